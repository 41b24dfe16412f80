//! The remote backend: a client for OpenAI-compatible servers (vLLM, SGLang, TGI,
//! llama-server, ollama) that streams one chat completion over SSE and records, for every
//! content chunk, when it arrived, plus what the server says about itself (usage, llama-server's
//! `timings`). The figures are derived in `metrics::remote`; this module only measures.
//!
//! The API key lives in [`ApiKey`], which never prints itself and goes only into the
//! `Authorization` header.

mod client;
mod error;
mod worker;

pub(crate) use client::{ChatRequest, Endpoint, RemoteClient, RemoteTurn, StreamEnd};
pub(crate) use error::RemoteError;
pub(crate) use worker::{is_url, spawn, Main, ServerFacts, REMOTE_BACKEND};

/// A bearer token. `Debug` and `Display` never show it.
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    /// A key read from an environment variable or a file (surrounding whitespace removed).
    pub(crate) fn new(raw: &str) -> Result<Self, RemoteError> {
        let key = raw.trim();
        if key.is_empty() {
            return Err(RemoteError::BadKey("the API key is empty".into()));
        }
        if key.chars().any(|c| c.is_control()) {
            return Err(RemoteError::BadKey(
                "the API key contains control characters".into(),
            ));
        }
        Ok(Self(key.to_string()))
    }

    pub(crate) fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}
