//! `load --find-capacity`: the highest request rate at which a server still holds the SLOs.
//! The rate doubles from 1/8 req/s while a level holds them at p99 (at least 99% of the
//! completed requests meet every target, and none failed), then bisects between the last
//! good and the first bad rate three times.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use super::report::{LoadSummary, Slo};
use super::Arrivals;
use crate::remote::RemoteError;

/// The first rate tried, and the highest the doubling goes to.
const FIRST_RATE: f64 = 0.125;
const LAST_RATE: f64 = 1024.0;
/// Bisection steps between the last good and the first bad rate.
const BISECTIONS: usize = 3;

/// Whether a level holds the SLOs at p99.
fn holds(r: &LoadSummary) -> bool {
    r.failed == 0
        && r.completed > 0
        && r.good_requests.unwrap_or(0) as f64 >= 0.99 * r.completed as f64
}

/// Runs levels with `run` until the capacity is bracketed (or `stop` is set), pushing every
/// level's row to `rows` and showing it with `shown`; returns the verdict sentence.
pub(crate) async fn find<F, Fut>(
    rows: &mut Vec<LoadSummary>,
    run: &F,
    slo: Slo,
    burstiness: f64,
    stop: &AtomicBool,
    shown: &dyn Fn(&LoadSummary),
) -> Result<String, RemoteError>
where
    F: Fn(Arrivals) -> Fut,
    Fut: Future<Output = Result<LoadSummary, RemoteError>>,
{
    let at = |per_s| Arrivals::Rate { per_s, burstiness };
    // The last rate that held, with its row; the first that did not.
    let mut good: Option<(f64, LoadSummary)> = None;
    let mut bad_rate: Option<f64> = None;
    let mut rate = FIRST_RATE;
    while bad_rate.is_none() && rate <= LAST_RATE && !stop.load(Ordering::SeqCst) {
        let row = run(at(rate)).await?;
        shown(&row);
        if holds(&row) {
            good = Some((rate, row.clone()));
            rate *= 2.0;
        } else {
            bad_rate = Some(rate);
        }
        rows.push(row);
    }
    if let (Some(mut lo), Some(mut hi)) = (good.as_ref().map(|(r, _)| *r), bad_rate) {
        for _ in 0..BISECTIONS {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let mid = (lo + hi) / 2.0;
            let row = run(at(mid)).await?;
            shown(&row);
            if holds(&row) {
                lo = mid;
                good = Some((mid, row.clone()));
            } else {
                hi = mid;
            }
            rows.push(row);
        }
    }
    Ok(match good {
        Some((_, g)) => format!(
            "at {} this server carries {}{} req/s = {} output tok/s ({})",
            slo.describe_p99(),
            if bad_rate.is_none() { "at least " } else { "" },
            crate::fmt::opt(g.request_per_s, 2),
            crate::fmt::opt(g.output_tok_per_s, 1),
            g.level
        ),
        None => format!(
            "at {} this server did not hold the targets even at {FIRST_RATE} req/s",
            slo.describe()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A server that holds the SLOs up to `limit` req/s; every level it is asked for is noted.
    fn level(per_s: f64, limit: f64) -> LoadSummary {
        let ok = per_s <= limit;
        LoadSummary {
            level: format!("rate={per_s}/s"),
            completed: 100,
            good_requests: Some(if ok { 100 } else { 50 }),
            request_per_s: Some(per_s),
            output_tok_per_s: Some(per_s * 10.0),
            ..LoadSummary::default()
        }
    }

    fn find_with(limit: f64, stop_after: Option<usize>) -> (Vec<f64>, String) {
        let asked = RefCell::new(Vec::new());
        let stop = AtomicBool::new(false);
        let run = |a: Arrivals| {
            let Arrivals::Rate { per_s, .. } = a else {
                panic!("{a:?}")
            };
            asked.borrow_mut().push(per_s);
            if stop_after.is_some_and(|n| asked.borrow().len() >= n) {
                stop.store(true, Ordering::SeqCst);
            }
            std::future::ready(Ok(level(per_s, limit)))
        };
        let mut rows = Vec::new();
        let slo = Slo {
            ttft: Some(std::time::Duration::from_millis(500)),
            ..Slo::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let verdict = rt
            .block_on(find(&mut rows, &run, slo, 1.0, &stop, &|_| {}))
            .unwrap();
        let asked = asked.into_inner();
        assert_eq!(rows.len(), asked.len(), "one row per level run");
        (asked, verdict)
    }

    #[test]
    fn doubles_then_bisects_three_times_between_good_and_bad() {
        let (asked, verdict) = find_with(3.0, None);
        assert_eq!(asked, [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 3.0, 3.5, 3.25]);
        assert!(verdict.contains("carries 3.00 req/s"), "{verdict}");
        assert!(verdict.contains("30.0 output tok/s"), "{verdict}");
        assert!(!verdict.contains("at least"), "{verdict}");
    }

    #[test]
    fn a_server_that_never_holds_is_said_so() {
        let (asked, verdict) = find_with(0.01, None);
        assert_eq!(asked, [0.125]);
        assert!(
            verdict.contains("did not hold the targets even at 0.125 req/s"),
            "{verdict}"
        );
    }

    #[test]
    fn a_stop_ends_the_search_with_a_lower_bound() {
        let (asked, verdict) = find_with(100.0, Some(3));
        assert_eq!(asked, [0.125, 0.25, 0.5]);
        assert!(verdict.contains("at least 0.50 req/s"), "{verdict}");
    }
}
