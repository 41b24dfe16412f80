//! The reproducibility stamp: everything needed to say what produced a figure (tokscope and
//! llama.cpp versions, backend and device, model file identity, context and sampling
//! settings, and on a GPU the driver, the power limits, CUDA's runtime switches and whether
//! CUDA graphs run). Every machine-readable report carries one.

use std::collections::BTreeMap;

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
    /// The K/V pair's CUDA flash-attention mark (`ModelInfo::fa_kv_kernel`): why its decode
    /// figures are not the pair's own kernel's; `None` when they are.
    pub fa_kv_kernel: Option<String>,
    /// llama.cpp's CUDA runtime switches set in this process (`llama::cuda_env`), name →
    /// value; empty when none is set.
    pub cuda_env: BTreeMap<String, String>,
    /// CUDA graphs: "on", or "off: …" with the reason; `None` without a CUDA backend.
    pub cuda_graphs: Option<String>,
    /// The NVIDIA driver and the CUDA version it supports (NVML); `None` without NVML.
    pub gpu_driver: Option<String>,
    /// Each GPU's enforced power limit, and its default where it is capped below it (NVML).
    pub gpu_power_limits: Vec<String>,
    pub template: String,
    pub sampling: SamplingParams,
    /// Seconds since the Unix epoch when the report was made.
    pub unix_time_s: u64,
}

impl Stamp {
    pub(crate) fn new(info: &ModelInfo, sampling: &SamplingParams) -> Self {
        let system_info = crate::llama::system_info();
        let cuda_env = crate::llama::cuda_env::cuda_env();
        let (gpu_driver, gpu_power_limits) = crate::hw::gpu::stamp_facts().clone();
        Self {
            tokscope_version: env!("CARGO_PKG_VERSION"),
            llama_cpp: info.llama_cpp.clone(),
            cuda_graphs: crate::llama::cuda_env::cuda_graphs(&system_info, &cuda_env),
            cuda_env,
            gpu_driver,
            gpu_power_limits,
            llama_system_info: system_info,
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
            fa_kv_kernel: info.fa_kv_kernel.clone(),
            template: info.template.clone(),
            sampling: sampling.clone(),
            unix_time_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }
}

impl Stamp {
    /// What this stamp says makes a GPU row's figures not the plain ones: the K/V pair's
    /// flash-attention fallback, CUDA graphs off; none for a row with no layer on a GPU.
    pub(crate) fn gpu_warnings(&self) -> Vec<String> {
        if self.n_gpu_layers == 0 {
            return Vec::new();
        }
        let graphs = self
            .cuda_graphs
            .as_deref()
            .and_then(|g| g.strip_prefix("off: "))
            .map(|why| format!("CUDA graphs off ({why}): each decode step launches every kernel"));
        self.fa_kv_kernel.iter().cloned().chain(graphs).collect()
    }
}
