//! The reproducibility stamp: everything needed to say what produced a figure (tokscope and
//! llama.cpp versions, backend and device, model file identity, context and sampling
//! settings). Every machine-readable report carries one.

use serde::Serialize;

use crate::engine::{ModelInfo, SamplingParams};

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stamp {
    pub tokscope_version: &'static str,
    pub llama_cpp: String,
    /// llama.cpp's compiled backends and CPU features (`llama_print_system_info`).
    pub llama_system_info: String,
    pub backend: String,
    pub devices: Vec<String>,
    pub model_file: String,
    pub model_size_bytes: u64,
    pub model_fingerprint: String,
    pub model_name: String,
    pub architecture: String,
    pub n_params: u64,
    pub quantization: String,
    pub synthetic: bool,
    pub n_ctx: u32,
    pub n_batch: u32,
    pub threads: u32,
    pub n_gpu_layers: u32,
    /// The CPU kernel set ("default" or "batch-invariant", see `ModelInfo::kernels`).
    pub kernels: String,
    pub template: String,
    pub sampling: SamplingParams,
    /// Seconds since the Unix epoch when the report was made.
    pub unix_time_s: u64,
}

impl Stamp {
    pub(crate) fn new(info: &ModelInfo, sampling: &SamplingParams) -> Self {
        Self {
            tokscope_version: env!("CARGO_PKG_VERSION"),
            llama_cpp: info.llama_cpp.clone(),
            llama_system_info: crate::llama::system_info(),
            backend: info.backend.clone(),
            devices: info.devices.clone(),
            model_file: info.file_name.clone(),
            model_size_bytes: info.file_size_bytes,
            model_fingerprint: info.fingerprint.clone(),
            model_name: info.name.clone(),
            architecture: info.architecture.clone(),
            n_params: info.n_params,
            quantization: info.quantization.clone(),
            synthetic: info.synthetic,
            n_ctx: info.n_ctx,
            n_batch: info.n_batch,
            threads: info.threads,
            n_gpu_layers: info.n_gpu_layers,
            kernels: info.kernels.clone(),
            template: info.template.clone(),
            sampling: sampling.clone(),
            unix_time_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }
}
