//! A reasoning model over an OpenAI-compatible server (issue 56, item 5): the reasoning
//! channel (`delta.reasoning_content`, `delta.reasoning`) is timed and counted; TTFT is the
//! first token on any channel and the first answer token (AIPerf's TTFO) is its own figure, as
//! the scripted server timed them; a stream that ends while thinking says so. And the small
//! remote fixes beside it: a trickling server is cut by `--timeout`, a refused field's retry
//! keeps the first attempt's clock, `continuous_usage_stats` is asked for, and the exports name
//! each ITL convention.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::remote_faults::{
    chunk, fake, run_turn, timed, tokscope, turn_against, url, usage_event, Chat, Fake,
};

/// A reasoning delta, as vLLM, SGLang, DeepSeek's API and llama-server send it
/// (`reasoning_content`), or as newer vLLM and OpenRouter do (`reasoning`).
fn reasoning(field: &str, text: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"{field}\":{}}}}}],\"model\":\"fake\"}}\n\n",
        serde_json::to_string(text).unwrap()
    )
}

/// Five reasoning chunks 20 ms apart (the first after 50 ms), then, when `answer`, three
/// content chunks 20 ms apart; then usage (8 or 5 tokens: the reasoning ones included) and
/// `[DONE]`.
fn thinking_stream(answer: bool) -> Vec<(Duration, Vec<u8>)> {
    let ms = Duration::from_millis;
    let mut pieces: Vec<(Duration, Vec<u8>)> = (0..5)
        .map(|i| {
            let field = if i % 2 == 0 {
                "reasoning_content"
            } else {
                "reasoning"
            };
            let pause = if i == 0 { ms(50) } else { ms(20) };
            (pause, reasoning(field, &format!("r{i} ")).into_bytes())
        })
        .collect();
    if answer {
        for text in ["Fo", "ur", "."] {
            pieces.push((ms(20), chunk(text).into_bytes()));
        }
    }
    let n = if answer { 8 } else { 5 };
    let end = usage_event(3, n) + "data: [DONE]\n\n";
    pieces.push((ms(5), end.into_bytes()));
    pieces
}

/// The server's own gap between its piece `a` and piece `b`, in ms (one connection's pieces).
fn server_gap_ms(f: &Fake, a: usize, b: usize) -> f64 {
    let at = f.paced_at.lock().unwrap();
    at[b].duration_since(at[a]).as_secs_f64() * 1e3
}

/// The client's figure is the server's within a few ms (both clocks on one machine; the
/// client's parse of an event is well under a millisecond).
fn assert_close(client_ms: f64, server_ms: f64, what: &str) {
    assert!(
        (client_ms - server_ms).abs() < 5.0,
        "{what}: client {client_ms:.2} ms, server {server_ms:.2} ms"
    );
}

#[test]
fn ttft_is_the_first_reasoning_chunk_and_ttfo_the_first_answer_chunk() {
    let (f, (code, stdout, stderr)) =
        turn_against(Chat::Paced(thinking_stream(true)), 8, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = &v["metrics"];
    // The answer's text holds the reasoning inside <think>…</think>, before the content.
    assert_eq!(v["text"], "<think>r0 r1 r2 r3 r4 </think>Four.");
    let chunk_ms: Vec<f64> = v["chunk_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_f64().unwrap())
        .collect();
    assert_eq!(chunk_ms.len(), 8, "both channels' chunks are timed");
    let ttft = m["ttft_ms"].as_f64().unwrap();
    let ttfo = m["ttfo_ms"].as_f64().unwrap();
    assert_eq!(ttft, chunk_ms[0], "TTFT is the first reasoning chunk");
    assert_eq!(ttfo, chunk_ms[5], "TTFO is the first content chunk");
    let th = &m["thinking"];
    assert_eq!(th["time_to_first_answer_ms"].as_f64(), Some(ttfo));
    // As the server timed them: first reasoning → first answer, and → last reasoning.
    assert_close(ttfo - ttft, server_gap_ms(&f, 0, 5), "TTFO − TTFT");
    assert_close(
        th["thinking_ms"].as_f64().unwrap(),
        server_gap_ms(&f, 0, 4),
        "thinking time",
    );
    assert!(ttfo - ttft >= 99.0, "five 20 ms gaps: {ttfo} − {ttft}");
    // Counted once: the server's 8 output tokens hold the 5 thinking ones.
    assert_eq!(m["tokens_generated"], 8);
    assert_eq!(th["thinking_tokens"], 5);
    assert_eq!(th["answer_tokens"], 3);
    assert_eq!(th["ended_while_thinking"], false);
    // ITL spans both channels: 7 gaps.
    assert_eq!(m["itl"]["count"], 7);

    // The text summary says it too.
    let (_, (code, stdout, stderr)) = turn_against(Chat::Paced(thinking_stream(true)), 8, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("<think>r0 r1"), "{stdout}");
    assert!(stderr.contains("thinking 5 tokens"), "{stderr}");
    assert!(stderr.contains("first answer token (TTFO) at"), "{stderr}");
    assert!(
        stderr.contains("ms to the last chunk with text")
            && stderr.contains("ms to the last chunk with a choice"),
        "both E2E figures are labelled: {stderr}"
    );
}

#[test]
fn a_stream_that_ends_while_thinking_is_marked() {
    let (_, (code, stdout, stderr)) =
        turn_against(Chat::Paced(thinking_stream(false)), 8, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = &v["metrics"];
    assert_eq!(v["text"], "<think>r0 r1 r2 r3 r4 </think>");
    assert_eq!(m["thinking"]["ended_while_thinking"], true, "{m}");
    assert!(m["thinking"]["time_to_first_answer_ms"].is_null());
    assert!(m["ttfo_ms"].is_null());
    assert_eq!(m["ttft_ms"], v["chunk_ms"][0]);
    let (_, (code, _, stderr)) = turn_against(Chat::Paced(thinking_stream(false)), 8, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("ended while thinking"), "{stderr}");
}

/// `load`: the per-level report carries TTFT (any channel) and TTFO with percentiles, and the
/// reasoning tokens, in JSON and CSV.
#[test]
fn load_reports_ttft_and_ttfo_of_a_reasoning_model() {
    let dir = tempfile::tempdir().unwrap();
    let run = |format: &str| {
        let f = fake(Chat::Paced(thinking_stream(true)), 40);
        let out = tokscope(&dir)
            .args(["load", "--url", &url(&f)])
            .args(["--concurrency", "1", "--requests", "3", "--warmup", "0"])
            .args(["--input-len", "8", "--metrics-interval", "0", "-o", format])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), f)
    };
    let (json, f) = run("json");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let level = &v["levels"][0];
    assert_eq!(level["completed"], 3, "{level}");
    assert_eq!(level["completion_tokens"], 24);
    assert_eq!(level["total_reasoning_tokens"], 15);
    assert_eq!(level["ended_while_thinking"], 0);
    let (ttft, ttfo) = (&level["ttft"], &level["ttfo"]);
    assert_eq!(ttfo["count"], 3, "{level}");
    // The chat requests' pieces are the last 27 the server wrote (9 a request).
    let stamps = f.paced_at.lock().unwrap().len();
    assert!(stamps >= 27, "{stamps}");
    let first = stamps - 27;
    let gap = server_gap_ms(&f, first, first + 5);
    let ttfo_minus_ttft = ttfo["mean_ms"].as_f64().unwrap() - ttft["mean_ms"].as_f64().unwrap();
    assert!(
        (ttfo_minus_ttft - gap).abs() < 5.0,
        "TTFO − TTFT {ttfo_minus_ttft:.2} ms, the server's gap {gap:.2} ms"
    );
    for p in ["p50_ms", "p90_ms", "p99_ms"] {
        assert!(ttfo[p].as_f64().unwrap() >= ttft[p].as_f64().unwrap() + 99.0);
    }
    let (csv, _) = run("csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    let cell = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(cell("total_reasoning_tokens"), "15");
    let csv_ttfo: f64 = cell("ttfo_p50_ms").parse().unwrap();
    let csv_ttft: f64 = cell("ttft_p50_ms").parse().unwrap();
    assert!(csv_ttfo >= csv_ttft + 99.0, "{csv_ttfo} {csv_ttft}");
}

/// Issue 57, item 8: a server that sends a byte every 2 s and never ends an event is cut by
/// `--timeout 3` (the wait between complete events), not kept for ever.
#[test]
fn a_trickle_that_never_ends_an_event_hits_the_timeout() {
    let mut pieces = vec![(Duration::ZERO, chunk("Hel").into_bytes())];
    pieces.extend((0..10).map(|_| (Duration::from_secs(2), b"d".to_vec())));
    let f = fake(Chat::Paced(pieces), 4);
    let (code, _, stderr, took) = timed(
        &["run", "--url", &url(&f), "-p", "hi", "--timeout", "3"],
        Duration::from_secs(40),
    );
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("no complete event"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// Issue 58, items 7 and 5: a request sent again after a refused field keeps the first
/// attempt's clock (the user waited from there), and `continuous_usage_stats` is asked for,
/// then dropped for a server that refuses it.
#[test]
fn a_resent_request_keeps_the_first_attempts_clock_and_a_refused_field_is_dropped() {
    let body = chunk("ok") + &usage_event(3, 1) + "data: [DONE]\n\n";
    let pause = Duration::from_millis(400);
    let f = fake(
        Chat::SlowRefuseField("continuous_usage_stats", pause, body.into_bytes()),
        8,
    );
    let started = Instant::now();
    let (code, stdout, stderr) = run_turn(&url(&f), &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(started.elapsed() >= pause);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ttft = v["metrics"]["ttft_ms"].as_f64().unwrap();
    assert!(
        ttft >= 400.0,
        "TTFT counts from the first attempt: {ttft} ms"
    );
    let posts: Vec<String> = f
        .requests
        .try_iter()
        .filter(|r| r.starts_with("POST"))
        .collect();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert!(
        posts[0].contains("\"continuous_usage_stats\":true"),
        "{}",
        posts[0]
    );
    assert!(!posts[1].contains("continuous_usage_stats"), "{}", posts[1]);
    assert!(posts[1].contains("\"include_usage\":true"), "{}", posts[1]);
}
