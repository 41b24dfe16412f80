//! Ids and clocks: conversation and run ids, Unix time, and the one SplitMix64 mixer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch; 0 for a clock set before 1970.
pub(crate) fn unix_s(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A random 32-bit number (a seed for `/seed -1` and `--seed -1`, as llama.cpp's -1 asks):
/// the clock's nanoseconds, the process id and a counter, mixed.
pub(crate) fn random_u32() -> u32 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mixed = splitmix64(
        nanos ^ (u64::from(std::process::id()) << 32) ^ COUNTER.fetch_add(1, Ordering::Relaxed),
    );
    (mixed >> 32) as u32
}

/// A new conversation id: `YYYYMMDD-HHMMSS-xxxx` in UTC. The suffix is a per-process random
/// start plus a counter, so ids made in the same second differ, within one process always.
pub(crate) fn new_id(now: SystemTime) -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        splitmix64(nanos ^ (u64::from(std::process::id()) << 32))
    });
    let suffix = seed.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed)) & 0xffff;
    let (date, time) = utc_parts(unix_s(now));
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}-{suffix:04x}",
        date.0, date.1, date.2, time.0, time.1, time.2
    )
}

/// SplitMix64: a tiny, fast, deterministic generator (Steele, Lea and Flood), the one used for
/// id suffixes, benchmark tokens and synthetic weights.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(pub u64);

impl SplitMix64 {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1): the top 53 bits.
    pub(crate) fn unit_open(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1] (never 0: safe under a logarithm).
    pub(crate) fn unit_nonzero(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// SplitMix64's output for one input (a generator started at `x - golden ratio`).
fn splitmix64(x: u64) -> u64 {
    SplitMix64(x.wrapping_sub(0x9e37_79b9_7f4a_7c15)).next_u64()
}

/// `YYYY-MM-DD HH:MM UTC`, as history's details and the bandwidth cache show a time.
pub(crate) fn utc_minute(unix_s: u64) -> String {
    let ((y, mo, d), (h, mi, _)) = utc_parts(unix_s);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02} UTC")
}

/// ((year, month, day), (hour, minute, second)) in UTC.
pub(crate) fn utc_parts(unix_s: u64) -> ((i64, u32, u32), (u32, u32, u32)) {
    let days = (unix_s / 86_400) as i64;
    let secs_of_day = (unix_s % 86_400) as u32;
    (
        civil_from_days(days),
        (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60),
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm), so that
/// no date crate is needed for ids and listings.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now_unix_s() -> u64 {
    unix_s(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ids_are_utc_time_plus_a_distinct_suffix() {
        let at = UNIX_EPOCH + Duration::from_secs(1_796_028_312); // 2026-11-30 08:45:12 UTC
        let id = new_id(at);
        assert!(id.starts_with("20261130-084512-"), "{id}");
        assert_eq!(id.len(), "20261130-084512-3f2a".len());
        assert!(id[16..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert!(
            id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{id}"
        );

        let ids: std::collections::HashSet<String> = (0..1000).map(|_| new_id(at)).collect();
        assert_eq!(ids.len(), 1000);

        assert!(new_id(UNIX_EPOCH).starts_with("19700101-000000-"));
        assert!(new_id(UNIX_EPOCH - Duration::from_secs(5)).starts_with("19700101-000000-"));
        assert!(
            new_id(UNIX_EPOCH + Duration::from_secs(951_868_799)).starts_with("20000229-235959-")
        );
        let far = new_id(UNIX_EPOCH + Duration::from_secs(u64::MAX / 4));
        assert!(far.len() > 16, "{far}");
        // Ids sort by time.
        assert!(new_id(at) < new_id(at + Duration::from_secs(1)));
    }
}
