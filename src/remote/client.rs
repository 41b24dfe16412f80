//! The HTTP side: one `reqwest` client (rustls), a cheap round-trip probe, and one streamed
//! chat completion parsed by `sse`. Every content chunk is timestamped the moment its event is
//! parsed; the request's clock starts just before it is sent.
//!
//! Nothing a server sends is trusted to be small or to end: every body is read against a size
//! limit and the timeout, a stream against an event limit, a total and the request's own
//! `max_tokens`, and a redirect is followed only within the same origin.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::sse::{EventTooLarge, SseParser};
use super::wire;
use super::{ApiKey, RemoteError};
use crate::engine::ChatMessage;
use crate::metrics::remote::{
    ChunkMark, RemoteTimeline, ServerReported, ServerTimingSource, ServerUsage, MAX_OUTPUT_TOKENS,
};

/// A streamed event (or one of its lines) longer than this is refused (a broken or hostile
/// server must not make the client buffer without bound).
pub(crate) const MAX_EVENT_BYTES: usize = 4 << 20;
/// A whole stream longer than this is closed (about 500,000 chunks of a real server: far past
/// any answer); it bounds the answer's text whatever the server sends.
pub(crate) const MAX_STREAM_BYTES: usize = 128 << 20;
/// A JSON reply (`/v1/models`, `/tokenize`, `/detokenize`) longer than this is refused.
pub(crate) const MAX_JSON_BODY_BYTES: usize = 16 << 20;
/// The most of an HTTP error body read (only an excerpt of it is shown).
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 << 10;
/// Redirects followed within the same origin.
const MAX_REDIRECTS: usize = 5;

/// How often a stream that has no new event checks whether it was cancelled: Esc closes the
/// stream within this long even while the server sends nothing.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// The markers around the reasoning channel's text in a turn's text (`<think>{reasoning}
/// </think>{content}`): the conversation folds a thinking span the same way whether a local
/// model wrote the markers or the client put them around a server's reasoning deltas, and
/// they are taken out again before the conversation goes back to a server
/// (`answer_only`).
pub(crate) const THINK_OPEN: &str = "<think>";
pub(crate) const THINK_CLOSE: &str = "</think>";

/// Where to send requests and how long to wait.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The API base, e.g. `http://127.0.0.1:8080/v1`, without a trailing slash.
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    /// The longest wait for the response headers and between two reads of the stream.
    pub timeout: Duration,
}

impl Endpoint {
    pub(crate) fn new(
        url: &str,
        api_key: Option<ApiKey>,
        timeout: Duration,
    ) -> Result<Self, RemoteError> {
        let bad = |reason: String| RemoteError::BadUrl {
            url: url.to_string(),
            reason,
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad(format!(
                "scheme '{}' is not http or https",
                parsed.scheme()
            )));
        }
        if parsed.query().is_some() || !parsed.username().is_empty() {
            return Err(bad(
                "no query string or user name, please (the key goes in --api-key-env)".into(),
            ));
        }
        Ok(Self {
            base_url: url.trim_end_matches('/').to_string(),
            api_key,
            timeout,
        })
    }

    /// The server's root (the base without a trailing `/v1` or `/api`), where llama-server
    /// keeps `/health`, `/metrics`, `/tokenize` and `/detokenize`.
    pub(crate) fn root(&self) -> &str {
        self.base_url
            .strip_suffix("/v1")
            .or_else(|| self.base_url.strip_suffix("/api"))
            .unwrap_or(&self.base_url)
    }

    /// A base ending in `/api` is ollama's native API (`/api/chat`, `/api/tags`), which
    /// reports the server's own durations; any other base is OpenAI's API.
    pub(crate) fn ollama_native(&self) -> bool {
        self.base_url.ends_with("/api")
    }

    /// The server's host and port (the scheme's default where the URL gives none).
    pub(crate) fn host_and_port(&self) -> (String, u16) {
        let url = reqwest::Url::parse(&self.base_url).ok();
        let host = url.as_ref().and_then(|u| u.host_str()).unwrap_or_default();
        (
            host.to_string(),
            url.as_ref()
                .and_then(|u| u.port_or_known_default())
                .unwrap_or(0),
        )
    }

    /// The URL as safe to log or store: scheme, host and port only.
    pub(crate) fn host_label(&self) -> String {
        reqwest::Url::parse(&self.base_url)
            .ok()
            .map(|u| {
                format!(
                    "{}://{}{}",
                    u.scheme(),
                    u.host_str().unwrap_or("?"),
                    u.port().map(|p| format!(":{p}")).unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "?".into())
    }
}

/// One chat completion to stream.
#[derive(Debug, Clone)]
pub(crate) struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u32>,
    /// Sent as `ignore_eos: true` (llama-server, vLLM and SGLang accept it) only when set.
    pub ignore_eos: bool,
}

/// How a stream ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StreamEnd {
    Done,
    Cancelled,
}

/// One streamed turn: the text, its timeline and, when the stream broke after it started, the
/// error (the partial text is kept).
#[derive(Debug, Clone)]
pub(crate) struct RemoteTurn {
    pub text: String,
    pub timeline: RemoteTimeline,
    pub finish_reason: Option<String>,
    /// The model name the server answered with.
    pub model: Option<String>,
    pub end: Result<StreamEnd, RemoteError>,
    /// What the server said that could not be true and was ignored, one sentence each.
    pub notes: Vec<String>,
}

pub(crate) struct RemoteClient {
    http: reqwest::Client,
    endpoint: Endpoint,
    /// Whether requests ask for vLLM's per-request metrics (`include_metrics`); turned off for
    /// the session when a server refuses the field.
    include_metrics: AtomicBool,
    /// Whether requests ask for usage with every chunk (`stream_options.
    /// continuous_usage_stats`: vLLM and SGLang give exact per-chunk token counts with it);
    /// turned off for the session when a server refuses the field.
    continuous_usage: AtomicBool,
    /// Whether `/props` is worth asking before a turn: false once the server answered it
    /// without `is_sleeping` (or not at all), so other servers are asked once per session.
    ask_props: AtomicBool,
}

/// The error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    for s in std::iter::successors(e.source(), |s| s.source()) {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// Scheme, host and port (the default port of the scheme when none is given) agree.
fn same_origin(a: &reqwest::Url, b: &reqwest::Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Follows a redirect only to the same origin: a conversation (and the key) never goes to a
/// server the user did not name. A refused redirect comes back as the 3xx response itself.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| same_origin(first, attempt.url()));
        if !same {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// A send that failed because a pooled keep-alive connection was already closed by the server:
/// nothing of the response arrived, so sending again is safe.
fn stale_connection(detail: &str) -> bool {
    detail.contains("connection closed before message completed")
}

impl RemoteClient {
    pub(crate) fn new(endpoint: Endpoint) -> Result<Self, RemoteError> {
        let http = reqwest::Client::builder()
            .connect_timeout(endpoint.timeout)
            .redirect(redirect_policy())
            .user_agent(concat!("tokscope/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RemoteError::Connect {
                url: endpoint.host_label(),
                detail: chain(&e),
            })?;
        Ok(Self {
            http,
            endpoint,
            include_metrics: AtomicBool::new(true),
            continuous_usage: AtomicBool::new(true),
            ask_props: AtomicBool::new(true),
        })
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Turns off each optional field a server's refusal names; whether any was still on.
    fn drop_refused_fields(&self, said: &str) -> bool {
        let mut dropped = false;
        for (field, flag) in [
            ("include_metrics", &self.include_metrics),
            ("continuous_usage_stats", &self.continuous_usage),
        ] {
            if said.contains(field) && flag.swap(false, Ordering::Relaxed) {
                dropped = true;
            }
        }
        dropped
    }

    fn with_auth(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.endpoint.api_key {
            Some(key) => builder.header(reqwest::header::AUTHORIZATION, key.header_value()),
            None => builder,
        }
    }

    fn timeout_error(&self, url: &str, what: &'static str) -> RemoteError {
        RemoteError::Timeout {
            url: url.to_string(),
            secs: self.endpoint.timeout.as_secs(),
            what,
        }
    }

    fn send_error(&self, url: &str, e: reqwest::Error) -> RemoteError {
        let detail = chain(&e);
        let lower = detail.to_lowercase();
        if e.is_timeout() {
            return self.timeout_error(url, "connecting");
        }
        if url.starts_with("https:")
            && (lower.contains("tls")
                || lower.contains("certificate")
                || lower.contains("corrupt message")
                || lower.contains("invalidcontenttype"))
        {
            return RemoteError::Tls {
                url: url.to_string(),
                detail,
            };
        }
        if e.is_connect() {
            return RemoteError::Connect {
                url: url.to_string(),
                detail,
            };
        }
        RemoteError::Transport {
            url: url.to_string(),
            detail,
        }
    }

    /// Sends a request with the timeout on the response headers; non-2xx become `Status`.
    async fn send(
        &self,
        url: &str,
        builder: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, RemoteError> {
        let response = tokio::time::timeout(self.endpoint.timeout, self.with_auth(builder).send())
            .await
            .map_err(|_| self.timeout_error(url, "waiting for the response headers"))?
            .map_err(|e| self.send_error(url, e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|v| error_excerpt(&String::from_utf8_lossy(v.as_bytes())))
                .unwrap_or_else(|| "(no Location)".into());
            return Err(RemoteError::Redirect {
                url: url.to_string(),
                status: status.as_u16(),
                location,
            });
        }
        // Only an excerpt is shown: the rest of a long (or endless) body is never read, and a
        // body that stalls shows what came before the timeout.
        let (mut body, limit) = (Vec::new(), MAX_ERROR_BODY_BYTES);
        let _ = self
            .read_body(url, response, limit, "the error body", &mut body)
            .await;
        Err(RemoteError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: error_excerpt(&String::from_utf8_lossy(&body)),
            hint: RemoteError::status_hint(status.as_u16()),
        })
    }

    /// Reads a whole body into `into`: at most `limit_bytes`, all of it within the timeout.
    async fn read_body(
        &self,
        url: &str,
        mut response: reqwest::Response,
        limit_bytes: usize,
        what: &'static str,
        into: &mut Vec<u8>,
    ) -> Result<(), RemoteError> {
        let too_large = || RemoteError::BodyTooLarge {
            url: url.to_string(),
            what,
            limit_bytes,
        };
        if response
            .content_length()
            .is_some_and(|n| n > limit_bytes as u64)
        {
            return Err(too_large());
        }
        let read = async {
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| self.send_error(url, e))?
            {
                if into.len() + chunk.len() > limit_bytes {
                    let room = limit_bytes - into.len();
                    into.extend_from_slice(&chunk[..room]);
                    return Err(too_large());
                }
                into.extend_from_slice(&chunk);
            }
            Ok(())
        };
        tokio::time::timeout(self.endpoint.timeout, read)
            .await
            .map_err(|_| self.timeout_error(url, "reading the body"))?
    }

    /// Sends a request and reads its reply, at most `limit_bytes`, within the timeout.
    async fn reply(
        &self,
        url: &str,
        builder: reqwest::RequestBuilder,
        limit_bytes: usize,
    ) -> Result<Vec<u8>, RemoteError> {
        let response = self.send(url, builder).await?;
        let mut bytes = Vec::new();
        self.read_body(url, response, limit_bytes, "the reply", &mut bytes)
            .await?;
        Ok(bytes)
    }

    /// A JSON reply, bounded and within the timeout.
    async fn json<T: DeserializeOwned>(
        &self,
        url: &str,
        builder: reqwest::RequestBuilder,
    ) -> Result<T, RemoteError> {
        let bytes = self.reply(url, builder, MAX_JSON_BODY_BYTES).await?;
        wire::parse(&bytes).map_err(|e| RemoteError::Malformed(format!("{url}: {e}")))
    }

    /// Whether the server sleeps now: llama-server's `GET /props` `is_sleeping` (answered from
    /// its cache while asleep, so asking does not wake it). Asked before a turn, outside its
    /// clock; `None` from a server without the field, which is then not asked again.
    pub(crate) async fn sleeping(&self) -> Option<bool> {
        if !self.ask_props.load(Ordering::Relaxed) {
            return None;
        }
        let url = format!("{}/props", self.endpoint.root());
        let said = self
            .json::<wire::Props>(&url, self.http.get(&url))
            .await
            .ok()
            .and_then(|props| props.is_sleeping);
        if said.is_none() {
            self.ask_props.store(false, Ordering::Relaxed);
        }
        said
    }

    /// The model ids of `GET /v1/models` (ollama's native API: the names of `GET /api/tags`),
    /// in the server's order.
    pub(crate) async fn models(&self) -> Result<Vec<String>, RemoteError> {
        let base = &self.endpoint.base_url;
        Ok(if self.endpoint.ollama_native() {
            let url = format!("{base}/tags");
            let tags: wire::Tags = self.json(&url, self.http.get(&url)).await?;
            tags.models.into_iter().flatten().map(|m| m.name).collect()
        } else {
            let url = format!("{base}/models");
            let models: wire::Models = self.json(&url, self.http.get(&url)).await?;
            models.data.into_iter().flatten().map(|m| m.id).collect()
        })
    }

    /// The first model the server lists.
    pub(crate) async fn default_model(&self) -> Result<String, RemoteError> {
        self.models()
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| RemoteError::NoModels {
                url: self.endpoint.host_label(),
            })
    }

    /// The round trip of a cheap request (`GET /v1/models`): connection set-up is excluded by
    /// timing the second of two requests on the kept-alive connection.
    pub(crate) async fn probe_rtt(&self) -> Result<Duration, RemoteError> {
        self.models().await?;
        let start = Instant::now();
        self.models().await?;
        Ok(start.elapsed())
    }

    /// `GET` a text body under the server's root (`/metrics`), at most `limit_bytes`, within
    /// the timeout; invalid UTF-8 becomes U+FFFD.
    pub(crate) async fn root_get_text(
        &self,
        path: &str,
        limit_bytes: usize,
    ) -> Result<String, RemoteError> {
        let url = format!("{}{path}", self.endpoint.root());
        let bytes = self.reply(&url, self.http.get(&url), limit_bytes).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// `POST` JSON under the server's root (llama-server's `/tokenize`, `/detokenize`).
    pub(crate) async fn root_post(&self, path: &str, body: &Value) -> Result<Value, RemoteError> {
        let url = format!("{}{path}", self.endpoint.root());
        self.json(&url, self.http.post(&url).json(body)).await
    }

    /// Streams one chat completion. `on_text` gets each content delta and its offset from the
    /// request. Failures before the stream starts are `Err`; a stream that breaks later
    /// returns its partial turn with the error in `end`. `cancelled` is checked at every event
    /// and every 10 ms while none arrives (and while the headers are awaited: then the result
    /// is `Err(Cancelled)`); dropping the stream closes the connection, which makes the
    /// server stop generating. The stream is closed at `request.max_tokens` content chunks
    /// whatever the server does, and the server's figures are checked before they are kept
    /// (`RemoteTimeline::drop_implausible`, its notes in `RemoteTurn::notes`).
    pub(crate) async fn stream_chat(
        &self,
        request: &ChatRequest,
        network_rtt: Option<Duration>,
        cancelled: &(dyn Fn() -> bool + Send + Sync),
        on_text: &mut (dyn FnMut(&str, Duration) + Send),
    ) -> Result<RemoteTurn, RemoteError> {
        let native = self.endpoint.ollama_native();
        let path = if native { "chat" } else { "chat/completions" };
        let url = format!("{}/{path}", self.endpoint.base_url);
        let body_for = || {
            if native {
                ollama_request_body(request)
            } else {
                request_body(
                    request,
                    self.include_metrics.load(Ordering::Relaxed),
                    self.continuous_usage.load(Ordering::Relaxed),
                )
            }
        };
        let mut body = body_for();
        // The clock starts at the first attempt and is never restarted: the user waits from
        // there, whatever is sent again (issue 58, item 7).
        let sent_at = Instant::now();
        let post = |body: &Value| self.send(&url, self.http.post(&url).json(body));
        let mut resent_stale = false;
        let response = loop {
            match until_cancelled(cancelled, post(&body)).await {
                // The pool handed out a kept-alive connection the server had just closed
                // (cpp-httplib closes idle ones when its threads are busy): the request never
                // got a response, so it is sent once more on a fresh connection.
                Err(RemoteError::Transport { detail, .. })
                    if !resent_stale && stale_connection(&detail) =>
                {
                    resent_stale = true;
                }
                // A server that refuses a field only vLLM or SGLang know (OpenAI's API rejects
                // unknown fields) is asked again without it, and never with it again; each
                // field is dropped at most once, so this ends.
                Err(RemoteError::Status {
                    status, body: said, ..
                }) if !native
                    && (400..500).contains(&status)
                    && self.drop_refused_fields(&said) => {}
                other => break other?,
            }
            body = body_for();
        };
        let reported = parse_tgi_headers(response.headers());
        let mut turn = Turn {
            turn: RemoteTurn {
                text: String::new(),
                timeline: RemoteTimeline {
                    network_rtt,
                    sent_at: Some(sent_at),
                    headers_at: Some(sent_at.elapsed()),
                    server_reported: reported,
                    ..Default::default()
                },
                finish_reason: None,
                model: None,
                end: Ok(StreamEnd::Done),
                notes: Vec::new(),
            },
            max_tokens: request.max_tokens,
            ollama_native: native,
            thinking: false,
        };
        let mut bytes = Box::pin(response.bytes_stream());
        let mut parser = if native {
            SseParser::ndjson(MAX_EVENT_BYTES)
        } else {
            SseParser::new(MAX_EVENT_BYTES)
        };
        let mut events: Vec<String> = Vec::new();
        let mut stream_bytes = 0usize;
        // `--timeout` bounds the wait between two complete events (a comment such as `: ping`
        // counts: a server says it is alive with one), not between two reads, so a server that
        // trickles bytes and never ends an event is cut (issue 57, item 8). The whole request
        // has a deadline too: the timeout once per token asked for, and once more.
        let timeout = self.endpoint.timeout;
        let per_token = request.max_tokens.map_or(u32::MAX, |n| n.saturating_add(1));
        let deadline_after = timeout.saturating_mul(per_token);
        let deadline = sent_at.checked_add(deadline_after);
        let mut blocks_seen = parser.blocks_ended();
        let mut stalled_at = Instant::now() + timeout;
        let end = 'stream: loop {
            for data in events.drain(..) {
                if cancelled() {
                    break 'stream Ok(StreamEnd::Cancelled);
                }
                if let Some(end) = turn.on_event(&data, sent_at.elapsed(), on_text).transpose() {
                    break 'stream end;
                }
            }
            // `next()` is cancel-safe: polling it again after a timeout loses nothing.
            let next = loop {
                if cancelled() {
                    break 'stream Ok(StreamEnd::Cancelled);
                }
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    break 'stream Err(RemoteError::Timeout {
                        url: url.clone(),
                        secs: deadline_after.as_secs(),
                        what: "the whole request: its deadline is --timeout once per token asked for, and once more",
                    });
                }
                if now >= stalled_at {
                    break 'stream Err(
                        self.timeout_error(&url, "the stream stalled: no complete event")
                    );
                }
                if let Ok(n) = tokio::time::timeout(CANCEL_POLL, bytes.next()).await {
                    break n;
                }
            };
            let chunk = match next {
                None => {
                    break Err(RemoteError::ClosedEarly {
                        chunks: turn.turn.timeline.chunks.len(),
                    })
                }
                Some(Err(e)) => {
                    break Err(RemoteError::Transport {
                        url: url.clone(),
                        detail: chain(&e),
                    })
                }
                Some(Ok(chunk)) => chunk,
            };
            stream_bytes += chunk.len();
            if stream_bytes > MAX_STREAM_BYTES {
                break Err(RemoteError::StreamTooLarge {
                    limit_bytes: MAX_STREAM_BYTES,
                });
            }
            if let Err(EventTooLarge) = parser.push(&chunk, &mut events) {
                break Err(RemoteError::ChunkTooLarge {
                    limit_bytes: MAX_EVENT_BYTES,
                });
            }
            if parser.blocks_ended() != blocks_seen {
                blocks_seen = parser.blocks_ended();
                stalled_at = Instant::now() + timeout;
            }
        };
        turn.end_thinking();
        let mut turn = turn.turn;
        turn.timeline.finished_at = sent_at.elapsed();
        turn.notes = turn.timeline.drop_implausible();
        turn.end = end;
        Ok(turn)
    }
}

/// `work`, or `Err(Cancelled)` as soon as `cancelled()` holds (looked at every 10 ms).
async fn until_cancelled<T>(
    cancelled: &(dyn Fn() -> bool + Send + Sync),
    work: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    let watch = async {
        while !cancelled() {
            tokio::time::sleep(CANCEL_POLL).await;
        }
    };
    tokio::select! {
        result = work => result,
        () = watch => Err(RemoteError::Cancelled),
    }
}

/// A stream being read: the turn so far and the client's own limit.
struct Turn {
    turn: RemoteTurn,
    max_tokens: Option<u32>,
    /// The stream is ollama's native newline-delimited JSON, not OpenAI's SSE.
    ollama_native: bool,
    /// The text so far ends inside `<think>`: the last chunk was on the reasoning channel.
    thinking: bool,
}

/// What one event (or line) does to the stream: `Some` ends it.
type EventEnd = Result<Option<StreamEnd>, RemoteError>;

impl Turn {
    /// One event's data; `Some` when it ends the stream.
    fn on_event(
        &mut self,
        data: &str,
        at: Duration,
        on_text: &mut (dyn FnMut(&str, Duration) + Send),
    ) -> EventEnd {
        let data = data.trim();
        if self.ollama_native {
            return self.on_ollama_line(data, at, on_text);
        }
        if data == "[DONE]" {
            return Ok(Some(StreamEnd::Done));
        }
        if data.is_empty() {
            return Ok(None);
        }
        let event: wire::ChatChunk = self.read_event(data, "event data")?;
        self.seen(event.error.as_ref(), event.model)?;
        let usage = event.usage.map(ServerUsage::from);
        // Only choice 0 is the answer (a server asked for one choice sends only it; one that
        // sends others must not mix them in, issue 57 item 12); an entry without `index` is
        // taken as choice 0.
        let choice = (event.choices.into_iter().flatten()).find(|c| c.index.unwrap_or(0) == 0);
        if let Some(reason) = choice.as_ref().and_then(|c| c.finish_reason.clone()) {
            self.turn.finish_reason = Some(reason);
        }
        let delta = choice.as_ref().and_then(|c| c.delta.as_ref());
        let text = Delta::of(delta, |m| {
            // A server that sends both channels' names sends the same text twice: one is taken.
            Some(&m.reasoning_content)
                .filter(|r| r.as_deref().is_some_and(|r| !r.is_empty()))
                .unwrap_or(&m.reasoning)
        });
        let tokens = usage.map(|u| u.completion_tokens);
        self.chunk(choice.is_some(), text, at, tokens, on_text)?;
        let timeline = &mut self.turn.timeline;
        if usage.is_some() {
            timeline.usage = usage;
        }
        if let Some(t) = event.timings {
            timeline.server_timings = Some(t.into());
        }
        if let Some(r) = event.metrics.and_then(wire::VllmMetrics::reported) {
            timeline.server_reported = Some(r);
        }
        Ok(None)
    }

    /// An event's (or a line's) JSON as `T`: text that is not JSON is quoted, a field of the
    /// wrong type is named.
    fn read_event<T: DeserializeOwned>(&self, data: &str, what: &str) -> Result<T, RemoteError> {
        wire::parse(data.as_bytes()).map_err(|e| {
            RemoteError::Malformed(match e {
                wire::WireError::Field(e) => format!("{what}: {e}"),
                wire::WireError::NotJson(e) => {
                    format!("{what} is not JSON ({e}): {}", error_excerpt(data))
                }
            })
        })
    }

    /// An event's `error` field is the server's error; the first `model` named is kept.
    fn seen(&mut self, error: Option<&Value>, model: Option<String>) -> Result<(), RemoteError> {
        if let Some(err) = error {
            return Err(RemoteError::ServerError(error_excerpt(&err.to_string())));
        }
        if self.turn.model.is_none() {
            self.turn.model = model;
        }
        Ok(())
    }

    /// One event's choice (OpenAI's choice 0, ollama's `message`), timed, and its text on
    /// either channel, when it has any. Each chunk with text holds at least one token: one
    /// past max_tokens proves the server ignored it (servers count thinking tokens against it
    /// too), and the stream ends here rather than when the server stops. Reasoning text goes
    /// into the turn's text inside `<think>`…`</think>`, closed when the answer starts (or at
    /// the end: `end_thinking`). A delta with both is the answer's first chunk.
    fn chunk(
        &mut self,
        has_choice: bool,
        text: Delta<'_>,
        at: Duration,
        cumulative_tokens: Option<u64>,
        on_text: &mut (dyn FnMut(&str, Duration) + Send),
    ) -> Result<(), RemoteError> {
        let timeline = &mut self.turn.timeline;
        if has_choice && timeline.choice_chunks.len() < MAX_OUTPUT_TOKENS as usize {
            timeline.choice_chunks.push(at);
        }
        if text.content.is_empty() && text.reasoning.is_empty() {
            return Ok(());
        }
        if let Some(max_tokens) = self.max_tokens {
            if timeline.chunks.len() >= max_tokens as usize {
                return Err(RemoteError::IgnoredMaxTokens { max_tokens });
            }
        }
        timeline.chunks.push(ChunkMark {
            at,
            cumulative_tokens,
            reasoning: text.content.is_empty(),
        });
        let mut shown = String::new();
        if !text.reasoning.is_empty() {
            if !self.thinking {
                shown.push_str(THINK_OPEN);
                self.thinking = true;
            }
            shown.push_str(text.reasoning);
        }
        if !text.content.is_empty() {
            if self.thinking {
                shown.push_str(THINK_CLOSE);
                self.thinking = false;
            }
            shown.push_str(text.content);
        }
        self.turn.text.push_str(&shown);
        on_text(&shown, at);
        Ok(())
    }

    /// Closes a thinking span the stream ended in (the turn ended while thinking), so the
    /// turn's text is always `<think>{reasoning}</think>{content}`.
    fn end_thinking(&mut self) {
        if std::mem::take(&mut self.thinking) {
            self.turn.text.push_str(THINK_CLOSE);
        }
    }

    /// One line of ollama's native `/api/chat` stream: `{"message": {"content"}, "done":
    /// false}` per token, then `{"done": true, "done_reason", "load_duration",
    /// "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"}` (ns).
    fn on_ollama_line(
        &mut self,
        data: &str,
        at: Duration,
        on_text: &mut (dyn FnMut(&str, Duration) + Send),
    ) -> EventEnd {
        if data.is_empty() {
            return Ok(None);
        }
        let line: wire::OllamaLine = self.read_event(data, "stream line")?;
        self.seen(line.error.as_ref(), line.model.clone())?;
        let text = Delta::of(line.message.as_ref(), |m| &m.thinking);
        self.chunk(line.message.is_some(), text, at, None, on_text)?;
        if line.done != Some(true) {
            return Ok(None);
        }
        let timeline = &mut self.turn.timeline;
        (timeline.usage, timeline.server_timings) = (line.usage(), line.timings());
        timeline.server_load_ms = line.load_duration.map(|ns| ns / 1e6);
        self.turn.finish_reason = line.done_reason;
        Ok(Some(StreamEnd::Done))
    }
}

/// One delta's text on each channel (empty: none).
#[derive(Clone, Copy, Default)]
struct Delta<'a> {
    content: &'a str,
    reasoning: &'a str,
}

impl<'a> Delta<'a> {
    /// A message's content and its reasoning channel (`reasoning` picks it).
    fn of(
        message: Option<&'a wire::Message>,
        reasoning: impl FnOnce(&'a wire::Message) -> &'a Option<String>,
    ) -> Self {
        let text = |t: &'a Option<String>| t.as_deref().unwrap_or("");
        message.map_or(Delta::default(), |m| Delta {
            content: text(&m.content),
            reasoning: text(reasoning(m)),
        })
    }
}

/// ollama's native chat request: its sampling settings go in `options` (`num_predict` is its
/// `max_tokens`); it has no `ignore_eos`.
fn ollama_request_body(r: &ChatRequest) -> Value {
    let mut options = serde_json::Map::new();
    insert_present(
        &mut options,
        [
            ("num_predict", r.max_tokens.map(Value::from)),
            ("temperature", r.temperature.map(Value::from)),
            ("top_p", r.top_p.map(Value::from)),
            ("seed", r.seed.map(Value::from)),
        ],
    );
    json!({
        "model": r.model,
        "messages": messages_json(r),
        "stream": true,
        "options": options,
    })
}

/// The conversation as both APIs take it: an earlier answer's thinking span is left out (the
/// servers take an assistant message's content only; its reasoning is not sent back).
fn messages_json(r: &ChatRequest) -> Vec<Value> {
    r.messages
        .iter()
        .map(|m| {
            let content = match m.role {
                crate::engine::Role::Assistant => answer_only(&m.content),
                _ => &m.content,
            };
            json!({"role": m.role.as_str(), "content": content})
        })
        .collect()
}

/// An answer without its leading `<think>`…`</think>` span (all of it when the span is not
/// closed: the turn ended while thinking).
fn answer_only(text: &str) -> &str {
    let Some(thought) = text.trim_start().strip_prefix(THINK_OPEN) else {
        return text;
    };
    thought
        .find(THINK_CLOSE)
        .map_or("", |i| thought[i + THINK_CLOSE.len()..].trim_start())
}

/// Sets each field that has a value; the others stay out of the request.
fn insert_present<const N: usize>(
    into: &mut serde_json::Map<String, Value>,
    fields: [(&str, Option<Value>); N],
) {
    for (k, v) in fields {
        if let Some(v) = v {
            into.insert(k.to_string(), v);
        }
    }
}

/// The request: `include_metrics` asks vLLM for its per-request times (on the final usage
/// chunk, when the server runs with `--enable-per-request-metrics`; other servers ignore it);
/// `continuous_usage` asks vLLM and SGLang for usage with every chunk, so each chunk's tokens
/// are counted exactly (llama-server, ollama and TGI ignore the field).
fn request_body(r: &ChatRequest, include_metrics: bool, continuous_usage: bool) -> Value {
    let mut body = serde_json::Map::new();
    body.insert("model".into(), Value::from(r.model.as_str()));
    body.insert("messages".into(), Value::Array(messages_json(r)));
    body.insert("stream".into(), Value::Bool(true));
    let mut stream_options = serde_json::Map::new();
    stream_options.insert("include_usage".into(), Value::Bool(true));
    if continuous_usage {
        stream_options.insert("continuous_usage_stats".into(), Value::Bool(true));
    }
    body.insert("stream_options".into(), Value::Object(stream_options));
    insert_present(
        &mut body,
        [
            ("max_tokens", r.max_tokens.map(Value::from)),
            ("temperature", r.temperature.map(Value::from)),
            ("top_p", r.top_p.map(Value::from)),
            ("seed", r.seed.map(Value::from)),
            ("ignore_eos", r.ignore_eos.then_some(Value::Bool(true))),
            (
                "include_metrics",
                include_metrics.then_some(Value::Bool(true)),
            ),
        ],
    );
    Value::Object(body)
}

/// TGI's timing headers (`x-queue-time`, `x-inference-time`, `x-time-per-token`, in ms), when
/// the response has any of them.
fn parse_tgi_headers(headers: &reqwest::header::HeaderMap) -> Option<ServerReported> {
    let f = |k: &str| headers.get(k)?.to_str().ok()?.trim().parse::<f64>().ok();
    let r = ServerReported {
        source: ServerTimingSource::Tgi,
        queue_ms: f("x-queue-time"),
        first_token_ms: None,
        decode_ms: None,
        inference_ms: f("x-inference-time"),
        tpot_ms: f("x-time-per-token"),
    };
    (!r.is_empty()).then_some(r)
}

/// At most 300 characters of a server's error body, on one line.
fn error_excerpt(body: &str) -> String {
    let one_line: String = body
        .chars()
        .map(|c| {
            if c.is_control() || crate::text::is_unsafe(c) {
                ' '
            } else {
                c
            }
        })
        .collect();
    let trimmed = one_line.trim();
    if trimmed.is_empty() {
        return "(empty body)".into();
    }
    let cut = trimmed.char_indices().nth(300);
    cut.map_or_else(
        || trimmed.to_string(),
        |(i, _)| format!("{}…", &trimmed[..i]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Role;

    #[test]
    fn the_body_asks_for_usage_and_sends_only_what_is_set() {
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::new(Role::User, "hi")],
            max_tokens: Some(8),
            temperature: None,
            top_p: None,
            seed: None,
            ignore_eos: false,
        };
        let plain = request_body(&request, false, false);
        assert!(plain.get("include_metrics").is_none());
        assert!(plain["stream_options"]
            .get("continuous_usage_stats")
            .is_none());
        let body = request_body(&request, true, true);
        assert_eq!(body["include_metrics"], true);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["stream_options"]["continuous_usage_stats"], true);
        assert_eq!(body["max_tokens"], 8);
        assert!(body.get("temperature").is_none());
        assert!(body.get("ignore_eos").is_none());
    }

    #[test]
    fn an_earlier_answers_thinking_is_not_sent_back() {
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage::new(Role::User, "<think>a user may write this</think>"),
                ChatMessage::new(Role::Assistant, "<think>let me see</think>\n\nFour."),
                ChatMessage::new(Role::Assistant, "<think>cut off while thinking"),
                ChatMessage::new(Role::Assistant, "Plain <think>inside</think> text."),
            ],
            max_tokens: None,
            temperature: None,
            top_p: None,
            seed: None,
            ignore_eos: false,
        };
        let body = request_body(&request, false, false);
        let contents: Vec<&str> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(
            contents,
            [
                "<think>a user may write this</think>",
                "Four.",
                "",
                "Plain <think>inside</think> text."
            ]
        );
    }

    /// A turn before its first event (`ollama_native`: the native `/api/chat` stream).
    fn empty_turn(ollama_native: bool) -> Turn {
        Turn {
            turn: RemoteTurn {
                text: String::new(),
                timeline: RemoteTimeline::default(),
                finish_reason: None,
                model: None,
                end: Ok(StreamEnd::Done),
                notes: Vec::new(),
            },
            max_tokens: None,
            ollama_native,
            thinking: false,
        }
    }

    /// A reasoning delta opens the thinking span, the first content closes it; choice 1 of an
    /// event is never mixed in and choice 0 after it is kept whole.
    #[test]
    fn reasoning_deltas_are_wrapped_timed_and_only_choice_0_is_shown() {
        let mut turn = empty_turn(false);
        let mut shown = Vec::new();
        let mut on_text = |t: &str, _: Duration| shown.push(t.to_string());
        let ms = Duration::from_millis;
        for (i, data) in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Hmm"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":", two"}}]}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"Four"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"."}}]}"#,
        ]
        .iter()
        .enumerate()
        {
            let at = ms(10 * (i as u64 + 1));
            assert_eq!(turn.on_event(data, at, &mut on_text).unwrap(), None);
        }
        turn.end_thinking();
        assert_eq!(turn.turn.text, "<think>Hmm, two</think>Four.");
        assert_eq!(shown, ["<think>Hmm", ", two", "</think>Four", "."]);
        let t = &turn.turn.timeline;
        assert_eq!(t.ttft(), Some(ms(20)));
        assert_eq!(t.ttfo(), Some(ms(40)));
        let channels: Vec<bool> = t.chunks.iter().map(|c| c.reasoning).collect();
        assert_eq!(channels, [true, true, false, false]);
        // A stream that ends while thinking gets its span closed.
        let mut still = Turn {
            thinking: false,
            ..turn
        };
        still.turn.text.clear();
        let data = r#"{"choices":[{"index":0,"delta":{"reasoning_content":"x"}}]}"#;
        still.on_event(data, ms(60), &mut |_, _| {}).unwrap();
        still.end_thinking();
        assert_eq!(still.turn.text, "<think>x</think>");
    }

    #[test]
    fn ollamas_thinking_field_is_the_reasoning_channel() {
        let mut turn = empty_turn(true);
        let ms = Duration::from_millis;
        let lines = [
            r#"{"message":{"role":"assistant","content":"","thinking":"Let me"},"done":false}"#,
            r#"{"message":{"role":"assistant","content":"Yes","thinking":""},"done":false}"#,
        ];
        for (i, line) in lines.iter().enumerate() {
            turn.on_event(line, ms(10 * (i as u64 + 1)), &mut |_, _| {})
                .unwrap();
        }
        assert_eq!(turn.turn.text, "<think>Let me</think>Yes");
        assert_eq!(turn.turn.timeline.ttft(), Some(ms(10)));
        assert_eq!(turn.turn.timeline.ttfo(), Some(ms(20)));
    }

    /// A field of the wrong type, or a required one missing, is an error that names it by its
    /// path; what is well-typed is read as before (usage, timings, vLLM's metrics, ollama's
    /// final line).
    #[test]
    fn a_wrong_typed_or_missing_field_is_named() {
        let error_of = |native: bool, data: &str| {
            let mut turn = empty_turn(native);
            match turn.on_event(data, Duration::ZERO, &mut |_, _| {}) {
                Err(RemoteError::Malformed(said)) => said,
                other => panic!("{data}: expected a malformed event, got {other:?}"),
            }
        };
        for (native, data, named) in [
            (
                false,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":"x"}}"#,
                "usage.completion_tokens: invalid type: string \"x\", expected u64",
            ),
            (
                false,
                r#"{"choices":[],"usage":{"completion_tokens":2}}"#,
                "usage: missing field `prompt_tokens`",
            ),
            (
                false,
                r#"{"choices":[{"index":0,"delta":{"content":7}}]}"#,
                "choices[0].delta.content: invalid type: integer `7`",
            ),
            (
                false,
                r#"{"choices":{"index":0}}"#,
                "choices: invalid type: map",
            ),
            (
                false,
                r#"{"choices":[],"timings":{"prompt_n":1,"prompt_ms":"2","predicted_n":1,"predicted_ms":1}}"#,
                "timings.prompt_ms: invalid type: string",
            ),
            (
                false,
                r#"{"choices":[],"metrics":{"mean_itl_ms":true}}"#,
                "metrics.mean_itl_ms: invalid type: boolean",
            ),
            (
                true,
                r#"{"done":true,"eval_count":-1}"#,
                "eval_count: invalid value: integer `-1`",
            ),
        ] {
            let said = error_of(native, data);
            assert!(said.starts_with("event data: ") || native, "{said}");
            assert!(said.contains(named), "{data}: {said}");
        }
        // Not JSON at all is said so, with the text.
        let said = error_of(false, "{not json");
        assert!(said.starts_with("event data is not JSON ("), "{said}");
        assert!(said.ends_with(": {not json"), "{said}");
        // Well-typed: each format's figures are read, nulls are absent fields.
        let mut turn = empty_turn(false);
        let data = r#"{"model":"m","choices":[{"index":0,"finish_reason":null,"delta":{"content":"Hi"}}],
            "usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}},
            "timings":{"prompt_n":1,"prompt_ms":2.5,"cache_n":2,"predicted_n":1,"predicted_ms":4},
            "metrics":{"queue_time_ms":1.5,"time_to_first_token_ms":null}}"#;
        turn.on_event(data, Duration::ZERO, &mut |_, _| {}).unwrap();
        let t = &turn.turn.timeline;
        let usage = t.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (3, 1));
        assert_eq!(usage.cached_tokens, Some(2));
        let timings = t.server_timings.unwrap();
        assert_eq!(
            (timings.prompt_ms, timings.cache_n, timings.predicted_ms),
            (2.5, Some(2), 4.0)
        );
        let reported = t.server_reported.unwrap();
        assert_eq!(
            (reported.queue_ms, reported.first_token_ms),
            (Some(1.5), None)
        );
        assert_eq!(
            (turn.turn.model.as_deref(), turn.turn.text.as_str()),
            (Some("m"), "Hi")
        );
        let mut ollama = empty_turn(true);
        let line = r#"{"message":{"content":""},"done":true,"done_reason":"stop","load_duration":2000000,
            "prompt_eval_count":5,"prompt_eval_duration":3000000,"eval_count":4,"eval_duration":8000000}"#;
        let end = ollama
            .on_event(line, Duration::ZERO, &mut |_, _| {})
            .unwrap();
        assert_eq!(end, Some(StreamEnd::Done));
        let t = &ollama.turn.timeline;
        assert_eq!(
            t.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((5, 4))
        );
        let timings = t.server_timings.unwrap();
        assert_eq!((timings.prompt_ms, timings.predicted_ms), (3.0, 8.0));
        assert_eq!(t.server_load_ms, Some(2.0));
        assert_eq!(ollama.turn.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn endpoint_checks_the_url_and_finds_the_root() {
        let e = Endpoint::new("http://127.0.0.1:8080/v1/", None, Duration::from_secs(5)).unwrap();
        assert_eq!(e.base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(e.root(), "http://127.0.0.1:8080");
        assert_eq!(e.host_label(), "http://127.0.0.1:8080");
        assert!(Endpoint::new("ftp://x/v1", None, Duration::from_secs(1)).is_err());
        assert!(Endpoint::new("not a url", None, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn the_key_never_prints() {
        let key = ApiKey::new("  sk-secret-123\n").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        assert_eq!(key.header_value(), "Bearer sk-secret-123");
        assert!(ApiKey::new("  ").is_err());
    }
}
