//! Driving the sweep: one model load per model and GPU-layer count, one context per test
//! (sized like llama-bench's: depth + prompt + generated, per sequence), warm-up and
//! repetitions, the bandwidth for the roofline, and the progress line on stderr.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use crate::llama::LoadedModel;

use super::gpu::{GpuColumns, GpuWatch};
use super::plan::{BandwidthChoice, BenchPlan};
use super::report::{build_row, Row, RowContext};
use super::sweep::{file_name, Job};
use crate::engine::{EngineError, ModelInfo, SamplingParams};
use crate::llama::measure::{Bencher, Sample};
use crate::llama::settings::EngineSettings;
use crate::llama::{describe, new_context};
use crate::metrics::roofline::{Bandwidth, BandwidthSource};

/// What the sweep produced: a row per test that ran, an error per test that did not.
#[derive(Default)]
pub(crate) struct Outcome {
    pub rows: Vec<Row>,
    pub failures: Vec<String>,
    /// A model could not be loaded (exit code 3, like `run`).
    pub model_failed: bool,
    /// `--trace`: the timed repetitions' events (`bench::trace`).
    pub trace: Vec<serde_json::Value>,
}

/// `--trace`: the clock's start and the events so far, and how many repetitions each test
/// has traced.
struct TraceLog {
    origin: Instant,
    events: Vec<serde_json::Value>,
    reps: std::collections::BTreeMap<usize, usize>,
}

/// The bandwidth each row's roofline uses, resolved once per run.
struct BandwidthResolver {
    choice: BandwidthChoice,
    /// The CPU probe's result per thread count, measured (or read from the shared cache) the
    /// first time it is needed.
    cpu: std::collections::BTreeMap<u32, Option<Bandwidth>>,
    /// The first GPU's, measured through ggml (datasheet beside it) the first time a model
    /// with offloaded layers needs it.
    gpu: Option<Option<Bandwidth>>,
}

impl BandwidthResolver {
    /// The configured figure, else the bandwidth for where llama.cpp put this model's layers:
    /// the GPU's (measured, datasheet beside it) with all of them offloaded, the CPU probe with
    /// none, and the two
    /// blended for a partial offload (`metrics::roofline::placed_bandwidth`).
    fn for_model(&mut self, info: &ModelInfo, threads: u32) -> Option<Bandwidth> {
        let probe = match self.choice {
            BandwidthChoice::Configured(bytes_per_s) => {
                return Some(Bandwidth {
                    bytes_per_s,
                    source: BandwidthSource::Config,
                })
            }
            BandwidthChoice::Auto { probe } => probe,
        };
        let gpu = (info.n_gpu_layers > 0).then(|| {
            self.gpu
                .get_or_insert_with(crate::llama::device_bw::first_gpu_bandwidth)
                .clone()
        });
        let cpu = (info.n_gpu_layers <= info.n_layer).then(|| {
            // Said only before a fresh probe: a figure read from the cache takes no time.
            let measure = || {
                crate::hw::cpu_bandwidth_announced(threads as usize, || {
                    eprintln!(
                        "the CPU's memory bandwidth at {threads} thread(s): the shared probe \
                         (measured once per machine and thread count; --no-probe skips it)…"
                    );
                })
            };
            self.cpu
                .entry(threads)
                .or_insert_with(|| probe.then(measure))
                .clone()
        });
        crate::metrics::roofline::placed_bandwidth(
            info.weight_bytes.as_ref(),
            info.n_layer,
            info.n_gpu_layers,
            gpu.flatten().as_ref(),
            cpu.flatten().as_ref(),
        )
    }
}

/// The progress line: `[3/12] model.gguf pp512 t=2 r=4/5`, redrawn in place on a terminal,
/// one line per test otherwise.
struct Progress {
    total: usize,
    terminal: bool,
    /// Settings worth naming because the sweep varies them: ngl, b, ub, ctk, ctv, fa.
    varied: [bool; 6],
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
        for (shown, text) in self.varied.into_iter().zip([
            format!(" ngl={}", p.n_gpu_layers),
            format!(" b={}", p.n_batch),
            format!(" ub={}", p.n_ubatch),
            format!(" ctk={}", p.type_k),
            format!(" ctv={}", p.type_v),
            format!(" fa={}", p.flash_attn),
        ]) {
            if shown {
                label.push_str(&text);
            }
        }
        // File names come from anywhere: no control characters reach the terminal.
        crate::text::one_line(&label).into_owned()
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
        eprintln!("{}", crate::text::terminal_safe(text));
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
    /// The GPUs, watched from before the first load; `Err` holds why there is no GPU figure
    /// (the rows say it).
    gpu: Result<GpuWatch, String>,
    trace: Option<TraceLog>,
}

/// Run every job; a test that fails, or every test of a model that does not load, is
/// reported and skipped, so that the other results are still printed.
pub(crate) fn run_jobs(
    plan: &BenchPlan,
    jobs: &[Job],
    sampling: &SamplingParams,
    run_id: &str,
) -> Outcome {
    let mut runner = Runner::new(plan, jobs, sampling, run_id);
    let mut outcome = Outcome::default();
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
    outcome.trace = runner.trace.map(|t| t.events).unwrap_or_default();
    outcome
}

/// Like [`run_jobs`], but in rounds: each round loads every job's model, warms up and times
/// one repetition, in forward order on even rounds and backward on odd ones, so that drift of
/// the machine's speed hits every job alike (what `compare` needs to rank candidates). Rows
/// are built from every round's sample.
pub(crate) fn run_jobs_alternating(
    plan: &BenchPlan,
    jobs: &[Job],
    sampling: &SamplingParams,
    run_id: &str,
) -> Outcome {
    let mut runner = Runner::new(plan, jobs, sampling, run_id);
    let load_before = crate::hw::load_average_1m();
    let n = jobs.len();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); n];
    let mut facts: Vec<Option<(ModelInfo, Option<Bandwidth>)>> = vec![None; n];
    let mut failed: Vec<Option<String>> = vec![None; n];
    let mut model_failed = false;
    let rounds = plan.repetitions;
    for round in 0..rounds {
        for i in super::spec::round_order(n, round) {
            let job = &jobs[i];
            if failed[i].is_some() {
                continue;
            }
            runner.progress.repetition(i, job, round + 1, rounds);
            let model = match job.params.load() {
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
    let rows = jobs.iter().zip(&samples).zip(&facts);
    let rows = rows.filter(|((_, samples), _)| samples.len() == rounds as usize);
    Outcome {
        rows: rows
            .filter_map(|((job, samples), facts)| {
                let (info, bandwidth) = facts.as_ref()?;
                let mut row =
                    runner.row(job, samples, info, bandwidth.as_ref(), rounds, load_before);
                runner.add_gpu(&mut row, job, samples);
                Some(row)
            })
            .collect(),
        failures: failed.iter().flatten().cloned().collect(),
        model_failed,
        trace: runner.trace.map(|t| t.events).unwrap_or_default(),
    }
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
            gpu: GpuWatch::start(),
            trace: plan.trace.then(|| TraceLog {
                origin: Instant::now(),
                events: Vec::new(),
                reps: std::collections::BTreeMap::new(),
            }),
            plan,
            sampling,
            run_id,
            bandwidth: BandwidthResolver {
                choice: plan.bandwidth,
                cpu: std::collections::BTreeMap::new(),
                gpu: None,
            },
            progress: Progress {
                total: jobs.len(),
                terminal: std::io::stderr().is_terminal(),
                varied: [
                    s.n_gpu_layers.len(),
                    s.n_batch.len(),
                    s.n_ubatch.len(),
                    s.type_k.len(),
                    s.type_v.len(),
                    s.flash_attn.len(),
                ]
                .map(|n| n > 1),
            },
        }
    }

    /// Jobs sharing one model load.
    fn run_group(&mut self, first_index: usize, group: &[Job], outcome: &mut Outcome) {
        let Some(first) = group.first() else {
            return;
        };
        let path = &first.params.model;
        self.progress
            .message(&format!("loading {}…", file_name(path)));
        let model =
            match first.params.load() {
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

    fn run_job(
        &mut self,
        index: usize,
        model: &LoadedModel,
        job: &Job,
    ) -> Result<Row, EngineError> {
        let reps = self.plan.repetitions;
        let load_before = crate::hw::load_average_1m();
        let (samples, info, bandwidth) = self.measure(index, model, job, reps)?;
        let mut row = self.row(job, &samples, &info, bandwidth.as_ref(), reps, load_before);
        self.add_gpu(&mut row, job, &samples);
        if let Ok(watch) = &self.gpu {
            watch.forget_before_now();
        }
        Ok(row)
    }

    /// The row's GPU columns over its samples' timed windows, and their warning.
    fn add_gpu(&self, row: &mut Row, job: &Job, samples: &[Sample]) {
        let (columns, warning) = match &self.gpu {
            Ok(watch) => watch.columns(
                &job.params.placement,
                &job.test,
                samples,
                self.plan.price_per_kwh,
            ),
            Err(why) => (
                GpuColumns {
                    gpu_telemetry: why.clone(),
                    ..GpuColumns::default()
                },
                None,
            ),
        };
        row.gpu = columns;
        if let Some(w) = warning {
            row.warning = Some(match row.warning.take() {
                Some(before) => format!("{before}; {w}"),
                None => w,
            });
        }
    }

    /// A context for the job, the warm-up (unless turned off), then `reps` timed runs.
    fn measure(
        &mut self,
        index: usize,
        model: &LoadedModel,
        job: &Job,
        reps: u32,
    ) -> Result<(Vec<Sample>, ModelInfo, Option<Bandwidth>), EngineError> {
        let settings = engine_settings(job);
        let started = Instant::now();
        let profiler = (self.plan.profile_rate > 0 && job.test.profilable())
            .then(crate::llama::profile::StepProfiler::new);
        let ctx = match job.test {
            crate::llama::measure::TestSpec::TgBackend { .. } => {
                crate::llama::new_context_with_chain(
                    model,
                    &settings,
                    crate::llama::sampler::backend_chain(self.sampling),
                )?
            }
            _ if profiler.is_some() => {
                crate::llama::new_session_context(model, &settings, None, profiler.clone())?
            }
            _ => new_context(model, &settings, job.test.sequences())?,
        };
        let info = describe(model, &ctx, &job.params.model, &settings, started);
        let bandwidth = self.bandwidth.for_model(&info, job.params.threads);
        let mut bencher = Bencher::new(model, ctx);
        if let Some(p) = profiler {
            p.set_kv_shape(info.kv_shape);
            bencher = bencher.with_profiler(p, self.plan.profile_rate);
        }
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
        if let Some(t) = self.trace.as_mut() {
            let done = t.reps.entry(index).or_insert(0);
            t.events.extend(super::trace::events(
                u32::try_from(index + 1).unwrap_or(u32::MAX),
                &self.progress.label(index, job),
                t.origin,
                &job.test,
                *done + 1,
                &samples,
            ));
            *done += samples.len();
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
        load_before: Option<f64>,
    ) -> Row {
        let cx = RowContext {
            load_before,
            load_after: crate::hw::load_average_1m(),
            run_id: self.run_id,
            info,
            bandwidth,
            price_per_gpu_hour_usd: self.plan.price_per_gpu_hour_usd,
            sampling: self.sampling,
            repetitions,
            warmup: self.plan.warmup,
        };
        let mut row = build_row(job, samples, &cx);
        row.profile_level = self.plan.profile_level;
        row
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
        sampling: crate::llama::settings::SamplingMode::Host,
        ..EngineSettings::default()
    }
}

/// Check every model before measuring anything, so a typo (a missing file, a directory) fails
/// at once (exit code 3). A file that exists but is damaged or hostile is not refused here: it
/// fails when its turn comes and is skipped, so the other models' results are kept.
pub(crate) fn check_models(
    models: &[std::path::PathBuf],
) -> Result<(), crate::engine::EngineError> {
    use crate::engine::EngineError as E;
    for m in models {
        if let Err(e @ (E::ModelNotFound(_) | E::ModelIsDirectory(_) | E::ModelUnreadable { .. })) =
            crate::engine::check_model_file(Path::new(m))
        {
            return Err(e);
        }
    }
    Ok(())
}
