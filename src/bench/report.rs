//! One result row per test: the statistics over its repetitions (mean ± standard deviation of
//! tok/s, TTFT and ITL percentiles from `metrics`), the roofline and cost figures from
//! `metrics::roofline`, the sweep parameters and the reproducibility stamp. Every output
//! format and the results log print these rows; nothing here measures or prints.

use std::time::Duration;

use serde::Serialize;

use super::sweep::Job;
use crate::engine::{ModelInfo, SamplingParams};
use crate::llama::measure::Sample;
use crate::llama::measure::{TestKind, TestSpec};
use crate::llama::settings::{FlashAttn, KvType};
use crate::metrics::busy::{busy_warnings, BusySignals};
use crate::metrics::roofline::{
    ceiling_tok_per_s, cost_per_million_tokens, depth_slowdown, mbu, prefill_flops, Bandwidth,
    DepthPoint, PrefillShape,
};
use crate::metrics::{ms, LatencyStats};
use crate::stamp::Stamp;

/// The swept settings of a row, beside the stamp (which has the effective context values).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct BenchParams {
    /// The model path as given.
    pub model: String,
    /// Requested GPU layers; -1 = all (the stamp has the number actually offloaded).
    pub n_gpu_layers: i64,
    pub threads: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub type_k: KvType,
    pub type_v: KvType,
    pub flash_attn: FlashAttn,
    pub n_prompt: u32,
    pub n_gen: u32,
    pub n_depth: u32,
    /// Sequences decoded together: 1 but for batch tests.
    pub batch_size: u32,
    pub repetitions: u32,
    pub warmup: bool,
    /// Context requested: depth + prompt + generated, times the sequences.
    pub n_ctx: u32,
    /// Multi-GPU placement (`--devices`, `--split-mode`, `--main-gpu`), like
    /// "CUDA0/CUDA1 sm row"; empty for llama.cpp's defaults.
    pub placement: String,
}

/// One test's results. Figures that are not defined for a test are `null`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// The run this row belongs to (its id in the results log).
    pub run_id: String,
    pub kind: TestKind,
    /// llama-bench's name: `pp512`, `tg128`, `pp512+tg128`, ` @ d512` at a depth; batch tests
    /// `B4 pp128+tg128`.
    pub test: String,
    pub params: BenchParams,
    /// Tokens per repetition that t/s counts: the prompt (pp), the generated tokens (tg),
    /// both (pg), B × generated (batch); generated tokens as counted while decoding.
    pub n_tokens: u64,
    /// t/s of each repetition.
    pub samples_tok_per_s: Vec<f64>,
    /// pp/tg/pg: tokens ÷ the whole timed run (llama-bench's t/s); batch: B × generated ÷ the
    /// generation steps' decode time (llama-batched-bench's S_TG).
    pub tok_per_s_mean: f64,
    /// Sample standard deviation over the repetitions (0 for one).
    pub tok_per_s_sd: f64,
    /// Start of the run → first generated token (tg, pg, batch), over the repetitions: one
    /// sample each, so `ttft_samples` is `-r`. A percentile is `null` when there are fewer
    /// samples than it needs (`TAIL_MIN_SAMPLES`: 10 for p90, 100 for p99): below that the
    /// nearest rank is the largest sample, not a tail.
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// How many TTFTs the percentiles above come from (`null` when none: pp).
    pub ttft_samples: Option<usize>,
    /// How many gaps the ITL figures below pool (every repetition's).
    pub itl_samples: Option<usize>,
    /// Gaps between consecutive generated tokens, all repetitions pooled.
    pub itl_mean_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p90_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    /// The prompt's decode calls, mean over the repetitions (pg, batch).
    pub prefill_ms_mean: Option<f64>,
    /// Generated tokens ÷ the generation phase, mean over the repetitions (tg, pg, batch).
    pub decode_tok_per_s: Option<f64>,
    /// tg and pg: the time between decode calls per generated token, in µs, mean over the
    /// repetitions (choosing the next token; `tg…+sampling` rows run the chat's sampler).
    pub host_us_per_token: Option<f64>,
    /// Batch: aggregate t/s ÷ B, what each user gets.
    pub per_sequence_tok_per_s: Option<f64>,
    /// Batch: aggregate t/s ÷ that of B = 1 with the same settings.
    pub speedup_vs_b1: Option<f64>,
    /// Batch: ITL p50 ÷ that of B = 1, how much each user's latency grew.
    pub latency_growth_vs_b1: Option<f64>,
    /// KV-cache positions read per step, averaged over the steps the roofline describes: the
    /// generated tokens for tg, pg and batch (each step reads the cells before it and its
    /// own: depth + prompt + (n + 1) / 2, as the profile counts the flash-attention kernel's
    /// cells), the prompt tokens for pp (depth + (p − 1) / 2).
    pub kv_depth_mean: f64,
    /// Bytes read from memory per generated token: the weights one decode step reads (÷ B in
    /// a batch) plus `kv_bytes_per_token` (tg, pg, batch).
    pub bytes_per_token: Option<f64>,
    /// The KV cache's part of `bytes_per_token`, per sequence: each step's cells as the
    /// attention kernel reads them (a window layer only its window), averaged over the steps.
    pub kv_bytes_per_token: Option<f64>,
    /// tg and pg rows of a depth sweep: decode t/s ÷ that of the same test at depth 0 (`null`
    /// at depth 0's own row, without a depth-0 row, and for other rows).
    pub speed_vs_d0: Option<f64>,
    /// The same ratio as the bytes predict it: depth 0's bytes per token ÷ this row's (at the
    /// same MBU, speed goes as 1 ÷ bytes read).
    pub predicted_speed_vs_d0: Option<f64>,
    pub bandwidth_gb_s: Option<f64>,
    /// Where the bandwidth comes from: configured, datasheet (device), measured (method).
    pub bandwidth_source: Option<String>,
    /// Bandwidth ÷ bytes per token: the decode speed memory allows (tg, pg, batch).
    pub ceiling_tok_per_s: Option<f64>,
    /// Memory bandwidth utilisation: decode t/s ÷ ceiling, in % (tg, pg, batch).
    pub mbu_pct: Option<f64>,
    /// pp: matmul FLOPs per prompt token (`metrics::roofline::prefill_flops`) × t/s.
    pub achieved_gflop_per_s: Option<f64>,
    pub price_per_gpu_hour_usd: f64,
    /// Price ÷ (t/s × 3600) × 10⁶, at this row's t/s (aggregate for batch).
    pub cost_per_million_tokens_usd: Option<f64>,
    /// NVML's readings over the timed repetitions (`bench::gpu`): flattened, so the JSON and
    /// CSV keep their `gpu_*` columns.
    #[serde(flatten)]
    pub gpu: super::gpu::GpuColumns,
    /// The model was written by `tokscope synth`.
    pub synthetic: bool,
    /// `ModelInfo::SYNTHETIC_LABEL` for synthetic models.
    /// Why this row cannot be fully vouched for: synthetic weights, a busy machine (load
    /// average, a stall between tokens), each with the advice to rerun; `None` when clean.
    pub warning: Option<String>,
    /// Where a generation step's time goes (`--profile`; tg and pg rows): the profiled steps
    /// of every repetition (docs/metrics.md, "Step profile"). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::metrics::profile::TurnProfile>,
    /// The level `--profile` asked for, for the table under the bench table (the JSON has
    /// both).
    #[serde(skip)]
    pub profile_level: crate::metrics::profile::ProfileLevel,
    pub stamp: Stamp,
}

/// Everything a row needs besides the job and its samples.
pub(crate) struct RowContext<'a> {
    pub run_id: &'a str,
    /// The model and context the test ran on (with the roofline's weight bytes and KV shape
    /// for the context's cache types).
    pub info: &'a ModelInfo,
    pub bandwidth: Option<&'a Bandwidth>,
    pub price_per_gpu_hour_usd: f64,
    pub sampling: &'a SamplingParams,
    pub repetitions: u32,
    pub warmup: bool,
    /// The 1-minute load average before and after the row's runs.
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
}

/// Mean and sample standard deviation (n − 1), as llama-bench reports them.
pub(crate) fn mean_sd(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

fn rate(tokens: u64, elapsed: Duration) -> Option<f64> {
    crate::metrics::rate_per_s(usize::try_from(tokens).unwrap_or(usize::MAX), elapsed)
}

/// Tokens of one repetition that t/s counts: the prompt plus the tokens generated as
/// counted while decoding (only those for batch tests).
fn counted_tokens(test: &TestSpec, s: &Sample) -> u64 {
    match *test {
        TestSpec::Batch { .. } => s.tokens_generated,
        _ => u64::from(test.lengths().0) + s.tokens_generated,
    }
}

/// t/s of one repetition (see `Row::tok_per_s_mean`).
fn sample_rate(test: &TestSpec, s: &Sample) -> f64 {
    let elapsed = match test {
        TestSpec::Batch { .. } => s.decode,
        _ => s.total,
    };
    rate(counted_tokens(test, s), elapsed).unwrap_or(0.0)
}

fn mean_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| mean_sd(&v).0)
}

/// The steps described by the roofline, first and last. pp: the prompt tokens' positions.
/// Decoding: the KV cells each generation step reads, the cache before it and its own (the
/// step at position q reads q + 1 cells, as `metrics::profile::attention_reads` counts the
/// flash-attention kernel's cells): depth + prompt + 1 to depth + prompt + n.
fn depth_span(job: &Job) -> (u64, u64) {
    let d = u64::from(job.depth);
    let (p, n) = job.test.lengths();
    let (p, n) = (u64::from(p), u64::from(n));
    match job.test.kind() {
        TestKind::Pp => (d, d + p.saturating_sub(1)),
        _ => (d + p + 1, d + p + n.max(1)),
    }
}

/// The fewest samples a percentile needs to be a tail and not the largest sample: p90 10,
/// p99 100 (nearest rank: below 1 ÷ (1 − p) samples, the rank is the last one).
pub(crate) const TAIL_MIN_SAMPLES: [(u32, usize); 2] = [(90, 10), (99, 100)];

/// Percentile `p`'s value when `count` samples are enough for it (`TAIL_MIN_SAMPLES`).
fn tail(count: usize, p: u32, value: f64) -> Option<f64> {
    let needs = TAIL_MIN_SAMPLES
        .iter()
        .find(|(q, _)| *q == p)
        .map_or(1, |(_, n)| *n);
    (count >= needs).then_some(value)
}

pub(crate) fn build_row(job: &Job, samples: &[Sample], cx: &RowContext) -> Row {
    let test = &job.test;
    let rates: Vec<f64> = samples.iter().map(|s| sample_rate(test, s)).collect();
    #[cfg(feature = "plant")]
    let rates: Vec<f64> = match crate::metrics::planted_factor("bench") {
        Some(f) => rates.iter().map(|r| r * f).collect(),
        None => rates,
    };
    let (tok_per_s_mean, tok_per_s_sd) = mean_sd(&rates);
    let ttft =
        LatencyStats::from_durations(&samples.iter().filter_map(|s| s.ttft).collect::<Vec<_>>());
    let gaps: Vec<Duration> = samples
        .iter()
        .flat_map(|s| s.gaps.iter().copied())
        .collect();
    let itl = LatencyStats::from_durations(&gaps);
    let generates = test.lengths().1 > 0;
    let decode_rates = samples
        .iter()
        .filter_map(|s| rate(s.tokens_generated, s.decode));
    let decode_tok_per_s = mean_of(decode_rates).filter(|_| generates);
    let (lo, hi) = depth_span(job);
    let mut row = Row {
        run_id: cx.run_id.to_string(),
        kind: test.kind(),
        test: test.name(job.depth),
        params: params(job, cx),
        n_tokens: samples.first().map_or(0, |s| counted_tokens(test, s)),
        samples_tok_per_s: rates,
        tok_per_s_mean,
        tok_per_s_sd,
        ttft_p50_ms: ttft.map(|t| t.p50_ms),
        ttft_p90_ms: ttft.and_then(|t| tail(t.count, 90, t.p90_ms)),
        ttft_p99_ms: ttft.and_then(|t| tail(t.count, 99, t.p99_ms)),
        ttft_samples: ttft.map(|t| t.count),
        itl_samples: itl.map(|t| t.count),
        itl_mean_ms: itl.map(|t| t.mean_ms),
        itl_p50_ms: itl.map(|t| t.p50_ms),
        itl_p90_ms: itl.map(|t| t.p90_ms),
        itl_p99_ms: itl.map(|t| t.p99_ms),
        prefill_ms_mean: mean_of(samples.iter().filter_map(|s| s.prefill.map(ms))),
        decode_tok_per_s,
        host_us_per_token: mean_of(
            samples
                .iter()
                .filter(|s| s.tokens_generated > 1)
                .map(|s| s.host.as_secs_f64() * 1e6 / (s.tokens_generated - 1) as f64),
        )
        .filter(|_| generates && !matches!(test, TestSpec::Batch { .. })),
        per_sequence_tok_per_s: matches!(test, TestSpec::Batch { .. })
            .then(|| tok_per_s_mean / f64::from(test.sequences())),
        speedup_vs_b1: None,
        latency_growth_vs_b1: None,
        kv_depth_mean: (lo + hi) as f64 / 2.0,
        bytes_per_token: None,
        kv_bytes_per_token: None,
        speed_vs_d0: None,
        predicted_speed_vs_d0: None,
        bandwidth_gb_s: cx.bandwidth.map(|b| b.bytes_per_s / 1e9),
        bandwidth_source: cx.bandwidth.map(|b| b.source.label()),
        ceiling_tok_per_s: None,
        mbu_pct: None,
        achieved_gflop_per_s: None,
        price_per_gpu_hour_usd: cx.price_per_gpu_hour_usd,
        cost_per_million_tokens_usd: cost_per_million_tokens(
            cx.price_per_gpu_hour_usd,
            tok_per_s_mean,
        ),
        gpu: super::gpu::GpuColumns::default(),
        synthetic: cx.info.synthetic,
        warning: measurement_warning(
            cx.info.synthetic,
            &BusySignals {
                threads: job.params.threads,
                load_before: cx.load_before,
                load_after: cx.load_after,
                itl_p50_ms: itl.map(|t| t.p50_ms),
                itl_max_ms: itl.map(|t| t.max_ms),
            },
        ),
        profile: row_profile(samples, cx.bandwidth.map(|b| b.bytes_per_s)).map(|mut p| {
            p.not_meaningful =
                crate::metrics::profile::shares_not_meaningful(&busy_warnings(&BusySignals {
                    threads: job.params.threads,
                    load_before: cx.load_before,
                    load_after: cx.load_after,
                    itl_p50_ms: itl.map(|t| t.p50_ms),
                    itl_max_ms: itl.map(|t| t.max_ms),
                }));
            p
        }),
        profile_level: crate::metrics::profile::ProfileLevel::default(),
        stamp: Stamp::new(cx.info, cx.sampling),
    };
    if generates {
        // Decode on a GPU: the K/V pair's flash-attention fallback, CUDA graphs off.
        let gpu = row.stamp.gpu_warnings();
        if !gpu.is_empty() {
            let parts: Vec<String> = row.warning.take().into_iter().chain(gpu).collect();
            row.warning = Some(parts.join("; "));
        }
        add_decode_roofline(&mut row, job, cx, (lo, hi));
    } else {
        add_prefill_flops(&mut row, cx.info, (lo, hi));
    }
    row
}

/// The profiled steps of every repetition as one record: each repetition's calls with the
/// gap before each (its first call's own time: nothing came before it). `None` unprofiled.
fn row_profile(
    samples: &[Sample],
    bandwidth: Option<f64>,
) -> Option<crate::metrics::profile::TurnProfile> {
    let mut merged = crate::metrics::profile::ProfileRecord::default();
    let mut gaps = Vec::new();
    for s in samples {
        let Some(r) = s.profile.as_deref() else {
            continue;
        };
        merged.rate = r.rate;
        merged.steps.extend(r.steps.iter().cloned());
        merged.calls.extend(r.calls.iter().copied());
        gaps.extend(r.calls.first().map(|c| c.0));
        gaps.extend(s.gaps.iter().copied());
    }
    merged.figures(&gaps, 1.0, super::profile::limits(bandwidth))
}

/// The synthetic label and the busy-machine warnings of one measurement (a `bench` row, a
/// `run` answer), joined; `None` when there are none.
pub(crate) fn measurement_warning(synthetic: bool, signals: &BusySignals) -> Option<String> {
    let label = synthetic.then(|| ModelInfo::SYNTHETIC_LABEL.to_string());
    let parts: Vec<String> = label.into_iter().chain(busy_warnings(signals)).collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn params(job: &Job, cx: &RowContext) -> BenchParams {
    let p = &job.params;
    let (n_prompt, n_gen) = job.test.lengths();
    BenchParams {
        model: p.model.display().to_string(),
        n_gpu_layers: p.n_gpu_layers,
        threads: p.threads,
        n_batch: p.n_batch,
        n_ubatch: p.n_ubatch,
        type_k: p.type_k,
        type_v: p.type_v,
        flash_attn: p.flash_attn,
        n_prompt,
        n_gen,
        n_depth: job.depth,
        batch_size: job.test.sequences(),
        repetitions: cx.repetitions,
        warmup: cx.warmup,
        n_ctx: job.n_ctx(),
        placement: job.params.placement.label(),
    }
}

/// Bytes per generated token, the ceiling they allow and how close the run came (MBU).
fn add_decode_roofline(row: &mut Row, job: &Job, cx: &RowContext, (lo, hi): (u64, u64)) {
    let Some(weights) = cx.info.weight_bytes else {
        return;
    };
    let (bytes_per_token, kv_per_sequence) = crate::metrics::roofline::decode_bytes_per_token(
        &weights,
        cx.info.kv_shape.as_ref(),
        (lo, hi),
        job.test.sequences(),
    );
    row.bytes_per_token = Some(bytes_per_token);
    row.kv_bytes_per_token = Some(kv_per_sequence);
    let Some(bandwidth) = cx.bandwidth else {
        return;
    };
    row.ceiling_tok_per_s = ceiling_tok_per_s(bandwidth.bytes_per_s, bytes_per_token);
    let achieved = match job.test {
        TestSpec::Batch { .. } => Some(row.tok_per_s_mean),
        _ => row.decode_tok_per_s,
    };
    let achieved_and_ceiling = achieved.zip(row.ceiling_tok_per_s);
    row.mbu_pct = achieved_and_ceiling
        .and_then(|(a, c)| mbu(a, c))
        .map(|m| m * 100.0);
}

/// Achieved FLOP/s of a prompt: the matmul FLOPs of its tokens (layers per token, the output
/// head for one logits row per n_batch chunk, attention at each token's depth; see
/// `metrics::roofline::prefill_flops`) per token × t/s.
fn add_prefill_flops(row: &mut Row, info: &ModelInfo, (lo, hi): (u64, u64)) {
    let shape = PrefillShape {
        n_params: info.n_params,
        n_vocab: u64::try_from(info.n_vocab).unwrap_or(0),
        n_embd: u64::try_from(info.n_embd).unwrap_or(0),
        n_layer: u64::from(info.n_layer),
        tied_output: info.weight_bytes.is_some_and(|w| w.tied_output),
        attn_k_width: attn_width(info, |kv| kv.n_embd_k),
        attn_v_width: attn_width(info, |kv| kv.n_embd_v),
    };
    let n_tokens = hi + 1 - lo.min(hi);
    let n_batch = u64::from(row.params.n_batch.max(1));
    let logits_rows = n_tokens.div_ceil(n_batch);
    let per_token = prefill_flops(&shape, lo, n_tokens, logits_rows) / n_tokens.max(1) as f64;
    let flops = per_token * row.tok_per_s_mean;
    row.achieved_gflop_per_s = (flops.is_finite() && flops > 0.0).then_some(flops / 1e9);
}

/// Query heads × the head size of the KV cache's keys or values (`width` of the KV shape ÷ KV
/// heads), else the model's width where the KV shape is not known.
fn attn_width(info: &ModelInfo, width: impl Fn(&crate::metrics::roofline::KvShape) -> u64) -> u64 {
    let n_embd = u64::try_from(info.n_embd).unwrap_or(0);
    match info.kv_shape.as_ref() {
        Some(kv) if info.n_head_kv > 0 => {
            u64::from(info.n_head) * (width(kv) / u64::from(info.n_head_kv))
        }
        _ => n_embd,
    }
}

/// Fill each batch row's speed-up and latency growth against the B = 1 row of the same
/// settings, model and lengths (when the sweep has one).
pub(crate) fn relate_batches(rows: &mut [Row]) {
    let baselines: Vec<(BenchParams, f64, Option<f64>)> = rows
        .iter()
        .filter(|r| r.kind == TestKind::Batch && r.params.batch_size == 1)
        .map(|r| (r.params.clone(), r.tok_per_s_mean, r.itl_p50_ms))
        .collect();
    for row in rows.iter_mut().filter(|r| r.kind == TestKind::Batch) {
        let Some((_, tok_per_s, itl)) = baselines
            .iter()
            .find(|(p, _, _)| same_but_batch(p, &row.params))
        else {
            continue;
        };
        row.speedup_vs_b1 = (*tok_per_s > 0.0).then(|| row.tok_per_s_mean / tok_per_s);
        let growth = row.itl_p50_ms.zip(*itl).filter(|(_, base)| *base > 0.0);
        row.latency_growth_vs_b1 = growth.map(|(now, base)| now / base);
    }
}

/// The decode rows (tg, pg) of a depth sweep as its points: (row index, point), for the rows
/// with bytes per token and a decode rate.
fn depth_points(rows: &[Row]) -> Vec<(usize, DepthPoint)> {
    rows.iter()
        .enumerate()
        .filter(|(_, r)| !matches!(r.kind, TestKind::Pp | TestKind::Batch))
        .filter_map(|(i, r)| {
            let point = DepthPoint {
                depth: u64::from(r.params.n_depth),
                tok_per_s: r.decode_tok_per_s?,
                bytes_per_token: r.bytes_per_token?,
                kv_bytes_per_token: r.kv_bytes_per_token.unwrap_or(0.0),
                ceiling_tok_per_s: r.ceiling_tok_per_s,
            };
            Some((i, point))
        })
        .collect()
}

/// The depth sweeps among `rows`: the decode rows of each test and settings (all but the
/// depth), each group in depth order, groups in the order of their first row; only groups of
/// two depths or more.
pub(crate) fn depth_sweeps(rows: &[Row]) -> Vec<Vec<(usize, DepthPoint)>> {
    let mut groups: Vec<Vec<(usize, DepthPoint)>> = Vec::new();
    for (i, point) in depth_points(rows) {
        let same = |g: &Vec<(usize, DepthPoint)>| {
            let first = &rows[g[0].0];
            first.kind == rows[i].kind && same_but_depth(&first.params, &rows[i].params)
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.push((i, point)),
            None => groups.push(vec![(i, point)]),
        }
    }
    for g in &mut groups {
        g.sort_by_key(|(_, p)| p.depth);
    }
    groups.retain(|g| g.len() >= 2);
    groups
}

/// Fill each decode row's speed against depth 0 of the same test and settings, measured and
/// as the bytes predict it (`metrics::roofline::depth_slowdown`).
pub(crate) fn relate_depths(rows: &mut [Row]) {
    for group in depth_sweeps(rows) {
        let points: Vec<DepthPoint> = group.iter().map(|(_, p)| *p).collect();
        let slowdown = depth_slowdown(&points);
        for ((i, _), (_, measured, predicted)) in group.iter().zip(slowdown) {
            rows[*i].speed_vs_d0 = measured;
            rows[*i].predicted_speed_vs_d0 = predicted;
        }
    }
}

/// Whether `a` and `b` are the same settings once `vary` has cleared the ones a sweep varies
/// (the context always follows them).
fn same_but(a: &BenchParams, b: &BenchParams, vary: fn(&mut BenchParams)) -> bool {
    let cleared = |p: &BenchParams| {
        let mut p = BenchParams {
            n_ctx: 0,
            ..p.clone()
        };
        vary(&mut p);
        p
    };
    cleared(a) == cleared(b)
}

fn same_but_depth(a: &BenchParams, b: &BenchParams) -> bool {
    same_but(a, b, |p| p.n_depth = 0)
}

fn same_but_batch(a: &BenchParams, b: &BenchParams) -> bool {
    same_but(a, b, |p| p.batch_size = 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd_like_llama_bench() {
        let (m, sd) = mean_sd(&[10.0, 12.0, 14.0]);
        assert_eq!(m, 12.0);
        assert!((sd - 2.0).abs() < 1e-12);
        assert_eq!(mean_sd(&[5.0]), (5.0, 0.0));
        assert_eq!(mean_sd(&[]), (0.0, 0.0));
    }

    #[test]
    fn depth_spans_cover_the_steps_the_roofline_describes() {
        use super::super::sweep::ParamSet;
        let job = |test, depth| Job {
            params: ParamSet {
                model: "m.gguf".into(),
                n_gpu_layers: -1,
                n_batch: 2048,
                n_ubatch: 512,
                type_k: KvType::F16,
                type_v: KvType::F16,
                flash_attn: FlashAttn::Auto,
                threads: 1,
                placement: crate::llama::placement::Placement::default(),
            },
            depth,
            test,
        };
        assert_eq!(
            depth_span(&job(TestSpec::Pp { n_prompt: 512 }, 0)),
            (0, 511)
        );
        // The step at position q reads q + 1 cells: the first of tg128 at depth 100 reads 101.
        assert_eq!(
            depth_span(&job(TestSpec::Tg { n_gen: 128 }, 100)),
            (101, 228)
        );
        let pg = TestSpec::Pg {
            n_prompt: 10,
            n_gen: 5,
        };
        assert_eq!(depth_span(&job(pg, 0)), (11, 15));
        let five = Sample {
            tokens_generated: 5,
            ..Sample::default()
        };
        assert_eq!(counted_tokens(&pg, &five), 15);
        let batch = TestSpec::Batch {
            sequences: 4,
            n_prompt: 8,
            n_gen: 3,
        };
        let twelve = Sample {
            tokens_generated: 12,
            ..Sample::default()
        };
        assert_eq!(counted_tokens(&batch, &twelve), 12);
        assert_eq!(depth_span(&job(batch, 0)), (9, 11));
    }

    /// Item 13 of issue 58: a decode row of a K/V pair this CUDA build converts to f16 warns,
    /// with the stamp's mark; a prefill row (whose kernels convert any quantized cache by
    /// design) and a row with nothing on the GPU do not.
    #[test]
    fn a_gpu_decode_row_of_an_uncompiled_kv_pair_warns() {
        use super::super::sweep::ParamSet;
        let mark = "K/V q8_0-f16: this build has no CUDA flash-attention decode kernel";
        let info = ModelInfo {
            n_gpu_layers: 33,
            fa_kv_kernel: Some(mark.to_string()),
            ..ModelInfo::default()
        };
        let sampling = SamplingParams::default();
        let cx = RowContext {
            run_id: "r",
            info: &info,
            bandwidth: None,
            price_per_gpu_hour_usd: 0.0,
            sampling: &sampling,
            repetitions: 1,
            warmup: false,
            load_before: None,
            load_after: None,
        };
        let job = |test| Job {
            params: ParamSet {
                model: "m.gguf".into(),
                n_gpu_layers: -1,
                n_batch: 2048,
                n_ubatch: 512,
                type_k: KvType::Q8_0,
                type_v: KvType::F16,
                flash_attn: FlashAttn::On,
                threads: 1,
                placement: crate::llama::placement::Placement::default(),
            },
            depth: 0,
            test,
        };
        let sample = Sample {
            total: Duration::from_secs(1),
            decode: Duration::from_secs(1),
            tokens_generated: 16,
            ..Sample::default()
        };
        let tg = build_row(
            &job(TestSpec::Tg { n_gen: 16 }),
            std::slice::from_ref(&sample),
            &cx,
        );
        assert_eq!(tg.stamp.fa_kv_kernel.as_deref(), Some(mark));
        assert!(
            tg.warning.as_deref().is_some_and(|w| w.contains(mark)),
            "{:?}",
            tg.warning
        );
        let pp = build_row(
            &job(TestSpec::Pp { n_prompt: 16 }),
            std::slice::from_ref(&sample),
            &cx,
        );
        assert!(pp.warning.is_none(), "{:?}", pp.warning);
        let on_cpu = ModelInfo {
            n_gpu_layers: 0,
            ..info.clone()
        };
        let cpu = RowContext {
            info: &on_cpu,
            ..cx
        };
        let tg = build_row(&job(TestSpec::Tg { n_gen: 16 }), &[sample], &cpu);
        assert!(tg.warning.is_none(), "{:?}", tg.warning);
    }

    /// Issue 60 item 2: a decode row's KV bytes are the cells the profile counts for the
    /// flash-attention kernel (`metrics::profile::attention_reads`: `cells_read(il, depth, 1)`
    /// per layer, the step's own cell included, a window layer only its window), summed over
    /// the layers and averaged over the steps; and a depth sweep's rows carry their speed
    /// against depth 0, measured and as the bytes predict it.
    #[test]
    fn depth_rows_read_the_kernel_s_cells_and_relate_to_depth_0() {
        use super::super::sweep::ParamSet;
        use crate::metrics::roofline::{KvShape, SlidingWindow, WeightBytes};
        // 4 layers, layers 0 and 2 with a 16-cell window; 64 + 64 bytes of K and V a cell.
        let kv = KvShape {
            n_layer: 4,
            n_embd_k: 32,
            n_embd_v: 32,
            type_k: KvType::F16,
            type_v: KvType::F16,
            sliding_window: SlidingWindow::new(16, [true, false, true, false].into_iter()),
        };
        let info = ModelInfo {
            weight_bytes: Some(WeightBytes {
                total_bytes: 1_000_000,
                token_embd_bytes: 0,
                embd_row_bytes: 0,
                tied_output: true,
                output_bytes: 0,
            }),
            kv_shape: Some(kv),
            ..ModelInfo::default()
        };
        let sampling = SamplingParams::default();
        let bandwidth = Bandwidth {
            bytes_per_s: 1e9,
            source: crate::metrics::roofline::BandwidthSource::Config,
        };
        let cx = RowContext {
            run_id: "r",
            info: &info,
            bandwidth: Some(&bandwidth),
            price_per_gpu_hour_usd: 0.0,
            sampling: &sampling,
            repetitions: 1,
            warmup: false,
            load_before: None,
            load_after: None,
        };
        let job = |n_gen, depth| Job {
            params: ParamSet {
                model: "m.gguf".into(),
                n_gpu_layers: 0,
                n_batch: 2048,
                n_ubatch: 512,
                type_k: KvType::F16,
                type_v: KvType::F16,
                flash_attn: FlashAttn::On,
                threads: 1,
                placement: crate::llama::placement::Placement::default(),
            },
            depth,
            test: TestSpec::Tg { n_gen },
        };
        let sample = |tok_per_s: f64, n: u64| Sample {
            total: Duration::from_secs_f64(n as f64 / tok_per_s),
            decode: Duration::from_secs_f64(n as f64 / tok_per_s),
            tokens_generated: n,
            ..Sample::default()
        };
        // One step at depth 100: what the profile counts for it, layer by layer.
        let kernel: u64 = (0..4).map(|il| kv.cells_read(il, 100, 1)).sum();
        assert_eq!(
            kernel,
            101 + 16 + 101 + 16,
            "the step's own cell, windows of 16"
        );
        let one = build_row(&job(1, 100), &[sample(10.0, 1)], &cx);
        assert_eq!(
            one.kv_bytes_per_token,
            Some(kernel as f64 * kv.layer_bytes_per_position())
        );
        assert_eq!(one.kv_depth_mean, 101.0);
        // A sweep: depth 0, 2048, 8192 of tg4, and a pp row that stays out of it.
        let mut rows = vec![
            build_row(&job(4, 0), &[sample(50.0, 4)], &cx),
            build_row(&job(4, 2048), &[sample(40.0, 4)], &cx),
            build_row(&job(4, 8192), &[sample(20.0, 4)], &cx),
        ];
        let pp = Job {
            test: TestSpec::Pp { n_prompt: 8 },
            ..job(4, 0)
        };
        rows.push(build_row(&pp, &[sample(100.0, 8)], &cx));
        relate_depths(&mut rows);
        let bytes = |i: usize| rows[i].bytes_per_token.unwrap();
        assert_eq!(rows[0].speed_vs_d0, Some(1.0));
        assert_eq!(rows[2].speed_vs_d0, Some(20.0 / 50.0));
        assert_eq!(rows[2].predicted_speed_vs_d0, Some(bytes(0) / bytes(2)));
        assert!(rows[2].predicted_speed_vs_d0.unwrap() < rows[1].predicted_speed_vs_d0.unwrap());
        assert_eq!(
            (rows[3].speed_vs_d0, rows[3].predicted_speed_vs_d0),
            (None, None)
        );
        assert_eq!(depth_sweeps(&rows).len(), 1);
        // Without a depth-0 row there is nothing to relate to.
        let mut deep = rows[1..3].to_vec();
        for r in &mut deep {
            r.speed_vs_d0 = None;
        }
        relate_depths(&mut deep);
        assert_eq!(deep[1].speed_vs_d0, None);
    }

    #[test]
    fn a_tail_percentile_needs_enough_samples() {
        assert_eq!(tail(5, 90, 1.0), None, "5 samples: the p90 is the largest");
        assert_eq!(tail(10, 90, 1.0), Some(1.0));
        assert_eq!(tail(99, 99, 2.0), None);
        assert_eq!(tail(100, 99, 2.0), Some(2.0));
    }

    #[test]
    fn batch_rate_is_generated_tokens_over_decode_time() {
        let batch = TestSpec::Batch {
            sequences: 4,
            n_prompt: 8,
            n_gen: 10,
        };
        let s = Sample {
            total: Duration::from_secs(3),
            decode: Duration::from_secs(2),
            tokens_generated: 40,
            ..Sample::default()
        };
        assert_eq!(sample_rate(&batch, &s), 20.0);
        let pg = TestSpec::Pg {
            n_prompt: 20,
            n_gen: 10,
        };
        let pg_sample = Sample {
            tokens_generated: 10,
            ..s
        };
        assert_eq!(sample_rate(&pg, &pg_sample), 10.0, "(20 + 10) / 3 s");
    }
}
