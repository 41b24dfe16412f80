//! The chat's host sampler (`llama::sampler::HostSampler`: greedy argmax, one-pass top-k, the
//! reused full chain) picks the same tokens as llama.cpp's own sampler chain
//! (`llama::build_sampler` + `llama_sampler_sample`, the implementation it replaced), from the
//! same logits and seeds, token after token. Real llama.cpp on synthetic models: the built-in
//! small vocabulary and the real Llama 3 vocabulary (128,256 tokens).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use tokscope::llama::sampler::{HostPath, HostSampler};
use tokscope::llama::settings::SamplingParams;
use tokscope::synth::{write_model, SynthSpec, TensorType};

fn chains() -> Vec<(SamplingParams, HostPath)> {
    let d = SamplingParams::default();
    vec![
        (d.clone(), HostPath::TopK),
        (
            SamplingParams {
                temperature: 0.0,
                ..d.clone()
            },
            HostPath::Greedy,
        ),
        (
            SamplingParams {
                temperature: 1.7,
                top_k: 5,
                top_p: 0.9,
                min_p: 0.0,
                ..d.clone()
            },
            HostPath::TopK,
        ),
        (
            SamplingParams {
                temperature: 0.4,
                top_k: 100,
                top_p: 1.0,
                min_p: 0.1,
                ..d.clone()
            },
            HostPath::TopK,
        ),
        (
            SamplingParams {
                top_k: 0,
                ..d.clone()
            },
            HostPath::FullChain,
        ),
        (
            SamplingParams {
                repeat_penalty: 1.3,
                ..d.clone()
            },
            HostPath::FullChain,
        ),
        (
            SamplingParams {
                temperature: 0.0,
                repeat_penalty: 1.3,
                ..d
            },
            HostPath::FullChain,
        ),
    ]
}

/// Decode `steps` tokens; at every step each (chain, seed) pair samples the same logits with
/// the old chain and the new sampler, and the two must agree. Returns how many comparisons
/// were made and how many distinct tokens the old chain drew (so a test that only ever saw
/// one token would show).
fn compare_on(model_path: &std::path::Path, seeds: u32, steps: usize) -> (usize, usize) {
    let _lock = common::model_lock();
    tokscope::llama::backend().unwrap();
    let model = tokscope::llama::load_model(model_path, None, |_| true).unwrap();
    let mut settings = common::settings(512);
    settings.n_batch = 64;
    let mut ctx = tokscope::llama::new_context(&model, &settings, 1).unwrap();
    let n_vocab = model.n_vocab();
    let mut pairs: Vec<(LlamaSampler, HostSampler, String)> = Vec::new();
    for (params, path) in chains() {
        for s in 0..seeds {
            let p = SamplingParams {
                seed: 1000 + s * 7919,
                ..params.clone()
            };
            let new = HostSampler::new(&p, n_vocab);
            assert_eq!(new.path(), path, "{p:?}");
            pairs.push((
                tokscope::llama::build_sampler(&p, n_vocab),
                new,
                format!("{p:?}"),
            ));
        }
    }
    let prompt = model.vocab().tokenize(b"Once upon a time", true, false);
    let mut idx = common::prefill(&mut ctx, &prompt);
    let mut batch = LlamaBatch::new(1, 1);
    let mut compared = 0;
    let mut seen = std::collections::BTreeSet::new();
    for (pos, step) in (prompt.len() as i32..).zip(0..steps) {
        let logits = ctx.get_logits_ith(idx).to_vec();
        let mut feed = None;
        for (old, new, label) in &mut pairs {
            let want = old.sample(&ctx, idx);
            let got = new.sample(&logits).unwrap();
            assert_eq!(got, want, "step {step}, {label}");
            seen.insert(want.0);
            compared += 1;
            feed.get_or_insert(want);
        }
        let token: LlamaToken = feed.unwrap();
        batch.clear();
        batch.add(token, pos, &[0], true).unwrap();
        ctx.decode(&mut batch).unwrap();
        idx = 0;
    }
    (compared, seen.len())
}

#[test]
fn host_sampler_matches_llama_chain_small_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 3);
    let (compared, distinct) = compare_on(&path, 24, 40);
    assert_eq!(compared, chains().len() * 24 * 40);
    assert!(distinct > 20, "only {distinct} distinct tokens drawn");
}

#[test]
fn host_sampler_matches_llama_chain_llama3_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = SynthSpec::preset("tiny").unwrap();
    spec.tensor_type = TensorType::Q8_0;
    spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
    let path = dir.path().join("tiny-l3.gguf");
    write_model(&path, &spec).unwrap();
    let (compared, distinct) = compare_on(&path, 8, 25);
    assert_eq!(compared, chains().len() * 8 * 25);
    assert!(distinct > 20, "only {distinct} distinct tokens drawn");
}
