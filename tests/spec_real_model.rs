//! Speculative decoding on the real demo model (gemma-3-270m Q4_K_M, `tokscope fetch-demo`)
//! through the real binary: greedy answers with `--spec ngram` and with the model drafting for
//! itself are the plain answers on the same (batch-invariant) kernels, token for token, over
//! several prompts (copy-heavy ones where prompt lookup has something to find, and ordinary
//! ones).
//!
//! Like tests/real_model.rs, a test that cannot find the model FAILS with what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

fn run_json(prompt: &str, extra: &[&str]) -> serde_json::Value {
    common::demo_run_json(&[&["-p", prompt, "-n", "48", "--ignore-eos"], extra].concat())
}

const PROMPTS: [&str; 4] = [
    "Here is a Python function:\n\ndef add(a, b):\n    total = a + b\n    return total\n\nWrite the same function again, exactly as above, but named plus.",
    "Repeat this sentence three times: The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "List the days of the week.",
];

#[test]
fn ngram_and_self_draft_answers_are_the_plain_answers() {
    let _lock = common::model_lock();
    let model = common::demo_model();
    let model = model.to_str().unwrap();
    let mut accepted = 0;
    for prompt in PROMPTS {
        // The plain decode speculation equals is the one on the same kernel set (docs/spec.md):
        // llama.cpp's default kernels (repacked weights, tiled matmul) can answer otherwise at
        // a near tie, as they did on an AVX2-only EPYC.
        let plain = run_json(prompt, &["--batch-invariant", "on"]);
        assert_eq!(plain["stamp"]["kernels"], "batch-invariant");
        let ngram = run_json(prompt, &["--spec", "ngram"]);
        assert_eq!(ngram["text"], plain["text"], "ngram, prompt {prompt:?}");
        assert_eq!(ngram["context_used"], plain["context_used"]);
        accepted += ngram["spec"]["accepted"].as_u64().unwrap();
        let draft = run_json(prompt, &["--draft", model, "--draft-max", "4"]);
        assert_eq!(
            draft["text"], plain["text"],
            "self-draft, prompt {prompt:?}"
        );
        assert_eq!(
            draft["spec"]["accepted"], draft["spec"]["drafted"],
            "the model drafting for itself is always accepted"
        );
    }
    assert!(
        accepted > 0,
        "prompt lookup found nothing to copy in any prompt"
    );
}
