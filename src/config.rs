//! Configuration: typed settings with one precedence order, embedded defaults < the user's
//! `config.toml` (found with `directories`, or `--config`) < environment < command-line flags.
//! Unknown keys and out-of-range values are errors that name the key, the value and where the
//! value came from.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::llama::settings::{EngineSettings, SamplingParams};

/// The largest config file read: a settings file is a few hundred bytes.
const CONFIG_MAX_BYTES: u64 = 1024 * 1024;
/// Environment variable naming the model file (between the config file and `-m`).
pub(crate) const MODEL_ENV: &str = "TOKSCOPE_MODEL";

/// Where a setting's value came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Env(&'static str),
    CommandLine,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "config file {}", p.display()),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::CommandLine => write!(f, "the command line"),
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}\n  fix the file's permissions, or point --config at another file")]
    Unreadable { path: PathBuf, reason: String },
    #[error("config file {path} is not valid: {message}\n  see config.example.toml for every key and its type")]
    Parse { path: PathBuf, message: String },
    #[error("invalid value for `{key}` in {origin}: {value} ({reason})")]
    Invalid {
        key: &'static str,
        value: String,
        reason: String,
        origin: Source,
    },
}

/// The effective settings after every layer was applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    pub model: Option<PathBuf>,
    pub engine: EngineSettings,
    pub sampling: SamplingParams,
    pub system_prompt: Option<String>,
    pub max_tokens: u32,
    /// Price of the machine in USD per GPU-hour, for `bench`'s cost per 1M tokens.
    pub price_per_gpu_hour_usd: f64,
    /// Peak memory bandwidth in GB/s for `bench`'s roofline; `None`: the GPU's datasheet
    /// value, else measured on the CPU.
    pub bandwidth_gb_s: Option<f64>,
    /// Price of electricity per kWh, for the energy cost per 1M tokens (GPU energy from NVML);
    /// `None`: no energy cost shown.
    pub price_per_kwh: Option<f64>,
    /// Folders the chat's model picker searches besides the well-known places (`~` expanded).
    pub model_dirs: Vec<PathBuf>,
    /// `[remote]`: the OpenAI-compatible server `chat --url` talks to by default.
    pub remote: RemoteSettings,
    /// `[quality] ref`: the reference model the chat scores each answer against (`chat
    /// --ref` overrides it, `/ref` changes it; `run` takes `--ref` only).
    pub reference: Option<PathBuf>,
}

/// The `[remote]` table: a server the chat talks to, and what is known of its hardware (the
/// roofline's inputs for a remote model: never guessed, "—" without them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RemoteSettings {
    /// The API base (`http://host:port/v1`); `--url` overrides it.
    pub url: Option<String>,
    /// The server's model name; `-m/--model` overrides it (default: the first it lists).
    pub model: Option<String>,
    /// The name of the environment variable that holds the API key (never the key itself).
    pub api_key_env: Option<String>,
    /// The model's weights in GB (10^9 bytes), read once per generated token.
    pub weights_gb: Option<f64>,
    /// The server's peak memory bandwidth in GB/s (all its GPUs together).
    pub bandwidth_gb_s: Option<f64>,
    /// How many GPUs serve the model: the chat's cost per 1M tokens counts
    /// `price_per_gpu_hour_usd` once per GPU.
    pub gpus: Option<u32>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            model: None,
            engine: EngineSettings::default(),
            sampling: SamplingParams::default(),
            system_prompt: None,
            max_tokens: 512,
            price_per_gpu_hour_usd: 2.0,
            bandwidth_gb_s: None,
            price_per_kwh: None,
            model_dirs: Vec::new(),
            remote: RemoteSettings::default(),
            reference: None,
        }
    }
}

/// The config file as written by the user. Every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    model: Option<PathBuf>,
    n_ctx: Option<i64>,
    threads: Option<i64>,
    n_batch: Option<i64>,
    n_ubatch: Option<i64>,
    cache_type_k: Option<String>,
    cache_type_v: Option<String>,
    flash_attn: Option<String>,
    n_gpu_layers: Option<i64>,
    template: Option<String>,
    system_prompt: Option<String>,
    max_tokens: Option<i64>,
    price_per_gpu_hour_usd: Option<f64>,
    bandwidth_gb_s: Option<f64>,
    price_per_kwh: Option<f64>,
    model_dirs: Option<Vec<PathBuf>>,
    sampling: Option<FileSampling>,
    remote: Option<FileRemote>,
    spec: Option<FileSpec>,
    quality: Option<FileQuality>,
}

/// The `[quality]` table: the chat's reference model.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileQuality {
    #[serde(rename = "ref")]
    reference: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRemote {
    url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    weights_gb: Option<f64>,
    bandwidth_gb_s: Option<f64>,
    gpus: Option<i64>,
}

/// The `[spec]` table: speculative decoding.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    mode: Option<String>,
    draft: Option<PathBuf>,
    draft_max: Option<i64>,
    draft_min: Option<i64>,
    draft_p_min: Option<f64>,
    draft_ngl: Option<i64>,
    ngram_n: Option<i64>,
    batch_invariant: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSampling {
    temperature: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    min_p: Option<f64>,
    repeat_penalty: Option<f64>,
    repeat_last_n: Option<i64>,
    seed: Option<i64>,
    mode: Option<String>,
}

/// Hands each given value (`Some`) to its setter, in order, and returns the first refusal:
/// `apply_given!(settings, &src; value => setter, …)`.
macro_rules! apply_given {
    ($settings:expr, $src:expr; $($value:expr => $set:ident),+ $(,)?) => {
        $(if let Some(v) = $value {
            $settings.$set(v, $src)?;
        })+
    };
}
pub(crate) use apply_given;

/// Values that may be overridden; each setter validates and names its source.
impl Settings {
    pub(crate) fn set_n_ctx(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("n_ctx", v, 32, 1 << 24, src).map(|v| self.engine.n_ctx = v)
    }

    pub(crate) fn set_threads(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("threads", v, 1, 1024, src).map(|v| self.engine.threads = v)
    }

    pub(crate) fn set_n_batch(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("n_batch", v, 1, 1 << 20, src).map(|v| self.engine.n_batch = v)
    }

    pub(crate) fn set_n_ubatch(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("n_ubatch", v, 1, 1 << 20, src).map(|v| self.engine.n_ubatch = v)
    }

    pub(crate) fn set_cache_type_k(&mut self, v: &str, src: &Source) -> Result<(), ConfigError> {
        parsed("cache_type_k", v, src).map(|v| self.engine.type_k = v)
    }

    pub(crate) fn set_cache_type_v(&mut self, v: &str, src: &Source) -> Result<(), ConfigError> {
        parsed("cache_type_v", v, src).map(|v| self.engine.type_v = v)
    }

    pub(crate) fn set_flash_attn(&mut self, v: &str, src: &Source) -> Result<(), ConfigError> {
        parsed("flash_attn", v, src).map(|v| self.engine.flash_attn = v)
    }

    /// `-1` means all layers.
    pub(crate) fn set_n_gpu_layers(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        let reason = "must be -1 (all layers) or a count from 0";
        self.engine.n_gpu_layers = match v {
            -1 => None,
            0..=100_000 => Some(v as u32),
            _ => return Err(invalid("n_gpu_layers", &v.to_string(), reason.into(), src)),
        };
        Ok(())
    }

    pub(crate) fn set_template(&mut self, v: &str, src: &Source) -> Result<(), ConfigError> {
        parsed("template", v, src).map(|v| self.engine.template = v)
    }

    pub(crate) fn set_max_tokens(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("max_tokens", v, 1, 1 << 24, src).map(|v| self.max_tokens = v)
    }

    pub(crate) fn set_price_per_gpu_hour_usd(
        &mut self,
        v: f64,
        src: &Source,
    ) -> Result<(), ConfigError> {
        positive("price_per_gpu_hour_usd", v, src).map(|v| self.price_per_gpu_hour_usd = v)
    }

    pub(crate) fn set_price_per_kwh(&mut self, v: f64, src: &Source) -> Result<(), ConfigError> {
        positive("price_per_kwh", v, src).map(|v| self.price_per_kwh = Some(v))
    }

    pub(crate) fn set_bandwidth_gb_s(&mut self, v: f64, src: &Source) -> Result<(), ConfigError> {
        bandwidth("bandwidth_gb_s", v, src).map(|v| self.bandwidth_gb_s = Some(v))
    }

    pub(crate) fn set_temperature(&mut self, v: f64, src: &Source) -> Result<(), ConfigError> {
        float_in("sampling.temperature", v, 0.0, 100.0, src).map(|v| self.sampling.temperature = v)
    }

    pub(crate) fn set_top_k(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("sampling.top_k", v, 0, 1 << 24, src).map(|v| self.sampling.top_k = v)
    }

    pub(crate) fn set_top_p(&mut self, v: f64, src: &Source) -> Result<(), ConfigError> {
        float_in("sampling.top_p", v, 0.0, 1.0, src).map(|v| self.sampling.top_p = v)
    }

    pub(crate) fn set_min_p(&mut self, v: f64, src: &Source) -> Result<(), ConfigError> {
        float_in("sampling.min_p", v, 0.0, 1.0, src).map(|v| self.sampling.min_p = v)
    }

    pub(crate) fn set_repeat_penalty(&mut self, v: f64, src: &Source) -> Result<(), ConfigError> {
        if v <= 0.0 {
            return Err(invalid(
                "sampling.repeat_penalty",
                &shown(v),
                "must be greater than 0 (1.0 turns it off)".into(),
                src,
            ));
        }
        float_in("sampling.repeat_penalty", v, 0.0, 10.0, src)
            .map(|v| self.sampling.repeat_penalty = v)
    }

    pub(crate) fn set_sampling_mode(&mut self, v: &str, src: &Source) -> Result<(), ConfigError> {
        parsed("sampling.mode", v, src).map(|v| self.engine.sampling = v)
    }

    pub(crate) fn set_repeat_last_n(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("sampling.repeat_last_n", v, 0, 1 << 20, src)
            .map(|v| self.sampling.repeat_last_n = v)
    }

    /// `-1` draws a random seed, as in llama.cpp; the seed drawn is the one recorded.
    pub(crate) fn set_seed(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        if v == -1 {
            self.sampling.seed = crate::ids::random_u32();
            return Ok(());
        }
        int_in("sampling.seed", v, 0, i64::from(u32::MAX), src).map(|v| self.sampling.seed = v)
    }

    pub(crate) fn set_spec_mode(&mut self, v: &str, src: &Source) -> Result<(), ConfigError> {
        parsed("spec.mode", v, src).map(|v| self.engine.spec.mode = v)
    }

    /// A draft model also selects the `draft` mode.
    pub(crate) fn set_draft_model(&mut self, v: &Path) {
        self.engine.spec.draft_model = Some(expand_home(v));
        self.engine.spec.mode = crate::llama::settings::SpecMode::Draft;
    }

    pub(crate) fn set_draft_max(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("spec.draft_max", v, 0, 64, src).map(|v| self.engine.spec.draft_max = v)
    }

    pub(crate) fn set_draft_min(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("spec.draft_min", v, 0, 64, src).map(|v| self.engine.spec.draft_min = v)
    }

    pub(crate) fn set_draft_p_min(&mut self, v: f64, src: &Source) -> Result<(), ConfigError> {
        float_in("spec.draft_p_min", v, 0.0, 1.0, src).map(|v| self.engine.spec.draft_p_min = v)
    }

    pub(crate) fn set_draft_ngl(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        self.engine.spec.draft_n_gpu_layers = if v == -1 {
            None
        } else {
            Some(int_in("spec.draft_ngl", v, 0, 100_000, src)?)
        };
        Ok(())
    }

    pub(crate) fn set_ngram_n(&mut self, v: i64, src: &Source) -> Result<(), ConfigError> {
        int_in("spec.ngram_n", v, 1, 64, src).map(|v| self.engine.spec.ngram_n = v)
    }

    /// `auto` (on while speculating), `on` or `off`.
    pub(crate) fn set_batch_invariant(&mut self, v: &str, src: &Source) -> Result<(), ConfigError> {
        parse_batch_invariant(v)
            .ok_or_else(|| {
                invalid(
                    "spec.batch_invariant",
                    v,
                    "use auto, on or off".to_string(),
                    src,
                )
            })
            .map(|v| self.engine.spec.batch_invariant = v)
    }

    /// The speculation settings hold together: `draft` mode needs a draft model.
    pub(crate) fn check_spec(&self, src: &Source) -> Result<(), ConfigError> {
        let spec = &self.engine.spec;
        if spec.mode == crate::llama::settings::SpecMode::Draft && spec.draft_model.is_none() {
            return Err(invalid(
                "spec.mode",
                "draft",
                "draft mode needs a draft model: --draft FILE or spec.draft".into(),
                src,
            ));
        }
        if spec.draft_min > spec.draft_max && spec.draft_max > 0 {
            return Err(invalid(
                "spec.draft_min",
                &spec.draft_min.to_string(),
                format!("must not exceed draft_max ({})", spec.draft_max),
                src,
            ));
        }
        Ok(())
    }

    /// Apply a config file's contents (already read) on top of these settings.
    pub fn apply_toml(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim().replace('\n', "\n  "),
        })?;
        let src = Source::File(path.to_path_buf());
        if let Some(m) = file.model {
            self.model = Some(expand_home(&m));
        }
        if let Some(v) = file.system_prompt {
            self.system_prompt = Some(v).filter(|s| !s.trim().is_empty());
        }
        apply_given!(self, &src;
            file.n_ctx => set_n_ctx,
            file.threads => set_threads,
            file.n_batch => set_n_batch,
            file.n_ubatch => set_n_ubatch,
            file.cache_type_k.as_deref() => set_cache_type_k,
            file.cache_type_v.as_deref() => set_cache_type_v,
            file.flash_attn.as_deref() => set_flash_attn,
            file.n_gpu_layers => set_n_gpu_layers,
            file.template.as_deref() => set_template,
            file.max_tokens => set_max_tokens,
            file.price_per_gpu_hour_usd => set_price_per_gpu_hour_usd,
            file.bandwidth_gb_s => set_bandwidth_gb_s,
            file.price_per_kwh => set_price_per_kwh,
        );
        if let Some(dirs) = file.model_dirs {
            self.model_dirs = dirs.iter().map(|d| expand_home(d)).collect();
        }
        if let Some(r) = file.remote {
            self.apply_remote(r, &src)?;
        }
        if let Some(v) = file.quality.and_then(|q| q.reference) {
            if v.as_os_str().is_empty() {
                return Err(invalid(
                    "quality.ref",
                    "",
                    "must name a model file (leave the key out for none)".into(),
                    &src,
                ));
            }
            self.reference = Some(expand_home(&v));
        }
        if let Some(s) = file.sampling {
            apply_given!(self, &src;
                s.temperature => set_temperature,
                s.top_k => set_top_k,
                s.top_p => set_top_p,
                s.min_p => set_min_p,
                s.repeat_penalty => set_repeat_penalty,
                s.repeat_last_n => set_repeat_last_n,
                s.seed => set_seed,
                s.mode.as_deref() => set_sampling_mode,
            );
        }
        if let Some(s) = file.spec {
            if let Some(v) = &s.draft {
                self.set_draft_model(v);
            }
            apply_given!(self, &src;
                s.mode.as_deref() => set_spec_mode,
                s.draft_max => set_draft_max,
                s.draft_min => set_draft_min,
                s.draft_p_min => set_draft_p_min,
                s.draft_ngl => set_draft_ngl,
                s.ngram_n => set_ngram_n,
                s.batch_invariant.as_deref() => set_batch_invariant,
            );
            self.check_spec(&src)?;
        }
        Ok(())
    }

    fn apply_remote(&mut self, r: FileRemote, src: &Source) -> Result<(), ConfigError> {
        let non_empty = |key: &'static str, v: String| {
            if v.trim().is_empty() {
                Err(invalid(key, &v, "must not be empty".into(), src))
            } else {
                Ok(v)
            }
        };
        if let Some(v) = r.url {
            self.remote.url = Some(non_empty("remote.url", v)?);
        }
        if let Some(v) = r.model {
            self.remote.model = Some(non_empty("remote.model", v)?);
        }
        if let Some(v) = r.api_key_env {
            self.remote.api_key_env = Some(non_empty("remote.api_key_env", v)?);
        }
        if let Some(v) = r.weights_gb {
            self.remote.weights_gb = Some(positive("remote.weights_gb", v, src)?);
        }
        if let Some(v) = r.bandwidth_gb_s {
            self.remote.bandwidth_gb_s = Some(bandwidth("remote.bandwidth_gb_s", v, src)?);
        }
        if let Some(v) = r.gpus {
            self.remote.gpus = Some(int_in("remote.gpus", v, 1, 65_536, src)?);
        }
        Ok(())
    }

    /// Load the layers below the command line: defaults, then the config file (the explicit
    /// `--config` path, which must exist, or the platform one, which may not), then the
    /// environment.
    pub(crate) fn load(explicit_config: Option<&Path>) -> Result<Settings, ConfigError> {
        let mut settings = Settings::default();
        let (path, must_exist) = match explicit_config {
            Some(p) => (p.to_path_buf(), true),
            None => (crate::paths::config_file(), false),
        };
        match crate::fsx::read_regular(&path, CONFIG_MAX_BYTES, "settings") {
            Ok(bytes) => {
                let text = String::from_utf8(bytes).map_err(|_| ConfigError::Parse {
                    path: path.clone(),
                    message: "the file is not UTF-8 text".into(),
                })?;
                settings.apply_toml(&text, &path)?;
            }
            Err(e) if e.is_not_found() && !must_exist => {}
            Err(e) => {
                let reason = match e {
                    crate::fsx::ReadError::Io { source, .. } => source.to_string(),
                    // A FIFO, a device node (`/dev/zero`) or a huge file: refused, never read.
                    refused => refused.to_string(),
                };
                return Err(ConfigError::Unreadable { path, reason });
            }
        }
        if let Some(m) = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty()) {
            settings.model = Some(expand_home(Path::new(&m)));
        }
        Ok(settings)
    }
}

fn invalid(key: &'static str, value: &str, reason: String, src: &Source) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        reason,
        origin: src.clone(),
    }
}

/// `auto` → `Some(None)` (on while speculating), `on` → `Some(Some(true))`, `off` →
/// `Some(Some(false))`; anything else `None`.
pub(crate) fn parse_batch_invariant(v: &str) -> Option<Option<bool>> {
    match v.trim().to_ascii_lowercase().as_str() {
        "auto" => Some(None),
        "on" | "true" | "yes" => Some(Some(true)),
        "off" | "false" | "no" => Some(Some(false)),
        _ => None,
    }
}

fn parsed<T: std::str::FromStr<Err = String>>(
    key: &'static str,
    v: &str,
    src: &Source,
) -> Result<T, ConfigError> {
    v.parse().map_err(|r| invalid(key, v, r, src))
}

fn int_in<T: TryFrom<i64>>(
    key: &'static str,
    v: i64,
    min: i64,
    max: i64,
    src: &Source,
) -> Result<T, ConfigError> {
    if v < min || v > max {
        return Err(invalid(
            key,
            &v.to_string(),
            format!("must be between {min} and {max}"),
            src,
        ));
    }
    T::try_from(v).map_err(|_| invalid(key, &v.to_string(), "out of range".into(), src))
}

fn float_in(
    key: &'static str,
    v: f64,
    min: f64,
    max: f64,
    src: &Source,
) -> Result<f32, ConfigError> {
    if !v.is_finite() || v < min || v > max {
        return Err(invalid(
            key,
            &shown(v),
            format!("must be between {min} and {max}"),
            src,
        ));
    }
    Ok(v as f32)
}

/// A number as a refusal quotes it: in scientific notation when it is huge or tiny, so that
/// `-1e308` is not echoed as 309 digits.
fn shown(v: f64) -> String {
    if v.is_finite() && v != 0.0 && !(1e-6..1e9).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// A finite number above zero (prices, bandwidths).
fn positive(key: &'static str, v: f64, src: &Source) -> Result<f64, ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(invalid(
            key,
            &shown(v),
            "must be a number greater than 0".into(),
            src,
        ))
    }
}

/// A bandwidth in GB/s, checked as a typed one is (`metrics::roofline::check_bandwidth_gb_s`).
fn bandwidth(key: &'static str, v: f64, src: &Source) -> Result<f64, ConfigError> {
    crate::metrics::roofline::check_bandwidth_gb_s(v)
        .map_err(|why| invalid(key, &shown(v), why, src))
}

/// Expand a leading `~` to the home directory, without a shell (no variables, no globbing).
pub(crate) fn expand_home(path: &Path) -> PathBuf {
    let Ok(rest) = path.strip_prefix("~") else {
        return path.to_path_buf();
    };
    match directories::BaseDirs::new() {
        Some(b) => b.home_dir().join(rest),
        None => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llama::settings::TemplateChoice;

    fn apply(text: &str) -> Result<Settings, ConfigError> {
        let mut s = Settings::default();
        s.apply_toml(text, Path::new("/cfg/config.toml"))?;
        Ok(s)
    }

    #[test]
    fn example_config_parses_and_matches_defaults() {
        let text = include_str!("../config.example.toml");
        let s = apply(text).unwrap();
        let d = Settings::default();
        assert_eq!(s.engine.n_ctx, d.engine.n_ctx);
        assert_eq!(s.sampling, d.sampling);
        assert_eq!(s.max_tokens, d.max_tokens);
        assert_eq!(s.price_per_gpu_hour_usd, d.price_per_gpu_hour_usd);
        assert_eq!(s.bandwidth_gb_s, d.bandwidth_gb_s);
    }

    #[test]
    fn file_values_apply() {
        let s = apply(
            "model = \"/m/x.gguf\"\nn_ctx = 1024\nthreads = 3\ntemplate = \"llama3\"\n[sampling]\ntemperature = 0.0\nseed = 7\n",
        )
        .unwrap();
        assert_eq!(s.model, Some(PathBuf::from("/m/x.gguf")));
        assert_eq!(s.engine.n_ctx, 1024);
        assert_eq!(s.engine.threads, 3);
        assert_eq!(s.sampling.temperature, 0.0);
        assert_eq!(s.sampling.seed, 7);
        assert_eq!(s.engine.template, TemplateChoice::Named("llama3".into()));
    }

    #[test]
    fn model_dirs_are_a_list_of_folders() {
        let s = apply("model_dirs = [\"/srv/models\", \"~/gguf\"]\n").unwrap();
        assert_eq!(s.model_dirs[0], PathBuf::from("/srv/models"));
        assert!(!s.model_dirs[1].starts_with("~"), "{:?}", s.model_dirs);
        assert!(s.model_dirs[1].ends_with("gguf"));
        let e = apply("model_dirs = \"/srv/models\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("model_dirs"), "{e}");
    }

    #[test]
    fn unknown_key_is_named() {
        let e = apply("n_ctxx = 5\n").unwrap_err().to_string();
        assert!(e.contains("n_ctxx"), "{e}");
        assert!(e.contains("/cfg/config.toml"), "{e}");
        let e = apply("[sampling]\ntemp = 5\n").unwrap_err().to_string();
        assert!(e.contains("temp"), "{e}");
    }

    #[test]
    fn wrong_type_and_bad_toml() {
        let e = apply("n_ctx = \"big\"\n").unwrap_err().to_string();
        assert!(e.contains("n_ctx"), "{e}");
        let e = apply("n_ctx = = 3\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }));
    }

    #[test]
    fn out_of_range_values_name_key_value_and_file() {
        for (text, key, value) in [
            ("n_ctx = 0", "n_ctx", "0"),
            ("threads = 0", "threads", "0"),
            (
                "[sampling]\ntemperature = -1.0",
                "sampling.temperature",
                "-1",
            ),
            ("[sampling]\ntop_p = 2.0", "sampling.top_p", "2"),
            (
                "[sampling]\nrepeat_penalty = 0.0",
                "sampling.repeat_penalty",
                "0",
            ),
            ("max_tokens = 0", "max_tokens", "0"),
            ("n_gpu_layers = -2", "n_gpu_layers", "-2"),
            ("template = \"\"", "template", ""),
            ("cache_type_k = \"q3_k\"", "cache_type_k", "q3_k"),
            ("flash_attn = \"maybe\"", "flash_attn", "maybe"),
            ("n_ubatch = 0", "n_ubatch", "0"),
        ] {
            let e = apply(text).unwrap_err();
            let msg = e.to_string();
            assert!(
                matches!(&e, ConfigError::Invalid { key: k, value: v, .. } if *k == key && v == value),
                "{text}: {msg}"
            );
            assert!(msg.contains("/cfg/config.toml"), "{msg}");
        }
    }

    #[test]
    fn the_remote_table_applies_and_names_bad_values() {
        let s = apply(
            "[remote]\nurl = \"http://h:8000/v1\"\nmodel = \"m\"\napi_key_env = \"K\"\nweights_gb = 16.0\nbandwidth_gb_s = 3350.0\ngpus = 2\n",
        )
        .unwrap();
        assert_eq!(s.remote.url.as_deref(), Some("http://h:8000/v1"));
        assert_eq!(s.remote.model.as_deref(), Some("m"));
        assert_eq!(s.remote.api_key_env.as_deref(), Some("K"));
        assert_eq!(s.remote.weights_gb, Some(16.0));
        assert_eq!(s.remote.bandwidth_gb_s, Some(3350.0));
        assert_eq!(s.remote.gpus, Some(2));
        for (bad, key) in [
            ("[remote]\nweights_gb = 0.0", "remote.weights_gb"),
            ("[remote]\nbandwidth_gb_s = -1.0", "remote.bandwidth_gb_s"),
            ("[remote]\ngpus = 0", "remote.gpus"),
            ("[remote]\nurl = \" \"", "remote.url"),
            ("[remote]\napi_key = \"sk\"", "api_key"),
        ] {
            let e = apply(bad).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn an_absurd_number_is_quoted_short() {
        let err = apply("price_per_gpu_hour_usd = -1e308\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("-1e308"), "{err}");
        assert!(err.len() < 300, "{err}");
        assert_eq!(shown(2.5), "2.5");
        assert_eq!(shown(1e-9), "1e-9");
    }

    #[test]
    fn price_per_kwh_applies_and_must_be_positive() {
        assert_eq!(Settings::default().price_per_kwh, None);
        let s = apply("price_per_kwh = 0.25\n").unwrap();
        assert_eq!(s.price_per_kwh, Some(0.25));
        for bad in [
            "price_per_kwh = 0.0",
            "price_per_kwh = -0.1",
            "price_per_kwh = \"x\"",
        ] {
            let e = apply(bad).unwrap_err().to_string();
            assert!(e.contains("price_per_kwh"), "{bad}: {e}");
        }
    }

    #[test]
    fn price_and_bandwidth_apply_and_must_be_positive() {
        let d = apply("").unwrap();
        assert_eq!(d.price_per_gpu_hour_usd, 2.0);
        assert_eq!(d.bandwidth_gb_s, None);
        let s = apply("price_per_gpu_hour_usd = 3.5\nbandwidth_gb_s = 3350.0\n").unwrap();
        assert_eq!(s.price_per_gpu_hour_usd, 3.5);
        assert_eq!(s.bandwidth_gb_s, Some(3350.0));
        for (text, key, value) in [
            (
                "price_per_gpu_hour_usd = 0.0",
                "price_per_gpu_hour_usd",
                "0",
            ),
            (
                "price_per_gpu_hour_usd = -1.0",
                "price_per_gpu_hour_usd",
                "-1",
            ),
            ("bandwidth_gb_s = 0.0", "bandwidth_gb_s", "0"),
            ("bandwidth_gb_s = nan", "bandwidth_gb_s", "NaN"),
            ("bandwidth_gb_s = 1e308", "bandwidth_gb_s", "1e308"),
        ] {
            let e = apply(text).unwrap_err();
            assert!(
                matches!(&e, ConfigError::Invalid { key: k, value: v, .. } if *k == key && v == value),
                "{text}: {e}"
            );
        }
        let e = apply("price_per_gpu_hour_usd = \"cheap\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("price_per_gpu_hour_usd"), "{e}");
    }

    #[test]
    fn n_gpu_layers_minus_one_means_all() {
        let s = apply("n_gpu_layers = -1").unwrap();
        assert_eq!(s.engine.n_gpu_layers, None);
        let s = apply("n_gpu_layers = 12").unwrap();
        assert_eq!(s.engine.n_gpu_layers, Some(12));
    }

    #[test]
    fn explicit_missing_config_is_an_error() {
        let e = Settings::load(Some(Path::new("/nonexistent/tokscope.toml"))).unwrap_err();
        assert!(matches!(e, ConfigError::Unreadable { .. }), "{e}");
    }

    #[test]
    fn tilde_expands_without_shell() {
        let p = expand_home(Path::new("~/models/a.gguf"));
        assert!(!p.starts_with("~"));
        assert!(p.ends_with("models/a.gguf"));
        assert_eq!(expand_home(Path::new("$HOME/x")), PathBuf::from("$HOME/x"));
    }
}
