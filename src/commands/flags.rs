//! Flag groups shared by several subcommands: the model and context flags and the sampling
//! flags of `chat` and `run`, applied on top of the configuration's lower layers; the runtime
//! sweep and roofline flags of `bench` and `compare`; and the remote flags of `chat --url`,
//! `run --url` and `load`, with how they become an [`Endpoint`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgAction, Args};

use crate::commands::Failure;
use crate::config::{apply_given, ConfigError, Settings, Source};
use crate::remote::{ApiKey, Endpoint};

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
    /// Prompt format: auto (the model's own Jinja template; completion-style without one),
    /// model, arch, completion, a template name (the GGUF's `tokenizer.chat_template.NAME`,
    /// else llama.cpp's built-in: llama3, gemma, chatml, …) or a Jinja template FILE.
    #[arg(long, value_name = "NAME|FILE")]
    pub template: Option<String>,
}

/// Sampling flags.
#[derive(Debug, Args, Default, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy).
    #[arg(long = "temp", value_name = "T", allow_negative_numbers = true)]
    pub temperature: Option<f64>,
    /// Keep the K most likely tokens (0: off) [config: sampling.top_k; default: 40].
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub top_k: Option<i64>,
    /// Nucleus sampling: keep the most likely tokens up to probability P (1: off)
    /// [config: sampling.top_p; default: 0.95].
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub top_p: Option<f64>,
    /// Drop tokens below P × the most likely one's probability (0: off)
    /// [config: sampling.min_p; default: 0.05].
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub min_p: Option<f64>,
    /// Repetition penalty over the last 64 tokens (1.0: off) [config: sampling.repeat_penalty;
    /// default: 1.0].
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub repeat_penalty: Option<f64>,
    /// Sampling seed, 0 to 4294967295; -1 draws a random one (recorded with the run)
    /// [config: sampling.seed; default: 42].
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
    /// Where the sampler chain runs: backend (inside llama.cpp's graph), host, or auto (the
    /// backend when the chain allows it) [config: sampling.mode; default: auto].
    #[arg(long, value_name = "WHERE")]
    pub sampling: Option<String>,
}

/// The runtime settings `bench` sweeps and `compare` compares (llama-bench's flags), each a
/// comma list.
#[derive(Debug, Args, Default, Clone)]
pub struct RuntimeSweepFlags {
    /// Layers offloaded to the GPU, -1 = all (-ngl) [default: -1].
    #[arg(long = "n-gpu-layers", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub n_gpu_layers: Vec<String>,
    /// KV-cache type of keys (-ctk): f16, q8_0, q4_0, … [default: f16].
    #[arg(long = "cache-type-k", value_name = "TYPE,…", action = ArgAction::Append)]
    pub cache_type_k: Vec<String>,
    /// KV-cache type of values (-ctv) [default: f16].
    #[arg(long = "cache-type-v", value_name = "TYPE,…", action = ArgAction::Append)]
    pub cache_type_v: Vec<String>,
    /// Flash attention (-fa): auto, on/1, off/0 [default: auto].
    #[arg(long = "flash-attn", value_name = "MODE,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub flash_attn: Vec<String>,
}

/// Where the roofline's bandwidth and the cost figures come from (`bench` and `compare`).
#[derive(Debug, Args, Default, Clone)]
pub struct RooflineFlags {
    /// Peak memory bandwidth for the roofline, GB/s (default: config `bandwidth_gb_s`, the
    /// GPU's datasheet, else measured on the CPU).
    #[arg(long = "bandwidth-gb-s", value_name = "X", allow_hyphen_values = true)]
    pub bandwidth_gb_s: Option<String>,
    /// Price of the machine, USD per GPU-hour, for cost per 1M tokens (default: config
    /// `price_per_gpu_hour_usd`).
    #[arg(long = "price", value_name = "USD", allow_hyphen_values = true)]
    pub price: Option<String>,
    /// Do not measure the CPU's memory bandwidth (no roofline without another source).
    #[arg(long)]
    pub no_probe: bool,
}

/// Where the remote server is and how to authenticate.
#[derive(Debug, Args, Clone)]
pub struct RemoteArgs {
    /// An OpenAI-compatible API base, e.g. http://127.0.0.1:8080/v1 (llama-server, vLLM,
    /// SGLang, TGI, ollama). With it, `-m/--model` is the server's model name (default: the
    /// first of GET /v1/models).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The name of the environment variable that holds the API key.
    #[arg(long, value_name = "VAR", conflicts_with = "api_key_file")]
    pub api_key_env: Option<String>,
    /// A file that holds the API key.
    #[arg(long, value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
    /// Seconds to wait for the response headers and between two reads of the stream.
    #[arg(long, value_name = "S", default_value_t = DEFAULT_TIMEOUT_S)]
    pub timeout: f64,
}

/// The `--timeout` default, in seconds.
const DEFAULT_TIMEOUT_S: f64 = 60.0;

// By hand, so that a default `RemoteArgs` equals an empty command line's (the bare command
// tells whether chat flags were given by comparing with the default).
impl Default for RemoteArgs {
    fn default() -> Self {
        Self {
            url: None,
            api_key_env: None,
            api_key_file: None,
            timeout: DEFAULT_TIMEOUT_S,
        }
    }
}

impl ModelArgs {
    /// Apply these flags on top of the lower layers.
    pub(crate) fn apply(&self, s: &mut Settings) -> Result<(), ConfigError> {
        let src = Source::CommandLine;
        if let Some(m) = &self.model {
            s.model = Some(m.clone());
        }
        apply_given!(s, &src;
            self.n_ctx => set_n_ctx,
            self.threads => set_threads,
            self.n_batch => set_n_batch,
            self.n_gpu_layers => set_n_gpu_layers,
            self.n_ubatch => set_n_ubatch,
            self.cache_type_k.as_deref() => set_cache_type_k,
            self.cache_type_v.as_deref() => set_cache_type_v,
            self.flash_attn.as_deref() => set_flash_attn,
            self.template.as_deref() => set_template,
        );
        Ok(())
    }
}

impl SamplingArgs {
    pub(crate) fn apply(&self, s: &mut Settings) -> Result<(), ConfigError> {
        let src = Source::CommandLine;
        apply_given!(s, &src;
            self.temperature => set_temperature,
            self.top_k => set_top_k,
            self.top_p => set_top_p,
            self.min_p => set_min_p,
            self.repeat_penalty => set_repeat_penalty,
            self.seed => set_seed,
            self.max_tokens => set_max_tokens,
            self.sampling.as_deref() => set_sampling_mode,
        );
        if let Some(v) = &self.system {
            s.system_prompt = Some(v.clone()).filter(|t| !t.trim().is_empty());
        }
        Ok(())
    }
}

impl RemoteArgs {
    pub(crate) fn endpoint(&self, url: &str) -> Result<Endpoint, Failure> {
        let key = match (&self.api_key_env, &self.api_key_file) {
            (Some(var), _) => {
                let raw = std::env::var(var).map_err(|_| {
                    Failure::usage(format!(
                        "--api-key-env {var}: the environment variable is not set"
                    ))
                })?;
                Some(ApiKey::new(&raw).map_err(|e| Failure::usage(e.to_string()))?)
            }
            (None, Some(path)) => {
                Some(ApiKey::from_file(path).map_err(|e| Failure::usage(e.to_string()))?)
            }
            (None, None) => None,
        };
        let timeout = self.endpoint_timeout()?;
        Endpoint::new(url, key, timeout).map_err(|e| Failure::usage(e.to_string()))
    }

    /// `--timeout` as a duration, checked.
    pub(crate) fn endpoint_timeout(&self) -> Result<Duration, Failure> {
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 86_400.0) {
            return Err(Failure::usage(format!(
                "--timeout {}: expected seconds between 0 and 86400",
                self.timeout
            )));
        }
        Ok(Duration::from_millis((self.timeout * 1000.0).round() as u64))
    }
}

/// `--ref FILE` of `run` and `chat`: each answer scored against a reference model.
#[derive(Debug, Args, Default, Clone, PartialEq)]
pub struct QualityArgs {
    /// Score each answer against a reference model: another file of the same model (its F16
    /// or Q8_0, say; same vocabulary). After the answer, never while it decodes: per token
    /// the KL divergence, whether the top token is the same, both models' probability of the
    /// chosen token and both entropies; per answer mean and p99 KLD, same-top %, the first
    /// divergence and the tokens the reference gave under 1%. The chat's config: `[quality]
    /// ref`.
    #[arg(long = "ref", value_name = "FILE")]
    pub reference: Option<PathBuf>,
}

impl QualityArgs {
    /// `--ref` with `--url`: refused (a server sends no full distributions).
    pub(crate) fn refuse_remote(&self) -> Result<(), Failure> {
        match self.reference {
            Some(_) => Err(Failure::usage(
                "--ref scores a local model's answers (a server sends no full distributions): \
                 run it with -m MODEL.gguf",
            )),
            None => Ok(()),
        }
    }

    /// The reference to score against: the flag's, else `fallback` (the config's), named
    /// before any model loads when it is missing or not a model file, or when it and `model`
    /// do not fit in memory together.
    pub(crate) fn resolve(
        &self,
        fallback: Option<&Path>,
        model: &Path,
    ) -> Result<Option<PathBuf>, Failure> {
        let Some(path) = self.reference.as_deref().or(fallback) else {
            return Ok(None);
        };
        let path = crate::config::expand_home(path);
        crate::engine::check_model_file(&path)
            .map_err(|e| Failure::from(crate::engine::EngineError::Reference(Box::new(e))))?;
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).ok();
        if let (Some(m), Some(r)) = (size(model), size(&path)) {
            pair_fits(m, r, crate::hw::available_memory_bytes())?;
        }
        Ok(Some(path))
    }
}

/// Both models' weights (their files' sizes) in the memory the kernel says is available:
/// the model is held for the whole session and the reference beside it from the first score.
/// Without a reading of the available memory, nothing is refused.
fn pair_fits(model: u64, reference: u64, available: Option<u64>) -> Result<(), Failure> {
    let Some(available) = available else {
        return Ok(());
    };
    let need = model.saturating_add(reference);
    if need <= available {
        return Ok(());
    }
    let b = crate::fmt::bytes;
    Err(Failure::new(
        crate::commands::MODEL,
        format!(
            "the model ({}) and the reference ({}) need {} of memory together, and {} is available \
             (MemAvailable): use a smaller reference (the model's Q8_0 instead of its F16, say), \
             or free memory",
            b(model),
            b(reference),
            b(need),
            b(available)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn flags_override_and_are_validated() {
        let cli = crate::commands::Cli::try_parse_from([
            "tokscope", "run", "-m", "x.gguf", "-p", "hi", "--temp", "0", "-t", "1", "-c", "256",
        ])
        .unwrap();
        let Some(crate::commands::Command::Run(args)) = cli.command else {
            panic!("not run")
        };
        let mut s = Settings::default();
        args.model.apply(&mut s).unwrap();
        args.sampling.apply(&mut s).unwrap();
        assert_eq!(s.engine.threads, 1);
        assert_eq!(s.engine.n_ctx, 256);
        assert_eq!(s.sampling.temperature, 0.0);

        let cli =
            crate::commands::Cli::try_parse_from(["tokscope", "run", "-p", "hi", "--temp", "-1"])
                .unwrap();
        let Some(crate::commands::Command::Run(args)) = cli.command else {
            panic!("not run")
        };
        let e = args.sampling.apply(&mut s).unwrap_err().to_string();
        assert!(
            e.contains("sampling.temperature") && e.contains("command line"),
            "{e}"
        );
    }

    #[test]
    fn a_model_and_reference_that_do_not_fit_are_refused_with_the_sizes() {
        assert!(pair_fits(4_920_000_000, 8_540_000_000, Some(16_000_000_000)).is_ok());
        assert!(pair_fits(4_920_000_000, 16_070_000_000, None).is_ok());
        let e = pair_fits(4_920_000_000, 16_070_000_000, Some(16_000_000_000)).unwrap_err();
        assert_eq!(e.code, crate::commands::MODEL);
        for part in [
            "the model (",
            "the reference (",
            "need ",
            "is available",
            "Q8_0",
        ] {
            assert!(e.message.contains(part), "{part}: {}", e.message);
        }
    }
}
