//! `run --url` and `load` against a real llama-server (built from the llama.cpp in the
//! llama-cpp-python sdist on PyPI, not the revision tokscope links; see
//! tests/common/llama_server.rs) serving a synthetic model on 127.0.0.1. These
//! tests fail, not skip, when llama-server cannot be built or started.
//!
//! They run in the default suite: scripts/test.sh builds llama-server once (about ten minutes
//! cold on two cores, then cached) and passes TOKSCOPE_LLAMA_SERVER; a plain `cargo test`
//! builds it here on first use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use assert_cmd::Command;
use common::llama_server::LlamaServer;

fn tokscope(dir: &tempfile::TempDir) -> Command {
    let mut cmd = common::tokscope_cmd(dir.path());
    cmd.env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
        .timeout(Duration::from_secs(300));
    cmd
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "tokscope failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The relative difference of two durations.
fn deviation(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Turns compared: the durations are compared per turn and the median of the turns'
/// differences is held to 5%. One turn alone is not enough on a shared two-core machine: with
/// the load at 7 to 8 (other builds), a single turn's TTFT once missed by 6% (756 ms against the
/// server's 711 ms) when a process was descheduled for 45 ms mid-turn, while the other turns of
/// the same run agreed within 1.1%.
const AGREEMENT_TURNS: usize = 5;

#[test]
fn a_remote_turn_agrees_with_the_servers_own_timings_and_usage() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    let server = LlamaServer::start(&model, 1, &[], dir.path());
    let mut tpot_devs = Vec::new();
    let mut ttft_devs = Vec::new();
    for turn in 0..AGREEMENT_TURNS {
        // A long prompt so that the server's prompt time dominates what HTTP adds; it starts
        // with the turn's number so that the server's prompt cache cannot reuse the last one.
        let prompt = format!(
            "turn {turn}: {}",
            "the quick brown fox jumps over the lazy dog ".repeat(24)
        );
        let trace = dir.path().join(format!("trace-{turn}.json"));
        let out = tokscope(&dir)
            .args(["run", "--url", &server.url(), "--json", "--temp", "0"])
            .args(["-n", "64", "--ignore-eos", "-p", &prompt, "--trace"])
            .arg(&trace)
            .output()
            .unwrap();
        let v = json_of(&out);
        // The stream's trace (request sent, headers, each chunk) gives back the report's
        // chunk times, TTFT and ITL (scripts/trace-check.py).
        let report = dir.path().join(format!("report-{turn}.json"));
        std::fs::write(&report, &out.stdout).unwrap();
        let said = common::trace_check(&trace, Some(&report)).unwrap();
        assert!(said.contains("1 turn(s), 64 tokens agree"), "{said}");
        let m = &v["metrics"];
        // Token counts: exactly the server's, every turn.
        assert_eq!(m["tokens_generated"], 64, "{m}");
        assert_eq!(m["server_predicted_tokens"], 64, "{m}");
        assert_eq!(m["token_count_source"], "usage_one_per_chunk", "{m}");
        // The usage's prompt tokens are the server's evaluated ones plus its cache hits.
        assert_eq!(
            m["server_prompt_tokens"].as_u64().unwrap()
                + m["server_cached_tokens"].as_u64().unwrap_or(0),
            m["prompt_tokens"].as_u64().unwrap(),
            "{m}"
        );
        assert_eq!(v["end"], "done");
        // Decode: tokscope's time per token (first → last chunk) against the server's
        // predicted_ms / predicted_n.
        let tpot = m["tpot_ms"].as_f64().unwrap();
        let server_tpot = m["server_tpot_ms"].as_f64().unwrap();
        // Prompt: TTFT minus the network round trip is the server's prompt time plus its
        // first token; everything else (queue, HTTP, template) must stay small beside it.
        let ttft = m["ttft_ms"].as_f64().unwrap();
        let rtt = m["network_rtt_ms"].as_f64().unwrap();
        let prompt_ms = m["server_prompt_ms"].as_f64().unwrap();
        // Only the template's opening and "turn " come from the server's cache.
        assert!(
            m["server_cached_tokens"].as_u64().unwrap_or(0) * 10
                < m["prompt_tokens"].as_u64().unwrap(),
            "the prompt was evaluated, not taken from the cache: {m}"
        );
        // vLLM's convention over the same stream: it starts at the first chunk with a choice
        // (at or before the first content) and ends at the last (at or after the last
        // content), one undivided gap per chunk (at least one per token after the first).
        let v = &m["vllm_convention"];
        let vllm_ttft = v["ttft_ms"].as_f64().unwrap();
        assert!(vllm_ttft <= ttft && vllm_ttft > 0.0, "{m}");
        assert!(
            v["e2e_ms"].as_f64().unwrap() >= m["e2e_ms"].as_f64().unwrap(),
            "{m}"
        );
        assert!(v["itl"]["count"].as_u64().unwrap() >= 63, "{m}");
        let vllm_tpot = v["tpot_ms"].as_f64().unwrap();
        assert!(deviation(vllm_tpot, tpot) < 0.05, "{m}");
        eprintln!(
            "turn {turn}: vLLM's TTFT {vllm_ttft:.2} ms (tokscope {ttft:.2}), TPOT {vllm_tpot:.3} ms, {} chunk gaps",
            v["itl"]["count"]
        );
        let qt = m["queue_transport_ms"].as_f64().unwrap();
        assert!((qt - (ttft - rtt - prompt_ms)).abs() < 1e-6);
        eprintln!(
            "turn {turn}: TPOT {tpot:.3} vs server {server_tpot:.3} ms; TTFT {ttft:.2} − RTT {rtt:.2} vs server prompt {prompt_ms:.2} + first token {server_tpot:.2} ms"
        );
        tpot_devs.push(deviation(tpot, server_tpot));
        ttft_devs.push(deviation(ttft - rtt, prompt_ms + server_tpot));
    }
    let (tpot_dev, ttft_dev) = (median(tpot_devs.clone()), median(ttft_devs.clone()));
    assert!(
        tpot_dev <= 0.05,
        "median TPOT difference {:.2}% (turns: {tpot_devs:?})",
        tpot_dev * 100.0
    );
    assert!(
        ttft_dev <= 0.05,
        "median TTFT difference {:.2}% (turns: {ttft_devs:?})",
        ttft_dev * 100.0
    );
}

#[test]
fn load_totals_equal_the_servers_metrics_counters_at_concurrency_1_2_4() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let server = LlamaServer::start(&model, 4, &[], dir.path());
    for c in [1, 2, 4] {
        let predicted_before = server.metric("llamacpp:tokens_predicted_total");
        let prompt_before = server.metric("llamacpp:prompt_tokens_total");
        let out = tokscope(&dir)
            .args(["load", "--url", &server.url(), "-o", "json"])
            .args([
                "--concurrency",
                &c.to_string(),
                "--requests",
                "6",
                "--warmup",
                "0",
            ])
            .args(["--input-len", "16..48", "--output-len", "12"])
            .output()
            .unwrap();
        let v = json_of(&out);
        let level = &v["levels"][0];
        assert_eq!(level["level"], format!("concurrency={c}"));
        assert_eq!(level["completed"], 6, "{level}");
        assert_eq!(level["failed"], 0, "{level}");
        assert_eq!(level["completion_tokens"], 6 * 12);
        let predicted = server.metric("llamacpp:tokens_predicted_total") - predicted_before;
        let prompt = server.metric("llamacpp:prompt_tokens_total") - prompt_before;
        assert_eq!(
            level["completion_tokens"].as_f64().unwrap(),
            predicted,
            "c={c}"
        );
        assert_eq!(level["server_prompt_n"].as_f64().unwrap(), prompt, "c={c}");
        assert!(v["prompts"].as_str().unwrap().contains("/tokenize"));
        // `load` read the same counters itself (GET /metrics, a baseline then every 500 ms):
        // its deltas are the test's, and the server never ran more requests than were sent.
        let m = &level["server_metrics"];
        assert_eq!(m["source"], "llamacpp:", "{m}");
        assert_eq!(
            m["generation_tokens"].as_f64(),
            Some(predicted),
            "c={c}: {m}"
        );
        assert_eq!(m["prompt_tokens"].as_f64(), Some(prompt), "c={c}: {m}");
        assert!(m["scrapes"].as_u64().unwrap() >= 1, "{m}");
        let running = m["running"]["max"].as_f64().unwrap();
        assert!((0.0..=c as f64).contains(&running), "c={c}: {m}");
    }
}

#[test]
fn goodput_is_zero_at_an_impossible_slo_and_the_throughput_at_a_loose_one() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let server = LlamaServer::start(&model, 2, &[], dir.path());
    let run = |slo: &str| {
        let out = tokscope(&dir)
            .args(["load", "--url", &server.url(), "-o", "json", "--slo", slo])
            .args(["--rate", "20", "--requests", "6", "--output-len", "8"])
            .output()
            .unwrap();
        json_of(&out)["levels"][0].clone()
    };
    let tight = run("ttft=1us");
    assert_eq!(tight["completed"], 6);
    assert_eq!(tight["good_requests"], 0);
    assert_eq!(tight["goodput_req_per_s"], 0.0);
    assert_eq!(tight["vllm_convention"]["requests"], 6, "{tight}");
    assert_eq!(tight["vllm_convention"]["good_requests"], 0, "{tight}");
    let loose = run("ttft=600s,tpot=600s,e2e=600s");
    assert_eq!(loose["good_requests"], 6);
    assert_eq!(loose["goodput_req_per_s"], loose["request_per_s"]);
    let v = &loose["vllm_convention"];
    assert_eq!(v["good_requests"], 6, "{loose}");
    // One undivided gap per chunk after the first: the 7 tokens after the first and the
    // closing finish chunk, for each of the 6 requests.
    assert!(v["itl"]["count"].as_u64().unwrap() >= 6 * 7, "{loose}");
    assert!(v["ttft"]["p50_ms"].as_f64().unwrap() <= loose["ttft"]["max_ms"].as_f64().unwrap());
}

#[test]
fn the_real_server_gives_401_for_a_bad_key_and_404_for_a_wrong_path() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let server = LlamaServer::start(&model, 1, &["--api-key", "right-key"], dir.path());
    let out = tokscope(&dir)
        .env("TOKSCOPE_TEST_KEY", "wrong-key")
        .args(["run", "--url", &server.url(), "-p", "hi", "-n", "4"])
        .args(["--api-key-env", "TOKSCOPE_TEST_KEY"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("--api-key-env"),
        "{stderr}"
    );
    let ok = tokscope(&dir)
        .env("TOKSCOPE_TEST_KEY", "right-key")
        .args([
            "run",
            "--url",
            &server.url(),
            "-p",
            "hi",
            "-n",
            "4",
            "--json",
        ])
        .args(["--api-key-env", "TOKSCOPE_TEST_KEY"])
        .output()
        .unwrap();
    json_of(&ok);
    let wrong = format!("http://127.0.0.1:{}/nope/v1", server.port);
    let out = tokscope(&dir)
        .env("TOKSCOPE_TEST_KEY", "right-key")
        .args(["run", "--url", &wrong, "-p", "hi", "-n", "4"])
        .args(["--api-key-env", "TOKSCOPE_TEST_KEY"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTP 404") && stderr.contains("wrong path"),
        "{stderr}"
    );
}

/// Issue 35, item 7: a turn that wakes a sleeping llama-server (`--sleep-idle-seconds`) is
/// labelled cold, because its TTFT holds the model's reload; the next turn, on the awake
/// server, is not. Asking `/props` (and `/v1/models`, the RTT probe) does not wake it.
#[test]
fn a_turn_that_wakes_a_sleeping_server_is_labelled_cold() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    let server = LlamaServer::start(&model, 1, &["--sleep-idle-seconds", "1"], dir.path());
    let asleep = || {
        server
            .get("/props")
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
            .and_then(|v| v["is_sleeping"].as_bool())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while asleep() != Some(true) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not fall asleep: {:?}",
            server.get("/props")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let run = || {
        tokscope(&dir)
            .args(["run", "--url", &server.url(), "--temp", "0", "-n", "8"])
            .args(["-p", "hello there", "--json"])
            .output()
            .unwrap()
    };
    let cold = json_of(&run());
    assert_eq!(
        cold["metrics"]["cold_start"]["why"], "sleeping",
        "{}",
        cold["metrics"]
    );
    assert_eq!(
        cold["metrics"]["tokens_generated"], 8,
        "{}",
        cold["metrics"]
    );
    let warm = json_of(&run());
    assert!(
        warm["metrics"]["cold_start"].is_null(),
        "the server was awake: {}",
        warm["metrics"]
    );
    // The human summary says it, in words.
    std::thread::sleep(Duration::from_millis(100));
    while asleep() != Some(true) {
        assert!(std::time::Instant::now() < deadline + Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = tokscope(&dir)
        .args(["run", "--url", &server.url(), "-n", "4", "-p", "hi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cold     the server was asleep"),
        "{stderr}"
    );
}

/// The real instruct model's prompt as tokscope builds it (its own Jinja template) is the one
/// llama-server `--jinja` builds: the same text as its `/apply-template` and the same token
/// count as its `usage.prompt_tokens`, for one turn and for three.
#[test]
fn the_instruct_models_prompt_is_llama_server_jinjas_for_one_and_three_turns() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::instruct_model();
    let server = LlamaServer::start(&model, 1, &["--jinja"], dir.path());
    let one = serde_json::json!([{"role": "user", "content": "What is the capital of France?"}]);
    let three = serde_json::json!([
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
        {"role": "user", "content": "And of Italy? Answer in one word."}
    ]);
    for (name, messages) in [("one turn", one), ("three turns", three)] {
        let (code, applied) = server.post_json(
            "/apply-template",
            &serde_json::json!({"messages": messages}),
        );
        assert_eq!(code, 200, "{applied}");
        let (code, answer) = server.post_json(
            "/v1/chat/completions",
            &serde_json::json!({"messages": messages, "max_tokens": 1, "temperature": 0}),
        );
        assert_eq!(code, 200, "{answer}");
        let server_tokens = answer["usage"]["prompt_tokens"].as_u64().unwrap();
        let file = dir.path().join("messages.json");
        std::fs::write(&file, messages.to_string()).unwrap();
        let out = tokscope(&dir)
            .args(["doctor", "template", "--json", "-m"])
            .arg(&model)
            .arg("--messages")
            .arg(&file)
            .output()
            .unwrap();
        let ours = json_of(&out);
        assert_eq!(
            ours["prompt"], applied["prompt"],
            "{name}: the prompt text differs from llama-server's /apply-template"
        );
        assert_eq!(
            ours["prompt_tokens"].as_u64().unwrap(),
            server_tokens,
            "{name}: tokscope's prompt tokens against llama-server --jinja's usage"
        );
    }
    // And the model answers the same: greedy, the same short answer token for token.
    let ask = serde_json::json!([{"role": "user", "content": "What is the capital of Germany?"}]);
    let (code, answer) = server.post_json(
        "/v1/chat/completions",
        &serde_json::json!({"messages": ask, "max_tokens": 24, "temperature": 0}),
    );
    assert_eq!(code, 200, "{answer}");
    let out = tokscope(&dir)
        .args(["run", "--json", "--temp", "0", "-t", "1", "-n", "24", "-m"])
        .arg(&model)
        .args(["-p", "What is the capital of Germany?"])
        .output()
        .unwrap();
    let ours = json_of(&out);
    assert_eq!(
        ours["text"], answer["choices"][0]["message"]["content"],
        "the greedy answers differ"
    );
}
