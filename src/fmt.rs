//! The one value formatter for people: byte counts in one unit family with its label, so the
//! chat, `bench`, `compare`, `synth` and the notices agree (a file, a token's bytes and a
//! bandwidth are all decimal: GB as bandwidth is quoted, never GiB beside MB); significant
//! digits, and a mean with its error at the precision the sample allows.

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

/// Decimals that show `digits` significant digits of `v` (0 for values of that many integer
/// digits or more), capped at 12.
fn decimals_for(v: f64, digits: u32) -> usize {
    if v == 0.0 || !v.is_finite() {
        return digits.saturating_sub(1) as usize;
    }
    let magnitude = v.abs().log10().floor() as i64;
    (i64::from(digits) - 1 - magnitude).clamp(0, 12) as usize
}

/// `v` with `digits` significant digits after the point, trailing zeros dropped: `0.45`,
/// `0.011`, `90`; whole numbers keep every digit (`1234`); `—` when not finite.
pub(crate) fn sig(v: f64, digits: u32) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    let s = format!("{v:.*}", decimals_for(v, digits));
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A mean with its standard error, as precise as the sample allows: the error to two
/// significant digits and the mean to the same decimal place (`12.31 ± 0.84`, not
/// `12.3107 ± 0.8391` from a few hundred tokens). Without an error (zero or not finite) the
/// mean gets four significant digits.
pub(crate) fn mean_pm(mean: f64, err: f64) -> String {
    if !mean.is_finite() {
        return "—".to_string();
    }
    if !(err.is_finite() && err > 0.0) {
        return sig(mean, 4);
    }
    let d = decimals_for(err, 2);
    format!("{mean:.d$} ± {err:.d$}")
}

/// A throughput mean with its standard deviation to two decimals (`12.31 ± 0.84`); with one
/// sample there is no spread: `12.31 ± — (n=1)`.
pub(crate) fn mean_sd(mean: f64, sd: Option<f64>) -> String {
    match sd {
        Some(s) => format!("{mean:.2} ± {s:.2}"),
        None => format!("{mean:.2} ± — (n=1)"),
    }
}

/// Bytes (a digest) as lowercase hex, two digits a byte.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An elapsed time for humans: `0.42 s`, `12.4 s`, `2m05s`.
pub(crate) fn secs(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2} s")
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else {
        let whole = d.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// [`secs`] of a time in ms (a negative or not finite one reads `—`).
pub(crate) fn secs_of_ms(ms: f64) -> String {
    if ms.is_finite() && ms >= 0.0 {
        secs(std::time::Duration::from_secs_f64(ms / 1000.0))
    } else {
        "—".to_string()
    }
}

/// An optional figure for humans: `—` when undefined (`None`, NaN, infinite).
pub(crate) fn opt(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "—".to_string(),
    }
}

/// A fraction (0.62) for humans as a percentage (`62%` at 0 decimals): `—` when undefined.
/// Figures already in percent (MBU) go through `roofline::mbu_pct_cell`.
pub(crate) fn pct(fraction: Option<f64>, decimals: usize) -> String {
    match fraction {
        Some(v) if v.is_finite() => format!("{:.decimals$}%", v * 100.0),
        _ => "—".to_string(),
    }
}

/// A speed-up or ratio as `1.23×`: `—` when undefined.
pub(crate) fn times(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.2}×"),
        _ => "—".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undefined_figures_are_a_dash() {
        assert_eq!(opt(None, 1), "—");
        assert_eq!(opt(Some(f64::NAN), 1), "—");
        assert_eq!(opt(Some(1.25), 1), "1.2");
        assert_eq!(pct(Some(0.62), 0), "62%");
        assert_eq!(pct(Some(f64::INFINITY), 0), "—");
        assert_eq!(times(Some(1.234)), "1.23×");
        assert_eq!(times(None), "—");
    }

    #[test]
    fn times_in_the_unit_that_reads() {
        assert_eq!(secs_of_ms(6489.0), "6.49 s");
        assert_eq!(secs_of_ms(85.2), "0.09 s");
        assert_eq!(secs_of_ms(12_345.0), "12.3 s");
        assert_eq!(secs_of_ms(125_000.0), "2m05s");
        assert_eq!(secs_of_ms(f64::NAN), "—");
    }

    #[test]
    fn significant_digits_and_errors() {
        assert_eq!(sig(0.45, 2), "0.45");
        assert_eq!(sig(0.0109, 2), "0.011");
        assert_eq!(sig(90.0, 3), "90");
        assert_eq!(sig(0.05, 2), "0.05");
        assert_eq!(sig(1234.0, 2), "1234");
        assert_eq!(sig(0.0, 2), "0");
        assert_eq!(sig(f64::NAN, 2), "—");
        assert_eq!(mean_pm(12.3107, 0.8391), "12.31 ± 0.84");
        assert_eq!(mean_pm(6.407115, 0.039119), "6.407 ± 0.039");
        assert_eq!(mean_pm(250.0, 31.0), "250 ± 31");
        assert_eq!(mean_pm(0.031273, 0.000238), "0.03127 ± 0.00024");
        assert_eq!(mean_pm(5.0, 0.0), "5");
        assert_eq!(mean_pm(f64::INFINITY, 1.0), "—");
    }

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
