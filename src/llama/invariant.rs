//! Batch-invariant CPU kernels: every row of a batch computed exactly as a one-token pass
//! computes it, so that a speculative verify pass gives greedy decoding's tokens bit for bit.
//!
//! llama.cpp's CPU backend picks its matrix-multiply kernel by batch size. Measured on the
//! demo model (`examples/greedy_margins.rs`, BENCHMARKS.md "Batch-invariant kernels"):
//! - weights repacked for the CPU (Q4_K, Q4_0, IQ4_NL, Q8_0 where the CPU has the kernels)
//!   take a 4-row gemm for batches of 4 or more and a gemv for one row: the logits of a
//!   4-row batch differ from one-token decoding's by 0.2 on average, up to 2;
//! - ggml's tiled K-quant matmul takes batches of 8 or more rows (same size of difference).
//!
//! Two switches make both paths the one-token path: the target's weights stay in their file
//! layout (llama.cpp's `use_extra_bufts = false`: no repacking), and `GGML_CPU_TILED_MM=0`,
//! which ggml reads once per process, at its first matrix multiply. With both, batches of 1
//! to 33 rows gave bit-identical logits on Q4_K_M and Q8_0 models.
//!
//! What stays batch-variant: F32, F16 and BF16 weights (llamafile's sgemm for two rows or
//! more, ggml's vec_dot for one; llama.cpp has no switch for it in its API), and GPU kernels.

/// The environment variable ggml's tiled K-quant matmul reads (`ggml-cpu/tiled/tiled.cpp`).
pub(crate) const TILED_MM_ENV: &str = "GGML_CPU_TILED_MM";

/// Turns ggml's tiled K-quant matmul off for this process. ggml reads the variable once, at
/// its first matrix multiply, so this must run before any model does: the engine calls it
/// before its thread starts, and nothing in tokscope decodes before an engine exists.
pub(crate) fn disable_tiled_matmul() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var(TILED_MM_ENV, "0"));
}

/// The kernel set's name in stamps, `run --json` and the status bar.
pub(crate) fn kernel_set_name(batch_invariant: bool) -> &'static str {
    if batch_invariant {
        "batch-invariant"
    } else {
        "default"
    }
}

/// What the batch-invariant kernel set costs, said where a run switches to it (measured,
/// BENCHMARKS.md "Batch-invariant kernels": prefill on the project's raw files).
pub(crate) const KERNELS_NOTE: &str = "batch-invariant kernels (speculation's default, so that \
     greedy speculation gives plain decoding's tokens): prefill measured 0.75-0.86x of the \
     default kernels on Q4_K_M models (decode within noise); `--batch-invariant off` keeps \
     llama.cpp's default kernels";
