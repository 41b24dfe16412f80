//! Speculative decoding's figures (docs/metrics.md, "Speculative decoding"): the raw counts
//! and durations the engine thread sums over a turn, and every rate derived from them, once,
//! for the chat's metrics column, `run --json` and `bench` alike.
//!
//! A *step* is one round of the loop: the guesser proposes up to k tokens (a *draft*), then one
//! target pass decodes the pending token and the draft together. A pass that verified at least
//! one drafted token is a *verify pass*; a pass with nothing to verify (no proposal) is a
//! *plain pass*, the ordinary one-token decode.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ms, ratio};

/// Raw sums over one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecStats {
    /// `ngram` or `draft`.
    pub mode: &'static str,
    /// The configured most tokens per draft (k).
    pub draft_max: usize,
    /// Target passes that verified at least one drafted token.
    pub verify_passes: usize,
    /// Target passes with no drafted token (the guesser proposed nothing).
    pub plain_passes: usize,
    /// Drafted tokens sent to the target for verification.
    pub drafted: usize,
    /// Drafted tokens the target accepted (its own choice at that position was the same).
    pub accepted: usize,
    /// Verify passes that rejected a drafted token (every other verify pass accepted its whole
    /// draft). Each verify pass tests drafted tokens in order until the first rejection, so
    /// `accepted / (accepted + rejections)` estimates the per-token acceptance probability.
    pub rejections: usize,
    /// Time spent proposing (the n-gram lookup, or the draft model's decode calls).
    pub draft_time: Duration,
    /// Time of the verify passes (decode call and synchronisation).
    pub verify_time: Duration,
    /// Time of the plain passes.
    pub plain_time: Duration,
    /// Cost of one draft token relative to one target pass under the roofline (both read
    /// their weights once per pass): draft weight bytes / target weight bytes; 0 for n-gram.
    pub draft_cost_ratio: f64,
    /// ρ: what one more row adds to a target pass, in one-row passes ([`RowCost`], measured
    /// by the engine when it loaded); `None` when not measured.
    pub row_cost: Option<f64>,
    /// Why speculation did not run this turn (sampling that is not greedy), if it did not.
    pub off_reason: Option<&'static str>,
    /// Tokens the turn generated (sampled, the end-of-generation token included, as host
    /// time counts them): the denominator of the per-token split.
    pub tokens: usize,
    /// Host time of the turn (`metrics::host`, the gaps between decode calls, drafting
    /// excluded), so that the per-token split of the decode phase is in one place.
    pub host_time: Duration,
}

/// The derived figures of [`SpecStats`]; `None` wherever undefined (nothing drafted, no pass).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecSummary {
    pub mode: String,
    pub draft_max: usize,
    pub verify_passes: usize,
    pub plain_passes: usize,
    pub drafted: usize,
    pub accepted: usize,
    /// accepted / drafted.
    pub acceptance_rate: Option<f64>,
    /// accepted / (accepted + rejections): the per-token acceptance probability α.
    pub acceptance_per_token: Option<f64>,
    /// Accepted drafted tokens per verify pass.
    pub accepted_per_verify_pass: Option<f64>,
    /// Tokens that came out of target passes per target pass (accepted + one per pass).
    pub tokens_per_pass: Option<f64>,
    /// Target passes per generated token (1 without speculation).
    pub passes_per_token: Option<f64>,
    /// Drafted tokens per verify pass (the mean k).
    pub mean_draft_len: Option<f64>,
    /// Proposal time per step (all steps, plain ones included), ms.
    pub draft_ms_per_step: Option<f64>,
    /// Time of one verify pass, ms.
    pub verify_ms_per_pass: Option<f64>,
    /// Time of one plain pass, ms (the no-speculation baseline, when the turn had any).
    pub plain_ms_per_pass: Option<f64>,
    /// The roofline's expected speed-up, bytes only: [`SpecStats::expected`] with ρ 0 (α, the
    /// mean k and the share of verify passes).
    pub expected_speedup: Option<f64>,
    /// ρ: one more row's cost in a target pass, in one-row passes (measured at load).
    #[serde(default)]
    pub row_cost: Option<f64>,
    /// The roofline with its compute term: [`SpecStats::expected`] at ρ; `None` without ρ.
    #[serde(default)]
    pub expected_speedup_compute: Option<f64>,
    /// Measured against this turn's own plain passes: plain ms per token over the mean step
    /// time per token; `None` when the turn had no plain pass (see `bench --spec` for a
    /// measured baseline).
    pub measured_speedup: Option<f64>,
    /// A verify pass's time in plain passes (verify ms / plain ms): 1 under the roofline,
    /// more when the pass has become compute bound.
    pub verify_cost_in_passes: Option<f64>,
    /// Whether speculation paid this turn and, if not, what bounds it (see [`verdict`]).
    pub verdict: Option<String>,
    pub draft_cost_ratio: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_reason: Option<String>,
    /// Tokens generated in the turn (the denominator of the `…_per_token` figures).
    #[serde(default)]
    pub tokens: usize,
    /// Where the decode phase's time went, per generated token: proposing drafts, ms.
    #[serde(default)]
    pub draft_ms_per_token: Option<f64>,
    /// Verify passes (decode call, synchronisation and the acceptance check), ms per token.
    #[serde(default)]
    pub verify_ms_per_token: Option<f64>,
    /// Plain one-token passes, ms per token.
    #[serde(default)]
    pub plain_ms_per_token: Option<f64>,
    /// Host time between decode calls (drafting excluded), µs per token: the same total as
    /// `host.host_us_per_token`.
    #[serde(default)]
    pub host_us_per_token: Option<f64>,
}

/// Expected tokens per target pass when each drafted token is accepted with probability `a`
/// independently and k are drafted: 1 + a + … + a^k = (1 − a^(k+1)) / (1 − a).
pub fn expected_tokens_per_pass(a: f64, k: f64) -> f64 {
    let a = a.clamp(0.0, 1.0);
    if (1.0 - a).abs() < 1e-12 {
        k + 1.0
    } else {
        (1.0 - a.powf(k + 1.0)) / (1.0 - a)
    }
}

/// The roofline's expected speed-up over plain decoding: a step costs k draft tokens at
/// `draft_cost_ratio` of a target pass each plus one verify pass, which at batch 1 reads the
/// weights once like a plain pass (so costs about one plain pass while it stays memory
/// bound), and yields [`expected_tokens_per_pass`] tokens.
pub fn expected_speedup(a: f64, k: f64, draft_cost_ratio: f64) -> f64 {
    expected_tokens_per_pass(a, k) / (1.0 + k * draft_cost_ratio.max(0.0))
}

/// The roofline's expected speed-up over a turn's steps, with its compute term `row_cost` (ρ;
/// 0 gives the bytes-only form). A target pass of r rows reads the weights once and computes
/// every row, t(r) = t(1) · (1 + (r − 1)·ρ), ρ being what one more row costs in one-row passes
/// ([`RowCost`]), so a step that drafted k tokens costs 1 + k·ρ + k·c passes for
/// [`expected_tokens_per_pass`] tokens. A step whose guesser proposed nothing is a plain pass,
/// one token for one pass plus what the guesser spent (c for a draft model's one decode, 0 for
/// n-gram); `verify_share` is the share of steps that drafted (verify passes ÷ target passes).
/// With ρ 0 and `verify_share` 1 it is [`expected_speedup`].
pub fn expected_speedup_over_steps(
    a: f64,
    k: f64,
    draft_cost_ratio: f64,
    row_cost: f64,
    verify_share: f64,
) -> f64 {
    let f = verify_share.clamp(0.0, 1.0);
    let c = draft_cost_ratio.max(0.0);
    let tokens = f * expected_tokens_per_pass(a, k) + (1.0 - f);
    let cost = f * (1.0 + k * row_cost.max(0.0) + k * c) + (1.0 - f) * (1.0 + c);
    tokens / cost
}

/// Rows of the long pass [`RowCost`] is measured with: about the largest verify pass a k of
/// the sweeps makes (k = 15), so that ρ is read where speculation runs.
pub const ROW_COST_ROWS: u32 = 16;

/// The compute term of the roofline, measured on the target at load (`llama::measure::
/// row_cost`): the time of one pass of one row and of one pass of `rows` rows, every row with
/// its logits (as in a verify pass), random tokens, an empty cache; medians of a few runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowCost {
    pub one_row_ms: f64,
    pub rows: u32,
    pub rows_ms: f64,
}

impl RowCost {
    /// What one more row adds to a pass, ms: (t(rows) − t(1)) / (rows − 1), at least 0.
    pub fn row_ms(&self) -> Option<f64> {
        (self.rows > 1)
            .then(|| ((self.rows_ms - self.one_row_ms) / f64::from(self.rows - 1)).max(0.0))
    }

    /// ρ: [`RowCost::row_ms`] in one-row passes.
    pub fn in_passes(&self) -> Option<f64> {
        self.row_ms().and_then(|r| ratio(r, self.one_row_ms))
    }
}

impl SpecStats {
    pub fn target_passes(&self) -> usize {
        self.verify_passes + self.plain_passes
    }

    /// Tokens produced by target passes: each pass yields the target's own token, plus the
    /// accepted drafted tokens.
    pub fn pass_tokens(&self) -> usize {
        self.target_passes() + self.accepted
    }

    /// Adds another turn's sums (bench pools a row's rounds this way). The configuration
    /// (mode, k, cost ratio) is the first turn's.
    pub fn add(&mut self, other: &SpecStats) {
        if self.mode.is_empty() {
            self.mode = other.mode;
            self.draft_max = other.draft_max;
            self.draft_cost_ratio = other.draft_cost_ratio;
        }
        self.row_cost = self.row_cost.or(other.row_cost);
        self.verify_passes += other.verify_passes;
        self.plain_passes += other.plain_passes;
        self.drafted += other.drafted;
        self.accepted += other.accepted;
        self.rejections += other.rejections;
        self.draft_time += other.draft_time;
        self.verify_time += other.verify_time;
        self.plain_time += other.plain_time;
        self.tokens += other.tokens;
        self.host_time += other.host_time;
        self.off_reason = self.off_reason.or(other.off_reason);
    }

    /// α: accepted / (accepted + rejections).
    fn alpha(&self) -> Option<f64> {
        ratio(
            self.accepted as f64,
            (self.accepted + self.rejections) as f64,
        )
    }

    /// The mean k: drafted tokens per verify pass.
    fn mean_k(&self) -> Option<f64> {
        ratio(self.drafted as f64, self.verify_passes as f64)
    }

    /// The roofline's expected speed-up of this turn's steps ([`expected_speedup_over_steps`])
    /// at its α, mean k and share of verify passes, with compute term `row_cost` (0: the
    /// bytes-only form); `None` before anything was drafted.
    pub fn expected(&self, row_cost: f64) -> Option<f64> {
        let (a, k) = (self.alpha()?, self.mean_k()?);
        let share = ratio(self.verify_passes as f64, self.target_passes() as f64)?;
        let c = self.draft_cost_ratio;
        Some(expected_speedup_over_steps(a, k, c, row_cost, share))
    }

    pub fn summary(&self) -> SpecSummary {
        let passes = self.target_passes() as f64;
        let per_token =
            |d: Duration, scale: f64| ratio(d.as_secs_f64() * scale, self.tokens as f64);
        let plain_ms = ratio(ms(self.plain_time), self.plain_passes as f64);
        let step_ms_per_token = ratio(
            ms(self.draft_time + self.verify_time + self.plain_time),
            self.pass_tokens() as f64,
        );
        SpecSummary {
            mode: self.mode.to_string(),
            draft_max: self.draft_max,
            verify_passes: self.verify_passes,
            plain_passes: self.plain_passes,
            drafted: self.drafted,
            accepted: self.accepted,
            acceptance_rate: ratio(self.accepted as f64, self.drafted as f64),
            acceptance_per_token: self.alpha(),
            accepted_per_verify_pass: ratio(self.accepted as f64, self.verify_passes as f64),
            tokens_per_pass: ratio(self.pass_tokens() as f64, passes),
            passes_per_token: ratio(passes, self.pass_tokens() as f64),
            mean_draft_len: self.mean_k(),
            draft_ms_per_step: ratio(ms(self.draft_time), passes),
            verify_ms_per_pass: ratio(ms(self.verify_time), self.verify_passes as f64),
            plain_ms_per_pass: plain_ms,
            expected_speedup: self.expected(0.0),
            row_cost: self.row_cost,
            expected_speedup_compute: self.row_cost.and_then(|rho| self.expected(rho)),
            measured_speedup: match (plain_ms, step_ms_per_token) {
                (Some(p), Some(s)) if self.verify_passes > 0 => ratio(p, s),
                _ => None,
            },
            verify_cost_in_passes: ratio(
                ms(self.verify_time) / self.verify_passes.max(1) as f64,
                plain_ms.unwrap_or(0.0),
            )
            .filter(|_| self.verify_passes > 0),
            verdict: None,
            draft_cost_ratio: self.draft_cost_ratio,
            off_reason: self.off_reason.map(str::to_string),
            tokens: self.tokens,
            draft_ms_per_token: per_token(self.draft_time, 1e3),
            verify_ms_per_token: per_token(self.verify_time, 1e3),
            plain_ms_per_token: per_token(self.plain_time, 1e3),
            host_us_per_token: per_token(self.host_time, 1e6),
        }
        .with_verdict()
    }
}

impl SpecSummary {
    fn with_verdict(mut self) -> Self {
        self.verdict = verdict(
            self.measured_speedup,
            self.acceptance_per_token,
            self.verify_cost_in_passes,
            self.draft_ms_per_step
                .zip(self.plain_ms_per_pass)
                .and_then(|(d, p)| ratio(d, p)),
        );
        self
    }
}

/// A verify pass costing more than this many plain passes is no longer free: the pass has
/// become compute bound.
pub const VERIFY_NOT_FREE_PASSES: f64 = 1.2;

/// One sentence: whether speculation paid (`speedup` > 1.05) and, when it did not, what
/// bounds it: a verify pass costing more than 1.2 plain passes (the pass became compute
/// bound, so verifying is no longer free), drafting costing more than a third of a plain
/// pass per step (the draft is too slow), or a per-token acceptance below one half.
pub fn verdict(
    speedup: Option<f64>,
    acceptance_per_token: Option<f64>,
    verify_cost_in_passes: Option<f64>,
    draft_cost_in_passes: Option<f64>,
) -> Option<String> {
    let s = speedup?;
    if s > 1.05 {
        return Some(format!("pays: {s:.2}× the plain decode speed"));
    }
    let mut why = Vec::new();
    if let Some(v) = verify_cost_in_passes.filter(|v| *v > VERIFY_NOT_FREE_PASSES) {
        why.push(format!(
            "a verify pass costs {v:.1} plain passes (compute bound: verifying is not free)"
        ));
    }
    if let Some(d) = draft_cost_in_passes.filter(|d| *d > 1.0 / 3.0) {
        why.push(format!(
            "drafting costs {d:.2} plain passes per step (the draft is too slow)"
        ));
    }
    if let Some(a) = acceptance_per_token.filter(|a| *a < 0.5) {
        why.push(format!("acceptance too low (α {:.0}%)", a * 100.0));
    }
    if why.is_empty() {
        why.push("no single bound stands out".to_string());
    }
    Some(format!("does not pay ({s:.2}×): {}", why.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_tokens_per_pass_is_the_geometric_sum() {
        assert!((expected_tokens_per_pass(0.0, 8.0) - 1.0).abs() < 1e-12);
        assert!((expected_tokens_per_pass(1.0, 8.0) - 9.0).abs() < 1e-12);
        let a: f64 = 0.7;
        let direct: f64 = (0..=4).map(|i| a.powi(i)).sum();
        assert!((expected_tokens_per_pass(a, 4.0) - direct).abs() < 1e-12);
    }

    #[test]
    fn expected_speedup_charges_the_draft() {
        // Self-draft: every token accepted, but each draft token costs a whole pass.
        assert!((expected_speedup(1.0, 4.0, 1.0) - 1.0).abs() < 1e-12);
        // Free, perfect guesser: k + 1 tokens per pass.
        assert!((expected_speedup(1.0, 4.0, 0.0) - 5.0).abs() < 1e-12);
        // Useless, costly guesser: slower than plain decoding.
        assert!(expected_speedup(0.0, 4.0, 0.1) < 1.0);
    }

    #[test]
    fn the_compute_term_charges_each_verified_row() {
        // No compute term: the bytes-only roofline.
        for (a, k, c) in [(0.7, 4.0, 0.1), (0.0, 8.0, 0.18), (1.0, 2.0, 1.0)] {
            assert!(
                (expected_speedup_over_steps(a, k, c, 0.0, 1.0) - expected_speedup(a, k, c)).abs()
                    < 1e-12
            );
        }
        // BENCHMARKS.md's unrelated draft: α 0, k 8, c 0.178, ρ 0.1: 1 / (1 + 0.8 + 1.424).
        let e = expected_speedup_over_steps(0.0, 8.0, 0.178, 0.1, 1.0);
        assert!((e - 1.0 / 3.224).abs() < 1e-9, "{e}");
        // A perfect free guesser at k 4 and ρ 0.25: 5 tokens for a pass of 2 plain passes.
        assert!((expected_speedup_over_steps(1.0, 4.0, 0.0, 0.25, 1.0) - 2.5).abs() < 1e-12);
    }

    #[test]
    fn steps_that_drafted_nothing_count_as_plain_passes() {
        // Every step drafted: the per-step form.
        let e = expected_speedup_over_steps(0.7, 4.0, 0.1, 0.2, 1.0);
        let per_step = expected_tokens_per_pass(0.7, 4.0) / (1.0 + 4.0 * 0.2 + 4.0 * 0.1);
        assert!((e - per_step).abs() < 1e-12);
        // Nothing drafted anywhere: plain decoding, less what the guesser spent.
        assert!((expected_speedup_over_steps(0.7, 4.0, 0.0, 0.2, 0.0) - 1.0).abs() < 1e-12);
        assert!((expected_speedup_over_steps(0.7, 4.0, 0.25, 0.2, 0.0) - 0.8).abs() < 1e-12);
        // Half the steps verify 5 sure tokens at 2 passes (k 4, ρ 0.25, n-gram): (2.5 + 0.5) /
        // (1 + 0.5).
        let e = expected_speedup_over_steps(1.0, 4.0, 0.0, 0.25, 0.5);
        assert!((e - 2.0).abs() < 1e-12, "{e}");
    }

    #[test]
    fn row_cost_is_the_marginal_row() {
        let rc = RowCost {
            one_row_ms: 20.0,
            rows: 16,
            rows_ms: 50.0,
        };
        assert_eq!(rc.row_ms(), Some(2.0));
        assert_eq!(rc.in_passes(), Some(0.1));
        // Noise that makes 16 rows faster than one is no negative cost.
        let faster = RowCost {
            rows_ms: 19.0,
            ..rc
        };
        assert_eq!(faster.in_passes(), Some(0.0));
        assert_eq!(RowCost { rows: 1, ..rc }.row_ms(), None);
        assert_eq!(
            RowCost {
                one_row_ms: 0.0,
                ..rc
            }
            .in_passes(),
            None
        );
    }

    #[test]
    fn summary_guards_empty_turns_and_derives_rates() {
        let empty = SpecStats::default().summary();
        assert_eq!(empty.acceptance_rate, None);
        assert_eq!(empty.tokens_per_pass, None);
        assert_eq!(empty.expected_speedup, None);
        assert_eq!(empty.measured_speedup, None);
        let s = SpecStats {
            mode: "ngram",
            draft_max: 4,
            verify_passes: 10,
            plain_passes: 10,
            drafted: 40,
            accepted: 20,
            rejections: 5,
            draft_time: Duration::from_millis(2),
            verify_time: Duration::from_millis(110),
            plain_time: Duration::from_millis(100),
            draft_cost_ratio: 0.0,
            row_cost: Some(0.05),
            off_reason: None,
            tokens: 40,
            host_time: Duration::from_millis(4),
        }
        .summary();
        assert_eq!(s.acceptance_rate, Some(0.5));
        assert_eq!(s.acceptance_per_token, Some(0.8));
        assert_eq!(s.accepted_per_verify_pass, Some(2.0));
        assert_eq!(s.tokens_per_pass, Some(40.0 / 20.0));
        assert_eq!(s.passes_per_token, Some(0.5));
        assert_eq!(s.plain_ms_per_pass, Some(10.0));
        // 212 ms for 40 tokens against 10 ms per token.
        let measured = s.measured_speedup.unwrap();
        assert!((measured - 10.0 / (212.0 / 40.0)).abs() < 1e-9);
        assert_eq!(s.verify_cost_in_passes, Some(1.1));
        // α 0.8, mean k 4, ρ 0.05, n-gram (c 0), half the passes verify: (E/2 + 1/2) tokens
        // for 1 pass (bytes only) or 1.2/2 + 1/2 = 1.1 passes (with the compute term).
        let e = expected_tokens_per_pass(0.8, 4.0) / 2.0 + 0.5;
        assert!((s.expected_speedup.unwrap() - e).abs() < 1e-9);
        assert!((s.expected_speedup_compute.unwrap() - e / 1.1).abs() < 1e-9);
        assert_eq!(empty.expected_speedup_compute, None);
        assert!(s.verdict.unwrap().starts_with("pays"));
        // The per-token split: 2 + 110 + 100 ms and 4 ms of host time over 40 tokens.
        assert_eq!(s.tokens, 40);
        assert!((s.draft_ms_per_token.unwrap() - 0.05).abs() < 1e-9);
        assert!((s.verify_ms_per_token.unwrap() - 2.75).abs() < 1e-9);
        assert!((s.plain_ms_per_token.unwrap() - 2.5).abs() < 1e-9);
        assert!((s.host_us_per_token.unwrap() - 100.0).abs() < 1e-9);
        assert_eq!(SpecStats::default().summary().host_us_per_token, None);
    }

    #[test]
    fn add_pools_turns() {
        let turn = SpecStats {
            mode: "draft",
            draft_max: 4,
            verify_passes: 3,
            plain_passes: 1,
            drafted: 12,
            accepted: 9,
            rejections: 1,
            draft_time: Duration::from_millis(3),
            verify_time: Duration::from_millis(30),
            plain_time: Duration::from_millis(5),
            draft_cost_ratio: 0.25,
            row_cost: None,
            off_reason: None,
            tokens: 13,
            host_time: Duration::from_millis(1),
        };
        let mut pooled = SpecStats::default();
        pooled.add(&turn);
        pooled.add(&turn);
        assert_eq!(pooled.mode, "draft");
        assert_eq!(pooled.draft_cost_ratio, 0.25);
        assert_eq!(pooled.accepted, 18);
        assert_eq!(pooled.tokens, 26);
        assert_eq!(pooled.verify_time, Duration::from_millis(60));
        // The first measured ρ is kept.
        pooled.add(&SpecStats {
            row_cost: Some(0.3),
            ..turn.clone()
        });
        pooled.add(&SpecStats {
            row_cost: Some(0.9),
            ..turn.clone()
        });
        assert_eq!(pooled.row_cost, Some(0.3));
        assert_eq!(
            pooled.summary().acceptance_rate,
            turn.summary().acceptance_rate
        );
    }

    #[test]
    fn verdict_names_the_bound() {
        let v = verdict(Some(0.7), Some(0.65), Some(4.0), Some(0.0)).unwrap();
        assert!(v.contains("compute bound"), "{v}");
        let v = verdict(Some(0.9), Some(0.9), Some(1.3), Some(0.0)).unwrap();
        assert!(v.contains("compute bound"), "above 1.2 passes: {v}");
        let v = verdict(Some(0.9), Some(0.9), Some(1.15), Some(0.0)).unwrap();
        assert!(v.contains("no single bound"), "{v}");
        let v = verdict(Some(0.5), Some(0.1), Some(1.1), Some(0.9)).unwrap();
        assert!(
            v.contains("too slow") && v.contains("acceptance too low"),
            "{v}"
        );
        assert_eq!(verdict(None, None, None, None), None);
    }
}
