//! Driving the sweep: one model load per model and GPU-layer count, one context per test
//! (sized like llama-bench's: depth + prompt + generated, per sequence), warm-up and
//! repetitions, the bandwidth for the roofline, and the progress line on stderr.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use llama_cpp_2::model::LlamaModel;

use super::plan::{BandwidthChoice, BenchPlan};
use super::report::{build_row, Row, RowContext};
use super::sweep::{file_name, Job};
use crate::engine::{EngineError, ModelInfo, SamplingParams, TemplateChoice};
use crate::llama::measure::{Bencher, Sample};
use crate::llama::settings::EngineSettings;
use crate::llama::{describe, load_model, new_context};
use crate::metrics::roofline::{datasheet_bandwidth, Bandwidth, BandwidthSource};

/// The CPU copy probe's buffer and repeats: large enough to leave every cache behind.
const PROBE_BYTES: usize = 256 << 20;
const PROBE_REPEATS: usize = 5;

/// What the sweep produced: a row per test that ran, an error per test that did not.
pub struct Outcome {
    pub rows: Vec<Row>,
    pub failures: Vec<String>,
    /// A model could not be loaded (exit code 3, like `run`).
    pub model_failed: bool,
}

/// The bandwidth each row's roofline uses, resolved once per run.
struct BandwidthResolver {
    choice: BandwidthChoice,
    /// The CPU probe's result, measured the first time it is needed.
    cpu: Option<Option<Bandwidth>>,
}

impl BandwidthResolver {
    fn for_model(&mut self, info: &ModelInfo) -> Option<Bandwidth> {
        match self.choice {
            BandwidthChoice::Configured(bytes_per_s) => Some(Bandwidth {
                bytes_per_s,
                source: BandwidthSource::Config,
            }),
            BandwidthChoice::Auto { .. } if info.n_gpu_layers > 0 => gpu_datasheet(),
            BandwidthChoice::Auto { probe } => self
                .cpu
                .get_or_insert_with(|| {
                    probe.then(|| {
                        eprintln!("measuring the CPU's memory bandwidth (--no-probe skips this)…");
                        crate::hw::measure_cpu_bandwidth(PROBE_BYTES, PROBE_REPEATS)
                    })
                })
                .clone(),
        }
    }
}

/// The datasheet bandwidth of the first GPU backend device llama.cpp sees.
fn gpu_datasheet() -> Option<Bandwidth> {
    crate::llama::gpu_device_descriptions()
        .iter()
        .find_map(|d| datasheet_bandwidth(d))
}

/// The progress line: `[3/12] model.gguf pp512 t=2 r=4/5`, redrawn in place on a terminal,
/// one line per test otherwise.
struct Progress {
    total: usize,
    terminal: bool,
    /// Settings worth naming because the sweep varies them.
    varied: Varied,
}

#[derive(Clone, Copy)]
struct Varied {
    ngl: bool,
    n_batch: bool,
    n_ubatch: bool,
    type_k: bool,
    type_v: bool,
    flash_attn: bool,
}

impl Progress {
    fn label(&self, index: usize, job: &Job) -> String {
        let p = &job.params;
        let mut label = format!(
            "[{}/{}] {} {} t={}",
            index + 1,
            self.total,
            job.model_file_name(),
            job.test.name(job.depth),
            p.threads
        );
        let v = self.varied;
        for (shown, text) in [
            (v.ngl, format!(" ngl={}", p.n_gpu_layers)),
            (v.n_batch, format!(" b={}", p.n_batch)),
            (v.n_ubatch, format!(" ub={}", p.n_ubatch)),
            (v.type_k, format!(" ctk={}", p.type_k)),
            (v.type_v, format!(" ctv={}", p.type_v)),
            (v.flash_attn, format!(" fa={}", p.flash_attn)),
        ] {
            if shown {
                label.push_str(&text);
            }
        }
        label
    }

    fn start(&self, index: usize, job: &Job) {
        if !self.terminal {
            eprintln!("{}", self.label(index, job));
        }
    }

    fn repetition(&self, index: usize, job: &Job, rep: u32, reps: u32) {
        if self.terminal {
            eprint!("\r\x1b[2K{} r={rep}/{reps}", self.label(index, job));
        }
    }

    fn message(&self, text: &str) {
        if self.terminal {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{text}");
    }

    fn finish(&self) {
        if self.terminal {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Everything the jobs share.
struct Runner<'a> {
    plan: &'a BenchPlan,
    sampling: &'a SamplingParams,
    run_id: &'a str,
    bandwidth: BandwidthResolver,
    progress: Progress,
}

/// Run every job; a test that fails, or every test of a model that does not load, is
/// reported and skipped, so that the other results are still printed.
pub fn run_jobs(
    plan: &BenchPlan,
    jobs: &[Job],
    sampling: &SamplingParams,
    run_id: &str,
) -> Outcome {
    let mut runner = Runner::new(plan, jobs, sampling, run_id);
    let mut outcome = Outcome {
        rows: Vec::new(),
        failures: Vec::new(),
        model_failed: false,
    };
    let mut start = 0;
    while let Some(first) = jobs.get(start) {
        let end = jobs[start..]
            .iter()
            .position(|j| !j.params.same_model_load(&first.params))
            .map_or(jobs.len(), |k| start + k);
        runner.run_group(start, &jobs[start..end], &mut outcome);
        start = end;
    }
    runner.progress.finish();
    outcome
}

/// Like [`run_jobs`], but in rounds: each round loads every job's model, warms up and times
/// one repetition, in forward order on even rounds and backward on odd ones, so that drift of
/// the machine's speed hits every job alike (what `compare` needs to rank candidates). Rows
/// are built from every round's sample.
pub fn run_jobs_alternating(
    plan: &BenchPlan,
    jobs: &[Job],
    sampling: &SamplingParams,
    run_id: &str,
) -> Outcome {
    let mut runner = Runner::new(plan, jobs, sampling, run_id);
    let n = jobs.len();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); n];
    let mut facts: Vec<Option<(ModelInfo, Option<Bandwidth>)>> = vec![None; n];
    let mut failed: Vec<Option<String>> = vec![None; n];
    let mut model_failed = false;
    let rounds = plan.repetitions;
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for i in order {
            let job = &jobs[i];
            if failed[i].is_some() {
                continue;
            }
            runner.progress.repetition(i, job, round + 1, rounds);
            let model =
                match load_model(&job.params.model, job.params.gpu_layers_setting(), |_| true) {
                    Ok(model) => model,
                    Err(e) => {
                        model_failed |= e.is_model_problem();
                        failed[i] = Some(format!(
                            "{}: the model did not load: {e}",
                            runner.progress.label(i, job)
                        ));
                        continue;
                    }
                };
            match runner.measure(i, &model, job, 1) {
                Ok((s, info, bandwidth)) => {
                    samples[i].extend(s);
                    facts[i] = Some((info, bandwidth));
                }
                Err(e) => failed[i] = Some(format!("{}: {e}", runner.progress.label(i, job))),
            }
        }
    }
    runner.progress.finish();
    let mut outcome = Outcome {
        rows: Vec::new(),
        failures: failed.iter().flatten().cloned().collect(),
        model_failed,
    };
    for ((job, samples), facts) in jobs.iter().zip(&samples).zip(&facts) {
        if let Some((info, bandwidth)) = facts {
            if samples.len() == rounds as usize {
                outcome
                    .rows
                    .push(runner.row(job, samples, info, bandwidth.as_ref(), rounds));
            }
        }
    }
    outcome
}

impl<'a> Runner<'a> {
    fn new(
        plan: &'a BenchPlan,
        jobs: &[Job],
        sampling: &'a SamplingParams,
        run_id: &'a str,
    ) -> Self {
        let s = &plan.sweep;
        Runner {
            plan,
            sampling,
            run_id,
            bandwidth: BandwidthResolver {
                choice: plan.bandwidth,
                cpu: None,
            },
            progress: Progress {
                total: jobs.len(),
                terminal: std::io::stderr().is_terminal(),
                varied: Varied {
                    ngl: s.n_gpu_layers.len() > 1,
                    n_batch: s.n_batch.len() > 1,
                    n_ubatch: s.n_ubatch.len() > 1,
                    type_k: s.type_k.len() > 1,
                    type_v: s.type_v.len() > 1,
                    flash_attn: s.flash_attn.len() > 1,
                },
            },
        }
    }
}

impl Runner<'_> {
    /// Jobs sharing one model load.
    fn run_group(&mut self, first_index: usize, group: &[Job], outcome: &mut Outcome) {
        let Some(first) = group.first() else {
            return;
        };
        let path = &first.params.model;
        self.progress
            .message(&format!("loading {}…", file_name(path)));
        let model =
            match load_model(path, first.params.gpu_layers_setting(), |_| true) {
                Ok(model) => model,
                Err(e) => {
                    self.progress.message(&format!("error: {e}"));
                    outcome.model_failed |= e.is_model_problem();
                    outcome.failures.extend(
                        (first_index..first_index + group.len())
                            .zip(group)
                            .map(|(i, job)| {
                                format!("{}: the model did not load", self.progress.label(i, job))
                            }),
                    );
                    return;
                }
            };
        for (offset, job) in group.iter().enumerate() {
            let index = first_index + offset;
            self.progress.start(index, job);
            match self.run_job(index, &model, job) {
                Ok(row) => outcome.rows.push(row),
                Err(e) => {
                    let text = format!("{}: {e}", self.progress.label(index, job));
                    self.progress.message(&format!("error: {text}"));
                    outcome.failures.push(text);
                }
            }
        }
    }

    fn run_job(&mut self, index: usize, model: &LlamaModel, job: &Job) -> Result<Row, EngineError> {
        let reps = self.plan.repetitions;
        let (samples, info, bandwidth) = self.measure(index, model, job, reps)?;
        Ok(self.row(job, &samples, &info, bandwidth.as_ref(), reps))
    }

    /// A context for the job, the warm-up (unless turned off), then `reps` timed runs.
    fn measure(
        &mut self,
        index: usize,
        model: &LlamaModel,
        job: &Job,
        reps: u32,
    ) -> Result<(Vec<Sample>, ModelInfo, Option<Bandwidth>), EngineError> {
        let settings = engine_settings(job);
        let started = Instant::now();
        let ctx = new_context(model, &settings, job.test.sequences())?;
        let info = describe(model, &ctx, &job.params.model, &settings, started);
        let bandwidth = self.bandwidth.for_model(&info);
        let mut bencher = Bencher::new(model, ctx);
        if self.plan.warmup {
            bencher.warm_up(&job.test)?;
        }
        let mut samples = Vec::with_capacity(reps as usize);
        for rep in 1..=reps {
            if reps > 1 {
                self.progress.repetition(index, job, rep, reps);
            }
            samples.push(bencher.run(&job.test, job.depth, self.sampling)?);
        }
        Ok((samples, info, bandwidth))
    }

    fn row(
        &self,
        job: &Job,
        samples: &[Sample],
        info: &ModelInfo,
        bandwidth: Option<&Bandwidth>,
        repetitions: u32,
    ) -> Row {
        let cx = RowContext {
            run_id: self.run_id,
            info,
            bandwidth,
            price_per_gpu_hour_usd: self.plan.price_per_gpu_hour_usd,
            sampling: self.sampling,
            repetitions,
            warmup: self.plan.warmup,
        };
        build_row(job, samples, &cx)
    }
}

/// The engine settings of one test's context.
fn engine_settings(job: &Job) -> EngineSettings {
    let p = &job.params;
    EngineSettings {
        n_ctx: job.n_ctx(),
        threads: p.threads,
        n_batch: p.n_batch,
        n_ubatch: p.n_ubatch,
        type_k: p.type_k,
        type_v: p.type_v,
        flash_attn: p.flash_attn,
        n_gpu_layers: p.gpu_layers_setting(),
        template: TemplateChoice::Auto,
    }
}

/// Check every model before measuring anything, so a typo fails at once (exit code 3).
pub fn check_models(models: &[std::path::PathBuf]) -> Result<(), crate::engine::EngineError> {
    for m in models {
        crate::engine::check_model_file(Path::new(m))?;
    }
    Ok(())
}
