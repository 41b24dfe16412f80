//! Host time per generated token: what the engine thread does between two decode calls
//! (docs/metrics.md, "Host time per token"). The engine accumulates raw durations per turn;
//! the per-token figures in microseconds are derived here.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Raw sums over one turn, taken with `Instant` on the engine thread.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostTimes {
    /// Generated tokens whose host work is summed.
    pub tokens: usize,
    /// Everything between the end of a decode call (or of prefill) and the start of the next
    /// decode call (or the end of the turn).
    pub total: Duration,
    /// Getting the token's logits row (and, on the full-chain path, the candidate array).
    pub logits_out: Duration,
    /// The sampler: argmax, top-k, the chain and the draw.
    pub sampling: Duration,
    /// Token to text piece, UTF-8 assembly and the stop-string check.
    pub detokenize: Duration,
    /// The token's own confidence (`run --confidence`, Alt+K without a reference): a pass over
    /// its logits row; zero unless asked for.
    pub confidence: Duration,
    /// The timestamp, the token event sent to the UI and the per-token bookkeeping.
    pub event: Duration,
    /// Each gap of `total`, in order (the median resists the odd preemption of the engine
    /// thread, which a mean over a short answer does not).
    pub gaps: Vec<Duration>,
}

/// Per-token means in microseconds; `None` when no token was generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct HostSummary {
    pub host_us_per_token: Option<f64>,
    /// The median gap between two decode calls, in µs.
    pub host_p50_us: Option<f64>,
    pub logits_out_us: Option<f64>,
    pub sampling_us: Option<f64>,
    pub detokenize_stop_us: Option<f64>,
    pub event_metrics_us: Option<f64>,
    /// The token's own confidence, when asked for (else 0).
    pub confidence_us: Option<f64>,
    /// The rest of the gap: the end-of-turn checks and building the next batch.
    pub other_us: Option<f64>,
}

impl HostTimes {
    pub(crate) fn summary(&self) -> HostSummary {
        let per =
            |d: Duration| (self.tokens > 0).then(|| d.as_secs_f64() * 1e6 / self.tokens as f64);
        let parts =
            self.logits_out + self.sampling + self.confidence + self.detokenize + self.event;
        HostSummary {
            host_us_per_token: per(self.total),
            host_p50_us: {
                let mut sorted = self.gaps.clone();
                sorted.sort_unstable();
                super::percentile_sorted(&sorted, 50.0).map(|d| d.as_secs_f64() * 1e6)
            },
            logits_out_us: per(self.logits_out),
            sampling_us: per(self.sampling),
            detokenize_stop_us: per(self.detokenize),
            event_metrics_us: per(self.event),
            confidence_us: per(self.confidence),
            other_us: per(self.total.saturating_sub(parts)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_token_means_and_no_tokens() {
        assert_eq!(HostTimes::default().summary(), HostSummary::default());
        let t = HostTimes {
            tokens: 4,
            total: Duration::from_micros(400),
            logits_out: Duration::from_micros(40),
            sampling: Duration::from_micros(120),
            detokenize: Duration::from_micros(80),
            event: Duration::from_micros(100),
            confidence: Duration::from_micros(20),
            gaps: [90, 120, 100, 90].map(Duration::from_micros).to_vec(),
        };
        let s = t.summary();
        assert_eq!(s.host_us_per_token, Some(100.0));
        assert_eq!(s.sampling_us, Some(30.0));
        assert_eq!(s.confidence_us, Some(5.0));
        assert_eq!(s.other_us, Some(10.0));
        assert_eq!(s.host_p50_us, Some(90.0));
    }
}
