//! The llama.cpp parameter set: context and load settings, KV-cache types, flash attention,
//! the prompt template choice and the sampler chain's settings. Parsed from config files and
//! flags by `config`, read by every part that creates a llama.cpp context.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};

pub use crate::gguf::kv_type::KvType;

/// Settings of the llama.cpp context and model load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineSettings {
    /// Context length in tokens (the KV cache size).
    pub n_ctx: u32,
    /// CPU threads for decode and prefill.
    pub threads: u32,
    /// Logical batch size: prefill is fed in chunks of at most this many tokens.
    pub n_batch: u32,
    /// Physical batch size (llama.cpp's n_ubatch): tokens computed per graph evaluation.
    pub n_ubatch: u32,
    /// KV-cache element types for keys and values.
    pub type_k: KvType,
    pub type_v: KvType,
    pub flash_attn: FlashAttn,
    /// Layers offloaded to the GPU; `None` means all of them.
    pub n_gpu_layers: Option<u32>,
    /// How the prompt is built from the conversation.
    pub template: TemplateChoice,
    /// Speculative decoding (off by default).
    pub spec: SpecSettings,
    /// Where the sampler chain runs (`--sampling`, config `sampling.mode`).
    pub sampling: SamplingMode,
    /// The sampling the first turn is expected to use. When it can run on the backend, the
    /// context is created with that chain, so that the first turn need not rebuild it.
    pub first_sampling: Option<SamplingParams>,
    /// The step profiler: one decode step in this many is timed node by node (0 = off: no
    /// evaluation callback is installed at all). docs/metrics.md, "Step profile".
    pub profile_rate: u32,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            n_ctx: 4096,
            threads: default_threads(),
            n_batch: 512,
            n_ubatch: 512,
            type_k: KvType::F16,
            type_v: KvType::F16,
            flash_attn: FlashAttn::Auto,
            n_gpu_layers: None,
            template: TemplateChoice::Auto,
            spec: SpecSettings::default(),
            sampling: SamplingMode::Auto,
            first_sampling: None,
            profile_rate: 0,
        }
    }
}

/// Where the sampler chain runs: inside llama.cpp's graph (the backend: on a GPU the logits
/// never leave the device) or on the host over the logits row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplingMode {
    /// The backend when every sampler of the chain has a backend implementation and nothing
    /// needs the full logits; the host otherwise.
    #[default]
    Auto,
    /// The backend; a setting it cannot do is an error.
    Backend,
    /// The host.
    Host,
}

/// A settings enum's `name()`, and its `FromStr` (trimmed, any case) from the same table: each
/// variant's name and the other spellings it is parsed from; `$err` says why any other text
/// (`{other}`) is refused.
macro_rules! named_setting {
    ($t:ident { $($v:ident => $name:literal $(| $alias:literal)*),+ $(,)? }, $err:literal) => {
        impl $t {
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $($t::$v => $name,)+
                }
            }
        }

        impl FromStr for $t {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($name $(| $alias)* => Ok($t::$v),)+
                    other => Err(format!($err, other = other)),
                }
            }
        }

        shown_by_name!($t);
    };
}

named_setting!(
    SamplingMode { Auto => "auto", Backend => "backend", Host => "host" },
    "unknown sampling place `{other}` (auto, backend, host)"
);

/// Which guesser proposes tokens for the target model to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecMode {
    /// No speculation: one target pass per token.
    #[default]
    Off,
    /// Prompt lookup: the continuation of the last n-gram's most recent earlier occurrence.
    Ngram,
    /// A second, smaller model with the same vocabulary (`SpecSettings::draft_model`).
    Draft,
}

named_setting!(
    SpecMode { Off => "off" | "none", Ngram => "ngram" | "lookup", Draft => "draft" },
    "unknown speculation mode `{other}` (off, ngram, draft; --draft FILE picks draft)"
);

/// Speculative decoding's settings (llama.cpp's `--draft-*` flags and prompt lookup).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecSettings {
    pub mode: SpecMode,
    /// The draft model, for `SpecMode::Draft`.
    pub draft_model: Option<std::path::PathBuf>,
    /// Most tokens proposed per step; 0 turns speculation off.
    pub draft_max: u32,
    /// A draft shorter than this is not verified (one plain pass instead).
    pub draft_min: u32,
    /// The draft model stops proposing when its own probability of its next token falls
    /// below this (0 = never).
    pub draft_p_min: f32,
    /// Layers of the draft model offloaded to the GPU; `None` means all of them.
    pub draft_n_gpu_layers: Option<u32>,
    /// Length of the n-gram looked up for `SpecMode::Ngram`.
    pub ngram_n: u32,
    /// Batch-invariant kernels for the target (`None` = auto: on while speculating): see
    /// [`SpecSettings::batch_invariant_kernels`].
    pub batch_invariant: Option<bool>,
}

impl Default for SpecSettings {
    fn default() -> Self {
        Self {
            mode: SpecMode::Off,
            draft_model: None,
            draft_max: 8,
            draft_min: 0,
            draft_p_min: 0.0,
            draft_n_gpu_layers: None,
            ngram_n: 3,
            batch_invariant: None,
        }
    }
}

impl SpecSettings {
    /// Whether turns speculate at all.
    pub fn active(&self) -> bool {
        self.mode != SpecMode::Off && self.draft_max > 0
    }

    /// Whether the target runs on batch-invariant CPU kernels: every row of a verify pass
    /// then goes through the kernel a one-token pass uses, so greedy speculation gives the
    /// plain decode's tokens exactly (see `llama::batch_invariant`). Auto: while speculating.
    pub fn batch_invariant_kernels(&self) -> bool {
        self.batch_invariant.unwrap_or_else(|| self.active())
    }
}

/// All CPU cores the process may use (llama.cpp decodes fastest with one thread per core).
pub(crate) fn default_threads() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(1))
        .unwrap_or(1)
}

/// Flash attention (llama.cpp's `-fa`): let llama.cpp decide, or force it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlashAttn {
    #[default]
    Auto,
    On,
    Off,
}

named_setting!(
    FlashAttn { Auto => "auto" | "-1", On => "on" | "1" | "true", Off => "off" | "0" | "false" },
    "unknown flash-attention setting `{other}` (auto, on/1, off/0)"
);

impl FlashAttn {
    pub(crate) fn to_llama(self) -> llama_cpp_sys_2::llama_flash_attn_type {
        match self {
            FlashAttn::Auto => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_AUTO,
            FlashAttn::On => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED,
            FlashAttn::Off => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }
    }
}

/// How the prompt is built from the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TemplateChoice {
    /// The GGUF's own chat template; a completion-style transcript when it has none (a model
    /// without a template is almost always a base model, which chat markers make babble).
    #[default]
    Auto,
    /// The GGUF's own chat template, or an error when it has none.
    Model,
    /// The template llama.cpp associates with the model's architecture (gemma → gemma,
    /// llama with Llama 3 tokens → llama3, …), used when the GGUF carries none.
    Architecture,
    /// A plain `Question: …\nAnswer:` transcript, for base (not instruction-tuned) models.
    Completion,
    /// A template the GGUF carries under this name (`tokenizer.chat_template.<name>`), else
    /// one of llama.cpp's built-in templates by name (llama3, gemma, chatml, mistral-v7, …).
    Named(String),
    /// A Hugging Face Jinja chat template in a file (a path with a `/`, or ending `.jinja`).
    File(std::path::PathBuf),
}

impl FromStr for TemplateChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s {
            "" => Err("must be auto, model, arch, completion, a template name or a .jinja file".into()),
            "auto" => Ok(Self::Auto),
            "model" => Ok(Self::Model),
            "arch" | "architecture" => Ok(Self::Architecture),
            "completion" => Ok(Self::Completion),
            path if path.contains(std::path::MAIN_SEPARATOR)
                || path.contains('/')
                || path.ends_with(".jinja")
                || path.ends_with(".j2") =>
            {
                Ok(Self::File(path.into()))
            }
            name if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
            {
                Ok(Self::Named(name.to_string()))
            }
            _ => Err("a template name is letters, digits, '-', '_' or '.'; a template file is a path with '/' or a name ending .jinja".into()),
        }
    }
}

impl fmt::Display for TemplateChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Model => "model",
            Self::Architecture => "arch",
            Self::Completion => "completion",
            Self::Named(n) => n,
            Self::File(p) => return write!(f, "{}", p.display()),
        })
    }
}

impl Serialize for TemplateChoice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The sampler chain's settings. Temperature 0 means greedy decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    pub temperature: f32,
    /// 0 turns top-k off.
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    /// 1.0 turns the repetition penalty off.
    pub repeat_penalty: f32,
    /// How many recent tokens the repetition penalty looks at.
    pub repeat_last_n: u32,
    pub seed: u32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        // llama.cpp's own defaults, with a fixed seed so that runs are reproducible.
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 42,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_choice_parses() {
        assert_eq!("auto".parse(), Ok(TemplateChoice::Auto));
        assert_eq!("completion".parse(), Ok(TemplateChoice::Completion));
        assert_eq!("arch".parse(), Ok(TemplateChoice::Architecture));
        assert_eq!("llama3".parse(), Ok(TemplateChoice::Named("llama3".into())));
        assert!("".parse::<TemplateChoice>().is_err());
        assert!("{% jinja %}".parse::<TemplateChoice>().is_err());
        assert_eq!(TemplateChoice::Named("gemma".into()).to_string(), "gemma");
    }

    #[test]
    fn flash_attn_parses_llama_bench_style() {
        assert_eq!("1".parse(), Ok(FlashAttn::On));
        assert_eq!("0".parse(), Ok(FlashAttn::Off));
        assert_eq!("auto".parse(), Ok(FlashAttn::Auto));
        assert!("maybe".parse::<FlashAttn>().is_err());
    }
}
