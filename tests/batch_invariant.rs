//! Batch-invariant kernels (`llama::invariant`) on real llama.cpp with a synthetic Q4_K_M
//! model, one thread: the logits of every row of a verify-sized batch are bit-identical to
//! one-token decoding's, where the default (repacked) kernels are not; and greedy speculation
//! at k = 3 and 7 (verify batches of 4 and 8, the sizes where the default kernels part) gives
//! the plain decode's tokens.
//!
//! Its own test binary: batch-invariant kernels turn ggml's tiled matmul off for the process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{ab_turn, greedy, model_lock, settings, start, synth, user};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use tokscope::llama::settings::SpecMode;
use tokscope::synth::TensorType;

/// Greedy-decodes `n` tokens after `prompt` one token per call, keeping each step's logits;
/// then decodes the same tokens again `b` at a time with logits at every row. Returns the
/// largest |Δ logit| over all rows.
fn batch_drift(model: &LlamaModel, prompt: &str, n: usize, b: usize) -> f32 {
    let s = settings(1024);
    let mut ctx = tokscope::llama::new_context(model, &s, 1).unwrap();
    let prompt = model.vocab().tokenize(prompt.as_bytes(), true, false);
    let prefill = |ctx: &mut llama_cpp_2::context::LlamaContext| {
        ctx.clear_kv_cache();
        common::prefill(ctx, &prompt)
    };
    let mut idx = prefill(&mut ctx);
    let (mut rows, mut tokens) = (Vec::new(), Vec::new());
    let mut one = LlamaBatch::new(1, 1);
    for step in 0..n {
        let logits = ctx.get_logits_ith(idx).to_vec();
        let best = logits
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |m, (i, &l)| if l > m.1 { (i, l) } else { m },
            )
            .0;
        rows.push(logits);
        let token = LlamaToken(best as i32);
        tokens.push(token);
        one.clear();
        one.add(token, (prompt.len() + step) as i32, &[0], true)
            .unwrap();
        ctx.decode(&mut one).unwrap();
        idx = 0;
    }
    prefill(&mut ctx);
    let mut worst = 0f32;
    let mut chunk = LlamaBatch::new(b, 1);
    for (start, group) in tokens[..n - 1].chunks(b).enumerate() {
        chunk.clear();
        for (i, t) in group.iter().enumerate() {
            chunk
                .add(*t, (prompt.len() + start * b + i) as i32, &[0], true)
                .unwrap();
        }
        ctx.decode(&mut chunk).unwrap();
        for i in 0..group.len() {
            let want = &rows[start * b + i + 1];
            let got = ctx.get_logits_ith(i as i32);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                worst = worst.max((g - w).abs());
            }
        }
    }
    worst
}

fn q4km(dir: &Path) -> std::path::PathBuf {
    synth(dir, "small-q4km.gguf", "small", TensorType::Q4KM, 5)
}

#[test]
fn verify_sized_batches_are_bit_identical_to_one_token_passes() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = q4km(dir.path());
    let prompt = "one two three four one two three four one two three";

    // First: it turns ggml's tiled matmul off, which ggml reads at the process's first matrix
    // multiply (the other test's engine may or may not have run before this one).
    let invariant = tokscope::llama::load_model_batch_invariant(&path, Some(0), |_| true).unwrap();

    // The control: llama.cpp's default kernels (Q4_K repacked for a 4-row gemm) part from
    // one-token decoding at 4 rows. If they did not, this test could not tell.
    let default = tokscope::llama::load_model(&path, Some(0), |_| true).unwrap();
    assert!(
        batch_drift(&default, prompt, 24, 2) == 0.0,
        "2-row batches take the one-token kernel even by default"
    );
    let drift = batch_drift(&default, prompt, 24, 4);
    assert!(
        drift > 0.0,
        "the default kernels were expected to part from one-token decoding at 4 rows"
    );
    drop(default);

    for b in [2, 3, 4, 5, 8, 9, 16] {
        assert_eq!(
            batch_drift(&invariant, prompt, 24, b),
            0.0,
            "batch-invariant kernels: {b}-row batches give one-token decoding's logits bit for bit"
        );
    }
}

#[test]
fn greedy_speculation_on_batch_invariant_kernels_is_the_plain_decode_at_k_3_and_7() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = q4km(dir.path());
    let prompts = [
        "one two three four one two three four one two three",
        "the quick brown fox jumps over the lazy dog the quick brown fox",
        "abc abc abc abc abc",
        "def f(x): return x + 1\ndef g(x): return x + 1\ndef h(x): return",
    ];
    let mut plain_settings = settings(1024);
    plain_settings.spec.batch_invariant = Some(true);
    let mut plain = start(&path, plain_settings);
    for k in [3, 7] {
        let mut s = settings(1024);
        s.spec.mode = SpecMode::Ngram;
        s.spec.draft_max = k;
        assert!(
            s.spec.batch_invariant_kernels(),
            "auto means batch-invariant while speculating"
        );
        let mut fast = start(&path, s);
        let mut drafted = 0;
        for p in prompts {
            let a = plain.turn(vec![user(p)], greedy(), 40);
            let b = fast.turn(vec![user(p)], greedy(), 40);
            assert_eq!(a.report.text, b.report.text, "k={k}, prompt {p:?}");
            assert_eq!(a.token_events, b.token_events, "k={k}, prompt {p:?}");
            drafted += b.report.spec.clone().unwrap_or_default().drafted;
        }
        assert!(drafted > 0, "k={k}: nothing was drafted, nothing verified");
    }
}

/// An A/B comparison measures model B on model A's kernels: under speculation both load in
/// their file layout (batch-invariant), and llama.cpp's own load log repacks neither's
/// weights; B given A's own file then answers as A does, token for token. The control: without
/// speculation both take llama.cpp's default kernels, which repack Q4_K on this CPU (AVX2), so
/// the log can tell the two apart.
#[test]
fn ab_model_b_runs_on_model_as_kernels_under_speculation() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = q4km(dir.path());
    let prompt = "one two three four one two three four one two three";
    // Speculating first: that engine turns ggml's tiled matmul off for the process before its
    // first matrix multiply, as the other tests here need (a default-kernels engine first
    // would leave it on for them).
    for speculating in [true, false] {
        let mut s = settings(1024);
        if speculating {
            s.spec.mode = SpecMode::Ngram;
            s.spec.draft_max = 4;
        }
        let mut e = start(&path, s);
        let want = if speculating {
            "batch-invariant"
        } else {
            "default"
        };
        assert_eq!(
            e.info.kernels, want,
            "A's kernels, speculating {speculating}"
        );
        assert_eq!(
            e.info.weights_repacked, !speculating,
            "llama.cpp repacks A's Q4_K weights on the default kernels only"
        );
        let (b, _) =
            ab_turn(&mut e, &path, vec![user(prompt)], greedy(), 24, |_, _| {}).expect("B answers");
        assert_eq!(
            b.model.kernels, e.info.kernels,
            "B on A's kernels, speculating {speculating}"
        );
        assert_eq!(
            b.model.weights_repacked, e.info.weights_repacked,
            "B's load as A's (llama.cpp's load log), speculating {speculating}"
        );
        let a = b.a_fresh.expect("A answered again beside B");
        assert_eq!(
            b.turn.text, a.text,
            "B with A's file answers as A, speculating {speculating}"
        );
    }
}

/// Q8_0 and Q4_0 rows are not one kernel: two rows or more go through llamafile's
/// `tinyBLAS_Q0_AVX`, one row through `ggml_vec_dot_q8_0_q8_0` / `ggml_vec_dot_q4_0_q8_0`
/// (docs/metrics.md). On x86 they agree bit for bit (measured on an AVX-512 and an AVX2-only
/// AMD EPYC: `benchmarks/batch-logit-drift-q0-avx2-20261203.txt`); this holds it, so a
/// llama.cpp update that changes either kernel's summation order fails here, not in a user's
/// speculative answer. ARM has no measurement and is not asserted.
#[cfg(target_arch = "x86_64")]
#[test]
fn q8_0_and_q4_0_batches_are_bit_identical_to_one_token_passes_on_x86() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let prompt = "one two three four one two three four one two three";
    for (name, t) in [("q8_0", TensorType::Q8_0), ("q4_0", TensorType::Q4_0)] {
        let path = synth(dir.path(), &format!("small-{name}.gguf"), "small", t, 5);
        let model = tokscope::llama::load_model_batch_invariant(&path, Some(0), |_| true).unwrap();
        for b in [2, 3, 4, 5, 8, 9, 16] {
            let drift = batch_drift(&model, prompt, 24, b);
            eprintln!("{name} batch-invariant b={b} max |d logit| = {drift}");
            assert_eq!(
                drift, 0.0,
                "{name}: {b}-row batches give one-token decoding's logits bit for bit on x86"
            );
        }
    }
}
