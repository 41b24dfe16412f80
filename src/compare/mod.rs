//! `tokscope compare`: quantizations and runtime settings of one model compared on speed and
//! quality in one table. A faster but worse answer is not a win, so every speed figure comes
//! with a quality figure beside it.
//!
//! - `args`: the command line (bench's speed flags, validated by bench).
//! - `quantize`: llama.cpp's quantizer, in-process, into a cache.
//! - `quality`: the lockstep evaluation (perplexity, KL divergence, same top token, Δp).
//! - `report`: rows, the Pareto front, the verdict, the formats.
//! - `log`: the comparisons log the chat's compare screen reads.

mod advice;
pub mod log;
mod plan;
pub mod quality;
pub(crate) mod quantize;
pub(crate) mod report;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

pub(crate) use advice::Budget;
pub(crate) use plan::{CompareFormat, ComparePlan};
pub use report::{CompareRow, Comparison};

use self::quality::{Evaluator, QualityStats};
use self::quantize::quantize_cached;
use crate::bench::sweep::{Job, ParamSet};
use crate::bench::Row;
use crate::config::Settings;
use crate::engine::ModelInfo;
use crate::llama::measure::{TestKind, TestSpec};
use crate::llama::settings::EngineSettings;
use crate::llama::settings::{FlashAttn, KvType};
use crate::llama::{describe, load_model, new_context};
use crate::metrics::quality::Chunking;

/// The evaluation text shipped with tokscope (see assets/eval/SOURCE.md).
/// The tokens each model decodes at a time while scoring, by default: llama.cpp's default
/// micro-batch (`n_ubatch`), the one the contexts are made with, so that the blocks are the
/// micro-batches one decode call of the chunk would make.
pub(crate) const SCORING_BLOCK: u32 = 512;
pub(crate) const BUILTIN_TEXT: &str = include_str!("../../assets/eval/alice.txt");
pub(crate) const BUILTIN_TEXT_NAME: &str =
    "builtin:alice (Alice's Adventures in Wonderland, Lewis Carroll, 1865; public domain)";

/// Why a comparison stopped, sorted the way the command's exit codes are.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompareError {
    /// A flag, file or text the user can fix.
    #[error("{0}")]
    Usage(String),
    /// A model file that cannot be read or loaded.
    #[error("{0}")]
    Model(String),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

impl CompareError {
    fn usage(message: impl Into<String>) -> Self {
        Self::Usage(message.into())
    }

    fn model(message: impl Into<String>) -> Self {
        Self::Model(message.into())
    }

    fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }
}

impl From<crate::engine::EngineError> for CompareError {
    fn from(e: crate::engine::EngineError) -> Self {
        if e.is_model_problem() {
            Self::Model(e.to_string())
        } else {
            Self::Failed(e.to_string())
        }
    }
}

impl From<std::io::Error> for CompareError {
    fn from(e: std::io::Error) -> Self {
        Self::Failed(e.to_string())
    }
}

/// One thing being compared: a model file under one set of runtime settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    pub model: PathBuf,
    pub n_gpu_layers: i64,
    pub type_k: KvType,
    pub type_v: KvType,
    pub flash_attn: FlashAttn,
    pub quantized_here: bool,
    /// The quantization of the source when it was itself quantized (`--allow-requantize`).
    pub requantized_from: Option<String>,
    /// Made by `--quantize`: the tensors that fell back to another type than asked.
    pub fallback: Option<quantize::Fallback>,
}

impl Candidate {
    fn gpu_layers_setting(&self) -> Option<u32> {
        u32::try_from(self.n_gpu_layers).ok()
    }

    fn same_load(&self, other: &Candidate) -> bool {
        self.model == other.model && self.n_gpu_layers == other.n_gpu_layers
    }

    fn same_settings(&self, other: &Candidate) -> bool {
        self.same_load(other)
            && self.type_k == other.type_k
            && self.type_v == other.type_v
            && self.flash_attn == other.flash_attn
    }

    fn engine_settings(&self, n_ctx: u32, threads: u32) -> EngineSettings {
        EngineSettings {
            n_ctx,
            threads,
            // One chunk is one decode call, as in llama-perplexity with -b equal to -c.
            n_batch: n_ctx,
            n_ubatch: n_ctx.min(SCORING_BLOCK),
            type_k: self.type_k,
            type_v: self.type_v,
            flash_attn: self.flash_attn,
            n_gpu_layers: self.gpu_layers_setting(),
            sampling: crate::llama::settings::SamplingMode::Host,
            ..EngineSettings::default()
        }
    }
}

/// Labels: the file name, plus whichever settings differ between candidates; a repeated
/// label gets `#2`, `#3`.
fn labels(candidates: &[Candidate]) -> Vec<String> {
    let settings: Vec<[String; 4]> = candidates
        .iter()
        .map(|c| {
            [
                format!(" ngl={}", c.n_gpu_layers),
                format!(" ctk={}", c.type_k.name()),
                format!(" ctv={}", c.type_v.name()),
                format!(" fa={}", c.flash_attn.name()),
            ]
        })
        .collect();
    let varies: [bool; 4] =
        std::array::from_fn(|i| settings.iter().any(|s| s[i] != settings[0][i]));
    let mut out: Vec<String> = Vec::new();
    for (c, setting) in candidates.iter().zip(&settings) {
        let mut label = if c.quantized_here {
            // `<fingerprint>/<stem>-<TYPE>.gguf` → `<stem>-<TYPE>`.
            let label = c
                .model
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            match &c.requantized_from {
                Some(from) => format!("{label} ← {from}"),
                None => label,
            }
        } else {
            crate::bench::sweep::file_name(&c.model)
        };
        for (_, part) in varies.iter().zip(setting).filter(|(v, _)| **v) {
            label.push_str(part);
        }
        let seen = out
            .iter()
            .filter(|l| l.split(" #").next() == Some(label.as_str()))
            .count();
        if seen > 0 {
            label = format!("{label} #{}", seen + 1);
        }
        out.push(label);
    }
    out
}

/// `tokscope compare` on a validated plan: quality in lockstep, speed in alternating rounds,
/// the table on stdout, the logs, the chart.
pub(crate) fn run(plan: &ComparePlan, settings: Settings) -> Result<(), CompareError> {
    crate::bench::run::check_models(&plan.models)?;
    let (text_name, text) = load_text(plan.text.as_deref())?;
    let (files, skipped) = usable_files(model_files(plan)?);
    if files.is_empty() {
        return Err(CompareError::model(skipped.join("\n")));
    }
    let candidates = candidates(&files, &plan.bench.sweep);
    let started = std::time::SystemTime::now();
    let id = crate::ids::new_id(started);
    let quality = evaluate_quality(plan, &candidates, &text)?;
    // Only the candidates that ran.
    let (candidates, per_candidate): (Vec<Candidate>, Vec<(ModelInfo, QualityStats, bool)>) =
        candidates
            .into_iter()
            .zip(quality.per_candidate)
            .filter_map(|(c, q)| Some((c, q?)))
            .unzip();
    let (speed, control, control_path) =
        time_candidates(plan, &candidates, &per_candidate, &settings, &id);
    let names = labels(&candidates);
    let mut rows = compare_rows(&candidates, &names, &per_candidate, &speed);
    report::mark_pareto(&mut rows, control.as_ref());
    // The answer first ("which one should I use"), then the front and what beats what.
    let mut verdict = advice::lines(&rows, control.as_ref(), &plan.budget);
    verdict.extend(report::verdict(&rows, control.as_ref()));
    let comparison = Comparison {
        id: id.clone(),
        unix_time_s: crate::ids::unix_s(started),
        command_line: crate::bench::command_line(),
        text: text_name,
        text_tokens: quality.text_tokens,
        n_ctx: plan.n_ctx,
        chunks: quality.chunks,
        reference: crate::bench::sweep::file_name(&quality.reference.model),
        reference_why: quality.reference_why.clone(),
        rows,
        verdict,
        llama_cpp: crate::llama::LLAMA_CPP_BINDINGS.to_string(),
        control,
    };
    print_comparison(plan, &comparison)?;
    let logged: Vec<_> = speed
        .into_iter()
        .filter(|r| control_path.as_deref() != Some(Path::new(&r.params.model)))
        .collect();
    save(&id, &comparison, &logged);
    if let Some(path) = &plan.plot {
        let mut backends: Vec<&str> = logged.iter().map(|r| r.stamp.backend.as_str()).collect();
        backends.dedup();
        let setup = format!("{} · {} thread(s)", backends.join(", "), plan.threads);
        plot(&comparison, &setup, path)?;
    }
    if !skipped.is_empty() {
        return Err(CompareError::model(format!(
            "{} file(s) skipped, the others compared:\n{}",
            skipped.len(),
            skipped.join("\n")
        )));
    }
    Ok(())
}

/// The files llama.cpp can run, and why each other one was skipped. A file that is damaged,
/// or that llama.cpp crashes on (tried in a child process), is skipped with a message; the
/// others are compared, and the exit code says one was bad.
fn usable_files(files: Vec<ModelFile>) -> (Vec<ModelFile>, Vec<String>) {
    let mut skipped = Vec::new();
    let files = files
        .into_iter()
        .filter(|ModelFile { path, .. }| {
            let verdict = crate::engine::check_model_file(path)
                .and_then(|_| crate::llama::probe::ensure_survivable(path));
            match verdict {
                Ok(()) => true,
                Err(e) => {
                    eprintln!(
                        "skipping {}: {}",
                        crate::text::path(path),
                        crate::text::terminal_safe(&e.to_string())
                    );
                    skipped.push(e.to_string());
                    false
                }
            }
        })
        .collect();
    (files, skipped)
}

/// Every file under every combination of the sweep's runtime settings, in the sweep's order.
fn candidates(files: &[ModelFile], sweep: &crate::bench::sweep::Sweep) -> Vec<Candidate> {
    use crate::bench::sweep::cross;
    let files = files.iter().map(|file| Candidate {
        model: file.path.clone(),
        n_gpu_layers: 0,
        type_k: KvType::F16,
        type_v: KvType::F16,
        flash_attn: FlashAttn::Auto,
        quantized_here: file.quantized_here,
        requantized_from: file.requantized_from.clone(),
        fallback: file.fallback,
    });
    let c = cross(files.collect(), &sweep.n_gpu_layers, |c, v| {
        c.n_gpu_layers = v
    });
    let c = cross(c, &sweep.type_k, |c, v| c.type_k = v);
    let c = cross(c, &sweep.type_v, |c, v| c.type_v = v);
    cross(c, &sweep.flash_attn, |c, v| c.flash_attn = v)
}

/// The speed pass (`plan.speed`, else nothing): the candidates, plus the self-copy control
/// (the reference's file copied byte for byte and timed in the same alternating rounds as a
/// candidate of its own). The copy is removed before this returns. Gives bench's rows of every
/// candidate timed (the control's included), the reference's tg beside its copy's when both
/// were timed, and the copy's path (gone by now: its rows stay out of bench's results log).
fn time_candidates(
    plan: &ComparePlan,
    candidates: &[Candidate],
    per_candidate: &[(ModelInfo, QualityStats, bool)],
    settings: &Settings,
    id: &str,
) -> (Vec<Row>, Option<report::Control>, Option<PathBuf>) {
    if !plan.speed {
        return (Vec::new(), None, None);
    }
    let control_copy = control_copy(candidates, per_candidate);
    let mut timed = candidates.to_vec();
    if let Some((_, copy)) = &control_copy {
        timed.push(copy.clone());
    }
    let rows = measure_speed(plan, &timed, settings, id);
    let tg_of = |c: &Candidate| speed_row(&rows, c, TestKind::Tg).map(|r| r.tok_per_s_mean);
    let control = control_copy.as_ref().and_then(|(_, copy)| {
        let reference = reference_of(candidates, per_candidate)?;
        Some(report::Control {
            reference_tg_tok_per_s: tg_of(reference)?,
            copy_tg_tok_per_s: tg_of(copy)?,
        })
    });
    let control_path = control_copy.as_ref().map(|(_, copy)| copy.model.clone());
    drop(control_copy);
    (rows, control, control_path)
}

/// The candidate that is the reference itself, if it ran.
fn reference_of<'c>(
    candidates: &'c [Candidate],
    per_candidate: &[(ModelInfo, QualityStats, bool)],
) -> Option<&'c Candidate> {
    let mut both = candidates.iter().zip(per_candidate);
    both.find(|(_, (_, _, is_reference))| *is_reference)
        .map(|(c, _)| c)
}

/// The speed row of `kind` (pp or tg) timed for `c`, if any.
fn speed_row<'a>(speed: &'a [Row], c: &Candidate, kind: TestKind) -> Option<&'a Row> {
    speed.iter().find(|r| {
        r.kind == kind
            && Path::new(&r.params.model) == c.model
            && r.params.n_gpu_layers == c.n_gpu_layers
            && r.params.type_k == c.type_k
            && r.params.type_v == c.type_v
            && r.params.flash_attn == c.flash_attn
    })
}

/// One table row per candidate that ran: its label, model facts, quality figures and (when
/// timed) pp and tg speed; the Pareto marks are left to `report::mark_pareto`.
fn compare_rows(
    candidates: &[Candidate],
    names: &[String],
    per_candidate: &[(ModelInfo, QualityStats, bool)],
    speed: &[Row],
) -> Vec<CompareRow> {
    candidates
        .iter()
        .zip(names)
        .zip(per_candidate)
        .map(|((c, label), (info, stats, is_reference))| {
            let pp = speed_row(speed, c, TestKind::Pp);
            let tg = speed_row(speed, c, TestKind::Tg);
            // One round has no spread: None, shown as "± — (n=1)".
            let sd = |r: Option<&Row>| {
                r.filter(|r| r.samples_tok_per_s.len() > 1)
                    .map(|r| r.tok_per_s_sd)
            };
            CompareRow {
                label: label.clone(),
                model: c.model.display().to_string(),
                quantization: match &c.requantized_from {
                    Some(from) => format!("{} ← {from}", info.quantization),
                    None => info.quantization.clone(),
                },
                file_size_bytes: info.file_size_bytes,
                bits_per_weight: if info.n_params > 0 {
                    info.weights_bytes as f64 * 8.0 / info.n_params as f64
                } else {
                    0.0
                },
                n_gpu_layers: c.n_gpu_layers,
                type_k: c.type_k.name().to_string(),
                type_v: c.type_v.name().to_string(),
                flash_attn: c.flash_attn.name().to_string(),
                reference: *is_reference,
                quantized_here: c.quantized_here,
                quality: stats.clone(),
                pp_tok_per_s: pp.map(|r| r.tok_per_s_mean),
                pp_tok_per_s_sd: sd(pp),
                tg_tok_per_s: tg.map(|r| r.tok_per_s_mean),
                tg_tok_per_s_sd: sd(tg),
                ceiling_tok_per_s: tg.and_then(|r| r.ceiling_tok_per_s),
                mbu_pct: tg.and_then(|r| r.mbu_pct),
                cost_per_million_tokens_usd: tg.and_then(|r| r.cost_per_million_tokens_usd),
                pareto: false,
                dominated_by: Vec::new(),
                synthetic: info.synthetic,
                requantized_from: c.requantized_from.clone(),
                fallback: c.fallback,
                fa_kv_kernel: info.fa_kv_kernel.clone(),
            }
        })
        .collect()
}

/// The comparison on stdout, in `plan.output`'s format.
fn print_comparison(plan: &ComparePlan, comparison: &Comparison) -> Result<(), CompareError> {
    let cannot =
        |e: serde_json::Error| CompareError::failed(format!("cannot format the results: {e}"));
    let out = match plan.output {
        CompareFormat::Markdown => report::markdown(comparison, false),
        CompareFormat::MarkdownWide => report::markdown(comparison, true),
        CompareFormat::Csv => report::csv(comparison).map_err(cannot)?,
        CompareFormat::Json => {
            format!(
                "{}\n",
                serde_json::to_string_pretty(comparison).map_err(cannot)?
            )
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(crate::text::for_stdout(&out, plan.output.shape()).as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The speed rows into bench's results log, the comparison into the comparisons log (a
/// failure to save is a warning on stderr, not an error).
fn save(id: &str, comparison: &Comparison, logged: &[Row]) {
    let data = crate::paths::data_dir();
    if !logged.is_empty() {
        crate::bench::save(
            &crate::bench::results_path(&data),
            id,
            comparison.unix_time_s,
            logged,
        );
    }
    let path = log::comparisons_path(&data);
    match log::append(&path, comparison) {
        Ok(torn) => {
            if let Some(torn) = torn {
                eprintln!("{}", crate::text::terminal_safe(&torn.warning(&path)));
            }
            eprintln!("comparison {id} saved in {}", path.display())
        }
        Err(e) => eprintln!("warning: could not save the comparison: {e}"),
    }
}

fn plot(c: &Comparison, setup: &str, path: &crate::fsx::Output) -> Result<(), CompareError> {
    let points: Vec<crate::plot::QualityPoint> = c
        .rows
        .iter()
        .filter_map(|r| {
            Some(crate::plot::QualityPoint {
                label: r.label.clone(),
                kld_mean: r.quality.kld_mean.unwrap_or(0.0),
                tok_per_s: r.tg_tok_per_s?,
                tok_per_s_sd: r.tg_tok_per_s_sd,
                pareto: r.pareto,
            })
        })
        .collect();
    // The candidates are in the chart's key; the subtitle says against what, where and how.
    let text = crate::text::ellipsis(&c.text, 32);
    let subtitle = format!(
        "reference {} · {setup} · KL at ctx {} × {} chunks ({} tokens of {text}) · tg speed · {}",
        c.reference, c.n_ctx, c.chunks, c.text_tokens, c.llama_cpp
    );
    crate::plot::plot_speed_vs_quality(&points, "speed against quality", &subtitle, path)
        .map_err(|e| CompareError::failed(format!("--plot: {e}")))?;
    eprintln!("wrote {}", path.path.display());
    Ok(())
}

/// The largest `--text` read: far more than perplexity needs, far less than memory.
const TEXT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The evaluation text: `--text FILE` or the built-in one.
pub(crate) fn load_text(path: Option<&Path>) -> Result<(String, String), CompareError> {
    match path {
        None => Ok((BUILTIN_TEXT_NAME.to_string(), BUILTIN_TEXT.to_string())),
        Some(p) => {
            let bytes = crate::fsx::read_regular(p, TEXT_MAX_BYTES, "an evaluation text")
                .map_err(|e| CompareError::usage(format!("--text: {e}")))?;
            let text = String::from_utf8(bytes).map_err(|_| {
                CompareError::usage(format!("--text: {} is not UTF-8 text", p.display()))
            })?;
            Ok((p.display().to_string(), text))
        }
    }
}

/// One file to compare, and how it came to be.
struct ModelFile {
    path: PathBuf,
    /// Made by `--quantize`.
    quantized_here: bool,
    /// Made from a source that was itself quantized: that source's quantization.
    requantized_from: Option<String>,
    /// Made by `--quantize`: the tensors that fell back to another type.
    fallback: Option<quantize::Fallback>,
}

/// The files to compare: as given, or the source and its quantizations.
fn model_files(plan: &ComparePlan) -> Result<Vec<ModelFile>, CompareError> {
    let given = |path: &PathBuf| ModelFile {
        path: path.clone(),
        quantized_here: false,
        requantized_from: None,
        fallback: None,
    };
    if plan.quantize.is_empty() {
        return Ok(plan.models.iter().map(given).collect());
    }
    let source = &plan.models[0];
    let header = crate::gguf::read_metadata(source)
        .map_err(|e| CompareError::model(format!("cannot read {}: {e}", source.display())))?;
    let file_type = header.get("general.file_type").and_then(|v| v.as_u64());
    // F32, F16, BF16 (and files that do not say: llama.cpp will tell).
    let source_quant = file_type.filter(|t| ![0, 1, 32].contains(t)).map(|t| {
        u32::try_from(t)
            .ok()
            .and_then(crate::engine::quantization_name)
            .unwrap_or("quantized")
            .to_string()
    });
    if let (Some(q), false) = (&source_quant, plan.allow_requantize) {
        return Err(CompareError::usage(format!(
            "--quantize needs a high-precision source (F32, F16 or BF16); {} is {q}. Either \
             give the model's F16 or BF16 GGUF (llama.cpp's convert_hf_to_gguf.py makes one from \
             the Hugging Face weights), or add --allow-requantize to quantize this {q} file: \
             the rows are then marked \"Q8_0 ← {q}\" and measured against your {q} weights, \
             not the original ones (a type with more bits than {q}, F16 included, gains no \
             quality from it: only its speed means something)",
            source.display(),
        )));
    }
    if let Some(q) = &source_quant {
        eprintln!(
            "requantizing a {q} file: every candidate is measured against the {q} weights, \
             not the original ones"
        );
    }
    let cache = crate::paths::cache_dir().join("quantized");
    let mut files = vec![given(source)];
    let terminal = std::io::stderr().is_terminal();
    for ty in &plan.quantize {
        let name = ty.name.to_ascii_uppercase();
        let t0 = Instant::now();
        let quantize::Quantized {
            path,
            reused,
            fallback,
        } = quantize_cached(
            source,
            *ty,
            &cache,
            plan.threads,
            plan.allow_requantize,
            |done, total| {
                if terminal {
                    eprint!("\rquantizing to {name}: tensor {done}/{total}\x1b[K");
                }
            },
        )
        .map_err(CompareError::failed)?;
        if terminal {
            eprint!("\r\x1b[K");
        }
        if reused {
            eprintln!("{name}: reusing {}", path.display());
        } else {
            eprintln!(
                "{name}: quantized into {} in {:.1} s",
                path.display(),
                t0.elapsed().as_secs_f64()
            );
        }
        if fallback.tensors > 0 {
            eprintln!(
                "{name}: {} of {} tensors fell back to other types (llama.cpp's quantizer: their \
                 rows do not fit {name}'s blocks)",
                fallback.tensors, fallback.of
            );
        }
        files.push(ModelFile {
            path,
            quantized_here: true,
            requantized_from: source_quant.clone(),
            fallback: Some(fallback),
        });
    }
    Ok(files)
}

/// What the quality pass found.
struct QualityOutcome {
    reference: Candidate,
    /// Why that file is the reference.
    reference_why: String,
    /// Per candidate, in order: its model facts, its figures, and whether it is the reference;
    /// `None` for a candidate llama.cpp could not run.
    per_candidate: Vec<Option<(ModelInfo, QualityStats, bool)>>,
    text_tokens: u64,
    chunks: u32,
}

/// Load every model once, pick the reference (the highest bits per weight; f16 KV cache),
/// check that all share one vocabulary, then evaluate every chunk in lockstep.
fn evaluate_quality(
    plan: &ComparePlan,
    candidates: &[Candidate],
    text: &str,
) -> Result<QualityOutcome, CompareError> {
    let (loads, load_of) = load_each_once(candidates)?;
    let (best, reference_why) = reference_index(plan, candidates, &loads, &load_of)?;
    let Some(best_candidate) = candidates.get(best) else {
        return Err(CompareError::usage("nothing to compare"));
    };
    let reference = Candidate {
        type_k: KvType::F16,
        type_v: KvType::F16,
        ..best_candidate.clone()
    };
    let ref_load = load_of[best];
    let tokens = shared_tokens(&reference, &loads[ref_load].2, &loads, text)?;
    let chunking = Chunking {
        n_ctx: plan.n_ctx,
        max_chunks: plan.max_chunks,
    };
    let n_chunks = chunking.chunks(tokens.len()).map_err(CompareError::usage)?;
    let (mut ref_eval, ref_info) = open_context(plan, &reference, &loads[ref_load].2)?;
    let (mut evals, infos, is_reference) =
        candidate_contexts(plan, candidates, &load_of, &loads, &reference, &ref_info);
    if evals.is_empty() && !is_reference.contains(&true) {
        return Err(CompareError::failed(
            "no candidate could be evaluated (see the messages above)",
        ));
    }
    evaluate_chunks(plan, &mut ref_eval, &mut evals, &tokens, n_chunks)?;
    let mut own_evals = evals.into_iter();
    let per_candidate = infos
        .into_iter()
        .zip(&is_reference)
        .map(|(info, own)| {
            let info = info?;
            let stats = if *own {
                ref_eval.accumulator.stats(false)
            } else {
                own_evals.next()?.accumulator.stats(true)
            };
            Some((info, stats, *own))
        })
        .collect();
    Ok(QualityOutcome {
        reference,
        reference_why,
        per_candidate,
        text_tokens: tokens.len() as u64,
        chunks: n_chunks as u32,
    })
}

/// The models loaded, one per (file, GPU layers).
type Loads = Vec<(PathBuf, i64, crate::llama::LoadedModel)>;

/// Loads each (file, GPU layers) once; also returns which load each candidate uses
/// (`load_of[i]` is candidate i's).
fn load_each_once(candidates: &[Candidate]) -> Result<(Loads, Vec<usize>), CompareError> {
    let mut loads: Loads = Vec::new();
    let mut load_of = Vec::with_capacity(candidates.len());
    for c in candidates.iter() {
        if let Some(i) = loads
            .iter()
            .position(|(p, n, _)| *p == c.model && *n == c.n_gpu_layers)
        {
            load_of.push(i);
            continue;
        }
        eprintln!("loading {}…", c.model.display());
        let model = load_model(&c.model, c.gpu_layers_setting(), |_| true)
            .map_err(|e| CompareError::model(e.to_string()))?;
        load_of.push(loads.len());
        loads.push((c.model.clone(), c.n_gpu_layers, model));
    }
    Ok((loads, load_of))
}

/// Which candidate the reference is made from, and why: `--reference`; else the source of
/// --quantize (everything was made from it, even when it is itself quantized); else the most
/// bits per weight among the files with real weights, the first given on a tie. A synthetic
/// file (tokscope's marker; a foreign file of random weights cannot be told apart) is never
/// the reference of real weights: a user who names one is told what to pass instead.
fn reference_index(
    plan: &ComparePlan,
    candidates: &[Candidate],
    loads: &Loads,
    load_of: &[usize],
) -> Result<(usize, String), CompareError> {
    let model = |i: usize| &loads[load_of[i]].2;
    let synthetic = |i: usize| {
        model(i)
            .meta_val_str(crate::gguf::SYNTHETIC_METADATA_KEY)
            .is_ok_and(|v| v == "true")
    };
    let bpw = |i: usize| model(i).size() as f64 * 8.0 / model(i).n_params().max(1) as f64;
    let any_real = (0..load_of.len()).any(|i| !synthetic(i));
    let (best, why) = if let Some(path) = &plan.reference {
        let i = candidates
            .iter()
            .position(|c| &c.model == path)
            .ok_or_else(|| {
                CompareError::usage(format!(
                    "--reference {}: not one of the -m files",
                    path.display()
                ))
            })?;
        (i, "--reference".to_string())
    } else if !plan.quantize.is_empty() {
        (0, "the source of --quantize".to_string())
    } else {
        let pool: Vec<usize> = (0..load_of.len())
            .filter(|&i| !any_real || !synthetic(i))
            .collect();
        let first = pool.first().copied().unwrap_or(0);
        let best = pool
            .iter()
            .copied()
            .fold(first, |best, i| if bpw(i) > bpw(best) { i } else { best });
        let passed_over = (0..load_of.len()).any(|i| synthetic(i) && bpw(i) > bpw(best));
        let why = match passed_over {
            true => format!(
                "the most bits per weight ({:.2}) of the files with real weights; a synthetic file is no quality reference",
                bpw(best)
            ),
            false => format!("the most bits per weight ({:.2})", bpw(best)),
        };
        (best, why)
    };
    if synthetic(best) && any_real {
        return Err(CompareError::usage(format!(
            "{} is synthetic (written by tokscope synth: random weights), so it cannot be the \
             quality reference of real weights; pass --reference with a real file (the original \
             F16/BF16, or your highest-precision quantization), or compare the synthetic files \
             for speed alone",
            candidates[best].model.display()
        )));
    }
    Ok((best, why))
}

/// The evaluation text as the reference's tokens, after checking that every loaded model has
/// the same vocabulary and tokenizes the text the same way.
fn shared_tokens(
    reference: &Candidate,
    ref_model: &LlamaModel,
    loads: &Loads,
    text: &str,
) -> Result<Vec<LlamaToken>, CompareError> {
    let refused = |e: crate::llama::error::EngineError| {
        CompareError::usage(format!("the evaluation text cannot be tokenized: {e}"))
    };
    let tokens = quality::tokenize(ref_model, text).map_err(refused)?;
    for (path, _, model) in loads {
        if model.n_vocab() != ref_model.n_vocab()
            || quality::tokenize(model, text).map_err(refused)? != tokens
        {
            return Err(CompareError::usage(format!(
                "{} and {} have different vocabularies ({} and {} tokens, or a different \
                     tokenization of the text): KL divergence compares distributions over one \
                     vocabulary, so compare files of one model",
                reference.model.display(),
                path.display(),
                ref_model.n_vocab(),
                model.n_vocab()
            )));
        }
    }
    Ok(tokens)
}

/// A context for candidate `c` on its loaded `model`, ready to evaluate chunks, and the
/// model's facts.
fn open_context<'m>(
    plan: &ComparePlan,
    c: &Candidate,
    model: &'m crate::llama::LoadedModel,
) -> Result<(Evaluator<'m>, ModelInfo), CompareError> {
    let settings = c.engine_settings(plan.n_ctx, plan.threads);
    let t0 = Instant::now();
    let ctx = new_context(model, &settings, 1).map_err(|e| CompareError::failed(e.to_string()))?;
    let info = describe(model, &ctx, &c.model, &settings, t0);
    let name = c.model.display().to_string();
    Ok((Evaluator::new(model, ctx, plan.scoring_block, name), info))
}

/// The candidates' contexts, beside the reference's: the candidate that is the reference
/// itself takes the reference's own figures; every other candidate (a second copy of the
/// reference file included) gets its own context. A combination llama.cpp refuses (a quantized
/// V cache without flash attention, say) is left out with a message; the rest of the
/// comparison goes on. Gives one context per candidate that is not the reference and that
/// llama.cpp accepted, in order; per candidate its model facts (`None` when it was skipped);
/// per candidate whether it is the reference itself.
fn candidate_contexts<'m>(
    plan: &ComparePlan,
    candidates: &[Candidate],
    load_of: &[usize],
    loads: &'m Loads,
    reference: &Candidate,
    ref_info: &ModelInfo,
) -> (Vec<Evaluator<'m>>, Vec<Option<ModelInfo>>, Vec<bool>) {
    let mut evals = Vec::new();
    let mut infos = Vec::new();
    let mut is_reference = Vec::new();
    for (c, &load) in candidates.iter().zip(load_of) {
        let own = c.same_settings(reference) && !is_reference.contains(&true);
        is_reference.push(own);
        let info = if own {
            Some(ref_info.clone())
        } else {
            match open_context(plan, c, &loads[load].2) {
                Ok((e, info)) => {
                    evals.push(e);
                    Some(info)
                }
                Err(f) => {
                    eprintln!(
                        "skipping {} (ctk {}, ctv {}, fa {}, ngl {}): {}",
                        c.model.display(),
                        c.type_k.name(),
                        c.type_v.name(),
                        c.flash_attn.name(),
                        c.n_gpu_layers,
                        f
                    );
                    None
                }
            }
        };
        infos.push(info);
    }
    (evals, infos, is_reference)
}

/// Evaluates the first `n_chunks` chunks of `tokens` in lockstep, the reference first, with a
/// progress line on stderr (in place on a terminal, every tenth chunk elsewhere).
fn evaluate_chunks(
    plan: &ComparePlan,
    ref_eval: &mut Evaluator<'_>,
    evals: &mut [Evaluator<'_>],
    tokens: &[LlamaToken],
    n_chunks: usize,
) -> Result<(), CompareError> {
    let terminal = std::io::stderr().is_terminal();
    let t0 = Instant::now();
    let n_ctx = plan.n_ctx as usize;
    for i in 0..n_chunks {
        let chunk = &tokens[i * n_ctx..(i + 1) * n_ctx];
        let scored_before = i * (n_ctx - 1 - n_ctx / 2);
        let work = (plan.threads as usize, plan.scoring_block as usize);
        quality::evaluate_chunk(ref_eval, evals, chunk, work, scored_before)
            .map_err(CompareError::failed)?;
        let line = format!(
            "quality: chunk {}/{n_chunks}, {} models, {:.0} s",
            i + 1,
            evals.len() + 1,
            t0.elapsed().as_secs_f64()
        );
        if terminal {
            eprint!("\r{line}\x1b[K");
        } else if (i + 1) % 10 == 0 || i + 1 == n_chunks {
            eprintln!("{line}");
        }
    }
    if terminal {
        eprintln!();
    }
    Ok(())
}

/// A byte-identical copy of the reference's file (in a temporary folder of the cache dir,
/// removed when the returned guard drops) as a candidate with the reference's settings. `None`
/// (with a note) when it cannot be made, e.g. for want of disk space.
fn control_copy(
    candidates: &[Candidate],
    per_candidate: &[(ModelInfo, QualityStats, bool)],
) -> Option<(tempfile::TempDir, Candidate)> {
    let reference = reference_of(candidates, per_candidate)?;
    let made = (|| -> std::io::Result<(tempfile::TempDir, Candidate)> {
        let cache = crate::paths::cache_dir();
        crate::fsx::ensure_private_dir(&cache)?;
        let dir = tempfile::Builder::new()
            .prefix("control-")
            .tempdir_in(&cache)?;
        let name = reference
            .model
            .file_name()
            .map_or_else(|| "reference.gguf".into(), |n| n.to_os_string());
        let path = dir.path().join(name);
        std::fs::copy(&reference.model, &path)?;
        Ok((
            dir,
            Candidate {
                model: path,
                ..reference.clone()
            },
        ))
    })();
    made.map_err(|e| eprintln!("no self-copy control (cannot copy the reference: {e}); speed differences are judged by the rounds' spread only"))
        .ok()
}

/// pp and tg of every candidate with bench's engine, in alternating rounds (each loads the
/// candidate, warms up and times one run), so that machine drift hits every candidate alike.
fn measure_speed(
    plan: &ComparePlan,
    candidates: &[Candidate],
    settings: &Settings,
    id: &str,
) -> Vec<Row> {
    let s = &plan.bench.sweep;
    let tests = s.tests.iter();
    let tests = tests.filter(|t| matches!(t, TestSpec::Pp { .. } | TestSpec::Tg { .. }));
    let jobs: Vec<Job> = candidates
        .iter()
        .flat_map(|c| tests.clone().map(move |test| (c, test)))
        .map(|(c, test)| Job {
            params: ParamSet {
                model: c.model.clone(),
                n_gpu_layers: c.n_gpu_layers,
                n_batch: s.n_batch[0],
                n_ubatch: s.n_ubatch[0],
                type_k: c.type_k,
                type_v: c.type_v,
                flash_attn: c.flash_attn,
                threads: plan.threads,
                placement: crate::llama::placement::Placement::default(),
            },
            depth: 0,
            test: *test,
        })
        .collect();
    let outcome =
        crate::bench::run::run_jobs_alternating(&plan.bench, &jobs, &settings.sampling, id);
    for failure in &outcome.failures {
        eprintln!("speed test failed: {failure}");
    }
    outcome.rows
}
