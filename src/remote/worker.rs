//! The remote backend behind the chat: a worker thread that speaks the engine's protocol
//! (`EngineCommand` in, `EngineEvent` out, every request with an id up to the handle's cancel
//! mark cancelled), so `tokscope chat --url` drives a server through the same `EngineHandle`,
//! the same events and the same `update` as the in-process engine. The thread owns a
//! current-thread tokio runtime and the HTTP client; each chunk's offset is taken by the client
//! where the chunk is parsed, on this thread, never by the UI.
//!
//! It also answers an A/B comparison's `AbGenerate` whose "path" is a URL: the same turn
//! streamed from that other server (`remote::is_url`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::{ChatRequest, Endpoint, RemoteClient, RemoteError, RemoteTurn, StreamEnd};
use crate::engine::{
    AbReport, EngineCommand, EngineError, EngineEvent, EngineHandle, EventSender, GenerateRequest,
    LlamaCounters, ModelInfo, RequestId, StopReason, TurnReport,
};
use crate::metrics::roofline::WeightBytes;

/// `ModelInfo::backend` of a remote model: the panes read it to show the remote breakdown.
pub(crate) const REMOTE_BACKEND: &str = "remote";

/// What the user told us about the server's hardware (config `remote.weights_gb`): the
/// roofline's bytes per token. Never guessed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServerFacts {
    pub weights_bytes: Option<u64>,
}

/// The chat's server: where it is and which model (`None`: the first of `GET /v1/models`).
pub(crate) struct Main {
    pub endpoint: Endpoint,
    pub model: Option<String>,
    pub facts: ServerFacts,
    /// `chat --url --prometheus` / `--otlp`: where every turn's client-side figures are
    /// counted (as `load` counts its requests) for the exporters.
    pub exposition: Option<Export>,
}

/// Where a remote chat's turns are counted for its exporters (`load::publish::serve_beside`):
/// the one the local engine counts into too.
pub(crate) use crate::metrics::exposition::Export;

/// Starts the worker. With `main`, it looks the model up and announces it (`Loading`, then
/// `Ready` or `LoadFailed`) and answers `Generate`; without, it only answers `AbGenerate` to
/// a URL (the side backend of a local chat's `/ab URL`), and announces nothing. `timeout` is
/// the wait for another URL's answers.
pub(crate) fn spawn(
    main: Option<Main>,
    timeout: Duration,
    events: EventSender,
) -> Result<EngineHandle, EngineError> {
    let (cmd_tx, cmd_rx) = mpsc::channel();
    let cancel_through = Arc::new(AtomicU64::new(0));
    let worker_cancel = Arc::clone(&cancel_through);
    let thread = std::thread::Builder::new()
        .name("remote".into())
        .spawn(move || run(main, timeout, &cmd_rx, &events, &worker_cancel))
        .map_err(|e| EngineError::Thread(e.to_string()))?;
    Ok(EngineHandle::from_worker(cmd_tx, cancel_through, thread))
}

/// An A/B "model path" that is a server's API base rather than a file.
pub(crate) fn is_url(path: &std::path::Path) -> bool {
    path.to_str()
        .is_some_and(|s| s.starts_with("http://") || s.starts_with("https://"))
}

fn remote_error(e: &RemoteError) -> EngineError {
    EngineError::Remote(e.to_string())
}

/// The server's model as the panes and the stamp show it.
fn model_info(endpoint: &Endpoint, model: &str, facts: ServerFacts, load: Duration) -> ModelInfo {
    let host = endpoint.host_label();
    ModelInfo {
        path: PathBuf::from(&endpoint.base_url),
        file_name: format!("{model} @ {host}"),
        name: model.to_string(),
        architecture: "server".into(),
        quantization: "—".into(),
        weights_bytes: facts.weights_bytes.unwrap_or(0),
        backend: REMOTE_BACKEND.into(),
        devices: vec![host],
        template: "the server's".into(),
        load_ms: load.as_secs_f64() * 1e3,
        weight_bytes: facts.weights_bytes.map(|total_bytes| WeightBytes {
            total_bytes,
            ..WeightBytes::default()
        }),
        ..ModelInfo::default()
    }
}

fn run(
    main: Option<Main>,
    timeout: Duration,
    commands: &mpsc::Receiver<EngineCommand>,
    events: &EventSender,
    cancel_through: &AtomicU64,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let error = EngineError::Remote(format!("cannot start the async runtime: {e}"));
            if main.is_some() {
                let _ = events.send(EngineEvent::LoadFailed(error));
            }
            return;
        }
    };
    let shutting_down = || cancel_through.load(Ordering::SeqCst) == u64::MAX;
    let served = main.map(|m| connect(&runtime, m, events, &shutting_down));
    let not_here = |what: &str| {
        EngineError::Remote(format!(
            "{what} needs a local model; this chat talks to a server (start `tokscope chat -m FILE` for a local one)"
        ))
    };
    let fail = |request_id, error| {
        let _ = events.send(EngineEvent::Failed { request_id, error });
    };
    while let Some(command) = runtime.block_on(next_command(commands)) {
        match command {
            EngineCommand::Generate(request) => match &served {
                Some(Ok(served)) => {
                    let cancelled = || cancel_through.load(Ordering::SeqCst) >= request.id;
                    generate(&runtime, served, &request, events, &cancelled);
                }
                Some(Err(error)) => fail(request.id, error.clone()),
                None => fail(request.id, EngineError::NoModel),
            },
            EngineCommand::AbGenerate { path, request, .. } if is_url(&path) => {
                let key = served
                    .as_ref()
                    .and_then(|s| s.as_ref().ok())
                    .map(|s| s.client.endpoint().clone());
                let cancelled = || cancel_through.load(Ordering::SeqCst) >= request.id;
                let key = key.as_ref();
                let ab = ab_url(&path, key, timeout, &request, events, &cancelled);
                let _ = events.send(runtime.block_on(ab));
            }
            EngineCommand::AbGenerate { path, request, .. } => fail(
                request.id,
                EngineError::Remote(format!(
                    "/ab {}: not a URL (this backend answers A/B turns from servers only)",
                    path.display()
                )),
            ),
            EngineCommand::SwitchModel { id, .. } => {
                let _ = events.send(EngineEvent::SwitchFailed {
                    request_id: id,
                    error: not_here("/model"),
                });
            }
            EngineCommand::Sweep { id, .. } => {
                let _ = events.send(EngineEvent::SweepDone {
                    request_id: id,
                    error: Some(not_here(
                        "the bench screen (for a server: `tokscope load --url`)",
                    )),
                });
            }
            EngineCommand::BenchTg { id, .. } => fail(
                id,
                not_here("bench's tg test (for a server: `tokscope load --url`)"),
            ),
            EngineCommand::ScoreLast { id, .. } | EngineCommand::ScoreText { id, .. } => fail(
                id,
                not_here("scoring against a reference (a server sends no full distributions)"),
            ),
            EngineCommand::Shutdown => break,
        }
    }
}

/// Connects the chat's server: its model looked up (unless named) and announced, or the
/// reason it cannot be. The network's round trip is measured once, here (two `GET
/// /v1/models`), not before every turn: a turn starts when it is sent, as a local one does.
/// Quitting while an unreachable server is looked up does not wait for the timeout.
fn connect(
    runtime: &tokio::runtime::Runtime,
    main: Main,
    events: &EventSender,
    shutting_down: &(dyn Fn() -> bool + Send + Sync),
) -> Result<Served, EngineError> {
    let _ = events.send(EngineEvent::Loading {
        stage: crate::engine::LoadStage::Connecting,
        progress: 0.0,
        read: None,
    });
    let started = Instant::now();
    let looked_up = RemoteClient::new(main.endpoint).and_then(|client| {
        let model = match main.model {
            Some(model) => model,
            None => runtime.block_on(until_cancelled(shutting_down, client.default_model()))?,
        };
        Ok((client, model))
    });
    let (client, model) = looked_up.map_err(|e| {
        let error = remote_error(&e);
        let _ = events.send(EngineEvent::LoadFailed(error.clone()));
        error
    })?;
    let rtt = runtime
        .block_on(until_cancelled(shutting_down, client.probe_rtt()))
        .ok();
    let info = model_info(client.endpoint(), &model, main.facts, started.elapsed());
    if let Some(Ok(mut m)) = main.exposition.as_ref().map(|e| e.metrics.lock()) {
        m.set_model(&model);
    }
    let _ = events.send(EngineEvent::Ready(Box::new(info)));
    Ok(Served {
        client,
        model,
        rtt,
        exposition: main.exposition,
    })
}

/// One chat turn on the connected server: streamed, counted for `--prometheus` (as `load`
/// counts a request), and reported.
fn generate(
    runtime: &tokio::runtime::Runtime,
    served: &Served,
    request: &GenerateRequest,
    events: &EventSender,
    cancelled: &(dyn Fn() -> bool + Send + Sync),
) {
    let exported = served.exposition.as_ref();
    if let Some(Ok(mut m)) = exported.map(|e| e.metrics.lock()) {
        m.sent();
    }
    let sent = Instant::now();
    let Served { client, model, .. } = served;
    let streamed = stream(client, model, served.rtt, request, events, cancelled);
    let (turn, _) = runtime.block_on(streamed);
    if let Some(export) = exported {
        if let Ok(mut m) = export.metrics.lock() {
            match super::record(&turn) {
                Ok(r) => m.observe(&r.observed()),
                Err(e) => m.failed(&e.kind, sent.elapsed()),
            }
        }
        export.counted.notify_one();
    }
    let _ = events.send(finished(request.id, turn));
}

/// How often the idle worker looks for a command. Between commands the runtime keeps
/// running, so the connection tasks it holds make progress: a stream dropped by Esc is closed
/// at once (and the server stops generating), not when the next request happens to poll it.
const COMMAND_POLL: Duration = Duration::from_millis(20);

/// The next command, or `None` when the handle is gone.
async fn next_command(commands: &mpsc::Receiver<EngineCommand>) -> Option<EngineCommand> {
    loop {
        match commands.try_recv() {
            Ok(command) => return Some(command),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => tokio::time::sleep(COMMAND_POLL).await,
        }
    }
}

/// `work`, or `Cancelled` once `cancelled()` has held for `CANCEL_GRACE`: for the waits that
/// check no cancel flag themselves (connecting, the response headers, the model lookup), so Esc
/// and quitting never wait for `--timeout`. The grace leaves a stream that is already flowing
/// time to stop by itself (within 10 ms) and return its partial turn.
async fn until_cancelled<T>(
    cancelled: &(dyn Fn() -> bool + Send + Sync),
    work: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    let watch = async {
        let mut since: Option<Instant> = None;
        loop {
            tokio::time::sleep(CANCEL_WATCH).await;
            match (cancelled(), since) {
                (false, _) => since = None,
                (true, None) => since = Some(Instant::now()),
                (true, Some(at)) if at.elapsed() >= CANCEL_GRACE => return,
                (true, Some(_)) => {}
            }
        }
    };
    tokio::select! {
        result = work => result,
        () = watch => Err(RemoteError::Cancelled),
    }
}

/// How often `until_cancelled` looks, and how long a cancel must hold before it gives up on
/// the work.
const CANCEL_WATCH: Duration = Duration::from_millis(20);
const CANCEL_GRACE: Duration = Duration::from_millis(100);

/// A connected server.
struct Served {
    client: RemoteClient,
    /// The model's name.
    model: String,
    /// The network's round trip, measured at connection.
    rtt: Option<Duration>,
    /// Where each turn's figures are counted (`chat --url --prometheus` / `--otlp`).
    exposition: Option<Export>,
}

/// Streams one turn from `client`, sending a `Token` event per content chunk (its offset is
/// the client's: from the request being sent). `rtt`: the network's round trip, measured when
/// the server was connected (TTFT's network part). Returns the turn (a failed one ends in its
/// error, with the text streamed before it) and each chunk's text.
async fn stream(
    client: &RemoteClient,
    model: &str,
    rtt: Option<Duration>,
    request: &GenerateRequest,
    events: &EventSender,
    cancelled: &(dyn Fn() -> bool + Send + Sync),
) -> (RemoteTurn, Vec<String>) {
    let turn = &request.turn;
    let chat = ChatRequest {
        model: model.to_string(),
        messages: turn.messages.clone(),
        max_tokens: Some(turn.max_tokens),
        temperature: Some(turn.sampling.temperature),
        top_p: Some(turn.sampling.top_p),
        seed: Some(turn.sampling.seed),
        ignore_eos: turn.ignore_eos,
    };
    let id = request.id;
    let mut pieces = Vec::new();
    let mut on_text = |text: &str, at: Duration| {
        let _ = events.send(EngineEvent::Token {
            request_id: id,
            index: pieces.len(),
            text: text.to_string(),
            at,
        });
        pieces.push(text.to_string());
    };
    let sleeping = until_cancelled(cancelled, async { Ok(client.sleeping().await) })
        .await
        .ok()
        .flatten();
    let streamed = until_cancelled(
        cancelled,
        client.stream_chat(&chat, rtt, cancelled, &mut on_text),
    )
    .await;
    let turn = match streamed {
        Ok(mut turn) => {
            turn.timeline.server_sleeping = sleeping;
            turn
        }
        // Ended while connecting or waiting for the headers (cancelled: nothing streamed yet).
        Err(e) => RemoteTurn {
            text: pieces.concat(),
            timeline: crate::metrics::remote::RemoteTimeline {
                network_rtt: rtt,
                ..Default::default()
            },
            finish_reason: None,
            model: None,
            end: match e {
                RemoteError::Cancelled => Ok(StreamEnd::Cancelled),
                e => Err(e),
            },
            notes: Vec::new(),
        },
    };
    for note in &turn.notes {
        tracing::warn!("remote turn: {note}");
    }
    (turn, pieces)
}

/// The report of a streamed turn, or the error that broke it (its partial text is already on
/// screen from the token events and stays in the conversation).
fn report(turn: RemoteTurn) -> Result<TurnReport, EngineError> {
    let stop_reason = match &turn.end {
        Ok(StreamEnd::Cancelled) => StopReason::Cancelled,
        Ok(StreamEnd::Done) if turn.finish_reason.as_deref() == Some("length") => {
            StopReason::MaxTokens
        }
        Ok(StreamEnd::Done) => StopReason::EndOfGeneration,
        Err(e) => return Err(remote_error(e)),
    };
    let timeline = turn.timeline.turn_timeline();
    let usage = turn.timeline.usage;
    let counters = turn
        .timeline
        .server_timings
        .map(|t| LlamaCounters {
            prompt_eval_ms: t.prompt_ms,
            prompt_eval_tokens: i32::try_from(t.prompt_n).unwrap_or(i32::MAX),
            eval_ms: t.predicted_ms,
            eval_tokens: i32::try_from(t.predicted_n).unwrap_or(i32::MAX),
        })
        .unwrap_or_default();
    Ok(TurnReport {
        prompt: Default::default(),
        text: turn.text,
        thinking_text: None,
        stop_reason,
        timeline,
        // Only counts that can be true: a prompt no context holds is no count, and the output is
        // the checked one (`tokens_generated` ignores a count the chunks cannot hold).
        context_used: usage
            .filter(|u| u.prompt_tokens <= crate::metrics::remote::MAX_PROMPT_TOKENS)
            .map_or(0, |u| {
                usize::try_from(u.prompt_tokens + turn.timeline.tokens_generated())
                    .unwrap_or(usize::MAX)
            }),
        dropped_messages: 0,
        llama_counters: counters,
        first_logits: None,
        host: Default::default(),
        sampler: "server",
        sampling: Default::default(),
        // The server's own speculation (if any) is not reported through the API.
        spec: None,
        profile: None,
    })
}

fn finished(id: RequestId, turn: RemoteTurn) -> EngineEvent {
    match report(turn) {
        Ok(report) => EngineEvent::Finished {
            request_id: id,
            report: Box::new(report),
        },
        Err(error) => EngineEvent::Failed {
            request_id: id,
            error,
        },
    }
}

/// Answer B of an A/B comparison from another server. The chat server's key goes along only
/// to the same scheme, host and port; another host gets no key.
async fn ab_url(
    path: &std::path::Path,
    chat_server: Option<&Endpoint>,
    timeout: Duration,
    request: &GenerateRequest,
    events: &EventSender,
    cancelled: &(dyn Fn() -> bool + Send + Sync),
) -> EngineEvent {
    let id = request.id;
    let fail = |error: EngineError| EngineEvent::Failed {
        request_id: id,
        error,
    };
    let connected = async {
        let mut endpoint = Endpoint::new(&path.to_string_lossy(), None, timeout)?;
        if let Some(chat) = chat_server.filter(|c| c.host_label() == endpoint.host_label()) {
            endpoint.api_key = chat.api_key.clone();
        }
        let started = Instant::now();
        let client = RemoteClient::new(endpoint)?;
        let model = client.default_model().await?;
        Ok::<_, RemoteError>((started, client, model))
    };
    let (started, client, model) = match connected.await {
        Ok(found) => found,
        Err(e) => return fail(remote_error(&e)),
    };
    let facts = ServerFacts::default();
    let info = model_info(client.endpoint(), &model, facts, started.elapsed());
    // B's round trip before its turn is sent, as the chat's own is taken at connection.
    let rtt = until_cancelled(cancelled, client.probe_rtt()).await.ok();
    let (turn, pieces) = stream(&client, &model, rtt, request, events, cancelled).await;
    match report(turn) {
        Ok(turn) => EngineEvent::AbFinished {
            request_id: id,
            report: Box::new(AbReport {
                model: info,
                turn,
                a_fresh: None,
                pieces,
                not_scored: Some(
                    "not scored: a server sends no full distributions to score against".to_string(),
                ),
            }),
        },
        Err(e) => fail(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::remote::{ChunkMark, RemoteTimeline, ServerTimingSource, ServerTimings};

    fn turn(end: Result<StreamEnd, RemoteError>, finish: Option<&str>) -> RemoteTurn {
        RemoteTurn {
            text: "ab".into(),
            timeline: RemoteTimeline {
                chunks: vec![ChunkMark {
                    at: Duration::from_millis(5),
                    cumulative_tokens: None,
                    reasoning: false,
                }],
                server_timings: Some(ServerTimings {
                    source: ServerTimingSource::LlamaServer,
                    prompt_n: 7,
                    prompt_ms: 3.5,
                    cache_n: None,
                    predicted_n: 1,
                    predicted_ms: 2.0,
                }),
                ..Default::default()
            },
            finish_reason: finish.map(String::from),
            model: None,
            end,
            notes: Vec::new(),
        }
    }

    #[test]
    fn how_a_stream_ended_becomes_the_turn_s_stop_reason() {
        let r = report(turn(Ok(StreamEnd::Done), Some("stop"))).unwrap();
        assert_eq!(r.stop_reason, StopReason::EndOfGeneration);
        assert_eq!(r.sampler, "server");
        // The server's own counters stand where llama.cpp's would.
        assert_eq!(r.llama_counters.prompt_eval_tokens, 7);
        assert_eq!(r.llama_counters.eval_ms, 2.0);
        let r = report(turn(Ok(StreamEnd::Done), Some("length"))).unwrap();
        assert_eq!(r.stop_reason, StopReason::MaxTokens);
        let r = report(turn(Ok(StreamEnd::Cancelled), None)).unwrap();
        assert_eq!(r.stop_reason, StopReason::Cancelled);
        let e = report(turn(Err(RemoteError::ClosedEarly { chunks: 1 }), None)).unwrap_err();
        assert!(e.to_string().contains("before [DONE]"), "{e}");
    }

    #[test]
    fn only_urls_are_remote_ab_targets() {
        assert!(is_url(std::path::Path::new("http://127.0.0.1:8080/v1")));
        assert!(is_url(std::path::Path::new("https://h/v1")));
        assert!(!is_url(std::path::Path::new("/models/b.gguf")));
        assert!(!is_url(std::path::Path::new("http.gguf")));
    }

    #[test]
    fn a_server_model_names_its_host_and_never_the_key() {
        let key = super::super::ApiKey::new("sk-never-shown").unwrap();
        let endpoint =
            Endpoint::new("http://10.1.2.3:8000/v1", Some(key), Duration::from_secs(1)).unwrap();
        let info = model_info(
            &endpoint,
            "m",
            ServerFacts {
                weights_bytes: Some(1000),
            },
            Duration::ZERO,
        );
        assert_eq!(info.backend, REMOTE_BACKEND);
        assert_eq!(info.file_name, "m @ http://10.1.2.3:8000");
        assert_eq!(info.bytes_per_token(100), Some(1000.0));
        assert!(!format!("{info:?}").contains("sk-never-shown"));
        let unknown = model_info(&endpoint, "m", ServerFacts::default(), Duration::ZERO);
        assert_eq!(unknown.bytes_per_token(0), None);
    }

    #[test]
    fn a_turn_with_absurd_server_counts_still_reports() {
        let mut t = turn(Ok(StreamEnd::Done), Some("stop"));
        t.timeline.usage = Some(crate::metrics::remote::ServerUsage {
            prompt_tokens: u64::MAX,
            completion_tokens: u64::MAX,
            cached_tokens: None,
        });
        let r = report(t).unwrap();
        assert_eq!(r.timeline.tokens_generated(), 1);
        assert_eq!(r.context_used, 0);
    }

    /// The chat's round trip is measured once, when it connects: three turns against a
    /// counting server send three `GET /v1/models` in all (the model lookup and the two of the
    /// probe), where two before every turn sent nine (#32 item 7).
    #[test]
    fn the_round_trip_is_measured_once_per_session_not_before_every_turn() {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::atomic::AtomicUsize;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let models = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&models);
        std::thread::spawn(move || {
            // One request per connection (`Connection: close`), at most 40, then it stops.
            for stream in listener.incoming().take(40) {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    continue;
                }
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length];
                let _ = std::io::Read::read_exact(&mut reader, &mut body);
                let reply = if first.starts_with("GET /v1/models") {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let json = r#"{"data":[{"id":"m"}]}"#;
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
                        json.len()
                    )
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n\
                     data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n\
                     data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                     data: [DONE]\n\n"
                        .to_string()
                };
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        let endpoint = Endpoint::new(
            &format!("http://127.0.0.1:{port}/v1"),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut handle = spawn(
            Some(Main {
                endpoint,
                model: None,
                facts: ServerFacts::default(),
                exposition: None,
            }),
            Duration::from_secs(10),
            tx,
        )
        .unwrap();
        let next = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<EngineEvent>| {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(e) = rx.try_recv() {
                    return e;
                }
                assert!(Instant::now() < deadline, "no event from the remote worker");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        loop {
            match next(&mut rx) {
                EngineEvent::Ready(_) => break,
                EngineEvent::LoadFailed(e) => panic!("{e}"),
                _ => {}
            }
        }
        let connected = models.load(Ordering::SeqCst);
        assert_eq!(
            connected, 3,
            "the lookup and the two requests of the round trip"
        );
        for _ in 0..3 {
            let id = handle.next_id();
            handle
                .send(
                    id,
                    crate::engine::TurnRequest {
                        messages: vec![crate::engine::ChatMessage::new(
                            crate::engine::Role::User,
                            "hi".to_string(),
                        )],
                        sampling: crate::engine::SamplingParams::default(),
                        max_tokens: 4,
                        capture_first_logits: false,
                        ignore_eos: false,
                        context_full: crate::engine::ContextFull::DropOldest,
                    },
                    None,
                )
                .unwrap();
            loop {
                match next(&mut rx) {
                    EngineEvent::Finished { request_id, report } if request_id == id => {
                        assert_eq!(report.text, "hi");
                        break;
                    }
                    EngineEvent::Failed { error, .. } => panic!("{error}"),
                    _ => {}
                }
            }
        }
        assert_eq!(
            models.load(Ordering::SeqCst),
            connected,
            "no GET /v1/models before a turn"
        );
        handle.shutdown();
    }
}
