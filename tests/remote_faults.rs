//! `tokscope run --url` against faults, each with a clear message, a non-zero exit, no panic,
//! and the partial answer kept. A tiny fake HTTP server (a std TcpListener on 127.0.0.1, one
//! thread, bounded to a few connections and a deadline) plays only the faults a real server
//! cannot be made to produce on demand: a 500 before and in the middle of a stream, a
//! malformed event, a stall, a huge event, a close without [DONE], and (issue 31) a hostile
//! server: absurd usage numbers, endless events, error bodies and replies, a stream that
//! ignores max_tokens, a stalled `/tokenize`, invalid UTF-8, pings, a redirect to another
//! origin. Every reply that never ends is capped and every server stops by itself within 30 s
//! (its connections within 20 s more). Connection refused and a
//! plain server behind an https URL need no real server's help; 401 and 404 are also checked
//! against the real llama-server in tests/remote_server.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use assert_cmd::Command;

/// What the fake server does with a chat-completions request.
#[derive(Clone)]
pub(crate) enum Chat {
    /// Writes these raw bytes after a 200 SSE header, then closes.
    Sse(Vec<u8>),
    /// Answers with this status and body.
    Status(u16, &'static str),
    /// Sends the SSE header and one chunk, then says nothing for this long.
    Stall(Duration),
    /// Closes the kept-alive connection when the first chat request arrives on it (after this
    /// pause), without a word (as a server does with an idle connection it is closing), then
    /// streams these bytes on every later connection.
    DropFirstPostThen(Duration, Vec<u8>),
    /// A 200 SSE header, `head`, then `repeat` again and again until the client hangs up.
    Endless { head: Vec<u8>, repeat: Vec<u8> },
    /// A 200 SSE header, then each piece after its pause.
    Paced(Vec<(Duration, Vec<u8>)>),
    /// This status with a body that never ends: `head`, then `repeat` again and again.
    EndlessStatus {
        code: u16,
        head: Vec<u8>,
        repeat: Vec<u8>,
    },
    /// 307 to the same path on 127.0.0.1 at this other port (another origin).
    RedirectTo(u16),
    /// These raw header lines (each ending in CRLF) in the 200 SSE header, then these bytes.
    SseWithHeaders(&'static str, Vec<u8>),
    /// A 400 naming the field when the request's body has it (as OpenAI's API refuses a field
    /// it does not know), else these bytes as `Sse`.
    RefuseField(&'static str, Vec<u8>),
    /// As `RefuseField`, the refusal sent only after this pause.
    SlowRefuseField(&'static str, Duration, Vec<u8>),
}

/// What the fake server does with `GET /v1/models` or `POST /tokenize`.
#[derive(Clone)]
pub(crate) enum Side {
    /// `GET /v1/models`: one model; `POST /tokenize`: as a chat request (not JSON).
    Usual,
    /// A 200 JSON reply that never ends: `head`, then `repeat` again and again.
    Endless { head: Vec<u8>, repeat: Vec<u8> },
    /// A 200 header announcing 4096 bytes, 10 of them, then nothing for this long.
    StallBody(Duration),
    /// 404 (a server without `/tokenize`).
    NotFound,
    /// `POST /tokenize` and `POST /detokenize` as vLLM answers them (one token per byte of
    /// text): `{"model", "prompt"}` → `{"tokens", "count", ...}`, `{"tokens"}` →
    /// `{"prompt"}`; a body without `prompt` (llama-server's form) is refused with a 400.
    Vllm,
}

/// What the fake server does, route by route.
#[derive(Clone)]
pub(crate) struct Plan {
    chat: Chat,
    models: Side,
    tokenize: Side,
}

impl From<Chat> for Plan {
    fn from(chat: Chat) -> Self {
        Plan {
            chat,
            models: Side::Usual,
            tokenize: Side::Usual,
        }
    }
}

pub(crate) struct Fake {
    pub(crate) port: u16,
    pub(crate) requests: mpsc::Receiver<String>,
    /// Bytes the endless replies got written before the client hung up.
    endless_written: Arc<AtomicUsize>,
    /// When each piece of a `Chat::Paced` reply was written (the server's own clock), in
    /// order, over every connection.
    pub(crate) paced_at: Arc<std::sync::Mutex<Vec<Instant>>>,
}

/// The most an endless reply writes: 256 MiB, far past every limit of the client, so a client
/// that kept reading all of it is told apart from one that hung up near its limit.
const ENDLESS_CAP_BYTES: usize = 256 << 20;

/// A client that stopped reading near a limit of at most 16 MiB has had, with the socket
/// buffers, far less than this written to it.
const HUNG_UP_BY_BYTES: usize = 64 << 20;

pub(crate) fn chunk(content: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}}}}],\"model\":\"fake\"}}\n\n",
        serde_json::to_string(content).unwrap()
    )
}

pub(crate) fn usage_event(prompt: u64, completion: u64) -> String {
    format!("data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n", prompt.saturating_add(completion))
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
    let mut body = vec![0; content_length.min(1 << 20)];
    let _ = reader.read_exact(&mut body);
    head + &String::from_utf8_lossy(&body)
}

/// Writes `head`, then `repeat` until the peer hangs up, `ENDLESS_CAP_BYTES` or 20 s.
fn write_endless(stream: &mut TcpStream, head: &[u8], repeat: &[u8], written: &AtomicUsize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    if stream.write_all(head).is_err() {
        return;
    }
    let mut total = head.len();
    let block = repeat.repeat((64 << 10) / repeat.len().max(1) + 1);
    while total < ENDLESS_CAP_BYTES && Instant::now() < deadline {
        if stream.write_all(&block).is_err() {
            break;
        }
        total += block.len();
    }
    written.fetch_add(total, Ordering::SeqCst);
}

fn side(stream: &mut TcpStream, how: &Side, written: &AtomicUsize) {
    match how {
        Side::Usual => {}
        Side::Endless { head, repeat } => {
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
            );
            write_endless(stream, head, repeat, written);
        }
        Side::NotFound => {
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
        Side::Vllm => {}
        Side::StallBody(pause) => {
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n{\"tokens\":",
            );
            let _ = stream.flush();
            std::thread::sleep(*pause);
        }
    }
}

/// Serves up to `max_connections` connections for at most 30 s, on 127.0.0.1 only.
pub(crate) fn fake(plan: impl Into<Plan>, max_connections: usize) -> Fake {
    let plan: Plan = plan.into();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let endless_written = Arc::new(AtomicUsize::new(0));
    let written = Arc::clone(&endless_written);
    let paced_at = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stamps = Arc::clone(&paced_at);
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
            stream
                .set_write_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let plan = plan.clone();
            let tx = tx.clone();
            let dropped = dropped.clone();
            let written = written.clone();
            let stamps = stamps.clone();
            std::thread::spawn(move || loop {
                let request = read_request(&mut stream);
                if request.is_empty() {
                    return;
                }
                let first = request.lines().next().unwrap_or("").to_string();
                let _ = tx.send(request.clone());
                if first.starts_with("GET /v1/models") {
                    if let Side::Usual = plan.models {
                        let body =
                            r#"{"object":"list","data":[{"id":"fake-model","object":"model"}]}"#;
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        continue;
                    }
                    side(&mut stream, &plan.models, &written);
                    return;
                }
                if first.starts_with("GET /api/tags") {
                    // ollama's native model list.
                    let body = r#"{"models":[{"name":"fake-model","model":"fake-model"}]}"#;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    continue;
                }
                if first.starts_with("GET /props") {
                    // Not a llama-server: no `/props` (asked once, before the first turn).
                    let _ =
                        stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
                    continue;
                }
                if matches!(plan.tokenize, Side::Vllm)
                    && (first.starts_with("POST /tokenize")
                        || first.starts_with("POST /detokenize"))
                {
                    let (status, body) = vllm_tokenizer(&first, &request);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    continue;
                }
                if first.starts_with("POST /tokenize") && !matches!(plan.tokenize, Side::Usual) {
                    side(&mut stream, &plan.tokenize, &written);
                    return;
                }
                let sse_head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let refusal_pause = match &plan.chat {
                    Chat::SlowRefuseField(_, pause, _) => *pause,
                    _ => Duration::ZERO,
                };
                match plan.chat {
                    Chat::DropFirstPostThen(pause, _) if !dropped.swap(true, Ordering::SeqCst) => {
                        std::thread::sleep(pause);
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                    }
                    Chat::Sse(bytes) | Chat::DropFirstPostThen(_, bytes) => {
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
                    Chat::Stall(pause) => {
                        let _ = stream.write_all(sse_head.as_bytes());
                        let _ = stream.write_all(chunk("Hel").as_bytes());
                        let _ = stream.flush();
                        std::thread::sleep(pause);
                    }
                    Chat::Endless { head, repeat } => {
                        let _ = stream.write_all(sse_head.as_bytes());
                        write_endless(&mut stream, &head, &repeat, &written);
                    }
                    Chat::Paced(pieces) => {
                        let _ = stream.write_all(sse_head.as_bytes());
                        for (pause, bytes) in pieces {
                            std::thread::sleep(pause);
                            let _ = stream.write_all(&bytes);
                            let _ = stream.flush();
                            stamps.lock().unwrap().push(Instant::now());
                        }
                    }
                    Chat::EndlessStatus { code, head, repeat } => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {code} Oops\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n"
                        );
                        write_endless(&mut stream, &head, &repeat, &written);
                    }
                    Chat::SseWithHeaders(headers, bytes) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{headers}connection: close\r\n\r\n"
                        );
                        let _ = stream.write_all(&bytes);
                    }
                    Chat::RefuseField(field, bytes) | Chat::SlowRefuseField(field, _, bytes) => {
                        if request.contains(&format!("\"{field}\"")) {
                            std::thread::sleep(refusal_pause);
                            let body = format!("{{\"error\":{{\"message\":\"Unrecognized request argument supplied: {field}\",\"type\":\"invalid_request_error\"}}}}");
                            let _ = write!(
                                stream,
                                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len()
                            );
                        } else {
                            let _ = stream.write_all(sse_head.as_bytes());
                            let _ = stream.write_all(&bytes);
                        }
                    }
                    Chat::RedirectTo(other) => {
                        let path = first.split(' ').nth(1).unwrap_or("/");
                        let _ = write!(
                            stream,
                            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{other}{path}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        );
                    }
                }
                return;
            });
        }
    });
    Fake {
        port,
        requests: rx,
        endless_written,
        paced_at,
    }
}

/// vLLM's `/tokenize` and `/detokenize` (its `serving_tokenization.py`), one token per byte.
fn vllm_tokenizer(first: &str, request: &str) -> (&'static str, String) {
    let body: serde_json::Value = request
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or_default();
    if first.starts_with("POST /tokenize") {
        return match body["prompt"].as_str() {
            Some(text) => {
                let tokens: Vec<u8> = text.bytes().collect();
                let answer = serde_json::json!({
                    "count": tokens.len(), "max_model_len": 32768, "tokens": tokens, "token_strs": null
                });
                ("200 OK", answer.to_string())
            }
            None => (
                "400 Bad Request",
                r#"{"object":"error","message":"[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}]","type":"BadRequestError","param":null,"code":400}"#.to_string(),
            ),
        };
    }
    let bytes: Vec<u8> = body["tokens"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| u8::try_from(t.as_u64()?).ok())
                .collect()
        })
        .unwrap_or_default();
    let answer = serde_json::json!({"prompt": String::from_utf8_lossy(&bytes)});
    ("200 OK", answer.to_string())
}

pub(crate) fn tokscope(dir: &tempfile::TempDir) -> Command {
    let mut cmd = common::tokscope_cmd(dir.path());
    cmd.env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
        .timeout(Duration::from_secs(60));
    cmd
}

/// Runs one turn against `url`; returns (exit code, stdout, stderr).
pub(crate) fn run_turn(url: &str, extra: &[&str]) -> (i32, String, String) {
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

/// One turn of `run --url` against a fake server that plays `plan` (for at most
/// `max_connections` connections): the server, for its requests, and (exit code, stdout,
/// stderr).
pub(crate) fn turn_against(
    plan: impl Into<Plan>,
    max_connections: usize,
    extra: &[&str],
) -> (Fake, (i32, String, String)) {
    let f = fake(plan, max_connections);
    let out = run_turn(&url(&f), extra);
    (f, out)
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
    let url = url(&f);
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

/// The resend keeps the first attempt's clock (issue 58, item 7): the server held the first
/// request 400 ms before closing its connection, and the user waited through that.
#[test]
fn a_request_on_a_connection_the_server_just_closed_is_sent_again() {
    let mut body = chunk("Hel");
    body += &chunk("lo");
    body += &usage_event(3, 2);
    body += "data: [DONE]\n\n";
    let pause = Duration::from_millis(400);
    let f = fake(Chat::DropFirstPostThen(pause, body.into_bytes()), 4);
    let url = url(&f);
    let (code, stdout, stderr) = run_turn(&url, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["text"], "Hello");
    assert_eq!(v["end"], "done");
    let ttft = v["metrics"]["ttft_ms"].as_f64().unwrap();
    assert!(
        ttft >= 400.0,
        "TTFT counts from the first attempt, before the dropped connection: {ttft} ms"
    );
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
    let (_, (code, _, stderr)) = turn_against(Chat::Status(500, r#"{"error":"boom"}"#), 4, &[]);
    assert_clean_failure(code, &stderr, "HTTP 500");
    assert!(stderr.contains("boom"), "{stderr}");
}

#[test]
fn an_error_in_the_middle_of_the_stream_keeps_the_partial_answer() {
    let body =
        chunk("Partial") + "data: {\"error\":{\"code\":500,\"message\":\"out of memory\"}}\n\n";
    let (_, (code, stdout, stderr)) = turn_against(Chat::Sse(body.into_bytes()), 4, &[]);
    assert_clean_failure(code, &stderr, "out of memory");
    assert!(stdout.contains("Partial"), "{stdout}");
}

#[test]
fn a_malformed_event_is_reported() {
    let body = chunk("A") + "data: {not json at all\n\n";
    let (_, (code, stdout, stderr)) = turn_against(Chat::Sse(body.into_bytes()), 4, &[]);
    assert_clean_failure(code, &stderr, "malformed");
    assert!(stdout.contains('A'));
}

/// A field of the wrong type is named by its path (src/remote/wire.rs), the text so far kept.
#[test]
fn a_wrong_typed_field_is_named() {
    let usage =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":\"x\"}}\n\n";
    let (_, (code, stdout, stderr)) =
        turn_against(Chat::Sse((chunk("A") + usage).into_bytes()), 4, &[]);
    assert_clean_failure(
        code,
        &stderr,
        "usage.completion_tokens: invalid type: string",
    );
    assert!(stdout.contains('A'), "{stdout}");
}

#[test]
fn a_stalling_server_hits_the_timeout() {
    let f = fake(Chat::Stall(Duration::from_secs(8)), 4);
    let start = Instant::now();
    let (code, stdout, stderr) = run_turn(&url(&f), &["--timeout", "1"]);
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
    let (_, (code, stdout, stderr)) = turn_against(Chat::Sse(body), 4, &[]);
    assert_clean_failure(code, &stderr, "exceeded");
    assert!(stdout.contains("ok"));
}

#[test]
fn a_close_without_done_is_reported_and_the_text_kept() {
    let body = chunk("Half") + &chunk(" an answer");
    let (_, (code, stdout, stderr)) = turn_against(Chat::Sse(body.into_bytes()), 4, &[]);
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
    let url = url(&f);
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
    for interval in ["10", "99999999"] {
        let dir = tempfile::tempdir().unwrap();
        let out = tokscope(&dir)
            .args([
                "load",
                "--url",
                "http://127.0.0.1:9/v1",
                "--metrics-interval",
                interval,
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--metrics-interval"), "{stderr}");
    }
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
            .args(["load", "--url", &url(&f)])
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
        // This server answers GET /metrics with an event stream: said once, left out, and
        // the level's own figures kept.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.matches("server metrics left out").count(),
            1,
            "{stderr}"
        );
        assert!(level["server_metrics"].is_null(), "{level}");
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
        .args(["load", "--url", &url(&f)])
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

// ---- A hostile or broken server (issue 31, items 2 to 5) ----

pub(crate) fn url(f: &Fake) -> String {
    format!("http://127.0.0.1:{}/v1", f.port)
}

/// Runs `tokscope ARGS` with a deadline; returns (exit code, stdout, stderr, how long it took).
pub(crate) fn timed(args: &[&str], limit: Duration) -> (i32, String, String, Duration) {
    let (code, stdout, stderr, took, _) = timed_rss(args, limit);
    (code, stdout, stderr, took)
}

/// As `timed`, with the peak resident set in MiB where `/usr/bin/time` can measure it.
fn timed_rss(args: &[&str], limit: Duration) -> (i32, String, String, Duration, Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let rss_file = dir.path().join("rss");
    let time = std::path::Path::new("/usr/bin/time");
    let mut cmd = if time.exists() {
        let mut cmd = Command::new(time);
        cmd.arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(&rss_file)
            .arg(assert_cmd::cargo::cargo_bin("tokscope"));
        cmd
    } else {
        Command::cargo_bin("tokscope").unwrap()
    };
    cmd.env("TOKSCOPE_DATA_DIR", dir.path().join("data"))
        .env("TOKSCOPE_CONFIG_DIR", dir.path().join("config"))
        .env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"));
    let start = Instant::now();
    let out = cmd.args(args).timeout(limit).output().unwrap();
    let rss_mib = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|t| t.lines().last()?.trim().parse::<u64>().ok())
        .map(|kib| kib / 1024);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed(),
        rss_mib,
    )
}

/// The peak resident set a turn may reach whatever the server sends: the process itself plus
/// one 16 MiB JSON reply or one 4 MiB event and the socket buffers.
const RSS_BOUND_MIB: u64 = 128;

fn assert_rss_bounded(rss_mib: Option<u64>, took: Duration) {
    eprintln!("took {took:?}");
    if let Some(rss) = rss_mib {
        eprintln!("peak RSS {rss} MiB");
        assert!(rss < RSS_BOUND_MIB, "peak RSS {rss} MiB");
    }
}

fn assert_no_panic(stderr: &str) {
    assert!(
        !stderr.contains("panicked")
            && !stderr.contains("crashed")
            && !stderr.contains("memory allocation"),
        "{stderr}"
    );
}

/// Item 2: a count no stream could hold neither sizes anything nor shows as a figure; the
/// summary says it was ignored.
#[test]
fn absurd_server_counts_are_ignored_and_said_so() {
    // Output tokens of 3·10^15 (would be a 48 PB allocation) for 3 chunks, human summary.
    let body = chunk("a") + &chunk("b") + &chunk("c") + &usage_event(4, 3_000_000_000_000_000);
    let body = body + "data: [DONE]\n\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let (code, stdout, stderr, _) = timed(
        &["run", "--url", &url(&f), "-p", "hi", "-n", "8"],
        Duration::from_secs(30),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_no_panic(&stderr);
    assert!(stdout.contains("abc"), "{stdout}");
    assert!(
        stderr.contains("output tokens for 3 chunks: ignored"),
        "{stderr}"
    );
    let decode = stderr.lines().find(|l| l.starts_with("decode")).unwrap();
    assert!(decode.contains("3 tokens in 3 chunks"), "{decode}");
    // Near 2^64 (a "capacity overflow" panic before), a prompt count no context holds and a
    // negative server time, as JSON: each dropped with a note, none shown as a figure.
    let body = chunk("x")
        + &chunk("y")
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":18446744073709550000,\"completion_tokens\":18446744073709551000}}\n\n"
        + "data: {\"choices\":[],\"timings\":{\"prompt_n\":3,\"prompt_ms\":-7.25,\"predicted_n\":2,\"predicted_ms\":1.5}}\n\n"
        + "data: [DONE]\n\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let (code, stdout, stderr, _) = timed(
        &["run", "--url", &url(&f), "-p", "hi", "-n", "8", "--json"],
        Duration::from_secs(30),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_no_panic(&stderr);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["metrics"]["tokens_generated"], 2, "{v}");
    assert!(v["metrics"]["prompt_tokens"].is_null(), "{v}");
    assert!(v["metrics"]["server_prompt_ms"].is_null(), "{v}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("for 2 chunks: ignored"), "{notes}");
    assert!(notes.contains("prompt time of -7.2"), "{notes}");
}

/// Item 2, `load`: a request with an absurd usage is an error of its own kind, not an abort.
#[test]
fn load_counts_absurd_usage_as_an_error_kind() {
    let body = chunk("a") + &chunk("b") + &usage_event(5, 1 << 62) + "data: [DONE]\n\n";
    let f = fake(Chat::Sse(body.into_bytes()), 20);
    let (code, stdout, stderr, _) = timed(
        &[
            "load",
            "--url",
            &url(&f),
            "--requests",
            "3",
            "--warmup",
            "0",
            "--input-len",
            "8",
            "-o",
            "json",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_no_panic(&stderr);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let level = &v["levels"][0];
    assert_eq!(level["errors_by_kind"]["implausible_usage"], 3, "{level}");
    assert!(level["first_error_by_kind"]["implausible_usage"]
        .as_str()
        .unwrap()
        .contains("for 2 chunks: ignored"));
}

/// Item 3: one event of endless short `data:` lines (each far under the line limit) is cut at
/// the event limit, quickly, without reading the rest.
#[test]
fn an_event_of_endless_data_lines_is_cut_at_the_event_limit() {
    let f = fake(
        Chat::Endless {
            head: (chunk("ok") + "data: {\"choices\":[\n").into_bytes(),
            repeat: b"data: {\"pad\":\"0123456789abcdef0123456789abcdef\"},\n".to_vec(),
        },
        4,
    );
    let (code, stdout, stderr, took, rss) = timed_rss(
        &["run", "--url", &url(&f), "-p", "hi", "-n", "8"],
        Duration::from_secs(30),
    );
    assert_clean_failure(code, &stderr, "exceeded 4194304 bytes");
    assert!(stdout.contains("ok"), "{stdout}");
    assert_cut_early(&f, took, rss);
}

/// An endless reply was cut early: within 10 s, memory bounded, the server's writing stopped
/// well before it would have given up on its own.
fn assert_cut_early(f: &Fake, took: Duration, rss: Option<u64>) {
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_rss_bounded(rss, took);
    std::thread::sleep(Duration::from_millis(300));
    let written = f.endless_written.load(Ordering::SeqCst);
    assert!(
        written < HUNG_UP_BY_BYTES,
        "the client read {written} bytes"
    );
}

/// Item 3: an HTTP error body that never ends is read only as far as its excerpt needs.
#[test]
fn an_endless_error_body_is_read_only_in_part() {
    let f = fake(
        Chat::EndlessStatus {
            code: 503,
            head: b"the backend is overloaded; ".to_vec(),
            repeat: b"padding padding padding ".to_vec(),
        },
        4,
    );
    let (code, _, stderr, took, rss) = timed_rss(
        &["run", "--url", &url(&f), "-p", "hi", "--timeout", "20"],
        Duration::from_secs(40),
    );
    assert_clean_failure(code, &stderr, "HTTP 503");
    assert!(stderr.contains("overloaded"), "{stderr}");
    assert_cut_early(&f, took, rss);
}

/// Item 3: a `/v1/models` reply that never ends is refused at the JSON limit.
#[test]
fn an_endless_models_reply_is_refused() {
    let f = fake(
        Plan {
            chat: Chat::Sse(Vec::new()),
            models: Side::Endless {
                head: b"{\"object\":\"list\",\"data\":[".to_vec(),
                repeat: b"{\"id\":\"m\",\"object\":\"model\"},".to_vec(),
            },
            tokenize: Side::Usual,
        },
        4,
    );
    let (code, _, stderr, took, rss) = timed_rss(
        &["run", "--url", &url(&f), "-p", "hi", "--timeout", "20"],
        Duration::from_secs(40),
    );
    assert_clean_failure(code, &stderr, "exceeded 16777216 bytes");
    assert!(stderr.contains("/v1/models"), "{stderr}");
    assert_cut_early(&f, took, rss);
}

/// Item 4: a server that ignores max_tokens and streams for ever is cut at the client's own
/// limit, with the first -n chunks kept.
#[test]
fn a_server_that_ignores_max_tokens_is_cut_at_the_client_limit() {
    let f = fake(
        Chat::Endless {
            head: Vec::new(),
            repeat: chunk("tok ").into_bytes(),
        },
        4,
    );
    let (code, stdout, stderr, took, rss) = timed_rss(
        &["run", "--url", &url(&f), "-p", "hi", "-n", "12"],
        Duration::from_secs(30),
    );
    assert_clean_failure(code, &stderr, "ignored max_tokens = 12");
    assert_eq!(stdout.matches("tok ").count(), 12, "{stdout}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_rss_bounded(rss, took);
}

/// Item 4: `load --url` gives up on a `/tokenize` body that stalls after --timeout (and cuts
/// its prompts by words instead).
#[test]
fn load_honours_the_timeout_on_a_stalled_tokenize_body() {
    let body = chunk("a") + &usage_event(5, 1) + "data: [DONE]\n\n";
    let f = fake(
        Plan {
            chat: Chat::Sse(body.into_bytes()),
            models: Side::Usual,
            tokenize: Side::StallBody(Duration::from_secs(20)),
        },
        20,
    );
    let (code, stdout, stderr, took) = timed(
        &[
            "load",
            "--url",
            &url(&f),
            "--requests",
            "2",
            "--warmup",
            "0",
            "--input-len",
            "8",
            "--timeout",
            "1",
            "-o",
            "json",
        ],
        Duration::from_secs(40),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_no_panic(&stderr);
    assert!(took < Duration::from_secs(10), "{took:?}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["levels"][0]["completed"], 2, "{v}");
    assert!(v["prompts"].as_str().unwrap().contains("words"), "{v}");
}

/// Starts `tokscope ARGS`, sends it SIGINT after `after`, and waits at most `limit` for it.
fn interrupted(args: &[&str], after: Duration, limit: Duration) -> (i32, String, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tokscope"))
        .env("TOKSCOPE_DATA_DIR", dir.path().join("data"))
        .env("TOKSCOPE_CONFIG_DIR", dir.path().join("config"))
        .env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let sent = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    while child.try_wait().unwrap().is_none() {
        if sent.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = sent.elapsed();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    )
}

/// Item 4: Ctrl-C ends `load` while it waits on a stalled `/tokenize`, with a message.
#[test]
fn ctrl_c_ends_load_while_it_prepares() {
    let f = fake(
        Plan {
            chat: Chat::Sse(Vec::new()),
            models: Side::Usual,
            tokenize: Side::StallBody(Duration::from_secs(20)),
        },
        8,
    );
    let (code, _, stderr, took) = interrupted(
        &[
            "load",
            "--url",
            &url(&f),
            "--timeout",
            "30",
            "--input-len",
            "8",
        ],
        Duration::from_millis(1500),
        Duration::from_secs(8),
    );
    assert!(took < Duration::from_secs(5), "{took:?}: {stderr}");
    assert_clean_failure(code, &stderr, "stopped by Ctrl-C");
}

/// Item 4: Ctrl-C during a warm-up request that stalls ends `load` with its (empty) report.
#[test]
fn ctrl_c_ends_load_during_a_stalled_warmup_with_the_report() {
    let f = fake(
        Plan {
            chat: Chat::Stall(Duration::from_secs(20)),
            models: Side::Usual,
            tokenize: Side::NotFound,
        },
        8,
    );
    let (code, stdout, stderr, took) = interrupted(
        &[
            "load",
            "--url",
            &url(&f),
            "--timeout",
            "30",
            "--input-len",
            "8",
            "--warmup",
            "1",
            "-o",
            "json",
        ],
        Duration::from_millis(1500),
        Duration::from_secs(8),
    );
    assert!(took < Duration::from_secs(5), "{took:?}: {stderr}");
    assert_eq!(code, 0, "{stderr}");
    assert_no_panic(&stderr);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["levels"][0]["completed"], 0, "{v}");
}

/// Item 5: a byte that is not UTF-8 becomes U+FFFD and the rest of a fast stream still comes,
/// in linear time.
#[test]
fn invalid_utf8_becomes_a_replacement_and_a_fast_stream_goes_on() {
    let mut body =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"bad\xC3(\"}}]}\n\n".to_vec();
    let n = 40_000;
    for i in 0..n {
        body.extend_from_slice(chunk(&format!("<{i}>")).as_bytes());
    }
    body.extend_from_slice(b"data: [DONE]\n\n");
    let f = fake(Chat::Sse(body), 4);
    let (code, stdout, stderr, took) = timed(
        &[
            "run",
            "--url",
            &url(&f),
            "-p",
            "hi",
            "-n",
            "50000",
            "--json",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("bad\u{FFFD}(<0>"),
        "{}",
        text.chars().take(40).collect::<String>()
    );
    assert!(
        text.ends_with(&format!("<{}>", n - 1)),
        "the stream stopped early"
    );
    assert_eq!(v["metrics"]["chunks"], n + 1);
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// Item 5: SSE comments (`: ping`) are reads: a server that pings while it thinks does not
/// stall, however long it thinks.
#[test]
fn pings_count_as_reads_for_the_stall_timer() {
    let mut pieces: Vec<(Duration, Vec<u8>)> = (0..7)
        .map(|_| (Duration::from_millis(400), b": ping\n\n".to_vec()))
        .collect();
    let end = chunk("late answer") + &usage_event(2, 1) + "data: [DONE]\n\n";
    pieces.push((Duration::from_millis(400), end.into_bytes()));
    let f = fake(Chat::Paced(pieces), 4);
    let (code, stdout, stderr, _) = timed(
        &["run", "--url", &url(&f), "-p", "hi", "--timeout", "1"],
        Duration::from_secs(30),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("late answer"), "{stdout}");
}

/// Item 5: a redirect to another origin is not followed: the conversation is not posted there.
#[test]
fn a_redirect_to_another_origin_is_not_followed() {
    let body = chunk("elsewhere") + &usage_event(1, 1) + "data: [DONE]\n\n";
    let other = fake(Chat::Sse(body.into_bytes()), 4);
    let f = fake(Chat::RedirectTo(other.port), 4);
    let (code, stdout, stderr, _) = timed(
        &[
            "run",
            "--url",
            &url(&f),
            "-m",
            "m",
            "-p",
            "a secret conversation",
        ],
        Duration::from_secs(30),
    );
    assert_clean_failure(code, &stderr, "redirect");
    assert!(stderr.contains("not followed"), "{stderr}");
    assert!(!stdout.contains("elsewhere"), "{stdout}");
    std::thread::sleep(Duration::from_millis(200));
    let posted: Vec<String> = other.requests.try_iter().collect();
    assert!(posted.is_empty(), "the other origin got: {posted:?}");
}

/// Item 5: `--api-key-file` is a regular file of bounded size: a device, a FIFO, a directory
/// and a huge file are refused at once with what is wrong.
#[test]
fn an_api_key_file_must_be_a_small_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("key.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let big = dir.path().join("big.key");
    std::fs::write(&big, "k".repeat(300 << 10)).unwrap();
    for (path, needle) in [
        (fifo.to_str().unwrap(), "FIFO"),
        (big.to_str().unwrap(), "more than the 16384 bytes"),
        (dir.path().to_str().unwrap(), "directory"),
        ("/dev/zero", "character device"),
    ] {
        let (code, _, stderr, took) = timed(
            &[
                "run",
                "--url",
                "http://127.0.0.1:9/v1",
                "-p",
                "hi",
                "--api-key-file",
                path,
            ],
            Duration::from_secs(10),
        );
        assert_eq!(code, 2, "{path}: {stderr}");
        assert_no_panic(&stderr);
        assert!(stderr.contains(needle), "{path}: {stderr}");
        assert!(
            stderr.contains("regular file") || stderr.contains("right file"),
            "{stderr}"
        );
        assert!(took < Duration::from_secs(5), "{path}: {took:?}");
    }
}

/// Issue 35, item 3: vLLM's per-request `metrics` object on the final usage chunk (fields and
/// definitions as `build_per_request_timing_metrics` in vLLM's serving code) is read and shown
/// in the TTFT breakdown with its source; the request asks for it with `include_metrics`.
#[test]
fn vllm_per_request_metrics_are_read_into_the_breakdown() {
    let body = String::from("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n")
        + &chunk("Hel")
        + &chunk("lo")
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5},\"metrics\":{\"time_to_first_token_ms\":1.5,\"generation_time_ms\":2.25,\"queue_time_ms\":0.5,\"mean_itl_ms\":2.25,\"tokens_per_second\":500.0}}\n\n"
        + "data: [DONE]\n\n";
    let (f, (code, stdout, stderr)) =
        turn_against(Chat::Sse(body.clone().into_bytes()), 8, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = &v["metrics"];
    assert_eq!(m["server_timing_source"], "vllm", "{m}");
    assert_eq!(m["server_queue_ms"], 0.5, "{m}");
    assert_eq!(m["server_first_token_ms"], 1.5, "{m}");
    assert_eq!(m["server_decode_ms"], 2.25, "{m}");
    assert_eq!(m["server_tpot_ms"], 2.25, "{m}");
    assert!(
        m["server_prompt_ms"].is_null(),
        "vLLM's TTFT is not a prompt time: {m}"
    );
    // The rest is TTFT − RTT − queue − the server's TTFT, to the microsecond.
    let parts = [
        "ttft_ms",
        "network_rtt_ms",
        "server_queue_ms",
        "server_first_token_ms",
    ]
    .map(|k| m[k].as_f64().unwrap_or_else(|| panic!("{k}: {m}")));
    let rest = m["queue_transport_ms"].as_f64().unwrap();
    assert!(
        (rest - (parts[0] - parts[1] - parts[2] - parts[3])).abs() < 1e-6,
        "{m}"
    );
    let chat = f
        .requests
        .try_iter()
        .find(|r| r.starts_with("POST"))
        .expect("a chat request");
    assert!(chat.contains("\"include_metrics\":true"), "{chat}");

    let (_, (code, _, stderr)) = turn_against(Chat::Sse(body.into_bytes()), 8, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("server queue 0.5 ms, server TTFT 1.5 ms"),
        "{stderr}"
    );
    assert!(
        stderr.contains("server   vLLM per-request metrics"),
        "{stderr}"
    );
}

/// Item 3: TGI's timing headers, where a response has them, are the server's queue and
/// per-token times; a server that sends no times at all says so, with "—".
#[test]
fn tgi_timing_headers_are_read_and_no_times_are_said_as_such() {
    let body = chunk("a") + &chunk("b") + &usage_event(3, 2) + "data: [DONE]\n\n";
    let f = fake(
        Chat::SseWithHeaders(
            "x-queue-time: 3\r\nx-inference-time: 9\r\nx-time-per-token: 2\r\n",
            body.clone().into_bytes(),
        ),
        8,
    );
    let (code, stdout, stderr) = run_turn(&url(&f), &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = &v["metrics"];
    assert_eq!(m["server_timing_source"], "tgi", "{m}");
    assert_eq!(m["server_queue_ms"], 3.0, "{m}");
    assert_eq!(m["server_tpot_ms"], 2.0, "{m}");
    let (_, (code, _, stderr)) = turn_against(Chat::Sse(body.into_bytes()), 8, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("server   no per-request times from the server (—)"),
        "{stderr}"
    );
}

/// Item 3: a server that refuses `include_metrics` (OpenAI's API refuses fields it does not
/// know) is asked again without it: the turn goes through, and the later request lacks it.
#[test]
fn a_server_that_refuses_include_metrics_is_asked_again_without_it() {
    let body = chunk("ok") + &usage_event(3, 1) + "data: [DONE]\n\n";
    let (f, (code, stdout, stderr)) = turn_against(
        Chat::RefuseField("include_metrics", body.into_bytes()),
        8,
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ok"), "{stdout}");
    let posts: Vec<String> = f
        .requests
        .try_iter()
        .filter(|r| r.starts_with("POST"))
        .collect();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert!(posts[0].contains("include_metrics") && !posts[1].contains("include_metrics"));
}

/// Item 3: a vLLM time that cannot be this turn's is dropped with a note, never shown.
#[test]
fn an_implausible_vllm_time_is_dropped_with_a_note() {
    let body = chunk("a")
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4},\"metrics\":{\"time_to_first_token_ms\":1.0,\"queue_time_ms\":-4.0,\"generation_time_ms\":1e300}}\n\n"
        + "data: [DONE]\n\n";
    let (_, (code, stdout, stderr)) = turn_against(Chat::Sse(body.into_bytes()), 8, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = &v["metrics"];
    assert!(
        m["server_queue_ms"].is_null() && m["server_decode_ms"].is_null(),
        "{m}"
    );
    assert_eq!(m["server_first_token_ms"], 1.0, "{m}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("queue time of -4.0 ms"), "{notes}");
    assert!(notes.contains("decode time of 1.00e300 ms"), "{notes}");
}

// ---- `load` against vLLM's `/tokenize`, its warm-up and its own cost (issue 35) ----

/// What one `load` run against a fake vLLM tokenizer sent and said.
struct VllmRun {
    report: serde_json::Value,
    stderr: String,
    /// The bodies of the `/tokenize` requests, in order.
    tokenize: Vec<serde_json::Value>,
    /// The chat requests' (max_tokens, the user message's text), in order.
    chats: Vec<(u64, String)>,
}

/// `load --input-len 8 --warmup 2 --requests 3 --output-len 32` (warm-up requests ask for 16
/// tokens, the level's for 32) against a server answering `/tokenize` only in vLLM's form.
fn load_against_vllms_tokenizer() -> VllmRun {
    let body = chunk("a") + &chunk("b") + &chunk("c") + &usage_event(8, 3) + "data: [DONE]\n\n";
    let f = fake(
        Plan {
            chat: Chat::Sse(body.into_bytes()),
            models: Side::Usual,
            tokenize: Side::Vllm,
        },
        40,
    );
    let (code, stdout, stderr, _) = timed(
        &[
            "load",
            "--url",
            &url(&f),
            "--requests",
            "3",
            "--warmup",
            "2",
            "--input-len",
            "8",
            "--output-len",
            "32",
            "-o",
            "json",
        ],
        Duration::from_secs(40),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_no_panic(&stderr);
    let body_of = |r: &str| -> serde_json::Value {
        serde_json::from_str(r.split_once("\r\n\r\n").unwrap().1).unwrap()
    };
    let (mut tokenize, mut chats) = (Vec::new(), Vec::new());
    for r in f.requests.try_iter() {
        if r.starts_with("POST /tokenize") {
            tokenize.push(body_of(&r));
        } else if r.starts_with("POST /v1/chat/completions") {
            let b = body_of(&r);
            let text = b["messages"][0]["content"].as_str().unwrap().to_string();
            chats.push((b["max_tokens"].as_u64().unwrap(), text));
        }
    }
    VllmRun {
        report: serde_json::from_str(&stdout).unwrap(),
        stderr,
        tokenize,
        chats,
    }
}

/// Item 1: a server that refuses llama-server's `{"content"}` (vLLM, SGLang) is asked in its
/// own form, `{"model", "prompt"}`, and its answer (`tokens`, `count`) read: the prompts are
/// exactly --input-len tokens, and stderr says which form was used.
#[test]
fn load_cuts_prompts_with_vllms_tokenize_form() {
    let run = load_against_vllms_tokenizer();
    assert!(
        run.stderr.contains("by the server's /tokenize")
            && run.stderr.contains("vLLM's and SGLang's form"),
        "{}",
        run.stderr
    );
    let prompts = run.report["prompts"].as_str().unwrap();
    assert!(prompts.contains("/tokenize"), "{prompts}");
    assert_eq!(run.tokenize.len(), 2, "{:?}", run.tokenize);
    assert!(run.tokenize[0]["content"].is_string());
    assert_eq!(run.tokenize[1]["model"], "fake-model");
    assert!(run.tokenize[1]["prompt"].is_string());
    assert_eq!(run.tokenize[1]["add_special_tokens"], false);
    // One token a byte: every prompt is 8 bytes.
    assert_eq!(run.chats.len(), 5, "{:?}", run.chats);
    for (_, text) in &run.chats {
        assert_eq!(text.len(), 8, "{text:?}");
    }
}

/// Item 4: the warm-up's prompts are not the level's, so the server's prompt cache cannot
/// answer the level's first requests.
#[test]
fn load_warms_up_with_prompts_the_level_does_not_send() {
    let run = load_against_vllms_tokenizer();
    let warmup: Vec<&String> = run
        .chats
        .iter()
        .filter(|c| c.0 == 16)
        .map(|c| &c.1)
        .collect();
    let level: Vec<&String> = run
        .chats
        .iter()
        .filter(|c| c.0 == 32)
        .map(|c| &c.1)
        .collect();
    assert_eq!((warmup.len(), level.len()), (2, 3), "{:?}", run.chats);
    for w in &warmup {
        assert!(
            !level.contains(w),
            "warm-up prompt {w:?} is in the level: {level:?}"
        );
    }
    assert_eq!(run.report["levels"][0]["completed"], 3, "{}", run.report);
}

/// Item 6: the client's own CPU time over the level, per request and as a share of one core.
#[test]
fn load_reports_the_clients_own_cpu_time() {
    let run = load_against_vllms_tokenizer();
    let level = &run.report["levels"][0];
    for key in [
        "client_cpu_s",
        "client_cpu_ms_per_request",
        "client_cpu_core_share",
    ] {
        let v = level[key].as_f64().unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{key}: {level}");
    }
    let share = level["client_cpu_core_share"].as_f64().unwrap();
    let per_request = level["client_cpu_ms_per_request"].as_f64().unwrap();
    let cpu = level["client_cpu_s"].as_f64().unwrap();
    let duration = level["duration_s"].as_f64().unwrap();
    assert!((share - cpu / duration).abs() < 1e-9, "{level}");
    assert!((per_request - cpu * 1e3 / 3.0).abs() < 1e-9, "{level}");
}

/// One line of ollama's native `/api/chat` stream carrying `content`.
fn ollama_line(content: &str) -> String {
    format!(
        "{{\"model\":\"fake-model\",\"created_at\":\"2026-12-06T00:00:00Z\",\"message\":{{\"role\":\"assistant\",\"content\":{}}},\"done\":false}}\n",
        serde_json::to_string(content).unwrap()
    )
}

/// ollama's final line, durations in ns.
fn ollama_done(load_ns: u64, prompt_n: u64, prompt_ns: u64, eval_n: u64, eval_ns: u64) -> String {
    format!(
        "{{\"model\":\"fake-model\",\"message\":{{\"role\":\"assistant\",\"content\":\"\"}},\"done\":true,\"done_reason\":\"stop\",\"total_duration\":{},\"load_duration\":{load_ns},\"prompt_eval_count\":{prompt_n},\"prompt_eval_duration\":{prompt_ns},\"eval_count\":{eval_n},\"eval_duration\":{eval_ns}}}\n",
        load_ns + prompt_ns + eval_ns
    )
}

/// Issue 35, item 3: a base ending in `/api` speaks ollama's native API, whose final line
/// carries the server's own durations; they fill the TTFT breakdown with their source, and
/// its model list comes from `/api/tags`. A load past a second marks the turn cold, by the
/// server's word.
#[test]
fn ollama_native_durations_fill_the_breakdown() {
    let pieces = vec![
        (Duration::from_millis(40), ollama_line("Hel").into_bytes()),
        (Duration::from_millis(5), ollama_line("lo").into_bytes()),
        (Duration::from_millis(5), ollama_line("!").into_bytes()),
        (
            Duration::from_millis(5),
            ollama_done(4_000_000, 12, 20_000_000, 3, 9_000_000).into_bytes(),
        ),
    ];
    let f = fake(Chat::Paced(pieces), 4);
    let base = format!("http://127.0.0.1:{}/api", f.port);
    let (code, stdout, stderr) = run_turn(&base, &["--json", "--temp", "0.5"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = &v["metrics"];
    assert_eq!(v["text"], "Hello!", "{v}");
    assert_eq!(m["tokens_generated"], 3, "{v}");
    assert_eq!(m["prompt_tokens"], 12, "{v}");
    assert_eq!(m["token_count_source"], "usage_one_per_chunk", "{v}");
    assert_eq!(m["server_timing_source"], "ollama", "{v}");
    assert_eq!(m["server_load_ms"], 4.0, "{v}");
    assert_eq!(m["server_prompt_ms"], 20.0, "{v}");
    assert_eq!(m["server_tpot_ms"], 3.0, "{v}");
    // The rest of TTFT: what the server's load and prompt times leave of it.
    let rest = m["queue_transport_ms"].as_f64().unwrap();
    let expect = m["ttft_ms"].as_f64().unwrap() - m["network_rtt_ms"].as_f64().unwrap() - 24.0;
    assert!((rest - expect).abs() < 1e-6, "{v}");
    assert!(m["cold_start"].is_null(), "{v}");
    let requests: Vec<String> = f.requests.try_iter().collect();
    assert!(
        requests.iter().any(|r| r.starts_with("GET /api/tags")),
        "{requests:?}"
    );
    let chat = requests
        .iter()
        .find(|r| r.starts_with("POST /api/chat"))
        .unwrap();
    assert!(
        chat.contains("\"num_predict\":8") && chat.contains("\"stream\":true"),
        "{chat}"
    );
    assert!(chat.contains("\"model\":\"fake-model\""), "{chat}");

    // Human-readable: the load is its own part of TTFT, named with the source.
    let pieces = vec![
        (
            Duration::from_millis(1_200),
            ollama_line("cold").into_bytes(),
        ),
        (
            Duration::from_millis(5),
            ollama_done(1_100_000_000, 4, 30_000_000, 1, 1_000_000).into_bytes(),
        ),
    ];
    let f = fake(Chat::Paced(pieces), 4);
    let base = format!("http://127.0.0.1:{}/api", f.port);
    let (code, stdout, stderr) = run_turn(&base, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("cold"), "{stdout}");
    assert!(
        stderr.contains("server model load 1100.0 ms") && stderr.contains("ollama durations"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1100 ms loading the model for this request"),
        "{stderr}"
    );
}

/// Issue 31 on the native path: a load longer than the turn is dropped with a note, a stream
/// that ignores `num_predict` is cut at the client's limit, a line past the event limit is
/// refused without buffering the rest, a line that is not JSON is named, and an error line
/// keeps the partial answer.
#[test]
fn a_hostile_ollama_stream_is_bounded_like_an_sse_one() {
    let body =
        ollama_line("a") + &ollama_line("b") + &ollama_done(u64::MAX / 2, 3, 1_000, 2, 1_000);
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let base = format!("http://127.0.0.1:{}/api", f.port);
    let (code, stdout, stderr) = run_turn(&base, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(v["metrics"]["server_load_ms"].is_null(), "{v}");
    assert!(v["metrics"]["cold_start"].is_null(), "{v}");
    assert!(
        v["notes"].to_string().contains("model load of 9.22e12 ms"),
        "{v}"
    );

    let f = fake(
        Chat::Endless {
            head: Vec::new(),
            repeat: ollama_line("x").into_bytes(),
        },
        4,
    );
    let base = format!("http://127.0.0.1:{}/api", f.port);
    let (code, _, stderr, took) = timed(
        &["run", "--url", &base, "-p", "hi", "-n", "5"],
        Duration::from_secs(30),
    );
    assert_clean_failure(code, &stderr, "max_tokens");
    assert!(took < Duration::from_secs(20), "{took:?}");

    let f = fake(
        Chat::Endless {
            head: b"{\"message\":{\"content\":\"".to_vec(),
            repeat: b"y".repeat(64 << 10),
        },
        4,
    );
    let base = format!("http://127.0.0.1:{}/api", f.port);
    let (code, _, stderr, took, rss) = timed_rss(
        &["run", "--url", &base, "-p", "hi", "-n", "5"],
        Duration::from_secs(30),
    );
    assert_clean_failure(code, &stderr, "exceeded 4194304 bytes");
    assert_cut_early(&f, took, rss);

    let body = ollama_line("kept") + "not json\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let base = format!("http://127.0.0.1:{}/api", f.port);
    let (code, stdout, stderr) = run_turn(&base, &[]);
    assert_clean_failure(code, &stderr, "not JSON");
    assert!(stdout.contains("kept"), "{stdout}");

    let body = ollama_line("part") + "{\"error\":\"model ran out of memory\"}\n";
    let f = fake(Chat::Sse(body.into_bytes()), 4);
    let base = format!("http://127.0.0.1:{}/api", f.port);
    let (code, stdout, stderr) = run_turn(&base, &[]);
    assert_clean_failure(code, &stderr, "ran out of memory");
    assert!(stdout.contains("part"), "{stdout}");
}
