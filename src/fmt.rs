//! The one value formatter for people: byte counts in one unit family with its label, so the
//! chat, `bench`, `compare`, `synth` and the notices agree (a file, a token's bytes and a
//! bandwidth are all decimal: GB as bandwidth is quoted, never GiB beside MB).

/// A byte count in decimal units with about three significant digits: `4.92 GB`, `17.4 GB`,
/// `398 MB`, `6.1 MB`, `0.47 MB`; under 10 kB it is counted in kB (`2.4 kB`), under 1 kB in
/// bytes. `—` for a value that is not a finite count.
pub(crate) fn bytes_f64(n: f64) -> String {
    if !n.is_finite() || n < 0.0 {
        "—".to_string()
    } else if n >= 1e10 {
        format!("{:.1} GB", n / 1e9)
    } else if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e7 {
        format!("{:.0} MB", n / 1e6)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.2} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n:.0} B")
    }
}

/// [`bytes_f64`] of a count.
pub(crate) fn bytes(n: u64) -> String {
    bytes_f64(n as f64)
}

/// [`bytes_f64`], `—` when undefined.
pub(crate) fn bytes_opt(n: Option<f64>) -> String {
    n.map_or_else(|| "—".to_string(), bytes_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_decimal_family_with_about_three_digits() {
        assert_eq!(bytes(4_920_000_000), "4.92 GB");
        assert_eq!(bytes(17_400_000_000), "17.4 GB");
        assert_eq!(bytes(398_000_000), "398 MB");
        assert_eq!(bytes(253_100_000), "253 MB");
        assert_eq!(bytes(6_100_000), "6.1 MB");
        assert_eq!(bytes(470_000), "0.47 MB");
        assert_eq!(bytes(2_400), "2.4 kB");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes_f64(f64::NAN), "—");
        assert_eq!(bytes_opt(None), "—");
        // Never a binary unit beside a decimal one.
        for n in [1u64, 999, 1 << 20, 1 << 30, u64::MAX] {
            let s = bytes(n);
            assert!(!s.contains("iB"), "{s}");
        }
    }
}
