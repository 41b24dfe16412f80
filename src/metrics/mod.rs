//! Every number tokscope shows is defined here, once. This module is pure timing math over
//! timestamps that the engine thread took; it has no UI types and does no I/O, so the chat
//! screen, `run`, `bench` and `compare` read the same figures and cannot disagree.
//!
//! The written definitions live in `docs/metrics.md`; the names below match them.
//! Rates are derived at the edge from raw `Duration`s and are `None` wherever they are not
//! defined (no tokens, or no elapsed time), never NaN or infinity.

use std::time::Duration;

pub(crate) mod busy;
pub(crate) mod energy;
pub(crate) mod exposition;
pub(crate) mod host;
pub mod paired;
pub mod profile;
pub mod quality;
pub mod remote;
pub mod roofline;
pub mod spec;
pub mod trace;

use serde::{Deserialize, Serialize};

/// How far llama.cpp has read a model's weights, as the engine thread saw it when llama.cpp's
/// progress last moved: the file's size and the time since the weights began to load. With
/// llama.cpp's progress (the tensor bytes loaded over all of them, 0.0..=1.0) it gives the
/// read rate and the time left (docs/metrics.md, "Loading").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadRead {
    pub file_bytes: u64,
    pub elapsed: Duration,
}

impl LoadRead {
    /// Below this much reading, a rate is mostly the first tensor's page faults: not shown.
    const SETTLED: Duration = Duration::from_millis(200);
    /// Below this fraction read, the time left is not estimated.
    const FIRST_FRACTION: f32 = 0.02;

    /// Bytes read per second so far: `progress × file size ÷ elapsed`; `None` before anything
    /// was read or before [`Self::SETTLED`].
    #[must_use]
    pub fn bytes_per_s(&self, progress: f32) -> Option<f64> {
        let secs = self.elapsed.as_secs_f64();
        (progress > 0.0 && self.elapsed >= Self::SETTLED)
            .then(|| f64::from(progress.min(1.0)) * self.file_bytes as f64 / secs)
    }

    /// The time left at the rate so far: `elapsed × (1 − progress) ÷ progress`; `None` before
    /// 2% were read or before [`Self::SETTLED`].
    #[must_use]
    pub fn time_left(&self, progress: f32) -> Option<Duration> {
        let p = f64::from(progress.min(1.0));
        (progress >= Self::FIRST_FRACTION && self.elapsed >= Self::SETTLED)
            .then(|| self.elapsed.mul_f64((1.0 - p) / p))
    }

    /// The loading line's figures: `42% · 82 MB/s · 3 s left`, each part once it is defined.
    #[must_use]
    pub fn describe(read: Option<&Self>, progress: f32) -> String {
        let percent = if progress.is_finite() {
            (progress.clamp(0.0, 1.0) * 100.0).round() as u32
        } else {
            0
        };
        let mut parts = vec![format!("{percent}%")];
        if let Some(r) = read {
            if let Some(rate) = r.bytes_per_s(progress) {
                parts.push(format!("{}/s", crate::fmt::bytes_f64(rate)));
            }
            if let Some(left) = r.time_left(progress).filter(|_| progress < 1.0) {
                let secs = left.as_secs_f64().ceil();
                parts.push(if left < Duration::from_secs(1) {
                    "under 1 s left".to_string()
                } else if secs < 60.0 {
                    format!("{secs:.0} s left")
                } else {
                    format!("{} left", crate::fmt::secs(left))
                });
            }
        }
        parts.join(" · ")
    }
}

/// Milliseconds as `f64`, for display and JSON.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `count / elapsed` in per-second units; `None` when either is zero.
pub(crate) fn rate_per_s(count: usize, elapsed: Duration) -> Option<f64> {
    let secs = elapsed.as_secs_f64();
    (count > 0 && secs > 0.0).then(|| count as f64 / secs)
}

/// The median of the finite values (the mean of the middle two for an even count); `None`
/// when there are none. The one median of the crate (paired ratios, ρ, `bench --spec`).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Linear-interpolation percentile of already sorted values (`fraction` in 0..=1): numpy's
/// default `np.percentile`, which vLLM's benchmark uses, and llama-perplexity's. 0 when empty.
pub(crate) fn percentile_linear<T: Copy + Into<f64>>(sorted: &[T], fraction: f64) -> f64 {
    match sorted {
        [] => 0.0,
        [only] => (*only).into(),
        _ => {
            let p = fraction.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
            let i = p.floor() as usize;
            let frac = p - i as f64;
            let next = sorted[(i + 1).min(sorted.len() - 1)];
            (1.0 - frac) * sorted[i].into() + frac * next.into()
        }
    }
}

/// Nearest-rank percentile of already sorted values (`p` in 0..=100). `None` when empty.
///
/// Nearest rank (not interpolation) so that every reported percentile is a gap that really
/// happened, as llama.cpp's tables do (vLLM's benchmark interpolates: `percentile_linear`).
pub(crate) fn percentile_sorted(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.saturating_sub(1).min(sorted.len() - 1);
    sorted.get(index).copied()
}

/// Summary statistics of a set of latencies (inter-token gaps).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub count: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl LatencyStats {
    /// `None` for an empty set.
    pub(crate) fn from_durations(values: &[Duration]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let pct = |p| percentile_sorted(&sorted, p).map_or(0.0, ms);
        Some(Self {
            count: sorted.len(),
            mean_ms: ms(total) / sorted.len() as f64,
            p50_ms: pct(50.0),
            p90_ms: pct(90.0),
            p99_ms: pct(99.0),
            max_ms: sorted.last().map_or(0.0, |d| ms(*d)),
        })
    }

    /// The same set with its percentiles interpolated (`percentile_linear`), as vLLM's
    /// benchmark computes them; `None` for an empty set.
    pub(crate) fn from_durations_interpolated(values: &[Duration]) -> Option<Self> {
        let mut stats = Self::from_durations(values)?;
        let mut sorted: Vec<f64> = values.iter().copied().map(ms).collect();
        sorted.sort_by(f64::total_cmp);
        stats.p50_ms = percentile_linear(&sorted, 0.50);
        stats.p90_ms = percentile_linear(&sorted, 0.90);
        stats.p99_ms = percentile_linear(&sorted, 0.99);
        Some(stats)
    }
}

/// Raw timeline of one chat turn, as recorded on the engine thread.
///
/// Every offset is measured from the moment the request was handed to the engine (the
/// `submitted_at` instant taken when the command was sent), so queueing inside the engine is
/// part of TTFT, as a user experiences it.
///
/// A stage that has not happened yet is `None`, never zero: the live copy of a turn in flight
/// fills its stages as the engine's events arrive, and a reader never has to guess whether a
/// zero means "not yet". The engine's final report has every stage it went through.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TurnTimeline {
    /// Queue: the request submitted (`submitted_at`) → the engine picking it up and ready to
    /// template it (creating its context again first when the turn's sampling moves between
    /// the host and the graph: that is setup, not templating).
    pub queue: Option<Duration>,
    /// Chat template application and tokenization (with the KV-cache prefix lookup), from
    /// the pick-up to the first prefill decode call. Queue + this + `prefill` end exactly at
    /// `prefill_done_at`, so the TTFT breakdown adds up.
    pub template_tokenize: Option<Duration>,
    /// The prefill decode calls (only the prompt tokens not already in the KV cache).
    pub prefill: Option<Duration>,
    /// Tokens in the whole templated prompt (known when prefill starts).
    pub prompt_tokens: Option<usize>,
    /// Prompt tokens whose KV entries were reused from the previous turn (known when prefill
    /// starts).
    pub cached_tokens: Option<usize>,
    /// Offset of the end of prefill (request → prefill done).
    pub prefill_done_at: Option<Duration>,
    /// Offset at which each generated token's text was ready (after sampling and
    /// detokenization), one entry per generated token, in order.
    pub token_ready_at: Vec<Duration>,
    /// Sum of the single-token decode calls (the forward passes of generated tokens),
    /// comparable with llama.cpp's own `t_eval` counter.
    pub decode_compute: Duration,
    /// Number of single-token decode calls summed in `decode_compute`.
    pub decode_calls: usize,
    /// Offset of the end of each target pass of the decode phase (its decode call and
    /// synchronisation), in order. One token per pass in plain decoding; a speculative verify
    /// pass delivers its accepted tokens at one time, so their ITL is about 0 and the gaps
    /// between passes are what the machine's pace shows.
    pub pass_done_at: Vec<Duration>,
    /// Offset of the start of each target pass's decode call, in order (one per
    /// `pass_done_at`): the trace's decode spans (`metrics::trace`).
    #[serde(skip)]
    pub pass_started_at: Vec<Duration>,
    /// Offset of the end of each prefill decode call (one micro-batch each), in order.
    #[serde(skip)]
    pub prefill_chunk_done_at: Vec<Duration>,
    /// Drafted tokens the verify passes accepted (0 without speculation): each pass yields
    /// one token of its own and these besides.
    pub accepted_drafts: usize,
    /// Offset at which the turn ended (end of generation, max tokens, stop or cancel).
    pub finished_at: Option<Duration>,
    /// A turn answered by a remote server: its raw record (chunk arrivals, the server's usage
    /// and timings). Its offsets, like the ones above for such a turn, start when the request
    /// was sent; `None` for the local engine's turns.
    #[serde(skip)]
    pub remote: Option<Box<remote::RemoteTimeline>>,
    /// The thinking span of a model that reasons before it answers (`<think>…</think>`
    /// locally, the reasoning channel of a server's stream); `None` for a turn without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingSpan>,
    /// The instant every offset above starts from (the request's `submitted_at`; for a remote
    /// turn, the request being sent): where a trace of several turns places each one
    /// (`metrics::trace`). Not saved; `None` for a turn read back from history.
    #[serde(skip)]
    pub submitted_at: Option<std::time::Instant>,
}

/// Where a turn's thinking ends and its answer starts (docs/metrics.md, "Thinking").
///
/// TTFT stays the first token of any kind (a thinking token included), as the serving tools
/// define it (AIPerf, GuideLLM, inference-perf); the answer's own start is `first_answer_at`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ThinkingSpan {
    /// Generated tokens of the thinking, its markers included. Locally the first `tokens`
    /// entries of `token_ready_at`; remotely the tokens of the reasoning channel (one per
    /// reasoning chunk unless the server counts them exactly). Part of `tokens_generated`,
    /// never added to it again (servers fold them into `completion_tokens` too).
    pub tokens: usize,
    /// Offset of the last thinking token (the closing marker, or the last reasoning chunk);
    /// `None` while the model still thinks.
    pub ended_at: Option<Duration>,
    /// Offset of the first answer token (the first token after the thinking: past the closing
    /// marker, or the first content chunk); `None` while none has come, and in a turn that
    /// ended while still thinking.
    pub first_answer_at: Option<Duration>,
}

impl TurnTimeline {
    /// The mean single-token decode call (`decode_compute ÷ decode_calls`), ms; `None` with
    /// no calls.
    pub fn decode_call_ms(&self) -> Option<f64> {
        (self.decode_calls > 0).then(|| ms(self.decode_compute) / self.decode_calls as f64)
    }

    /// Prompt tokens that had to be prefilled (prompt minus cache hits); `None` until prefill
    /// starts.
    pub fn prefilled_tokens(&self) -> Option<usize> {
        Some(
            self.prompt_tokens?
                .saturating_sub(self.cached_tokens.unwrap_or(0)),
        )
    }

    pub fn tokens_generated(&self) -> usize {
        self.token_ready_at.len()
    }

    /// Time to first token: request handed to the engine → first token's text ready.
    pub(crate) fn ttft(&self) -> Option<Duration> {
        self.token_ready_at.first().copied()
    }

    /// First sample: end of prefill → first token's text ready (sampling + detokenize).
    pub(crate) fn first_sample(&self) -> Option<Duration> {
        Some(self.ttft()?.saturating_sub(self.prefill_done_at?))
    }

    /// Inter-token latencies: the gap between consecutive tokens' ready times.
    pub(crate) fn inter_token_latencies(&self) -> Vec<Duration> {
        self.token_ready_at
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
            .collect()
    }

    /// Gaps between the ends of consecutive target passes of the decode phase (the first
    /// from the end of prefill, when known).
    pub(crate) fn pass_gaps(&self) -> Vec<Duration> {
        let ends: Vec<Duration> = (self.prefill_done_at.into_iter())
            .chain(self.pass_done_at.iter().copied())
            .collect();
        ends.windows(2).map(|w| w[1].saturating_sub(w[0])).collect()
    }

    /// End-to-end latency: request → last token's text ready (request → end of the turn when
    /// no token was generated); `None` while neither has happened.
    pub(crate) fn e2e(&self) -> Option<Duration> {
        self.token_ready_at.last().copied().or(self.finished_at)
    }

    /// The derived figures of this turn.
    pub fn summary(&self) -> TurnSummary {
        let n = self.tokens_generated();
        let ttft = self.ttft();
        let decode_span = (self.token_ready_at.first().zip(self.token_ready_at.last()))
            .map_or(Duration::ZERO, |(first, last)| last.saturating_sub(*first));
        let e2e = self.e2e().unwrap_or_default();
        let tpot = ttft
            .filter(|_| n >= 2)
            .map(|t| ms(e2e.saturating_sub(t)) / (n - 1) as f64);
        // `TurnSummary` is the saved and printed form: its stage fields are plain numbers
        // (0 for a stage that has not happened), so a finished turn's JSON and history entry
        // stay as they always were. Whether a live turn's stage is known is read from the
        // timeline (see `ui::view`), not from these numbers.
        let prefilled = self.prefilled_tokens().unwrap_or(0);
        TurnSummary {
            tokens_generated: n,
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            cached_tokens: self.cached_tokens.unwrap_or(0),
            prefilled_tokens: prefilled,
            queue_ms: self.queue.map_or(0.0, ms),
            template_tokenize_ms: self.template_tokenize.map_or(0.0, ms),
            prefill_ms: self.prefill.map_or(0.0, ms),
            prefill_tok_per_s: self.prefill.and_then(|p| rate_per_s(prefilled, p)),
            first_sample_ms: self.first_sample().map(ms),
            ttft_ms: ttft.map(ms),
            e2e_ms: ms(e2e),
            tpot_ms: tpot,
            decode_tok_per_s: rate_per_s(n.saturating_sub(1), decode_span),
            itl: LatencyStats::from_durations(&self.inter_token_latencies()),
            decode_compute_ms: ms(self.decode_compute),
            decode_calls: self.decode_calls,
            pass_gap: LatencyStats::from_durations(&self.pass_gaps()),
            // Each pass yields the token its last accepted row samples, and the drafted tokens
            // it accepted.
            tokens_per_pass: (!self.pass_done_at.is_empty())
                .then(|| 1.0 + self.accepted_drafts as f64 / self.pass_done_at.len() as f64),
            thinking: self.thinking_summary(),
        }
    }

    /// The thinking and answer figures of a turn that thought (`None` for one that did not).
    pub(crate) fn thinking_summary(&self) -> Option<ThinkingSummary> {
        let span = self.thinking?;
        let n = self.tokens_generated();
        let answer_tokens = n.saturating_sub(span.tokens);
        let last = self.token_ready_at.last().copied();
        let answer_span = span
            .first_answer_at
            .zip(last)
            .map_or(Duration::ZERO, |(first, last)| last.saturating_sub(first));
        Some(ThinkingSummary {
            thinking_tokens: span.tokens,
            thinking_ms: self
                .ttft()
                .zip(span.ended_at)
                .map(|(t, e)| ms(e.saturating_sub(t))),
            time_to_first_answer_ms: span.first_answer_at.map(ms),
            answer_tokens,
            answer_tok_per_s: rate_per_s(answer_tokens.saturating_sub(1), answer_span),
            ended_while_thinking: span.first_answer_at.is_none() && self.finished_at.is_some(),
        })
    }
}

/// The derived figures of a turn's thinking and answer (docs/metrics.md, "Thinking").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThinkingSummary {
    /// Generated tokens of the thinking, markers included (part of `tokens_generated`).
    pub thinking_tokens: usize,
    /// First token (TTFT) → last thinking token; `None` while the model still thinks.
    pub thinking_ms: Option<f64>,
    /// Request → first answer token (AIPerf's time to first output token, TTFO); `None` when
    /// no answer token came.
    pub time_to_first_answer_ms: Option<f64>,
    /// Generated tokens after the thinking.
    pub answer_tokens: usize,
    /// The answer's own decode rate: (answer tokens − 1) ÷ (last token − first answer token).
    pub answer_tok_per_s: Option<f64>,
    /// The turn ended (end of generation, limit, stop or cancel) while the model still thought.
    pub ended_while_thinking: bool,
}

/// Derived, display-ready figures of one turn (see `docs/metrics.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    pub tokens_generated: usize,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub prefilled_tokens: usize,
    /// Submitted → picked up by the engine (older saved turns have none: 0).
    #[serde(default)]
    pub queue_ms: f64,
    pub template_tokenize_ms: f64,
    pub prefill_ms: f64,
    pub prefill_tok_per_s: Option<f64>,
    pub first_sample_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: f64,
    /// Time per output token after the first: (E2E − TTFT) / (N − 1).
    pub tpot_ms: Option<f64>,
    /// (N − 1) / (t_last − t_first).
    pub decode_tok_per_s: Option<f64>,
    pub itl: Option<LatencyStats>,
    pub decode_compute_ms: f64,
    pub decode_calls: usize,
    /// Gaps between target passes of the decode phase (docs/metrics.md): beside ITL, the
    /// pace of the machine when a speculative pass delivers several tokens at once. Absent
    /// for a remote server's turn and in older saved turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_gap: Option<LatencyStats>,
    /// Tokens per target pass of the decode phase: 1 for plain decoding, 1 + accepted ÷
    /// passes when speculation's verify passes accept drafted tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_pass: Option<f64>,
    /// The thinking/answer split of a model that reasons before it answers; absent otherwise
    /// and in older saved turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingSummary>,
}

impl TurnSummary {
    /// The gaps a stall shows in, as (median, max) ms: between target passes where they were
    /// recorded (a speculative pass's accepted tokens share one time, so their ITL median is
    /// about 0 and any gap would look like a stall), else between tokens.
    pub fn stall_gaps_ms(&self) -> Option<(f64, f64)> {
        self.pass_gap.or(self.itl).map(|g| (g.p50_ms, g.max_ms))
    }
}

/// The smallest difference of two means called real: the sum of their sds, or a systematic
/// error (in the figure's unit) when that is larger. `compare` and `bench --vs` judge by it.
pub(crate) fn noise_threshold(sd_a: f64, sd_b: f64, systematic: f64) -> f64 {
    (sd_a + sd_b).max(systematic)
}

/// `num / den`, `None` when the denominator is not positive or the numerator not finite.
pub(crate) fn ratio(num: f64, den: f64) -> Option<f64> {
    (den > 0.0 && num.is_finite()).then(|| num / den)
}

/// Relative difference `|a − b| / b`; `None` when `b` is zero.
pub fn relative_difference(a: f64, b: f64) -> Option<f64> {
    (b != 0.0 && a.is_finite() && b.is_finite()).then(|| (a - b).abs() / b.abs())
}

/// One batch size of a batched-decoding sweep. A figure the measurement could not define
/// (no decode time, fewer than two tokens per sequence for an ITL) is `None`, never 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchPoint {
    /// Sequences decoded together (B).
    pub batch: u32,
    /// Tokens per second over all sequences.
    pub aggregate_tok_per_s: Option<f64>,
    /// Tokens per second of one sequence.
    pub per_sequence_tok_per_s: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
}

/// Decode at one depth of a depth sweep: bench's `tg{n_gen} @ d{depth}` on the engine's
/// thread, in a context of its own sized as bench sizes it (depth + n_gen).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthRun {
    /// Tokens in the cache before the first generated one.
    pub depth: u32,
    pub n_gen: u32,
    /// N ÷ the timed run (bench's tg t/s).
    pub tok_per_s: f64,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    /// The untimed fill of the cache to `depth` (a prefill of random tokens), ms.
    pub fill_ms: f64,
}

/// What a batching sweep shows, in one line, from its own rows (never before they exist):
/// the peak aggregate tok/s and its B against B = 1, and the first B where one sequence's
/// inter-token latency grew more than the aggregate did from the B before (batching stops
/// paying there). On a compute-bound machine the peak can be B = 1: then it says so. Each B is
/// one run, which the line says: a difference of a few percent is within run-to-run noise.
/// `None` without a B = 1 row to compare with.
pub fn batching_verdict(points: &[BatchPoint]) -> Option<String> {
    let agg = |p: &BatchPoint| p.aggregate_tok_per_s.filter(|v| v.is_finite() && *v > 0.0);
    let base = points.iter().find(|p| p.batch == 1)?;
    let base_agg = agg(base)?;
    let peak = points
        .iter()
        .filter(|p| agg(p).is_some())
        .max_by(|a, b| agg(a).unwrap_or(0.0).total_cmp(&agg(b).unwrap_or(0.0)))?;
    let peak_agg = agg(peak)?;
    if points.len() < 2 {
        return None;
    }
    let mut line = if peak.batch == 1 {
        let (b, r) = points
            .iter()
            .filter(|p| p.batch != 1)
            .filter_map(|p| Some((p.batch, agg(p)? / base_agg)))
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        format!(
            "batching does not pay here: aggregate tok/s is highest at B = 1 ({}); the best \
             other, B = {b}, gives {r:.2}× (a compute-bound machine: each extra sequence costs \
             about what it adds)",
            crate::fmt::sig(base_agg, 3)
        )
    } else {
        format!(
            "peak aggregate {} tok/s at B = {} ({:.2}× B = 1)",
            crate::fmt::sig(peak_agg, 3),
            peak.batch,
            peak_agg / base_agg
        )
    };
    // The first step where one user's latency grew by more than the aggregate did.
    let mut sorted: Vec<&BatchPoint> = points.iter().collect();
    sorted.sort_by_key(|p| p.batch);
    let knee = sorted.windows(2).find_map(|w| {
        let (prev, next) = (w[0], w[1]);
        let throughput = agg(next)? / agg(prev)?;
        let latency = ratio(next.itl_p50_ms?, prev.itl_p50_ms?)?;
        (latency > throughput).then_some((prev.batch, next.batch, latency, throughput))
    });
    if let Some((from, to, latency, throughput)) = knee {
        if peak.batch != 1 {
            line.push_str(&format!(
                "; from B = {from} to {to} one user's latency grew {latency:.2}× and the \
                 aggregate only {throughput:.2}×"
            ));
        }
    }
    line.push_str(" · one run per B: a few % is noise");
    Some(line)
}

/// A planted error for the agreement check, in test builds with the `plant` feature only: the
/// factor `TOKSCOPE_PLANT_SCALE` gives `figure` (`decode:1.1,prefill:1.1`; `bench` scales
/// every rate `tokscope bench` reports; `row_cost` the speculation roofline's ρ), so
/// scripts/agreement.sh and scripts/spec-bench-sweep.sh --check can show that they catch it.
#[cfg(feature = "plant")]
pub(crate) fn planted_factor(figure: &str) -> Option<f64> {
    let spec = std::env::var("TOKSCOPE_PLANT_SCALE").ok()?;
    spec.split(',').find_map(|item| {
        let (name, factor) = item.split_once(':')?;
        (name == figure)
            .then(|| factor.parse::<f64>().ok())
            .flatten()
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_load_reads_its_rate_and_time_left_from_llamas_progress() {
        let read = LoadRead {
            file_bytes: 1_000_000_000,
            elapsed: Duration::from_secs(2),
        };
        // A quarter of 1 GB in 2 s: 125 MB/s, and three times as long to go.
        assert_eq!(read.bytes_per_s(0.25), Some(125e6));
        assert_eq!(read.time_left(0.25), Some(Duration::from_secs(6)));
        assert_eq!(
            LoadRead::describe(Some(&read), 0.25),
            "25% · 125 MB/s · 6 s left"
        );
        // Nothing read, 1% read, or too soon: no rate or no estimate, never infinity.
        assert_eq!(read.bytes_per_s(0.0), None);
        assert_eq!(read.time_left(0.01), None);
        let soon = LoadRead {
            elapsed: Duration::from_millis(50),
            ..read
        };
        assert_eq!(LoadRead::describe(Some(&soon), 0.5), "50%");
        assert_eq!(LoadRead::describe(None, 0.42), "42%");
        // Nearly done: not rounded up to a whole second.
        assert_eq!(
            LoadRead::describe(Some(&read), 0.96),
            "96% · 480 MB/s · under 1 s left"
        );
        // Done: the rate stays, no time left.
        assert_eq!(LoadRead::describe(Some(&read), 1.0), "100% · 500 MB/s");
    }

    fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn timeline(tokens_ms: &[u64]) -> TurnTimeline {
        TurnTimeline {
            queue: Some(d(1)),
            template_tokenize: Some(d(2)),
            prefill: Some(d(50)),
            prompt_tokens: Some(100),
            cached_tokens: Some(20),
            prefill_done_at: Some(d(60)),
            token_ready_at: tokens_ms.iter().map(|t| d(*t)).collect(),
            decode_compute: d(30),
            decode_calls: tokens_ms.len().saturating_sub(1),
            finished_at: Some(d(tokens_ms.last().copied().unwrap_or(70) + 1)),
            pass_done_at: Vec::new(),
            pass_started_at: Vec::new(),
            prefill_chunk_done_at: Vec::new(),
            accepted_drafts: 0,
            remote: None,
            thinking: None,
            submitted_at: None,
        }
    }

    #[test]
    fn thinking_splits_the_turn_at_the_first_answer_token() {
        // Tokens at 70, 80, 90, 100 (thinking, the closing marker last), then 110, 120, 130.
        let mut t = timeline(&[70, 80, 90, 100, 110, 120, 130]);
        assert_eq!(t.summary().thinking, None, "no span: no thinking figures");
        t.thinking = Some(ThinkingSpan {
            tokens: 4,
            ended_at: Some(d(100)),
            first_answer_at: Some(d(110)),
        });
        let s = t.summary();
        let th = s.thinking.unwrap();
        assert_eq!(s.ttft_ms, Some(70.0), "TTFT is the first token of any kind");
        assert_eq!(th.time_to_first_answer_ms, Some(110.0));
        assert_eq!(th.thinking_tokens, 4);
        assert_eq!(th.answer_tokens, 3);
        assert_eq!(th.thinking_ms, Some(30.0));
        // Two answer gaps over 20 ms: 100 tok/s; the whole turn's six gaps over 60 ms too.
        assert_eq!(th.answer_tok_per_s, Some(100.0));
        assert!(!th.ended_while_thinking);
        // A turn that ended while thinking: no answer figures, and said so.
        t.thinking = Some(ThinkingSpan {
            tokens: 7,
            ended_at: None,
            first_answer_at: None,
        });
        let th = t.summary().thinking.unwrap();
        assert!(th.ended_while_thinking);
        assert_eq!(
            (th.answer_tokens, th.answer_tok_per_s, th.thinking_ms),
            (0, None, None)
        );
    }

    /// A batch sweep's point: `agg` tok/s in all, ITL p50 `itl` ms and p99 1.2 × that.
    pub(crate) fn point(batch: u32, agg: f64, itl: f64) -> BatchPoint {
        BatchPoint {
            batch,
            aggregate_tok_per_s: Some(agg),
            per_sequence_tok_per_s: Some(agg / f64::from(batch)),
            itl_p50_ms: Some(itl),
            itl_p99_ms: Some(itl * 1.2),
        }
    }

    #[test]
    fn the_batching_verdict_comes_from_the_rows() {
        // A GPU-like sweep: throughput rises until B = 16, then latency outgrows it.
        let gpu = [
            point(1, 100.0, 10.0),
            point(2, 195.0, 10.3),
            point(4, 380.0, 10.5),
            point(8, 700.0, 11.4),
            point(16, 900.0, 17.8),
            point(32, 880.0, 36.0),
        ];
        let v = batching_verdict(&gpu).unwrap();
        assert!(
            v.starts_with("peak aggregate 900 tok/s at B = 16 (9.00× B = 1)"),
            "{v}"
        );
        assert!(
            v.contains("from B = 8 to 16 one user's latency grew 1.56×"),
            "{v}"
        );
        assert!(v.ends_with("one run per B: a few % is noise"), "{v}");
        // The busy 2-core CPU the issue saw: B = 2 at 0.91×.
        let cpu = [
            point(1, 20.0, 50.0),
            point(2, 18.2, 110.0),
            point(4, 17.0, 235.0),
        ];
        let v = batching_verdict(&cpu).unwrap();
        assert!(
            v.starts_with("batching does not pay here: aggregate tok/s is highest at B = 1 (20)"),
            "{v}"
        );
        assert!(v.contains("B = 2, gives 0.91×"), "{v}");
        assert!(!v.contains("grows much faster"), "{v}");
        // Nothing to say before there are rows to say it from.
        assert_eq!(batching_verdict(&[]), None);
        assert_eq!(batching_verdict(&[point(1, 20.0, 50.0)]), None);
        assert_eq!(
            batching_verdict(&[point(2, 20.0, 50.0), point(4, 30.0, 60.0)]),
            None
        );
    }

    #[test]
    fn zero_tokens_has_no_rates_and_no_nan() {
        let s = timeline(&[]).summary();
        assert_eq!(s.tokens_generated, 0);
        assert_eq!(s.ttft_ms, None);
        assert_eq!(s.tpot_ms, None);
        assert_eq!(s.decode_tok_per_s, None);
        assert_eq!(s.itl, None);
        assert_eq!(s.first_sample_ms, None);
        assert_eq!(s.e2e_ms, 71.0);
        let json = serde_json::to_string(&s).unwrap_or_default();
        assert!(!json.contains("NaN") && !json.contains("inf"), "{json}");
    }

    #[test]
    fn stages_not_yet_reached_are_none_not_zero() {
        let live = TurnTimeline::default();
        assert_eq!(live.prefilled_tokens(), None);
        assert_eq!(live.first_sample(), None);
        assert_eq!(live.e2e(), None);
        let mut live = TurnTimeline {
            prompt_tokens: Some(10),
            cached_tokens: Some(4),
            token_ready_at: vec![d(90)],
            ..TurnTimeline::default()
        };
        assert_eq!(live.prefilled_tokens(), Some(6));
        // Without the end of prefill there is no first-sample figure, whatever the TTFT.
        assert_eq!(live.first_sample(), None);
        assert_eq!(live.e2e(), Some(d(90)));
        assert_eq!(live.summary().prefill_tok_per_s, None);
        live.prefill_done_at = Some(d(60));
        live.prefill = Some(d(50));
        assert_eq!(live.first_sample(), Some(d(30)));
        assert!((live.summary().prefill_tok_per_s.unwrap_or_default() - 120.0).abs() < 1e-9);
    }

    #[test]
    fn a_finished_turns_summary_is_plain_numbers() {
        // The saved and printed form keeps its shape: known stages are numbers, not objects.
        let json = serde_json::to_value(timeline(&[100, 110]).summary()).unwrap_or_default();
        assert_eq!(json["queue_ms"], 1.0);
        assert_eq!(json["template_tokenize_ms"], 2.0);
        assert_eq!(json["prefill_ms"], 50.0);
        assert_eq!(json["prompt_tokens"], 100);
        assert_eq!(json["cached_tokens"], 20);
        assert_eq!(json["first_sample_ms"], 40.0);
        assert_eq!(json["e2e_ms"], 110.0);
    }

    #[test]
    fn one_token_has_ttft_but_no_decode_rate() {
        let s = timeline(&[80]).summary();
        assert_eq!(s.ttft_ms, Some(80.0));
        assert_eq!(s.first_sample_ms, Some(20.0));
        assert_eq!(s.tpot_ms, None);
        assert_eq!(s.decode_tok_per_s, None);
        assert_eq!(s.itl, None);
        assert_eq!(s.e2e_ms, 80.0);
    }

    #[test]
    fn known_timeline_gives_known_figures() {
        // Tokens at 100, 110, 130, 160 ms: gaps 10, 20, 30.
        let s = timeline(&[100, 110, 130, 160]).summary();
        assert_eq!(s.ttft_ms, Some(100.0));
        assert_eq!(s.e2e_ms, 160.0);
        // TPOT = (160 - 100) / 3 = 20 ms; decode rate = 3 / 0.060 s = 50 tok/s.
        assert!((s.tpot_ms.unwrap_or_default() - 20.0).abs() < 1e-9);
        assert!((s.decode_tok_per_s.unwrap_or_default() - 50.0).abs() < 1e-9);
        let itl = s.itl.unwrap_or_else(|| panic!("itl"));
        assert_eq!(itl.count, 3);
        assert!((itl.mean_ms - 20.0).abs() < 1e-9);
        assert_eq!(itl.p50_ms, 20.0);
        assert_eq!(itl.p90_ms, 30.0);
        assert_eq!(itl.max_ms, 30.0);
        // Prefill: 80 tokens in 50 ms = 1600 tok/s.
        assert_eq!(s.prefilled_tokens, 80);
        assert!((s.prefill_tok_per_s.unwrap_or_default() - 1600.0).abs() < 1e-6);
    }

    /// A speculative turn: passes every 30 ms, each delivering 4 tokens at its end. ITL's
    /// median is 0 (tokens of a pass share a time), so a stall check on ITL cries wolf at
    /// any gap; on the passes it sees their steady 30 ms.
    #[test]
    fn a_speculative_turn_is_judged_on_its_passes() {
        let mut tokens = vec![61];
        let mut passes = Vec::new();
        for p in 1..=8u64 {
            let end = 60 + 30 * p;
            passes.push(d(end));
            tokens.extend([end, end, end, end]);
        }
        let mut t = timeline(&tokens);
        t.pass_done_at = passes;
        t.accepted_drafts = 8 * 3;
        let s = t.summary();
        assert_eq!(s.itl.unwrap().p50_ms, 0.0);
        let gap = s.pass_gap.unwrap();
        assert_eq!(gap.count, 8);
        assert_eq!(gap.p50_ms, 30.0);
        assert_eq!(s.tokens_per_pass, Some(4.0));
        assert_eq!(s.stall_gaps_ms(), Some((30.0, 30.0)));
        let signals = |gaps: Option<(f64, f64)>| busy::BusySignals {
            threads: 1,
            itl_p50_ms: gaps.map(|g| g.0),
            itl_max_ms: gaps.map(|g| g.1),
            ..Default::default()
        };
        assert!(busy::busy_warnings(&signals(s.stall_gaps_ms())).is_empty());
        // What the check said when it read ITL: a stall.
        let on_itl = s.itl.map(|i| (i.p50_ms.max(0.01), i.max_ms));
        assert!(!busy::busy_warnings(&signals(on_itl)).is_empty());
        // A plain turn's passes are its tokens: 1 a pass, the same judgement as ITL.
        let mut plain = timeline(&[61, 91, 121]);
        plain.pass_done_at = vec![d(90), d(120)];
        assert_eq!(plain.summary().tokens_per_pass, Some(1.0));
        // A turn with no passes recorded (a server's, an older one) falls back to ITL.
        let old = timeline(&[61, 91, 121]).summary();
        assert_eq!(old.pass_gap, None);
        assert_eq!(old.stall_gaps_ms(), old.itl.map(|i| (i.p50_ms, i.max_ms)));
    }

    #[test]
    fn median_of_odd_even_and_non_finite() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 4.0]), Some(4.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn tpot_equals_mean_itl() {
        let s = timeline(&[5, 9, 17, 18, 40, 41]).summary();
        let itl = s.itl.unwrap_or_else(|| panic!("itl"));
        assert!((s.tpot_ms.unwrap_or_default() - itl.mean_ms).abs() < 1e-9);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(d).collect();
        assert_eq!(percentile_sorted(&v, 50.0), Some(d(50)));
        assert_eq!(percentile_sorted(&v, 90.0), Some(d(90)));
        assert_eq!(percentile_sorted(&v, 99.0), Some(d(99)));
        assert_eq!(percentile_sorted(&v, 100.0), Some(d(100)));
        assert_eq!(percentile_sorted(&v, 0.0), Some(d(1)));
        assert_eq!(percentile_sorted(&[], 50.0), None);
        assert_eq!(percentile_sorted(&[d(7)], 99.0), Some(d(7)));
    }

    #[test]
    fn rates_guard_zero() {
        assert_eq!(rate_per_s(0, d(10)), None);
        assert_eq!(rate_per_s(10, Duration::ZERO), None);
        assert_eq!(rate_per_s(10, d(1000)), Some(10.0));
        assert_eq!(relative_difference(105.0, 100.0), Some(0.05));
        assert_eq!(relative_difference(1.0, 0.0), None);
    }
}
