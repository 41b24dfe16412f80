//! The HTTP side: one `reqwest` client (rustls), a cheap round-trip probe, and one streamed
//! chat completion parsed by `eventsource-stream`. Every content chunk is timestamped the
//! moment its event is parsed; the request's clock starts just before it is sent.

use std::time::{Duration, Instant};

use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{ApiKey, RemoteError};
use crate::engine::ChatMessage;
use crate::metrics::remote::{ChunkMark, RemoteTimeline, ServerTimings, ServerUsage};

/// A streamed event longer than this without a line break is refused (a broken or hostile
/// server must not make the client buffer without bound).
pub(crate) const MAX_EVENT_BYTES: usize = 4 << 20;

/// How often a stream that has no new event checks whether it was cancelled: Esc closes the
/// stream within this long even while the server sends nothing.
const CANCEL_POLL: Duration = Duration::from_millis(10);

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
        let parsed = reqwest::Url::parse(url).map_err(|e| RemoteError::BadUrl {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(RemoteError::BadUrl {
                url: url.to_string(),
                reason: format!("scheme '{}' is not http or https", parsed.scheme()),
            });
        }
        if parsed.query().is_some() || !parsed.username().is_empty() {
            return Err(RemoteError::BadUrl {
                url: url.to_string(),
                reason: "no query string or user name, please (the key goes in --api-key-env)"
                    .into(),
            });
        }
        Ok(Self {
            base_url: url.trim_end_matches('/').to_string(),
            api_key,
            timeout,
        })
    }

    /// The server's root (the base without a trailing `/v1`), where llama-server keeps
    /// `/health`, `/metrics`, `/tokenize` and `/detokenize`.
    pub(crate) fn root(&self) -> &str {
        self.base_url.strip_suffix("/v1").unwrap_or(&self.base_url)
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
}

pub(crate) struct RemoteClient {
    http: reqwest::Client,
    endpoint: Endpoint,
}

/// What the byte stream can fail with before SSE parsing.
#[derive(Debug)]
enum ReadFail {
    Transport(String),
    TooLarge,
}

impl std::fmt::Display for ReadFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFail::Transport(s) => f.write_str(s),
            ReadFail::TooLarge => f.write_str("event too large"),
        }
    }
}

impl std::error::Error for ReadFail {}

/// The error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
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
            .user_agent(concat!("tokscope/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RemoteError::Connect {
                url: endpoint.host_label(),
                detail: chain(&e),
            })?;
        Ok(Self { http, endpoint })
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn with_auth(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.endpoint.api_key {
            Some(key) => builder.header(reqwest::header::AUTHORIZATION, key.header_value()),
            None => builder,
        }
    }

    fn send_error(&self, url: &str, e: reqwest::Error) -> RemoteError {
        let detail = chain(&e);
        let lower = detail.to_lowercase();
        if e.is_timeout() {
            return RemoteError::Timeout {
                url: url.to_string(),
                secs: self.endpoint.timeout.as_secs(),
                what: "connecting",
            };
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
            .map_err(|_| RemoteError::Timeout {
                url: url.to_string(),
                secs: self.endpoint.timeout.as_secs(),
                what: "waiting for the response headers",
            })?
            .map_err(|e| self.send_error(url, e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = tokio::time::timeout(self.endpoint.timeout, response.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Err(RemoteError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: error_excerpt(&body),
            hint: RemoteError::status_hint(status.as_u16()),
        })
    }

    async fn get_json(&self, url: &str) -> Result<Value, RemoteError> {
        let response = self.send(url, self.http.get(url)).await?;
        let text = tokio::time::timeout(self.endpoint.timeout, response.text())
            .await
            .map_err(|_| RemoteError::Timeout {
                url: url.to_string(),
                secs: self.endpoint.timeout.as_secs(),
                what: "reading the body",
            })?
            .map_err(|e| self.send_error(url, e))?;
        serde_json::from_str(&text).map_err(|e| RemoteError::Malformed(format!("{url}: {e}")))
    }

    /// The model ids of `GET /v1/models`, in the server's order.
    pub(crate) async fn models(&self) -> Result<Vec<String>, RemoteError> {
        let url = format!("{}/models", self.endpoint.base_url);
        let v = self.get_json(&url).await?;
        Ok(v.get("data")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| m.get("id").and_then(Value::as_str).map(String::from))
                    .collect()
            })
            .unwrap_or_default())
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

    /// `POST` JSON under the server's root (llama-server's `/tokenize`, `/detokenize`).
    pub(crate) async fn root_post(&self, path: &str, body: &Value) -> Result<Value, RemoteError> {
        let url = format!("{}{path}", self.endpoint.root());
        let response = self.send(&url, self.http.post(&url).json(body)).await?;
        let text = response
            .text()
            .await
            .map_err(|e| self.send_error(&url, e))?;
        serde_json::from_str(&text).map_err(|e| RemoteError::Malformed(format!("{url}: {e}")))
    }

    /// Streams one chat completion. `on_text` gets each content delta and its offset from the
    /// request. Failures before the stream starts are `Err`; a stream that breaks later
    /// returns its partial turn with the error in `end`. `cancelled` is checked at every event
    /// and every 10 ms while none arrives; dropping the stream closes the connection, which
    /// makes the server stop generating.
    pub(crate) async fn stream_chat(
        &self,
        request: &ChatRequest,
        network_rtt: Option<Duration>,
        cancelled: &(dyn Fn() -> bool + Send + Sync),
        on_text: &mut (dyn FnMut(&str, Duration) + Send),
    ) -> Result<RemoteTurn, RemoteError> {
        let url = format!("{}/chat/completions", self.endpoint.base_url);
        let body = request_body(request);
        let mut sent_at = Instant::now();
        let response = match self.send(&url, self.http.post(&url).json(&body)).await {
            // The pool handed out a kept-alive connection the server had just closed (cpp-httplib
            // closes idle ones when its threads are busy): the request never got a response, so
            // it is sent once more on a fresh connection, and its clock starts again there.
            Err(RemoteError::Transport { detail, .. }) if stale_connection(&detail) => {
                sent_at = Instant::now();
                self.send(&url, self.http.post(&url).json(&body)).await?
            }
            other => other?,
        };
        let mut timeline = RemoteTimeline {
            network_rtt,
            headers_at: Some(sent_at.elapsed()),
            ..Default::default()
        };
        let mut since_newline = 0usize;
        let bytes = response.bytes_stream().map(move |item| match item {
            Ok(b) => {
                match b.iter().rposition(|&c| c == b'\n') {
                    Some(i) => since_newline = b.len() - i - 1,
                    None => since_newline += b.len(),
                }
                if since_newline > MAX_EVENT_BYTES {
                    Err(ReadFail::TooLarge)
                } else {
                    Ok(b)
                }
            }
            Err(e) => Err(ReadFail::Transport(chain(&e))),
        });
        let mut events = Box::pin(bytes.eventsource());
        let mut turn = RemoteTurn {
            text: String::new(),
            timeline: RemoteTimeline::default(),
            finish_reason: None,
            model: None,
            end: Ok(StreamEnd::Done),
        };
        let end = 'stream: loop {
            // `next()` is cancel-safe: polling it again after a timeout loses nothing.
            let stalled_at = Instant::now() + self.endpoint.timeout;
            let next = loop {
                if cancelled() {
                    break 'stream Ok(StreamEnd::Cancelled);
                }
                match tokio::time::timeout(CANCEL_POLL, events.next()).await {
                    Ok(n) => break n,
                    Err(_) if Instant::now() >= stalled_at => {
                        break 'stream Err(RemoteError::Timeout {
                            url: url.clone(),
                            secs: self.endpoint.timeout.as_secs(),
                            what: "the stream stalled",
                        })
                    }
                    Err(_) => {}
                }
            };
            let event = match next {
                None => {
                    break Err(RemoteError::ClosedEarly {
                        chunks: timeline.chunks.len(),
                    })
                }
                Some(Err(EventStreamError::Transport(ReadFail::TooLarge))) => {
                    break Err(RemoteError::ChunkTooLarge {
                        limit_bytes: MAX_EVENT_BYTES,
                    })
                }
                Some(Err(EventStreamError::Transport(ReadFail::Transport(detail)))) => {
                    break Err(RemoteError::Transport {
                        url: url.clone(),
                        detail,
                    })
                }
                Some(Err(e)) => break Err(RemoteError::Malformed(e.to_string())),
                Some(Ok(event)) => event,
            };
            let at = sent_at.elapsed();
            let data = event.data.trim();
            if data == "[DONE]" {
                break Ok(StreamEnd::Done);
            }
            if data.is_empty() {
                continue;
            }
            let value: Value = match serde_json::from_str(data) {
                Ok(v) => v,
                Err(e) => {
                    break Err(RemoteError::Malformed(format!(
                        "event data is not JSON ({e}): {}",
                        error_excerpt(data)
                    )))
                }
            };
            if let Some(err) = value.get("error") {
                break Err(RemoteError::ServerError(error_excerpt(&err.to_string())));
            }
            if turn.model.is_none() {
                turn.model = value.get("model").and_then(Value::as_str).map(String::from);
            }
            let usage = value.get("usage").and_then(parse_usage);
            let choice = value
                .get("choices")
                .and_then(Value::as_array)
                .and_then(|c| c.first());
            let content = choice
                .and_then(|c| c.get("delta"))
                .and_then(|d| d.get("content"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if let Some(reason) = choice
                .and_then(|c| c.get("finish_reason"))
                .and_then(Value::as_str)
            {
                turn.finish_reason = Some(reason.to_string());
            }
            if !content.is_empty() {
                timeline.chunks.push(ChunkMark {
                    at,
                    cumulative_tokens: usage.map(|u| u.completion_tokens),
                });
                turn.text.push_str(content);
                on_text(content, at);
            }
            if usage.is_some() {
                timeline.usage = usage;
            }
            if let Some(t) = value.get("timings").and_then(parse_timings) {
                timeline.server_timings = Some(t);
            }
        };
        timeline.finished_at = sent_at.elapsed();
        turn.timeline = timeline;
        turn.end = end;
        Ok(turn)
    }
}

fn request_body(r: &ChatRequest) -> Value {
    let messages: Vec<Value> = r
        .messages
        .iter()
        .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
        .collect();
    let mut body = json!({
        "model": r.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let fields = [
        ("max_tokens", r.max_tokens.map(Value::from)),
        ("temperature", r.temperature.map(Value::from)),
        ("top_p", r.top_p.map(Value::from)),
        ("seed", r.seed.map(Value::from)),
        ("ignore_eos", r.ignore_eos.then_some(Value::Bool(true))),
    ];
    if let Some(obj) = body.as_object_mut() {
        for (k, v) in fields {
            if let Some(v) = v {
                obj.insert(k.to_string(), v);
            }
        }
    }
    body
}

fn parse_usage(v: &Value) -> Option<ServerUsage> {
    let prompt_tokens = v.get("prompt_tokens")?.as_u64()?;
    let completion_tokens = v.get("completion_tokens")?.as_u64()?;
    let cached_tokens = v
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64);
    Some(ServerUsage {
        prompt_tokens,
        completion_tokens,
        cached_tokens,
    })
}

fn parse_timings(v: &Value) -> Option<ServerTimings> {
    Some(ServerTimings {
        prompt_n: v.get("prompt_n")?.as_u64()?,
        prompt_ms: v.get("prompt_ms")?.as_f64()?,
        cache_n: v.get("cache_n").and_then(Value::as_u64),
        predicted_n: v.get("predicted_n")?.as_u64()?,
        predicted_ms: v.get("predicted_ms")?.as_f64()?,
    })
}

/// At most 300 characters of a server's error body, on one line.
fn error_excerpt(body: &str) -> String {
    let one_line: String = body
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let trimmed = one_line.trim();
    if trimmed.is_empty() {
        return "(empty body)".into();
    }
    match trimmed.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &trimmed[..i]),
        None => trimmed.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Role;

    #[test]
    fn the_body_asks_for_usage_and_sends_only_what_is_set() {
        let body = request_body(&ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::new(Role::User, "hi")],
            max_tokens: Some(8),
            temperature: None,
            top_p: None,
            seed: None,
            ignore_eos: false,
        });
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["max_tokens"], 8);
        assert!(body.get("temperature").is_none());
        assert!(body.get("ignore_eos").is_none());
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
