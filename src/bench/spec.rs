//! `bench --spec ngram | --draft MODEL` with a `--draft-max` sweep: every k (0 = no
//! speculation, the baseline) answers the same prompt greedily for a fixed number of tokens in
//! an engine of its own, round after round, the order of the k alternating (forward, then
//! backward: ABBA) so that drift of the machine's speed hits every k alike. Each row: decode
//! tok/s, the speed-up against k = 0 in the same round with its spread, acceptance, tokens per
//! target pass, draft and verify time, the roofline's expected speed-up and the verdict
//! (`metrics::spec`, one definition for the chat, `run` and here).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::plan::{OutputFormat, SpecBenchError, SpecPlan};
use crate::engine::{
    ChatMessage, EngineConfig, EngineError, EngineEvent, EngineHandle, EngineSettings,
    EventReceiver, ModelInfo, SamplingParams, TgSample, TurnReport, TurnRequest,
};
use crate::llama::settings::SpecMode;
use crate::metrics::ratio;
use crate::metrics::spec::{verdict, SpecStats};
use crate::stamp::Stamp;

/// The copy-heavy prompt n-gram lookup needs to find anything (the one `scripts/spec-bench.sh`
/// used): a function, then the request to write it again under another name.
pub(crate) const DEFAULT_SPEC_PROMPT: &str = "Here is a Python function:

def compute_total(items, tax_rate):
    total = 0
    for item in items:
        price = item[\"price\"]
        quantity = item[\"quantity\"]
        total = total + price * quantity
    tax = total * tax_rate
    total = total + tax
    return round(total, 2)

Write the same function again, exactly as above, but named sum_prices.";

/// The engine settings of every k but its speculation: the configured ones on `threads`
/// threads, a context of at least `n_gen` + 2048 tokens (the prompt's room), and one kernel set
/// for every k (`batch_invariant`; auto: batch-invariant, as when speculating), so that k = 0
/// is the baseline of the same kernels and "same text" means what it says.
pub(crate) fn sweep_engine(
    configured: &EngineSettings,
    batch_invariant: Option<bool>,
    threads: u32,
    n_gen: u32,
) -> EngineSettings {
    let mut engine = configured.clone();
    engine.spec.batch_invariant = Some(batch_invariant.unwrap_or(true));
    engine.threads = threads;
    engine.n_ctx = engine.n_ctx.max(n_gen.saturating_add(2048));
    engine
}

/// The kind of the sweep's rows in the results log.
pub(crate) const KIND: &str = "spec";

/// One k of the sweep.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SpecRow {
    pub run_id: String,
    /// `spec`, beside bench's `pp`, `tg`, `pg`, `batch` in the results log.
    pub kind: &'static str,
    /// `tg128+ngram-k2`: the generated tokens, the guesser and k (`tokscope results`, `--vs`).
    pub test: String,
    pub model: String,
    /// `ngram` or `draft` (the sweep's mode; k = 0 does not speculate).
    pub mode: String,
    pub draft_model: Option<String>,
    /// The length of the n-gram `--spec ngram` looks up; `null` with a draft model.
    pub ngram_n: Option<u32>,
    /// Every k on batch-invariant kernels (`llama::invariant`), k = 0 too.
    pub batch_invariant: bool,
    /// Most tokens drafted per step; 0 is plain decoding, the baseline.
    pub draft_max: u32,
    pub n_gen: u32,
    pub rounds: u32,
    pub prompt: String,
    /// Decode tok/s of each round ((N − 1) / (last − first token's ready time)).
    pub samples_tok_per_s: Vec<f64>,
    pub tok_per_s_mean: f64,
    pub tok_per_s_sd: f64,
    /// Each round's tok/s ÷ k = 0's in the same round (exactly 1 for k = 0).
    pub speedup_per_round: Vec<f64>,
    /// Mean, sample standard deviation, least and greatest of the per-round speed-ups.
    pub speedup_mean: f64,
    pub speedup_sd: f64,
    pub speedup_min: f64,
    pub speedup_max: f64,
    /// The roofline's expected speed-up, bytes only, at the pooled α, mean k and share of
    /// verify passes (`metrics::spec::SpecStats::expected`).
    pub expected_speedup: Option<f64>,
    /// ρ, the roofline's compute term: the median of what every speculating engine of the
    /// sweep measured when it loaded (`metrics::spec::RowCost`); `null` for k = 0.
    pub row_cost: Option<f64>,
    /// The roofline with its compute term at the same figures and ρ
    /// (`metrics::spec::SpecStats::expected`).
    pub expected_speedup_compute: Option<f64>,
    /// accepted / drafted, all rounds pooled; `null` for k = 0.
    pub acceptance_rate: Option<f64>,
    /// α: accepted / (accepted + rejections).
    pub acceptance_per_token: Option<f64>,
    /// Tokens per target pass (accepted + passes) / passes.
    pub tokens_per_pass: Option<f64>,
    pub mean_draft_len: Option<f64>,
    pub draft_ms_per_step: Option<f64>,
    pub verify_ms_per_pass: Option<f64>,
    /// k = 0's decode compute per pass, the same rounds: what a plain pass costs.
    pub plain_ms_per_pass: Option<f64>,
    /// verify ms per pass ÷ k = 0's plain ms per pass (1 while verifying is free).
    pub verify_cost_in_passes: Option<f64>,
    /// draft ms per step ÷ k = 0's plain ms per pass.
    pub draft_cost_in_passes: Option<f64>,
    /// The decode phase per generated token: drafting, verify and plain passes, host time.
    pub draft_ms_per_token: Option<f64>,
    pub verify_ms_per_token: Option<f64>,
    pub plain_ms_per_token: Option<f64>,
    pub host_us_per_token: Option<f64>,
    /// Every round's greedy text equal to k = 0's (it must be).
    pub text_identical: bool,
    /// `metrics::spec::verdict` at this row's speed-up; `null` for k = 0.
    pub verdict: Option<String>,
    /// The 1-minute load average before and after the sweep.
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    /// A busy machine, synthetic weights; `null` when clean.
    pub warning: Option<String>,
    /// Against plain decoding on llama.cpp's default kernels (a sweep on batch-invariant
    /// kernels only): this row's speed-up and what the kernel set costs prefill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_kernels: Option<super::kernel_baseline::DefaultKernels>,
    pub stamp: Stamp,
}

impl SpecRow {
    /// What guessed the drafts: `draft <file name>`, or the mode.
    pub(crate) fn guesser(&self) -> String {
        match &self.draft_model {
            Some(d) => format!("draft {}", super::sweep::file_name(std::path::Path::new(d))),
            None => self.mode.clone(),
        }
    }
}

/// What the sweep produced.
pub(crate) struct SpecOutcome {
    pub rows: Vec<SpecRow>,
    /// The sentence under the table: the best k's verdict.
    pub verdict: String,
}

/// One k's engine and what its turns gave.
struct Lane {
    k: u32,
    /// Its engine while loaded (with more than one thread, only for its own turns: see `run`).
    bench: Option<BenchEngine>,
    /// What the engine said about the model when it first loaded.
    info: ModelInfo,
    tok_per_s: Vec<f64>,
    texts: Vec<String>,
    stats: SpecStats,
    /// ρ of each measured turn's engine (`SpecStats::row_cost`).
    row_costs: Vec<f64>,
    decode_compute: Duration,
    decode_calls: usize,
}

/// An engine of its own that answers fixed turns for a benchmark, read as `run` reads it (a k
/// of this sweep, a `run` lane of `bench --run-vs-tg`).
pub(super) struct BenchEngine {
    pub engine: EngineHandle,
    events: EventReceiver,
    pub info: ModelInfo,
}

impl BenchEngine {
    /// Spawn the engine (the model loads on its thread) and wait until it is ready.
    pub(super) fn start(model: PathBuf, settings: EngineSettings) -> Result<Self, EngineError> {
        let (engine, mut events) = EngineHandle::spawn(EngineConfig {
            model_path: model,
            settings,
        })?;
        match wait(&mut events, None)? {
            Waited::Ready(info) => Ok(BenchEngine {
                engine,
                events,
                info: *info,
            }),
            Waited::Finished(_) | Waited::Tg(_) => Err(EngineError::EngineGone),
        }
    }

    /// One turn answering `messages` for exactly `n_gen` tokens (end-of-generation ignored);
    /// its errors name lane `lane` (`k=3`, `run c4096`).
    pub(super) fn turn(
        &mut self,
        lane: &str,
        messages: &[ChatMessage],
        sampling: SamplingParams,
        n_gen: u32,
    ) -> Result<TurnReport, SpecBenchError> {
        let request = TurnRequest {
            messages: messages.to_vec(),
            sampling,
            max_tokens: n_gen,
            capture_first_logits: false,
            ignore_eos: true,
            context_full: crate::engine::ContextFull::DropOldest,
        };
        let id = self.engine.send(self.engine.next_id(), request, None);
        let waited = id.and_then(|id| wait(&mut self.events, Some(id)));
        let report = match waited.map_err(SpecBenchError::in_lane(lane))? {
            Waited::Finished(report) => *report,
            _ => return Err(SpecBenchError::in_lane(lane)(EngineError::EngineGone)),
        };
        let got = report.timeline.tokens_generated();
        if got != n_gen as usize {
            return Err(SpecBenchError::Short {
                lane: lane.to_string(),
                got,
                want: n_gen,
                why: format!("{:?}", report.stop_reason),
            });
        }
        Ok(report)
    }

    /// One timed run of bench's tg test of `n_gen` tokens on this engine's thread.
    pub(super) fn tg(&mut self, n_gen: u32) -> Result<TgSample, EngineError> {
        let id = self.engine.next_id();
        self.engine.bench_tg(id, n_gen)?;
        match wait(&mut self.events, Some(id))? {
            Waited::Tg(sample) => Ok(sample),
            Waited::Ready(_) | Waited::Finished(_) => Err(EngineError::EngineGone),
        }
    }
}

/// The sweep's sampling: greedy, no repetition penalty (so every k speculates and must give
/// the same text).
pub(crate) fn greedy() -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        repeat_penalty: 1.0,
        ..SamplingParams::default()
    }
}

/// Wait for the engine's answer to `id` (or its readiness when `id` is `None`), looking once per
/// stream frame while an answer is in flight, so that its token events wake nobody (as `run`).
fn wait(events: &mut EventReceiver, id: Option<u64>) -> Result<Waited, EngineError> {
    let pace = id.map(|_| crate::engine::STREAM_FRAME_INTERVAL);
    while let Some(event) = crate::engine::recv_paced(events, pace) {
        match event {
            EngineEvent::Ready(info) if id.is_none() => return Ok(Waited::Ready(info)),
            EngineEvent::LoadFailed(e) => return Err(e),
            EngineEvent::Finished { request_id, report } if Some(request_id) == id => {
                return Ok(Waited::Finished(report))
            }
            EngineEvent::TgMeasured { request_id, sample } if Some(request_id) == id => {
                return Ok(Waited::Tg(sample))
            }
            EngineEvent::Failed { request_id, error } if Some(request_id) == id => {
                return Err(error)
            }
            _ => {}
        }
    }
    Err(EngineError::EngineGone)
}

enum Waited {
    Ready(Box<ModelInfo>),
    Finished(Box<TurnReport>),
    Tg(TgSample),
}

impl Lane {
    fn start(plan: &SpecPlan, k: u32) -> Result<Self, SpecBenchError> {
        let bench = Self::engine(plan, k)?;
        Ok(Lane {
            k,
            info: bench.info.clone(),
            bench: Some(bench),
            tok_per_s: Vec::new(),
            texts: Vec::new(),
            stats: SpecStats::default(),
            row_costs: Vec::new(),
            decode_compute: Duration::ZERO,
            decode_calls: 0,
        })
    }

    /// The engine of k, loaded and ready.
    fn engine(plan: &SpecPlan, k: u32) -> Result<BenchEngine, SpecBenchError> {
        let mut settings = plan.engine.clone();
        settings.spec.draft_max = k;
        settings.spec.ngram_n = plan.ngram_n;
        // Every k on the plan's kernels (k = 0 does not speculate, so auto would differ).
        settings.spec.batch_invariant = Some(plan.engine.spec.batch_invariant_kernels());
        settings.spec.mode = if k == 0 { SpecMode::Off } else { plan.mode };
        settings.spec.draft_model = plan.draft.clone().filter(|_| k > 0);
        BenchEngine::start(plan.model.clone(), settings)
            .map_err(SpecBenchError::in_lane(format!("k={k}")))
    }

    /// Shuts the engine down (its thread joined, its OpenMP pool gone with it).
    fn unload(&mut self) {
        if let Some(b) = self.bench.take() {
            b.engine.shutdown();
        }
    }

    fn turn(&mut self, plan: &SpecPlan, n_gen: u32) -> Result<TurnReport, SpecBenchError> {
        let bench = match self.bench.take() {
            Some(bench) => bench,
            None => Self::engine(plan, self.k)?,
        };
        let lane = format!("k={}", self.k);
        (self.bench.insert(bench)).turn(&lane, &plan.messages, greedy(), n_gen)
    }

    /// A timed turn: its tok/s, text and figures.
    fn measure(&mut self, plan: &SpecPlan) -> Result<f64, SpecBenchError> {
        let report = self.turn(plan, plan.n_gen)?;
        let tok_per_s = report.timeline.summary().decode_tok_per_s.unwrap_or(0.0);
        self.tok_per_s.push(tok_per_s);
        self.texts.push(report.text);
        if let Some(s) = &report.spec {
            self.stats.add(s);
            self.row_costs.extend(s.row_cost);
        }
        self.decode_compute += report.timeline.decode_compute;
        self.decode_calls += report.timeline.decode_calls;
        Ok(tok_per_s)
    }
}

/// The order of the lanes in round `round`: forward on even rounds, backward on odd ones
/// (A B B A …), as `run::run_jobs_alternating` orders its jobs.
pub(crate) fn round_order(n: usize, round: u32) -> Vec<usize> {
    if round % 2 == 0 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// Run the sweep: one engine per k; a warm-up turn each (unless turned off); then `rounds`
/// rounds of one timed turn per k in alternating order. Progress on stderr.
///
/// With one thread every engine stays loaded. With more, each k's engine is loaded for its
/// turn (and its warm-up) and shut down after it: every engine thread holds an OpenMP pool
/// of its own, and libgomp, counting more threads than cores, then puts its workers to sleep
/// after every parallel region. Measured: the demo model's plain decode at 2 threads ran at
/// 33 tok/s with four engines loaded, against 47–53 tok/s alone (BENCHMARKS.md).
pub(crate) fn run(plan: &SpecPlan, run_id: &str) -> Result<SpecOutcome, SpecBenchError> {
    let load_before = crate::hw::load_average_1m();
    let one_at_a_time = plan.engine.threads > 1;
    let warmup = plan.n_gen.min(16);
    let mut lanes = Vec::with_capacity(plan.draft_max.len());
    for &k in &plan.draft_max {
        eprintln!("loading the engine for k={k}…");
        let mut lane = Lane::start(plan, k)?;
        if plan.warmup {
            lane.turn(plan, warmup)?;
        }
        if one_at_a_time {
            lane.unload();
        }
        lanes.push(lane);
    }
    for round in 0..plan.rounds {
        for i in round_order(lanes.len(), round) {
            let lane = &mut lanes[i];
            if one_at_a_time && plan.warmup {
                lane.turn(plan, warmup)?;
            }
            let tps = lane.measure(plan)?;
            if one_at_a_time {
                lane.unload();
            }
            eprintln!(
                "round {}/{} k={}: {tps:.1} tok/s",
                round + 1,
                plan.rounds,
                lane.k
            );
        }
    }
    let kernels = kernel_runs(plan)?;
    let load_after = crate::hw::load_average_1m();
    let mut rows = rows(plan, &lanes, run_id, load_before, load_after);
    for row in &mut rows {
        row.default_kernels = kernels.for_row(&row.samples_tok_per_s);
    }
    for mut lane in lanes {
        lane.unload();
    }
    let verdict = sweep_verdict(&rows);
    Ok(SpecOutcome { rows, verdict })
}

/// Plain decoding on both kernel sets in child processes, `plan.rounds` times in alternating
/// order (after the sweep's own rounds, with every engine of this process idle), when the
/// plan asks for it.
fn kernel_runs(plan: &SpecPlan) -> Result<super::kernel_baseline::KernelRuns, SpecBenchError> {
    use super::kernel_baseline::{child_run, prompt_file, KernelRuns};
    let mut runs = KernelRuns::default();
    if !plan.kernel_baseline {
        return Ok(runs);
    }
    let prompt = prompt_file(plan).map_err(|e| {
        let why = format!("cannot write the prompt for the child run: {e}");
        SpecBenchError::in_lane("plain decoding on the default kernels")(EngineError::Decode(why))
    })?;
    for round in 0..plan.rounds {
        for invariant in [round % 2 == 1, round % 2 == 0] {
            let run = child_run(plan, prompt.path(), invariant)?;
            eprintln!(
                "round {}/{} plain on the {} kernels (child): prefill {:.1} tok/s, decode {:.1} tok/s",
                round + 1,
                plan.rounds,
                crate::llama::invariant::kernel_set_name(invariant),
                run.prefill_tok_per_s,
                run.decode_tok_per_s
            );
            if invariant {
                runs.invariant.push(run);
            } else {
                runs.default.push(run);
            }
        }
    }
    Ok(runs)
}

fn mean_sd_min_max(values: &[f64]) -> (f64, f64, f64, f64) {
    let (mean, sd) = super::report::mean_sd(values);
    let fold = |init, f: fn(f64, f64) -> f64| values.iter().copied().fold(init, f);
    match values {
        [] => (0.0, 0.0, 0.0, 0.0),
        _ => (
            mean,
            sd,
            fold(f64::INFINITY, f64::min),
            fold(f64::NEG_INFINITY, f64::max),
        ),
    }
}

/// A busy machine (the 1-minute load before and after) and synthetic weights, joined; `None`
/// when clean.
pub(super) fn sweep_warning(
    threads: u32,
    load_before: Option<f64>,
    load_after: Option<f64>,
    synthetic: bool,
) -> Option<String> {
    let mut warnings = crate::metrics::busy::busy_warnings(&crate::metrics::busy::BusySignals {
        threads,
        load_before,
        load_after,
        ..Default::default()
    });
    if synthetic {
        warnings.push("synthetic model: its speed is real, its text is noise".to_string());
    }
    (!warnings.is_empty()).then(|| warnings.join("; "))
}

fn rows(
    plan: &SpecPlan,
    lanes: &[Lane],
    run_id: &str,
    load_before: Option<f64>,
    load_after: Option<f64>,
) -> Vec<SpecRow> {
    let Some(base) = lanes.iter().find(|l| l.k == 0) else {
        return Vec::new();
    };
    let plain_ms = ratio(
        crate::metrics::ms(base.decode_compute),
        base.decode_calls as f64,
    );
    let (threads, synthetic) = (plan.engine.threads, base.info.synthetic);
    let warning = sweep_warning(threads, load_before, load_after, synthetic);
    // ρ belongs to the target and its kernels, not to k: every engine's measurement pooled.
    let mut row_costs: Vec<f64> = lanes.iter().flat_map(|l| l.row_costs.clone()).collect();
    row_costs.sort_by(f64::total_cmp);
    let row_cost = row_costs.get(row_costs.len() / 2).copied();
    lanes
        .iter()
        .map(|lane| {
            let speedups: Vec<f64> = lane
                .tok_per_s
                .iter()
                .zip(&base.tok_per_s)
                .map(|(t, b)| {
                    if lane.k == 0 {
                        1.0
                    } else {
                        ratio(*t, *b).unwrap_or(0.0)
                    }
                })
                .collect();
            let (tps_mean, tps_sd) = super::report::mean_sd(&lane.tok_per_s);
            let (s_mean, s_sd, s_min, s_max) = mean_sd_min_max(&speedups);
            let spec = (lane.k > 0).then(|| lane.stats.summary());
            let get = |f: fn(&crate::metrics::spec::SpecSummary) -> Option<f64>| {
                spec.as_ref().and_then(f)
            };
            let verify_cost = get(|s| s.verify_ms_per_pass)
                .zip(plain_ms)
                .and_then(|(v, p)| ratio(v, p));
            let draft_cost = get(|s| s.draft_ms_per_step)
                .zip(plain_ms)
                .and_then(|(d, p)| ratio(d, p));
            let alpha = get(|s| s.acceptance_per_token);
            // k = 0 is its own baseline: one token per pass, no speed-up expected.
            let or_one = |v: Option<f64>| if lane.k == 0 { Some(1.0) } else { v };
            let expected_compute = or_one(row_cost.and_then(|rho| lane.stats.expected(rho)));
            SpecRow {
                run_id: run_id.to_string(),
                kind: KIND,
                test: format!("tg{}+{}-k{}", plan.n_gen, plan.mode.name(), lane.k),
                model: plan.model.display().to_string(),
                mode: plan.mode.name().to_string(),
                draft_model: plan.draft.as_ref().map(|d| d.display().to_string()),
                ngram_n: (plan.mode == SpecMode::Ngram).then_some(plan.ngram_n),
                batch_invariant: plan.engine.spec.batch_invariant_kernels(),
                draft_max: lane.k,
                n_gen: plan.n_gen,
                rounds: plan.rounds,
                prompt: plan.prompt_source.clone(),
                samples_tok_per_s: lane.tok_per_s.clone(),
                tok_per_s_mean: tps_mean,
                tok_per_s_sd: tps_sd,
                speedup_per_round: speedups,
                speedup_mean: s_mean,
                speedup_sd: s_sd,
                speedup_min: s_min,
                speedup_max: s_max,
                expected_speedup: or_one(get(|s| s.expected_speedup)),
                row_cost: row_cost.filter(|_| lane.k > 0),
                expected_speedup_compute: expected_compute,
                acceptance_rate: get(|s| s.acceptance_rate),
                acceptance_per_token: alpha,
                tokens_per_pass: or_one(get(|s| s.tokens_per_pass)),
                mean_draft_len: get(|s| s.mean_draft_len),
                draft_ms_per_step: get(|s| s.draft_ms_per_step),
                verify_ms_per_pass: get(|s| s.verify_ms_per_pass),
                plain_ms_per_pass: plain_ms,
                verify_cost_in_passes: verify_cost,
                draft_cost_in_passes: draft_cost,
                draft_ms_per_token: get(|s| s.draft_ms_per_token),
                verify_ms_per_token: get(|s| s.verify_ms_per_token),
                plain_ms_per_token: get(|s| s.plain_ms_per_token),
                host_us_per_token: get(|s| s.host_us_per_token),
                text_identical: lane.texts == base.texts,
                verdict: (lane.k > 0)
                    .then(|| verdict(Some(s_mean), alpha, verify_cost, draft_cost))
                    .flatten(),
                load_before,
                load_after,
                warning: warning.clone(),
                default_kernels: None,
                stamp: Stamp::new(&lane.info, &greedy()),
            }
        })
        .collect()
}

/// Under the verdict of a sweep on batch-invariant kernels: each k against plain decoding on
/// llama.cpp's default kernels (what the user had before turning speculation on), and what
/// the kernel set costs prefill; empty when that baseline was not measured.
pub(crate) fn default_kernels_lines(rows: &[SpecRow]) -> String {
    let Some(first) = rows.iter().find_map(|r| r.default_kernels.as_ref()) else {
        return String::new();
    };
    let decode = crate::metrics::median(&first.decode_tok_per_s).unwrap_or(f64::NAN);
    let mut out = format!(
        "Against plain decoding on llama.cpp's default kernels ({decode:.1} tok/s, median of {} child runs):",
        first.decode_tok_per_s.len()
    );
    for r in rows {
        if let Some(d) = &r.default_kernels {
            out.push_str(&format!(
                " k={} {:.2}× ({:.2}–{:.2});",
                r.draft_max, d.speedup_median, d.speedup_min, d.speedup_max
            ));
        }
    }
    out.pop();
    out.push_str(&format!(
        ".\nPrefill on the batch-invariant kernels: {:.2}× of the default kernels' ({:.1} against {:.1} tok/s, medians; the whole prompt in a fresh context).\n",
        first.prefill_ratio, first.prefill_invariant_tok_per_s, first.prefill_default_tok_per_s
    ));
    out
}

/// The sentence under the table: the verdict of the k with the best **median** per-round
/// speed-up (one slow baseline round lifts a whole round's ratios, so means mislead), and a
/// word when the runner-up's per-round range overlaps the best's: those k are not told apart.
pub(crate) fn sweep_verdict(rows: &[SpecRow]) -> String {
    let median = |r: &SpecRow| crate::metrics::median(&r.speedup_per_round).unwrap_or(0.0);
    let mut speculating: Vec<&SpecRow> = rows.iter().filter(|r| r.draft_max > 0).collect();
    speculating.sort_by(|a, b| median(b).total_cmp(&median(a)));
    let Some((best, v)) = (speculating.first()).and_then(|b| Some((b, b.verdict.clone()?))) else {
        return "Verdict: no speculative row was measured.".to_string();
    };
    let mut out = format!(
        "Verdict (best k = {}): speculation {v} (the largest median speed-up, {:.2}×).",
        best.draft_max,
        median(best)
    );
    let close: Vec<String> = speculating[1..]
        .iter()
        .filter(|r| r.speedup_max >= best.speedup_min)
        .map(|r| format!("k = {} ({:.2}×)", r.draft_max, median(r)))
        .collect();
    if !close.is_empty() {
        out.push_str(&format!(
            " Not distinguishable from it over these rounds (their ranges overlap): {}.",
            close.join(", ")
        ));
    }
    out
}

/// The rows as the charts draw them (`--plot`'s FILE-spec and the Markdown output's chart).
pub(crate) fn points(rows: &[SpecRow]) -> Vec<crate::plot::SpecPoint> {
    rows.iter()
        .map(|r| crate::plot::SpecPoint {
            k: r.draft_max,
            speedup: r.speedup_mean,
            speedup_min: r.speedup_min,
            speedup_max: r.speedup_max,
            expected: r.expected_speedup,
            expected_compute: r.expected_speedup_compute,
            acceptance: r.acceptance_rate,
            alpha: r.acceptance_per_token,
        })
        .collect()
}

/// The rows in the chosen format; Markdown gets the chart (`spec_chart`) and the verdict
/// sentence under the table.
pub(crate) fn render(
    outcome: &SpecOutcome,
    format: OutputFormat,
) -> Result<String, serde_json::Error> {
    use crate::fmt::{opt, pct, times};
    use crate::report::{csv_lines, Align::*};
    let rows = &outcome.rows;
    Ok(match format {
        OutputFormat::Markdown | OutputFormat::MarkdownWide => {
            let columns: [super::format::Column<SpecRow>; 12] = [
                ("k", Right, |r| r.draft_max.to_string()),
                ("tok/s", Right, |r| {
                    format!("{:.1} ± {:.1}", r.tok_per_s_mean, r.tok_per_s_sd)
                }),
                ("speed-up (min–max)", Right, |r| {
                    format!(
                        "{:.2}× ({:.2}–{:.2})",
                        r.speedup_mean, r.speedup_min, r.speedup_max
                    )
                }),
                ("expected", Right, |r| times(r.expected_speedup)),
                ("+compute", Right, |r| times(r.expected_speedup_compute)),
                ("accept", Right, |r| pct(r.acceptance_rate, 0)),
                ("α", Right, |r| pct(r.acceptance_per_token, 0)),
                ("tok/pass", Right, |r| opt(r.tokens_per_pass, 2)),
                ("draft ms/step", Right, |r| opt(r.draft_ms_per_step, 2)),
                ("verify ms/pass", Right, |r| opt(r.verify_ms_per_pass, 2)),
                ("verify cost", Right, |r| opt(r.verify_cost_in_passes, 2)),
                ("same text", Left, |r| {
                    if r.text_identical { "yes" } else { "NO" }.into()
                }),
            ];
            let mut out = String::new();
            if let Some(first) = rows.first() {
                out.push_str(&format!(
                    "speculative decoding: {} with {}, {} tokens greedy, {} round(s) ABBA, {} thread(s), {} kernels, prompt: {}\n\n",
                    crate::bench::sweep::file_name(std::path::Path::new(&first.model)),
                    first.guesser(),
                    first.n_gen,
                    first.rounds,
                    first.stamp.threads,
                    if first.batch_invariant {
                        "batch-invariant"
                    } else {
                        "default"
                    },
                    first.prompt
                ));
            }
            out.push_str(&super::format::rows_table(&columns, rows, None));
            out.push('\n');
            let chart = super::spec_chart::chart(&points(rows));
            if !chart.is_empty() {
                out.push_str(&chart);
                out.push('\n');
            }
            out.push_str(&outcome.verdict);
            out.push('\n');
            out.push_str(&default_kernels_lines(rows));
            if let Some(w) = rows.iter().find_map(|r| r.warning.as_ref()) {
                out.push_str(&format!("warning: {w}\n"));
            }
            out
        }
        OutputFormat::Csv => {
            use serde_json::Value;
            let cell = |k: String, v: &Value| (k, crate::report::cell(Some(v)));
            let fields = |map: &serde_json::Map<String, Value>| -> Vec<(String, String)> {
                let field = |(k, v): (&String, &Value)| match v {
                    Value::Object(inner) if k == "stamp" => {
                        let stamp = inner.iter().map(|(ik, iv)| cell(format!("stamp.{ik}"), iv));
                        stamp.collect()
                    }
                    _ => vec![cell(k.clone(), v)],
                };
                map.iter().flat_map(field).collect()
            };
            let values = rows.iter().map(serde_json::to_value);
            let lines: Vec<_> = values
                .map(|v| v.map(|v| v.as_object().map(fields).unwrap_or_default()))
                .collect::<Result<_, _>>()?;
            csv_lines(&lines)
        }
        OutputFormat::Json => {
            #[derive(Serialize)]
            struct Sweep<'a> {
                verdict: &'a str,
                rows: &'a [SpecRow],
            }
            let sweep = Sweep {
                verdict: &outcome.verdict,
                rows,
            };
            format!("{}\n", serde_json::to_string_pretty(&sweep)?)
        }
        OutputFormat::JsonLines => crate::report::json_lines(rows)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate() {
        assert_eq!(round_order(3, 0), vec![0, 1, 2]);
        assert_eq!(round_order(3, 1), vec![2, 1, 0]);
        assert_eq!(round_order(3, 2), vec![0, 1, 2]);
    }

    #[test]
    fn spread_of_nothing_is_zero() {
        assert_eq!(mean_sd_min_max(&[]), (0.0, 0.0, 0.0, 0.0));
        let (m, _, lo, hi) = mean_sd_min_max(&[0.5, 1.5]);
        assert_eq!((m, lo, hi), (1.0, 0.5, 1.5));
    }
}
