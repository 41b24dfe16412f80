//! The llama.cpp-level building blocks every in-process tool shares (the chat's engine thread,
//! `bench`, `compare`): loading a model with the pre-flight checks, context parameters from the
//! settings, the sampler chain, KV-cache and flash-attention choices, and the model's facts.

pub(crate) mod cuda_env;
pub(crate) mod device_bw;
pub(crate) mod error;
pub(crate) mod fattn;
pub(crate) mod gpu;
pub(crate) mod invariant;
pub(crate) mod measure;
pub(crate) mod model_info;
pub(crate) mod placement;
pub mod probe;
pub(crate) mod profile;
pub mod runs;
pub mod sampler;
pub mod settings;

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;

use error::{llama_says, EngineError};
use model_info::{check_model_file, fingerprint, quantization_name, ModelInfo};
use settings::{EngineSettings, KvType, SamplingParams};

pub(crate) use crate::metrics::roofline::LayerSplit;

/// The llama.cpp bindings this build links (pinned in Cargo.toml).
pub(crate) const LLAMA_CPP_BINDINGS: &str = "llama-cpp-sys-2 0.1.160";

/// llama.cpp's own description of the compiled backends and CPU features
/// (`llama_print_system_info`), for the reproducibility stamp. Computed once: llama.cpp
/// builds it in one static string, so concurrent calls would corrupt each other.
pub(crate) fn system_info() -> String {
    static INFO: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    INFO.get_or_init(read_system_info).clone()
}

#[allow(unsafe_code)]
fn read_system_info() -> String {
    // SAFETY: llama_print_system_info returns a pointer to a static, NUL-terminated string
    // owned by llama.cpp (it does not need the backend to be initialised), or null. The
    // OnceLock above makes this the only call.
    let ptr = unsafe { llama_cpp_sys_2::llama_print_system_info() };
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated as above; copied out at once.
    unsafe { std::ffi::CStr::from_ptr(ptr) }
        .to_string_lossy()
        .trim()
        .trim_end_matches('|')
        .trim()
        .to_string()
}

/// One of ggml's GPU devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuDevice {
    /// ggml's name: "CUDA0".
    pub name: String,
    /// "NVIDIA H200".
    pub description: String,
    /// The PCI bus id ("0000:01:00.0") where the backend gives one: how NVML's device is found.
    pub bus_id: Option<String>,
}

/// ggml's GPU devices, in its order (the devices CUDA lets this process see).
pub(crate) fn gpu_devices() -> Vec<GpuDevice> {
    if backend().is_err() {
        return Vec::new();
    }
    llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .filter(is_gpu)
        .map(|d| GpuDevice {
            name: d.name,
            description: d.description,
            bus_id: d.device_id,
        })
        .collect()
}

/// Whether ggml's device is a GPU (discrete or integrated).
fn is_gpu(d: &llama_cpp_2::LlamaBackendDevice) -> bool {
    use llama_cpp_2::LlamaBackendDeviceType::{Gpu, IntegratedGpu};
    matches!(d.device_type, Gpu | IntegratedGpu)
}

/// llama.cpp's backend, initialised once per process and shared by every engine and by the
/// in-process tools that read models directly. Logging is the caller's to set up first
/// (`crate::logging::init`), so that llama.cpp's own lines are routed before it speaks.
pub fn backend() -> Result<&'static llama_cpp_2::llama_backend::LlamaBackend, EngineError> {
    static BACKEND: OnceLock<Result<llama_cpp_2::llama_backend::LlamaBackend, String>> =
        OnceLock::new();
    BACKEND
        .get_or_init(|| llama_cpp_2::llama_backend::LlamaBackend::init().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| EngineError::Backend(e.clone()))
}

/// The KV cache type as llama.cpp's context parameters name it.
fn kv_cache_type(t: KvType) -> KvCacheType {
    match t {
        KvType::F32 => KvCacheType::F32,
        KvType::F16 => KvCacheType::F16,
        KvType::Bf16 => KvCacheType::BF16,
        KvType::Q8_0 => KvCacheType::Q8_0,
        KvType::Q5_1 => KvCacheType::Q5_1,
        KvType::Q5_0 => KvCacheType::Q5_0,
        KvType::Q4_1 => KvCacheType::Q4_1,
        KvType::Q4_0 => KvCacheType::Q4_0,
        KvType::Iq4Nl => KvCacheType::IQ4_NL,
    }
}

/// A model as llama.cpp loaded it, with where llama.cpp put its layers, captured at its own
/// load (a draft loaded after its target, or a model B loaded beside the chat's model, has
/// its own). Derefs to the model.
pub struct LoadedModel {
    model: LlamaModel,
    offload: crate::logging::OffloadLog,
    requested_gpu_layers: u32,
    /// Loaded in its file layout, for batch-invariant kernels (see [`invariant`]).
    file_layout: bool,
    /// The pre-flight checks and the probe, then llama.cpp's load of the weights.
    pub(crate) checks: std::time::Duration,
    pub(crate) weights: std::time::Duration,
}

impl std::ops::Deref for LoadedModel {
    type Target = LlamaModel;

    fn deref(&self) -> &LlamaModel {
        &self.model
    }
}

impl LoadedModel {
    /// Where llama.cpp put the layers ([`placed_layers`]).
    pub(crate) fn layer_split(&self) -> LayerSplit {
        placed_layers(
            self.offload,
            self.model.n_layer(),
            self.requested_gpu_layers,
            !gpu_devices().is_empty(),
        )
    }

    /// Whether the model's output layer runs on a GPU (llama.cpp offloads it first).
    pub fn output_on_gpu(&self) -> bool {
        self.layer_split().output_on_gpu
    }

    /// The CPU kernel set this model was loaded for ([`invariant::kernel_set_name`]): what
    /// its load asked of llama.cpp, not what the settings of whoever describes it say.
    pub(crate) fn kernels(&self) -> &'static str {
        invariant::kernel_set_name(self.file_layout)
    }

    /// Whether llama.cpp repacked any of the weights for the CPU's kernels (its load log: a
    /// "CPU_REPACK" model buffer).
    pub fn weights_repacked(&self) -> bool {
        self.offload.repacked
    }
}

/// Where llama.cpp put the layers of a model with `n_layer` repeating layers: its load's count
/// ("offloaded N/M layers to GPU") placed by llama.cpp's rule ([`LayerSplit::of`]: the output
/// layer first, then the repeating layers from the last). Where the load logged no count (a
/// build whose llama.cpp supports no offload), nothing is offloaded without a GPU device and
/// the request is placed by the same rule with one.
pub(crate) fn placed_layers(
    log: crate::logging::OffloadLog,
    n_layer: u32,
    requested: u32,
    has_gpu: bool,
) -> LayerSplit {
    match log.offloaded {
        Some((n, _)) => {
            let split = LayerSplit::of(n_layer, n);
            if split.output_on_gpu != log.output_layer {
                tracing::warn!(
                    "llama.cpp's load log disagrees with its placement rule: {n} layers \
                     offloaded, the output layer line {}",
                    if log.output_layer { "seen" } else { "not seen" }
                );
            }
            split
        }
        None => LayerSplit::of(n_layer, if has_gpu { requested } else { 0 }),
    }
}

/// Layers to offload: all of them by default when built with CUDA, none on the CPU build.
pub(crate) fn requested_gpu_layers(setting: Option<u32>) -> u32 {
    setting.unwrap_or(if gpu::CUDA_BUILD { u32::MAX } else { 0 })
}

/// Load a model after the pre-flight checks; `on_progress` gets llama.cpp's 0..=1 progress
/// and returns whether to go on (false aborts the load, e.g. when the user quits).
pub fn load_model(
    path: &Path,
    n_gpu_layers: Option<u32>,
    on_progress: impl FnMut(f32) -> bool + 'static,
) -> Result<LoadedModel, EngineError> {
    load_model_placed(path, n_gpu_layers, &Default::default(), false, on_progress)
}

/// [`load_model`] for batch-invariant kernels (see [`invariant`]): the weights in their file
/// layout, and ggml's tiled matmul off for this process (call it before any model decodes).
pub fn load_model_batch_invariant(
    path: &Path,
    n_gpu_layers: Option<u32>,
    on_progress: impl FnMut(f32) -> bool + 'static,
) -> Result<LoadedModel, EngineError> {
    invariant::disable_tiled_matmul();
    load_model_placed(path, n_gpu_layers, &Default::default(), true, on_progress)
}

/// [`load_model`] with a multi-GPU placement (split mode, main GPU, device set); with
/// `file_layout` the CPU's weights are not repacked (batch-invariant kernels, see
/// [`invariant`]).
pub(crate) fn load_model_placed(
    path: &Path,
    n_gpu_layers: Option<u32>,
    placement: &placement::Placement,
    file_layout: bool,
    on_progress: impl FnMut(f32) -> bool + 'static,
) -> Result<LoadedModel, EngineError> {
    let started = std::time::Instant::now();
    let backend = backend()?;
    check_model_file(path)?;
    // What llama.cpp would abort on is tried in a child process first (see probe.rs).
    probe::ensure_survivable(path)?;
    let checks = started.elapsed();
    crate::logging::clear_llama_problems();
    crate::logging::reset_offload_log();
    let requested = requested_gpu_layers(n_gpu_layers);
    let params = LlamaModelParams::default()
        .with_n_gpu_layers(requested)
        .with_progress_callback(on_progress);
    let params = placement
        .apply(params)
        .map_err(EngineError::Placement)?
        .with_use_extra_bufts(!file_layout);
    let model = LlamaModel::load_from_file(backend, path, &params).map_err(|_| {
        EngineError::LoadFailed {
            path: path.to_path_buf(),
            llama_says: llama_says(),
        }
    })?;
    Ok(LoadedModel {
        model,
        // This load's own lines: the log is per thread, and this thread logged nothing else
        // since the reset above.
        offload: crate::logging::offload_log(),
        requested_gpu_layers: requested,
        file_layout,
        checks,
        weights: started.elapsed() - checks,
    })
}

/// Context parameters from the settings; `n_seq_max` sequences (1 for a chat).
pub(crate) fn context_params(s: &EngineSettings, n_seq_max: u32) -> LlamaContextParams {
    let threads = i32::try_from(s.threads).unwrap_or(1);
    LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(s.n_ctx))
        .with_n_batch(s.n_batch)
        .with_n_ubatch(s.n_ubatch.min(s.n_batch).max(1))
        .with_n_seq_max(n_seq_max.max(1))
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_type_k(kv_cache_type(s.type_k))
        .with_type_v(kv_cache_type(s.type_v))
        .with_swa_full(SWA_FULL)
        .with_flash_attention_policy(s.flash_attn.to_llama())
        .with_no_perf(false)
}

/// A context for `model` with the settings' parameters.
pub fn new_context<'m>(
    model: &'m LlamaModel,
    s: &EngineSettings,
    n_seq_max: u32,
) -> Result<LlamaContext<'m>, EngineError> {
    crate::logging::clear_llama_problems();
    model
        .new_context(backend()?, context_params(s, n_seq_max))
        .map_err(|_| context_failed(s))
}

/// A context llama.cpp would not create, with what it logged about it.
fn context_failed(s: &EngineSettings) -> EngineError {
    EngineError::ContextFailed {
        n_ctx: s.n_ctx,
        llama_says: llama_says(),
    }
}

/// A context whose sequence 0 samples inside the graph with `chain` (llama.cpp's backend
/// sampling: its logits are not copied out; `LlamaContext::sampled_token_ith` reads the token).
pub fn new_context_with_chain<'m>(
    model: &'m LlamaModel,
    s: &EngineSettings,
    chain: LlamaSampler,
) -> Result<LlamaContext<'m>, EngineError> {
    new_session_context(model, s, Some(chain), None)
}

/// A chat session's context: sampling inside the graph with `chain` when given, and the step
/// profiler watching the graph when given (an evaluation callback is installed only then).
pub(crate) fn new_session_context<'m>(
    model: &'m LlamaModel,
    s: &EngineSettings,
    chain: Option<LlamaSampler>,
    profiler: Option<std::sync::Arc<profile::StepProfiler>>,
) -> Result<LlamaContext<'m>, EngineError> {
    crate::logging::clear_llama_problems();
    let mut params = context_params(s, 1);
    if let Some(p) = profiler {
        params = params.with_eval_observer(p);
    }
    match chain {
        Some(chain) => model.new_context_with_samplers(backend()?, params, [(0, chain)]),
        None => model.new_context(backend()?, params),
    }
    .map_err(|_| context_failed(s))
}

/// llama.cpp's usual chain order: penalties → top-k → top-p → min-p → temperature → draw; after
/// the penalties, the samplers of [`sampler::backend_chain`] (a top-p of 1 and a min-p of 0
/// change nothing and are left out).
pub fn build_sampler(p: &SamplingParams, n_vocab: i32) -> LlamaSampler {
    let mut chain = Vec::new();
    if p.repeat_penalty != 1.0 {
        chain.push(LlamaSampler::penalties(
            n_vocab,
            i32::try_from(p.repeat_last_n).unwrap_or(i32::MAX),
            p.repeat_penalty,
            0.0,
            0.0,
        ));
    }
    chain.extend(sampler::chain_after_penalties(p));
    LlamaSampler::chain(chain, false)
}

/// The facts about a loaded model and its context (template fields are the caller's).
pub(crate) fn describe(
    model: &LoadedModel,
    ctx: &LlamaContext<'_>,
    path: &Path,
    settings: &EngineSettings,
    started: Instant,
) -> ModelInfo {
    let meta = |k: &str| model.meta_val_str(k).ok();
    let devices = llama_cpp_2::list_llama_ggml_backend_devices();
    let gpu_backend = devices
        .iter()
        .find(|d| is_gpu(d))
        .map(|d| d.backend.clone());
    let header = crate::gguf::read_metadata(path).ok();
    let n_layer = model.n_layer();
    // What llama.cpp really offloaded at this model's own load (its load log), not what was
    // asked for, nor what a model loaded after it (a draft) offloaded.
    let n_gpu_layers = if gpu_backend.is_some() {
        model.layer_split().offloaded()
    } else {
        0
    };
    // Some layers' attention (and their KV cache) on a CUDA GPU.
    let attention_on_cuda = gpu_backend.as_deref() == Some("CUDA") && n_gpu_layers > 0;
    ModelInfo {
        file_name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file_size_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        fingerprint: fingerprint(path).unwrap_or_default(),
        name: meta("general.name").unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        }),
        architecture: meta("general.architecture").unwrap_or_default(),
        n_params: model.n_params(),
        n_layer,
        n_embd: model.n_embd(),
        n_head: model.n_head(),
        n_head_kv: model.n_head_kv(),
        n_vocab: model.n_vocab(),
        n_ctx_train: model.n_ctx_train(),
        quantization: meta("general.file_type")
            .and_then(|v| v.parse::<u32>().ok())
            .and_then(quantization_name)
            .unwrap_or("unknown")
            .to_string(),
        weights_bytes: model.size(),
        n_ctx: ctx.n_ctx(),
        n_batch: ctx.n_batch(),
        threads: settings.threads,
        // A CUDA build without a GPU says so wherever the backend is shown (status bar, bench
        // rows, stamps); a CPU build stays plain "CPU".
        backend: gpu_backend.unwrap_or_else(|| {
            let cuda_build = gpu::no_gpu_note().is_some();
            if cuda_build {
                "CPU (CUDA build, no GPU)"
            } else {
                "CPU"
            }
            .to_string()
        }),
        devices: devices
            .iter()
            .map(|d| {
                if d.description.is_empty() {
                    format!("{} ({})", d.name, d.backend)
                } else {
                    format!("{} ({}: {})", d.name, d.backend, d.description)
                }
            })
            .collect(),
        n_gpu_layers,
        template: String::new(),
        template_note: None,
        synthetic: meta(crate::gguf::SYNTHETIC_METADATA_KEY).as_deref() == Some("true"),
        llama_cpp: LLAMA_CPP_BINDINGS.to_string(),
        kernels: model.kernels().to_string(),
        weights_repacked: model.weights_repacked(),
        fa_kv_kernel: fattn::fa_kv_note(
            &system_info(),
            (settings.type_k, settings.type_v),
            settings.flash_attn,
            attention_on_cuda,
        ),
        load_ms: crate::metrics::ms(started.elapsed()),
        // Filled by the session, which timed the context.
        load_stages: Default::default(),
        path: path.to_path_buf(),
        weight_bytes: header
            .as_ref()
            .and_then(crate::metrics::roofline::WeightBytes::from_gguf),
        kv_shape: header.as_ref().and_then(|h| {
            crate::metrics::roofline::KvShape::from_gguf(h, settings.type_k, settings.type_v)
        }),
        kv_cache_bytes: kv_cache_bytes(path, settings),
    }
}

/// Whether a sliding-window layer's cache is as long as the context: llama.cpp's `swa_full`,
/// which `llama_context_default_params` turns on and `context_params` keeps (a shorter window
/// cache would cost the chat its KV prefix reuse past the window).
const SWA_FULL: bool = true;

/// The micro-batch llama.cpp runs with these settings (`n_ubatch` at most `n_batch`).
fn effective_ubatch(s: &EngineSettings) -> u32 {
    s.n_ubatch.min(s.n_batch).max(1)
}

/// The bytes llama.cpp will allocate for the KV cache of a one-sequence context with these
/// settings, from the GGUF's shape (docs/metrics.md, "KV cache size"); `None` when the file's
/// shape cannot be read.
pub(crate) fn kv_cache_bytes(path: &Path, s: &EngineSettings) -> Option<u64> {
    let header = crate::gguf::read_metadata(path).ok()?;
    let kv = crate::metrics::roofline::KvShape::from_gguf(&header, s.type_k, s.type_v)?;
    Some(kv.allocated_bytes(s.n_ctx, effective_ubatch(s), SWA_FULL))
}

/// Refuses a context whose KV cache would not fit in the memory the kernel says is available
/// (`MemAvailable`), before llama.cpp allocates it: only where the cache lives in host memory
/// (no layer on a GPU); a GPU's own allocation failure is llama.cpp's to report.
pub(crate) fn check_kv_cache_fits(
    path: &Path,
    s: &EngineSettings,
    on_host: bool,
) -> Result<(), EngineError> {
    let Some(cache_bytes) = kv_cache_bytes(path, s) else {
        return Ok(());
    };
    let Some(available_bytes) = crate::hw::available_memory_bytes().filter(|_| on_host) else {
        return Ok(());
    };
    if cache_bytes <= available_bytes {
        return Ok(());
    }
    Err(kv_cache_too_large(path, s, cache_bytes, available_bytes))
}

/// The refusal, with what would fit: the largest context within half the available memory
/// (the weights, compute buffers and the rest of the machine need the other half), and the
/// q8_0 cache types when they are not already in use.
fn kv_cache_too_large(
    path: &Path,
    s: &EngineSettings,
    cache_bytes: u64,
    available_bytes: u64,
) -> EngineError {
    let header = crate::gguf::read_metadata(path).ok();
    let kv = header
        .as_ref()
        .and_then(|h| crate::metrics::roofline::KvShape::from_gguf(h, s.type_k, s.type_v));
    let fits = kv.map_or(0, |kv| {
        kv.largest_context_within(available_bytes / 2, effective_ubatch(s), SWA_FULL)
    });
    let mut what = if fits > 0 {
        format!("use a smaller context: -c {fits} takes at most half of it")
    } else {
        "use a much smaller context (-c)".to_string()
    };
    if s.type_k == KvType::F16 && s.type_v == KvType::F16 {
        what.push_str(
            "; or a quantized cache: --cache-type-k q8_0 --cache-type-v q8_0 takes about half",
        );
    }
    what.push_str("; or free memory");
    EngineError::KvCacheTooLarge {
        n_ctx: s.n_ctx,
        cache_bytes,
        available_bytes,
        type_k: s.type_k,
        type_v: s.type_v,
        what_to_do: what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::OffloadLog;

    /// The lines llama.cpp's loader logs for `ngl` on a build with a GPU (`llama-model.cpp`
    /// lines 1913-1926 of llama-cpp-sys-2 0.1.160), as [`OffloadLog`] reads them.
    fn loader_log(ngl: u32, n_layer: u32) -> OffloadLog {
        let n_gpu = ngl.min(n_layer);
        OffloadLog {
            output_layer: n_gpu > 0,
            offloaded: Some((ngl.min(n_layer + 1), n_layer + 1)),
            repacked: false,
        }
    }

    #[test]
    fn placement_follows_llama_cpps_load_log() {
        let n = 32;
        // ngl 0: nothing; 1: the output layer alone; n: the output layer and every repeating
        // layer but the first; n + 1 and past it: everything.
        let cases = [
            (0, false, 0),
            (1, true, 0),
            (n, true, n - 1),
            (n + 1, true, n),
        ];
        for (ngl, output, repeating) in cases {
            let split = placed_layers(loader_log(ngl, n), n, ngl, true);
            assert_eq!(split.output_on_gpu, output, "ngl {ngl}");
            assert_eq!(split.repeating_on_gpu, repeating, "ngl {ngl}");
        }
        assert!(placed_layers(loader_log(999, n), n, 999, true).all_on_gpu());
        // A load that logged nothing: the CPU build places nothing, whatever was asked.
        assert!(placed_layers(OffloadLog::default(), n, 99, false).none_on_gpu());
        // A GPU device but no line seen: the request, by the same rule.
        assert_eq!(
            placed_layers(OffloadLog::default(), n, 1, true),
            LayerSplit::of(n, 1)
        );
    }
}
