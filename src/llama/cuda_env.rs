//! The runtime switches llama.cpp's CUDA backend reads from the environment, so that a stamp
//! says which were set: each changes the kernels or the memory a run gets, and none shows in
//! a figure. The list is every `getenv` in `ggml/src/ggml-cuda/` of llama-cpp-sys-2 0.1.160,
//! plus the CUDA runtime's own variables that llama.cpp's docs/build.md names.

use std::collections::BTreeMap;

/// Each switch with where llama.cpp reads it and what setting it does.
pub(crate) const CUDA_SWITCHES: [(&str, &str); 18] = [
    // common.cuh:1289: any value, "0" included, turns CUDA graphs off.
    ("GGML_CUDA_DISABLE_GRAPHS", "CUDA graphs off (any value)"),
    // ggml-cuda.cu:3508, 4607: a non-zero number turns kernel fusion off.
    ("GGML_CUDA_DISABLE_FUSION", "kernel fusion off (non-zero)"),
    // ggml-cuda.cu:4727: "1" turns the graph optimisation (concurrent streams) on.
    ("GGML_CUDA_GRAPH_OPT", "graph optimisation on (1)"),
    // common.cuh:1701: "0" turns programmatic dependent launch off where it was compiled.
    ("GGML_CUDA_PDL", "programmatic dependent launch (0 = off)"),
    // ggml-cuda.cu:144, 5177: any value allocates with cudaMallocManaged.
    (
        "GGML_CUDA_ENABLE_UNIFIED_MEMORY",
        "unified memory (any value)",
    ),
    // ggml-cuda.cu:236: emulates this many devices.
    ("GGML_CUDA_DEVICES", "emulated device count"),
    // ggml-cuda.cu:386, 601: any value enables peer access between GPUs.
    ("GGML_CUDA_P2P", "peer-to-peer access (any value)"),
    // ggml-cuda.cu:1222: the multi-GPU all-reduce (NCCL or internal).
    ("GGML_CUDA_ALLREDUCE", "all-reduce implementation"),
    // allreduce.cu:423-435: the internal all-reduce's thresholds.
    ("GGML_CUDA_AR_COPY_THRESHOLD", "all-reduce copy threshold"),
    ("GGML_CUDA_AR_COPY_CHUNK_BYTES", "all-reduce copy chunk"),
    ("GGML_CUDA_AR_BF16_THRESHOLD", "all-reduce bf16 threshold"),
    // ggml-cuda.cu:1274, 5219: any value makes host buffers pageable.
    ("GGML_CUDA_NO_PINNED", "no pinned host memory (any value)"),
    // ggml-cuda.cu:1644: cuBLAS compute type.
    ("GGML_CUDA_CUBLAS_COMPUTE_TYPE", "cuBLAS compute type"),
    // mmq.cu:96: activation precision of the NVFP4/MXFP4 matmuls.
    ("GGML_CUDA_MMQ_PREC", "MMQ activation precision"),
    // ggml-cuda.cu:5027, 5050: host memory registration.
    ("GGML_CUDA_REGISTER_HOST", "host memory registration"),
    // ggml-cuda.cu:5928: the batch size from which ops on CPU weights are offloaded.
    (
        "GGML_OP_OFFLOAD_MIN_BATCH",
        "op offload from this batch size (default 32)",
    ),
    // The CUDA runtime's (docs/build.md, "Runtime CUDA environmental variables").
    ("CUDA_VISIBLE_DEVICES", "the devices CUDA shows"),
    ("CUDA_SCALE_LAUNCH_QUEUES", "CUDA's launch queue size"),
];

/// The switches of [`CUDA_SWITCHES`] set in `vars` (an environment), name → value.
pub(crate) fn cuda_env_from(
    vars: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    vars.filter(|(name, _)| CUDA_SWITCHES.iter().any(|(s, _)| s == name))
        .collect()
}

/// The switches set in this process's environment.
pub(crate) fn cuda_env() -> BTreeMap<String, String> {
    cuda_env_from(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned()))),
    )
}

/// Whether CUDA graphs can run, for a build whose llama.cpp system info is `system_info`
/// under the switches `env`: "on", or "off: …" with the reason; `None` without a CUDA backend.
/// (ggml also leaves graphs off for a step it cannot capture, e.g. on a split across GPUs:
/// that is decided per step and not said here.)
pub(crate) fn cuda_graphs(system_info: &str, env: &BTreeMap<String, String>) -> Option<String> {
    let features = super::fattn::backend_features(system_info);
    if !features.iter().any(|(backend, _, _)| backend == "CUDA") {
        return None;
    }
    Some(if let Some(v) = env.get("GGML_CUDA_DISABLE_GRAPHS") {
        format!("off: GGML_CUDA_DISABLE_GRAPHS={v} is set (any value turns them off)")
    } else if super::fattn::cuda_feature(system_info, "USE_GRAPHS").as_deref() != Some("1") {
        "off: this build has no CUDA graphs (GGML_CUDA_GRAPHS=OFF)".to_string()
    } else {
        "on".to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        cuda_env_from(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn only_llama_cpps_switches_are_kept() {
        let e = env(&[
            ("GGML_CUDA_DISABLE_GRAPHS", "0"),
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("HOME", "/root"),
            ("GGML_CUDA_SOMETHING_ELSE", "1"),
        ]);
        assert_eq!(
            e.into_iter().collect::<Vec<_>>(),
            vec![
                ("CUDA_VISIBLE_DEVICES".to_string(), "1".to_string()),
                ("GGML_CUDA_DISABLE_GRAPHS".to_string(), "0".to_string()),
            ]
        );
    }

    #[test]
    fn graphs_are_off_when_the_switch_is_set_at_all_or_not_built() {
        let built = "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | FA_QUANTS = all | CPU : SSE3 = 1";
        assert_eq!(cuda_graphs(built, &env(&[])).as_deref(), Some("on"));
        let off = cuda_graphs(built, &env(&[("GGML_CUDA_DISABLE_GRAPHS", "0")])).unwrap();
        assert!(off.starts_with("off: GGML_CUDA_DISABLE_GRAPHS=0"), "{off}");
        let unbuilt = "CUDA : ARCHS = 900 | FA_QUANTS = all | CPU : SSE3 = 1";
        assert!(cuda_graphs(unbuilt, &env(&[]))
            .unwrap()
            .contains("GGML_CUDA_GRAPHS=OFF"));
        assert_eq!(cuda_graphs("CPU : SSE3 = 1", &env(&[])), None);
    }
}
