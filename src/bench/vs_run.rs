//! `bench --run-vs-tg [CTX]`: `run`'s decode against llama-bench's tg on the same file, in
//! paired rounds (A B B A …) on one engine's thread.
//!
//! One engine at `run`'s settings and context size (`spec::BenchEngine`) serves every lane:
//! - `tg`: bench's tg test (`EngineCommand::BenchTg`: random tokens, no sampling, a context of
//!   its own sized like bench's, llama-bench's rule), on the loaded model;
//! - one `run` lane per sampling (greedy, and the configured chain with --tg-sampling): a turn
//!   answering a fixed prompt for exactly `-n` tokens, through the engine's sampler,
//!   detokenizer, stop check and events, read once per stream frame as `run` reads them.
//!
//! Everything decodes on the engine's one thread, so one OpenMP pool serves both sides. (Lanes
//! on threads of their own ran at half the speed of a lone `bench` on a 2-core VM: with more
//! OpenMP threads than cores, libgomp's workers sleep after every parallel region, and every
//! decode paid a wake-up.) Separate processes differ in speed by up to 2× on a shared VM (the
//! same `run` gave 451–828 tok/s in 12 consecutive processes); rounds of a fraction of a
//! second on one thread put both sides of a ratio in the same spell of the machine.
//!
//! Each run lane's figure is the median of its rounds' ratios to tg with 2 robust standard
//! errors (`metrics::paired`), judged against the floor of 0.97 (issue #16's target).

use std::path::PathBuf;

use serde::Serialize;

use super::plan::OutputFormat;
use super::plan::SpecBenchError;
use super::spec::BenchEngine;
use crate::engine::{ChatMessage, EngineSettings, SamplingParams};
use crate::metrics::paired::{paired, FloorVerdict, PairedRatio};
use crate::stamp::Stamp;

/// `run`'s decode ÷ tg that counts as "no slower than the benchmark" (issue #16).
pub(crate) const FLOOR: f64 = 0.97;

/// The prompt every run lane answers (the one `scripts/run-vs-bench.sh` gave `run`).
pub(crate) const PROMPT: &str = "Write a long story about a lighthouse keeper.";

/// What `--run-vs-tg` measures, validated (parsed in `commands::bench`).
#[derive(Debug, Clone)]
pub(crate) struct VsRunPlan {
    pub model: PathBuf,
    /// `run`'s engine settings (threads from -t and bench's runtime flags).
    pub engine: EngineSettings,
    /// The engine's context size (`run`'s: config `context`, or CTX).
    pub n_ctx: u32,
    /// The run lanes' sampling: greedy, and the configured chain with --tg-sampling.
    pub samplings: Vec<SamplingParams>,
    pub n_gen: u32,
    pub rounds: u32,
    pub warmup: bool,
    pub messages: Vec<ChatMessage>,
    pub output: OutputFormat,
}

/// One lane's row.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VsRunRow {
    pub run_id: String,
    /// `run-vs-tg`, beside bench's `pp`, `tg`, … in the results log.
    pub kind: &'static str,
    /// `tg128` or `run128-c4096-greedy`.
    pub test: String,
    pub model: String,
    /// `tg` (llama-bench's test) or `run` (the engine, as `run` drives it).
    pub lane: &'static str,
    pub n_ctx: u32,
    /// `none` (tg feeds random tokens), `greedy` or `chain`.
    pub sampling: &'static str,
    /// The engine's sampling path (`host-greedy`, `host-chain`, `backend`, …); `none` for tg.
    pub sampler: String,
    pub n_gen: u32,
    pub rounds: u32,
    pub threads: u32,
    /// Decode tok/s of each round: tg's n ÷ its n decode calls' time; a run lane's (N − 1) ÷
    /// (last − first token ready), `run`'s decode tok/s.
    pub samples_tok_per_s: Vec<f64>,
    pub tok_per_s_mean: f64,
    pub tok_per_s_sd: f64,
    /// This lane's tok/s ÷ tg's in the same round (1 for tg).
    pub ratio_per_round: Vec<f64>,
    /// The paired judgement of `ratio_per_round`; `null` for tg.
    pub ratio: Option<PairedRatio>,
    /// `ratio` against [`FLOOR`]; `null` for tg.
    pub verdict: Option<FloorVerdict>,
    /// Mean time of one decode call (synchronised), ms: where the per-token time goes
    /// inside llama.cpp.
    pub decode_call_ms: Option<f64>,
    /// This lane's decode call ÷ tg's, paired by round: a ratio below 1 here and above 1 in
    /// `ratio` would put the gap outside llama.cpp.
    pub decode_call_ratio: Option<PairedRatio>,
    /// Host time per token between decode calls (median of the rounds), µs.
    pub host_us_per_token: Option<f64>,
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    pub warning: Option<String>,
    pub stamp: Stamp,
}

/// What `--run-vs-tg` produced: the tg row first, then one row per run lane.
pub(crate) struct VsRunOutcome {
    pub rows: Vec<VsRunRow>,
}

/// One lane's rounds.
#[derive(Default)]
struct Rounds {
    tok_per_s: Vec<f64>,
    call_ms: Vec<f64>,
    host_us: Vec<f64>,
}

impl Rounds {
    fn push(&mut self, tok_per_s: f64, call_ms: Option<f64>, host_us: Option<f64>) {
        self.tok_per_s.push(tok_per_s);
        self.call_ms.push(call_ms.unwrap_or(f64::NAN));
        self.host_us.push(host_us.unwrap_or(f64::NAN));
    }
}

struct RunLane {
    n_ctx: u32,
    sampling: SamplingParams,
    sampler: String,
    rounds: Rounds,
}

impl RunLane {
    fn name(&self) -> String {
        format!("run c{} {}", self.n_ctx, sampling_name(&self.sampling))
    }

    fn turn(
        &self,
        engine: &mut BenchEngine,
        plan: &VsRunPlan,
        n_gen: u32,
    ) -> Result<crate::engine::TurnReport, SpecBenchError> {
        engine.turn(&self.name(), &plan.messages, self.sampling.clone(), n_gen)
    }

    fn measure(
        &mut self,
        engine: &mut BenchEngine,
        plan: &VsRunPlan,
    ) -> Result<f64, SpecBenchError> {
        let report = self.turn(engine, plan, plan.n_gen)?;
        #[allow(unused_mut)]
        let mut tok_per_s = report.timeline.summary().decode_tok_per_s.unwrap_or(0.0);
        #[cfg(feature = "plant")]
        if let Some(f) = crate::metrics::planted_factor("decode") {
            tok_per_s *= f;
        }
        self.sampler = report.sampler.to_string();
        self.rounds.push(
            tok_per_s,
            report.timeline.decode_call_ms(),
            report.host.summary().host_us_per_token,
        );
        Ok(tok_per_s)
    }
}

fn sampling_name(s: &SamplingParams) -> &'static str {
    if s.temperature <= 0.0 {
        "greedy"
    } else {
        "chain"
    }
}

/// One engine at `run`'s settings; a warm-up (unless turned off); then `rounds` rounds of one
/// timed tg and one timed turn per sampling, in alternating order, all on the engine's thread.
pub(crate) fn run(plan: &VsRunPlan, run_id: &str) -> Result<VsRunOutcome, SpecBenchError> {
    let load_before = crate::hw::load_average_1m();
    let mut settings = plan.engine.clone();
    settings.n_ctx = plan.n_ctx;
    settings.first_sampling = None;
    eprintln!("loading the engine (run c{})…", plan.n_ctx);
    let mut engine = BenchEngine::start(plan.model.clone(), settings)
        .map_err(SpecBenchError::in_lane(format!("run c{}", plan.n_ctx)))?;
    let mut lanes: Vec<RunLane> = plan
        .samplings
        .iter()
        .map(|sampling| RunLane {
            n_ctx: plan.n_ctx,
            sampling: sampling.clone(),
            sampler: String::new(),
            rounds: Rounds::default(),
        })
        .collect();
    let tg_run =
        |engine: &mut BenchEngine| engine.tg(plan.n_gen).map_err(SpecBenchError::in_lane("tg"));
    if plan.warmup {
        // tg's context is made and warmed up on its first request.
        tg_run(&mut engine)?;
        for lane in &mut lanes {
            lane.turn(&mut engine, plan, plan.n_gen.min(16))?;
        }
    }
    let mut tg = Rounds::default();
    for round in 0..plan.rounds {
        for i in super::spec::round_order(lanes.len() + 1, round) {
            let (name, tps) = if i == 0 {
                let s = tg_run(&mut engine)?;
                tg.push(
                    s.tok_per_s,
                    Some(s.decode_call_ms),
                    Some(s.host_us_per_token),
                );
                ("tg".to_string(), s.tok_per_s)
            } else {
                let lane = &mut lanes[i - 1];
                (lane.name(), lane.measure(&mut engine, plan)?)
            };
            eprintln!("round {}/{} {name}: {tps:.1} tok/s", round + 1, plan.rounds);
        }
    }
    let load_after = crate::hw::load_average_1m();
    let (threads, synthetic) = (plan.engine.threads, engine.info.synthetic);
    let warning = super::spec::sweep_warning(threads, load_before, load_after, synthetic);
    let row = |lane: &'static str,
               test: String,
               n_ctx: u32,
               sampling: &'static str,
               sampler: String,
               r: &Rounds,
               stamp_sampling: &SamplingParams| {
        let (mean, sd) = super::report::mean_sd(&r.tok_per_s);
        let per_round = |mine: &[f64], theirs: &[f64]| -> Vec<f64> {
            mine.iter().zip(theirs).map(|(a, b)| a / b).collect()
        };
        let is_tg = lane == "tg";
        let ratio_per_round = per_round(&r.tok_per_s, &tg.tok_per_s);
        let ratio = if is_tg {
            None
        } else {
            paired(&ratio_per_round)
        };
        VsRunRow {
            run_id: run_id.to_string(),
            kind: "run-vs-tg",
            test,
            model: plan.model.display().to_string(),
            lane,
            n_ctx,
            sampling,
            sampler,
            n_gen: plan.n_gen,
            rounds: plan.rounds,
            threads: plan.engine.threads,
            samples_tok_per_s: r.tok_per_s.clone(),
            tok_per_s_mean: mean,
            tok_per_s_sd: sd,
            ratio_per_round,
            verdict: ratio.map(|p| p.against_floor(FLOOR)),
            ratio,
            decode_call_ms: paired(&r.call_ms).map(|p| p.median),
            decode_call_ratio: if is_tg {
                None
            } else {
                paired(&per_round(&r.call_ms, &tg.call_ms))
            },
            host_us_per_token: paired(&r.host_us).map(|p| p.median),
            load_before,
            load_after,
            warning: warning.clone(),
            stamp: Stamp::new(&engine.info, stamp_sampling),
        }
    };
    let (tg_name, greedy) = (format!("tg{}", plan.n_gen), super::spec::greedy());
    let tg_row = row(
        "tg",
        tg_name,
        plan.n_gen,
        "none",
        "none".into(),
        &tg,
        &greedy,
    );
    let rows = std::iter::once(tg_row)
        .chain(lanes.iter().map(|lane| {
            let name = sampling_name(&lane.sampling);
            let test = format!("run{}-c{}-{name}", plan.n_gen, lane.n_ctx);
            let sampler = lane.sampler.clone();
            row(
                "run",
                test,
                lane.n_ctx,
                name,
                sampler,
                &lane.rounds,
                &lane.sampling,
            )
        }))
        .collect();
    engine.engine.shutdown();
    Ok(VsRunOutcome { rows })
}

/// The sentence under the table for one run lane.
pub(crate) fn verdict_line(r: &VsRunRow) -> Option<String> {
    let p = r.ratio?;
    let what = match r.verdict? {
        FloorVerdict::Met => format!("meets the {FLOOR} floor"),
        FloorVerdict::Missed => format!("misses the {FLOOR} floor"),
        FloorVerdict::Unsettled => {
            format!("cannot be told from the {FLOOR} floor at this spread (more rounds, a quieter machine)")
        }
    };
    Some(format!(
        "run c{} {} ÷ tg: {}: {what}.",
        r.n_ctx,
        r.sampling,
        p.describe()
    ))
}

/// The rows in the chosen format; Markdown gets a verdict line per run lane.
pub(crate) fn render(outcome: &VsRunOutcome, format: OutputFormat) -> Result<String, String> {
    use crate::fmt::opt;
    use crate::report::Align::*;
    let rows = &outcome.rows;
    Ok(match format {
        OutputFormat::Markdown | OutputFormat::MarkdownWide => {
            fn ratio(p: Option<PairedRatio>) -> String {
                match p {
                    Some(p) => match p.two_se {
                        Some(u) => format!("{:.3} ± {u:.3} ({:.2}–{:.2})", p.median, p.min, p.max),
                        None => format!("{:.3}", p.median),
                    },
                    None => "1".to_string(),
                }
            }
            let columns: [super::format::Column<VsRunRow>; 8] = [
                ("lane", Left, |r| match r.lane {
                    "tg" => "tg (llama-bench's test)".to_string(),
                    _ => format!("run ({})", r.sampler),
                }),
                ("n_ctx", Right, |r| r.n_ctx.to_string()),
                ("sampling", Left, |r| r.sampling.to_string()),
                ("tok/s", Right, |r| {
                    format!("{:.1} ± {:.1}", r.tok_per_s_mean, r.tok_per_s_sd)
                }),
                ("÷ tg (min–max)", Right, |r| ratio(r.ratio)),
                ("decode call ms", Right, |r| opt(r.decode_call_ms, 3)),
                ("call ÷ tg", Right, |r| ratio(r.decode_call_ratio)),
                ("host µs/tok", Right, |r| opt(r.host_us_per_token, 1)),
            ];
            let mut out = String::new();
            if let Some(first) = rows.first() {
                out.push_str(&format!(
                    "run vs tg: {}, {} tokens, {} round(s) ABBA on one engine thread, {} thread(s)\n\n",
                    crate::bench::sweep::file_name(std::path::Path::new(&first.model)),
                    first.n_gen,
                    first.rounds,
                    first.threads
                ));
            }
            out.push_str(&super::format::rows_table(&columns, rows, None));
            out.push('\n');
            for line in rows.iter().filter_map(verdict_line) {
                out.push_str(&line);
                out.push('\n');
            }
            if let Some(w) = rows.iter().find_map(|r| r.warning.as_ref()) {
                out.push_str(&format!("warning: {w}\n"));
            }
            out
        }
        OutputFormat::Json => crate::report::json(rows).map_err(|e| e.to_string())?,
        OutputFormat::JsonLines => crate::report::json_lines(rows).map_err(|e| e.to_string())?,
        OutputFormat::Csv => {
            return Err("--run-vs-tg writes md, json or jsonl, not csv".to_string());
        }
    })
}
