//! When a measurement cannot be vouched for: signs that the machine was busy while it ran.
//! Pure: the load averages and latencies are passed in (read by `hw` and the engine).

/// What a busy warning ends with.
pub(crate) const RERUN: &str = "rerun on an idle machine";

/// An ITL maximum this many times the median means a stall (another process, swapping), not
/// the model.
pub(crate) const ITL_STALL_RATIO: f64 = 50.0;

/// An MBU below this fraction of its peers' median is out of line with its quantization.
pub(crate) const MBU_PEER_FRACTION: f64 = 0.5;

/// What was seen around one measurement.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct BusySignals {
    /// Threads the measurement used.
    pub threads: u32,
    /// The 1-minute load average just before and just after (the latter includes the
    /// measurement's own threads, so it is compared after taking them off).
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_max_ms: Option<f64>,
}

/// The warnings these signals call for, each ending with the advice to rerun.
pub(crate) fn busy_warnings(s: &BusySignals) -> Vec<String> {
    let threads = f64::from(s.threads.max(1));
    let mut out = Vec::new();
    if let Some(before) = s.load_before.filter(|l| *l > threads) {
        out.push(format!(
            "busy machine: load average {before:.1} before the run, above its {} thread(s) — {RERUN}",
            s.threads
        ));
    }
    if let Some(after) = s.load_after.filter(|l| l - threads > threads) {
        out.push(format!(
            "busy machine: load average {after:.1} after the run ({:.1} besides its own {} thread(s)) — {RERUN}",
            after - threads,
            s.threads
        ));
    }
    if let (Some(p50), Some(max)) = (s.itl_p50_ms, s.itl_max_ms) {
        if p50 > 0.0 && max > ITL_STALL_RATIO * p50 {
            out.push(format!(
                "a stall: the longest gap between tokens ({max:.1} ms) is {:.0}× the median ({p50:.2} ms) — {RERUN}",
                max / p50
            ));
        }
    }
    out
}

/// One candidate's MBU, with the kind of file it was measured on (its quantization type).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MbuPeer {
    pub label: String,
    /// Files are peers only when this is the same: an F16 and a Q4_1 reach different shares of
    /// the bandwidth on one machine (dequantization costs compute), so comparing them would
    /// call a sound measurement busy.
    pub kind: String,
    pub mbu_pct: f64,
}

/// Warnings for candidates whose MBU is far below the median of their peers' (the other
/// candidates of the same kind): on one machine the same kind of file reaches about the same
/// share of the bandwidth, so an outlier was most likely slowed down by something else. A
/// candidate without a peer of its kind is not judged.
pub(crate) fn mbu_outliers(rows: &[MbuPeer]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let mut peers: Vec<f64> = rows
            .iter()
            .enumerate()
            .filter(|(j, p)| *j != i && p.kind == row.kind)
            .map(|(_, p)| p.mbu_pct)
            .collect();
        if peers.is_empty() {
            continue;
        }
        peers.sort_by(f64::total_cmp);
        let median = peers[peers.len() / 2];
        if row.mbu_pct < MBU_PEER_FRACTION * median {
            out.push(format!(
                "{}: MBU {:.1}% is far below its {} peers' ({median:.1}%): the machine was probably busy during its runs — {RERUN}",
                row.label, row.mbu_pct, row.kind
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_run_has_no_warning() {
        let s = BusySignals {
            threads: 2,
            load_before: Some(0.3),
            load_after: Some(2.4),
            itl_p50_ms: Some(13.0),
            itl_max_ms: Some(40.0),
        };
        assert!(busy_warnings(&s).is_empty());
        assert!(busy_warnings(&BusySignals::default()).is_empty());
    }

    #[test]
    fn load_and_stalls_are_reported_with_the_advice_to_rerun() {
        let s = BusySignals {
            threads: 2,
            load_before: Some(3.5),
            load_after: Some(6.5),
            // The example: a 2.2 s gap between two tokens, p50 13 ms.
            itl_p50_ms: Some(13.0),
            itl_max_ms: Some(2200.0),
        };
        let w = busy_warnings(&s);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("3.5 before"), "{w:?}");
        assert!(w[1].contains("4.5 besides"), "{w:?}");
        assert!(w[2].contains("169×"), "{w:?}");
        assert!(w.iter().all(|l| l.ends_with(RERUN)));
    }

    #[test]
    fn an_mbu_far_below_its_peers_is_an_outlier() {
        // The example: the reference at 2.9% next to peers near 60%.
        let peer = |label: &str, kind: &str, mbu_pct: f64| MbuPeer {
            label: label.into(),
            kind: kind.into(),
            mbu_pct,
        };
        let rows = vec![
            peer("f16", "F16", 2.9),
            peer("f16 ctk=q8_0", "F16", 61.0),
            peer("f16 ctk=q4_0", "F16", 58.0),
        ];
        let w = mbu_outliers(&rows);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("f16: MBU 2.9% is far below its F16 peers'"),
            "{w:?}"
        );
        assert!(mbu_outliers(&rows[1..]).is_empty());
        assert!(mbu_outliers(&rows[..1]).is_empty());
    }

    #[test]
    fn mbu_is_compared_like_with_like() {
        // The case: a Q4_1 at 19.3% beside an F16 at 50.3% is no sign of a busy
        // machine; the types reach different shares of the bandwidth.
        let peer = |label: &str, kind: &str, mbu_pct: f64| MbuPeer {
            label: label.into(),
            kind: kind.into(),
            mbu_pct,
        };
        let rows = vec![
            peer("smollm2-q4_1.gguf", "Q4_1", 19.3),
            peer("smollm2-f16.gguf", "F16", 50.3),
        ];
        assert!(mbu_outliers(&rows).is_empty(), "{:?}", mbu_outliers(&rows));
    }
}
