//! Human formatting of the figures on screen: parameter counts, file sizes, durations and
//! metric values. Formatting only: every figure comes from `metrics`/`ModelInfo`, and an
//! undefined value is `—` (through `fmt::opt`).

/// A parameter count: `8.0B`, `268M`, `12.5M`, `0.47M`.
pub(crate) fn params(n: u64) -> String {
    let n = n as f64;
    if n <= 0.0 {
        "—".to_string()
    } else if n >= 1e9 {
        format!("{:.1}B", n / 1e9)
    } else if n >= 1e8 {
        format!("{:.0}M", n / 1e6)
    } else if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else {
        format!("{:.2}M", n / 1e6)
    }
}

/// A file size: the crate's one byte formatter.
pub(crate) use crate::fmt::bytes;

/// An elapsed time for humans: the crate's one time formatter.
pub(crate) use crate::fmt::secs;

/// A metric value with as many decimals as its size deserves (`1.23`, `45.6`, `1234`);
/// `—` when undefined.
pub(crate) fn num(value: Option<f64>) -> String {
    let decimals = match value {
        Some(v) if v.abs() < 10.0 => 2,
        Some(v) if v.abs() < 100.0 => 1,
        _ => 0,
    };
    crate::fmt::opt(value, decimals)
}

/// A loading progress fraction as a whole percentage, `0..=100`.
pub(crate) fn percent(fraction: f32) -> u32 {
    if fraction.is_finite() {
        (fraction.clamp(0.0, 1.0) * 100.0).round() as u32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts() {
        assert_eq!(params(8_030_000_000), "8.0B");
        assert_eq!(params(70_560_000_000), "70.6B");
        assert_eq!(params(268_000_000), "268M");
        assert_eq!(params(494_032_768), "494M");
        assert_eq!(params(12_500_000), "12.5M");
        assert_eq!(params(470_000), "0.47M");
        assert_eq!(params(0), "—");
    }

    #[test]
    fn file_sizes() {
        assert_eq!(bytes(4_920_000_000), "4.92 GB");
        assert_eq!(bytes(17_400_000_000), "17.4 GB");
        assert_eq!(bytes(397_800_000), "398 MB");
        assert_eq!(bytes(6_100_000), "6.1 MB");
        assert_eq!(bytes(470_000), "0.47 MB");
        assert_eq!(bytes(0), "0 B");
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(secs(Duration::from_millis(420)), "0.42 s");
        assert_eq!(secs(Duration::from_millis(12_400)), "12.4 s");
        assert_eq!(secs(Duration::from_secs(125)), "2m05s");
        assert_eq!(secs(Duration::ZERO), "0.00 s");
    }

    #[test]
    fn metric_values() {
        assert_eq!(num(None), "—");
        assert_eq!(num(Some(f64::NAN)), "—");
        assert_eq!(num(Some(f64::INFINITY)), "—");
        assert_eq!(num(Some(1.234)), "1.23");
        assert_eq!(num(Some(45.67)), "45.7");
        assert_eq!(num(Some(1234.4)), "1234");
        assert_eq!(num(Some(0.0)), "0.00");
    }

    #[test]
    fn percentages() {
        assert_eq!(percent(0.424), 42);
        assert_eq!(percent(1.5), 100);
        assert_eq!(percent(-1.0), 0);
        assert_eq!(percent(f32::NAN), 0);
    }
}
