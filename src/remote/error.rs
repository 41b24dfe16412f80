//! What can go wrong talking to a remote server, each with a message that says what to do.

/// A remote request's failure. Messages never contain the API key.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum RemoteError {
    #[error("bad URL '{url}': {reason} (expected something like http://127.0.0.1:8080/v1)")]
    BadUrl { url: String, reason: String },
    #[error("bad API key: {0}")]
    BadKey(String),
    #[error("could not connect to {url}: {detail} (is the server running and listening there?)")]
    Connect { url: String, detail: String },
    #[error("TLS failed talking to {url}: {detail} (is it a plain-HTTP server? try http:// instead of https://)")]
    Tls { url: String, detail: String },
    #[error("no answer from {url} within {secs} s ({what}); raise --timeout or check the server")]
    Timeout {
        url: String,
        secs: u64,
        what: &'static str,
    },
    #[error("{url} answered HTTP {status}: {body}{hint}")]
    Status {
        url: String,
        status: u16,
        body: String,
        hint: &'static str,
    },
    #[error("the server reported an error in the middle of the stream: {0}")]
    ServerError(String),
    #[error("malformed server-sent event: {0}")]
    Malformed(String),
    #[error("a streamed event exceeded {limit_bytes} bytes without ending; the stream was closed")]
    ChunkTooLarge { limit_bytes: usize },
    #[error("the stream exceeded {limit_bytes} bytes in all; it was closed there and the partial answer is kept")]
    StreamTooLarge { limit_bytes: usize },
    #[error("{what} from {url} exceeded {limit_bytes} bytes; the read was stopped (is --url the API base of an OpenAI-compatible server?)")]
    BodyTooLarge {
        url: String,
        what: &'static str,
        limit_bytes: usize,
    },
    #[error("the server ignored max_tokens = {max_tokens}: it kept streaming past that many content chunks, so the client closed the stream there (the first {max_tokens} are kept)")]
    IgnoredMaxTokens { max_tokens: u32 },
    #[error("{url} answered HTTP {status} redirecting to {location}, another origin: not followed, so neither the request nor the key goes there (if you trust that server, point --url at it)")]
    Redirect {
        url: String,
        status: u16,
        location: String,
    },
    #[error("the server closed the stream before [DONE] (after {chunks} content chunks); the partial answer is kept")]
    ClosedEarly { chunks: usize },
    #[error("connection to {url} failed while streaming: {detail}")]
    Transport { url: String, detail: String },
    #[error("the server lists no models at {url}; pass --model NAME")]
    NoModels { url: String },
    #[error("cancelled")]
    Cancelled,
}

impl RemoteError {
    /// A short stable name, for the load test's "errors by kind".
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            RemoteError::BadUrl { .. } => "bad_url",
            RemoteError::BadKey(_) => "bad_key",
            RemoteError::Connect { .. } => "connect",
            RemoteError::Tls { .. } => "tls",
            RemoteError::Timeout { .. } => "timeout",
            RemoteError::Status { status, .. } => match status {
                401 | 403 => "http_auth",
                404 => "http_404",
                429 => "http_429",
                500..=599 => "http_5xx",
                _ => "http_other",
            },
            RemoteError::ServerError(_) => "server_error",
            RemoteError::Malformed(_) => "malformed",
            RemoteError::ChunkTooLarge { .. } => "chunk_too_large",
            RemoteError::StreamTooLarge { .. } => "stream_too_large",
            RemoteError::BodyTooLarge { .. } => "body_too_large",
            RemoteError::IgnoredMaxTokens { .. } => "ignored_max_tokens",
            RemoteError::Redirect { .. } => "redirect",
            RemoteError::ClosedEarly { .. } => "closed_early",
            RemoteError::Transport { .. } => "transport",
            RemoteError::NoModels { .. } => "no_models",
            RemoteError::Cancelled => "cancelled",
        }
    }

    /// The hint printed after an HTTP status.
    pub(crate) fn status_hint(status: u16) -> &'static str {
        match status {
            401 | 403 => " (check the key: --api-key-env VAR or --api-key-file PATH)",
            404 => " (wrong path? the URL should be the API base, e.g. http://host:8080/v1)",
            429 => " (the server is rate limiting)",
            500..=599 => " (a server-side failure; see the server's log)",
            _ => "",
        }
    }
}
