//! `tokscope run --url` against faults, each with a clear message, a non-zero exit, no panic,
//! and the partial answer kept. A tiny fake HTTP server (a std TcpListener on 127.0.0.1, one
//! thread, bounded to a few connections and a deadline) plays only the faults a real server
//! cannot be made to produce on demand: a 500 before and in the middle of a stream, a
//! malformed event, a stall, a huge event, a close without [DONE]. Connection refused and a
//! plain server behind an https URL need no real server's help; 401 and 404 are also checked
//! against the real llama-server in tests/remote_server.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use assert_cmd::Command;

/// What the fake server does with a chat-completions request.
#[derive(Clone)]
enum Chat {
    /// Writes these raw bytes after a 200 SSE header, then closes.
    Sse(Vec<u8>),
    /// Answers with this status and body.
    Status(u16, &'static str),
    /// Sends the SSE header and one chunk, then says nothing until the client gives up.
    Stall,
    /// Closes the kept-alive connection when the first chat request arrives on it, without a
    /// word (as a server does with an idle connection it is closing), then streams these bytes
    /// on every later connection.
    DropFirstPostThen(Vec<u8>),
}

struct Fake {
    port: u16,
    requests: mpsc::Receiver<String>,
}

fn chunk(content: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}}}}],\"model\":\"fake\"}}\n\n",
        serde_json::to_string(content).unwrap()
    )
}

fn usage_event(prompt: u64, completion: u64) -> String {
    format!("data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n", prompt + completion)
}

fn read_request(stream: &mut TcpStream) -> String {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap_or(0);
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let mut body = vec![0; content_length];
    let _ = reader.read_exact(&mut body);
    head + &String::from_utf8_lossy(&body)
}

/// Serves up to `max_connections` connections for at most 30 s.
fn fake(chat: Chat, max_connections: usize) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        listener.set_nonblocking(true).unwrap();
        let mut served = 0;
        while served < max_connections && Instant::now() < deadline {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            served += 1;
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let chat = chat.clone();
            let tx = tx.clone();
            let dropped = dropped.clone();
            std::thread::spawn(move || loop {
                let request = read_request(&mut stream);
                if request.is_empty() {
                    return;
                }
                let first = request.lines().next().unwrap_or("").to_string();
                let _ = tx.send(request);
                if first.starts_with("GET /v1/models") {
                    let body = r#"{"object":"list","data":[{"id":"fake-model","object":"model"}]}"#;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    continue;
                }
                let sse_head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                match chat {
                    Chat::DropFirstPostThen(_)
                        if !dropped.swap(true, std::sync::atomic::Ordering::SeqCst) =>
                    {
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                    }
                    Chat::Sse(bytes) | Chat::DropFirstPostThen(bytes) => {
                        let _ = stream.write_all(sse_head.as_bytes());
                        let _ = stream.write_all(&bytes);
                    }
                    Chat::Status(code, body) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {code} Oops\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Chat::Stall => {
                        let _ = stream.write_all(sse_head.as_bytes());
                        let _ = stream.write_all(chunk("Hel").as_bytes());
                        let _ = stream.flush();
                        std::thread::sleep(Duration::from_secs(8));
                    }
                }
                return;
            });
        }
    });
    Fake { port, requests: rx }
}

fn tokscope(dir: &tempfile::TempDir) -> Command {
    let mut cmd = Command::cargo_bin("tokscope").unwrap();
    cmd.env("TOKSCOPE_DATA_DIR", dir.path().join("data"))
        .env("TOKSCOPE_CONFIG_DIR", dir.path().join("config"))
        .env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
        .timeout(Duration::from_secs(60));
    cmd
}

/// Runs one turn against `url`; returns (exit code, stdout, stderr).
fn run_turn(url: &str, extra: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = tokscope(&dir)
        .args(["run", "--url", url, "-p", "hi", "-n", "8"])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_clean_failure(code: i32, stderr: &str, needle: &str) {
    assert_ne!(code, 0, "expected a failure: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("crashed"),
        "{stderr}"
    );
    assert!(
        stderr.to_lowercase().contains(&needle.to_lowercase()),
        "expected '{needle}' in: {stderr}"
    );
}

#[test]
fn a_complete_stream_is_measured_and_the_role_only_delta_is_not_a_token() {
    let mut body =
        String::from("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n");
    body += &chunk("Hel");
    body += &chunk("lo");
    body += &usage_event(3, 2);
    body += "data: [DONE]\n\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let url = format!("http://127.0.0.1:{}/v1", f.port);
    let (code, stdout, stderr) = run_turn(&url, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["text"], "Hello");
    assert_eq!(v["end"], "done");
    assert_eq!(v["metrics"]["tokens_generated"], 2);
    assert_eq!(v["metrics"]["chunks"], 2);
    assert_eq!(v["metrics"]["prompt_tokens"], 3);
    assert_eq!(v["metrics"]["token_count_source"], "usage_one_per_chunk");
    // The fake server sends no timings: those parts are unknown, not zero.
    assert!(v["metrics"]["server_prompt_ms"].is_null());
    assert!(v["metrics"]["queue_transport_ms"].is_null());
    assert!(v["metrics"]["network_rtt_ms"].as_f64().unwrap() > 0.0);
    // TTFT is the first content chunk, after the role-only delta.
    assert_eq!(v["metrics"]["ttft_ms"], v["chunk_ms"][0]);
    let requests: Vec<String> = f.requests.try_iter().collect();
    let chat = requests
        .iter()
        .find(|r| r.starts_with("POST /v1/chat/completions"))
        .unwrap();
    assert!(chat.contains("\"include_usage\":true"), "{chat}");
    assert!(chat.contains("\"model\":\"fake-model\""), "{chat}");
}

#[test]
fn a_request_on_a_connection_the_server_just_closed_is_sent_again() {
    let mut body = chunk("Hel");
    body += &chunk("lo");
    body += &usage_event(3, 2);
    body += "data: [DONE]\n\n";
    let f = fake(Chat::DropFirstPostThen(body.into_bytes()), 4);
    let url = format!("http://127.0.0.1:{}/v1", f.port);
    let (code, stdout, stderr) = run_turn(&url, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["text"], "Hello");
    assert_eq!(v["end"], "done");
    let posts = f
        .requests
        .try_iter()
        .filter(|r| r.starts_with("POST /v1/chat/completions"))
        .count();
    assert_eq!(posts, 2, "the dropped request and its resend");
}

#[test]
fn connection_refused_says_so() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, _, stderr) = run_turn(&format!("http://127.0.0.1:{port}/v1"), &[]);
    assert_clean_failure(code, &stderr, "could not connect");
}

#[test]
fn a_plain_server_behind_an_https_url_is_named() {
    let f = fake(Chat::Status(200, "{}"), 2);
    let (code, _, stderr) = run_turn(&format!("https://127.0.0.1:{}/v1", f.port), &[]);
    assert_clean_failure(code, &stderr, "http://");
}

#[test]
fn http_500_before_the_stream() {
    let f = fake(Chat::Status(500, r#"{"error":"boom"}"#), 4);
    let (code, _, stderr) = run_turn(&format!("http://127.0.0.1:{}/v1", f.port), &[]);
    assert_clean_failure(code, &stderr, "HTTP 500");
    assert!(stderr.contains("boom"), "{stderr}");
}

#[test]
fn an_error_in_the_middle_of_the_stream_keeps_the_partial_answer() {
    let body =
        chunk("Partial") + "data: {\"error\":{\"code\":500,\"message\":\"out of memory\"}}\n\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let (code, stdout, stderr) = run_turn(&format!("http://127.0.0.1:{}/v1", f.port), &[]);
    assert_clean_failure(code, &stderr, "out of memory");
    assert!(stdout.contains("Partial"), "{stdout}");
}

#[test]
fn a_malformed_event_is_reported() {
    let body = chunk("A") + "data: {not json at all\n\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let (code, stdout, stderr) = run_turn(&format!("http://127.0.0.1:{}/v1", f.port), &[]);
    assert_clean_failure(code, &stderr, "malformed");
    assert!(stdout.contains('A'));
}

#[test]
fn a_stalling_server_hits_the_timeout() {
    let f = fake(Chat::Stall, 4);
    let start = Instant::now();
    let (code, stdout, stderr) = run_turn(
        &format!("http://127.0.0.1:{}/v1", f.port),
        &["--timeout", "1"],
    );
    assert_clean_failure(code, &stderr, "--timeout");
    assert!(stdout.contains("Hel"));
    assert!(
        start.elapsed() < Duration::from_secs(7),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_huge_event_is_refused_without_buffering_it_all() {
    let mut body = chunk("ok").into_bytes();
    body.extend_from_slice(b"data: \"");
    body.extend(std::iter::repeat_n(b'x', 6 << 20));
    let f = fake(Chat::Sse(body), 4);
    let (code, stdout, stderr) = run_turn(&format!("http://127.0.0.1:{}/v1", f.port), &[]);
    assert_clean_failure(code, &stderr, "exceeded");
    assert!(stdout.contains("ok"));
}

#[test]
fn a_close_without_done_is_reported_and_the_text_kept() {
    let body = chunk("Half") + &chunk(" an answer");
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let (code, stdout, stderr) = run_turn(&format!("http://127.0.0.1:{}/v1", f.port), &[]);
    assert_clean_failure(code, &stderr, "before [DONE]");
    assert!(stdout.contains("Half an answer"), "{stdout}");
}

#[test]
fn the_api_key_goes_only_into_the_authorization_header() {
    const KEY: &str = "sk-tokscope-test-7f3a9c";
    let body = chunk("Hi") + &usage_event(1, 1) + "data: [DONE]\n\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let url = format!("http://127.0.0.1:{}/v1", f.port);
    let mut outputs = Vec::new();
    for extra in [
        vec!["--api-key-env", "TOKSCOPE_TEST_KEY", "--json"],
        vec!["--api-key-file", key_file.to_str().unwrap()],
    ] {
        let out = tokscope(&dir)
            .env("TOKSCOPE_TEST_KEY", KEY)
            .env("RUST_LOG", "trace")
            .args(["run", "--url", &url, "-p", "hi", "-n", "4"])
            .args(&extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push(out.stdout);
        outputs.push(out.stderr);
    }
    for o in &outputs {
        assert!(!String::from_utf8_lossy(o).contains(KEY));
    }
    // Every file tokscope wrote (data, config, cache, logs) is free of the key.
    let mut stack = vec![dir.path().to_path_buf()];
    let mut files = 0;
    while let Some(p) = stack.pop() {
        for entry in std::fs::read_dir(&p).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path != key_file {
                files += 1;
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(KEY),
                    "{} holds the key",
                    path.display()
                );
            }
        }
    }
    assert!(files > 0, "tokscope wrote no file at all (no log?)");
    let requests: Vec<String> = f.requests.try_iter().collect();
    let with_header = requests
        .iter()
        .filter(|r| r.contains(&format!("authorization: Bearer {KEY}")))
        .count();
    assert_eq!(with_header, requests.len(), "every request carries the key");
    for r in &requests {
        let body = r.split("\r\n\r\n").nth(1).unwrap_or("");
        assert!(!body.contains(KEY), "the key leaked into a body: {body}");
    }
}

#[test]
fn bad_flags_are_usage_errors() {
    let (code, _, stderr) = run_turn("ftp://example/v1", &[]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run_turn(
        "http://127.0.0.1:9/v1",
        &["--api-key-env", "TOKSCOPE_NO_SUCH_VAR_X"],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("TOKSCOPE_NO_SUCH_VAR_X"), "{stderr}");
}

/// `load` end to end against the fake server (the same driver the real-server tests use):
/// every request counted, tokens from usage, goodput 0 at an impossible SLO and equal to the
/// request rate at a loose one, and failures counted by kind, not in the latencies.
#[test]
fn load_counts_requests_tokens_goodput_and_errors_by_kind() {
    let body = chunk("a") + &chunk("b") + &chunk("c") + &usage_event(5, 3) + "data: [DONE]\n\n";
    let dir = tempfile::tempdir().unwrap();
    for (slo, good) in [("ttft=1us", 0), ("ttft=600s,tpot=600s,e2e=600s", 6)] {
        let f = fake(Chat::Sse(body.clone().into_bytes()), 40);
        let out = tokscope(&dir)
            .args(["load", "--url", &format!("http://127.0.0.1:{}/v1", f.port)])
            .args([
                "--concurrency",
                "2",
                "--requests",
                "6",
                "--warmup",
                "1",
                "-o",
                "json",
            ])
            .args(["--input-len", "8", "--slo", slo])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let level = &v["levels"][0];
        assert_eq!(level["completed"], 6, "{level}");
        assert_eq!(level["completion_tokens"], 18);
        assert_eq!(level["prompt_tokens"], 30);
        assert_eq!(level["good_requests"], good);
        if good == 0 {
            assert_eq!(level["goodput_req_per_s"], 0.0);
        } else {
            assert_eq!(level["goodput_req_per_s"], level["request_per_s"]);
        }
        assert!(v["prompts"].as_str().unwrap().contains("words"));
    }
    let f = fake(Chat::Status(500, r#"{"error":"busy"}"#), 40);
    let out = tokscope(&dir)
        .args(["load", "--url", &format!("http://127.0.0.1:{}/v1", f.port)])
        .args([
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--warmup",
            "0",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let level = &v["levels"][0];
    assert_eq!(level["completed"], 0);
    assert_eq!(level["failed"], 4);
    assert_eq!(level["errors_by_kind"]["http_5xx"], 4);
    assert!(level["ttft"].is_null());
}
