//! The remote backend: a client for OpenAI-compatible servers (vLLM, SGLang, TGI,
//! llama-server, ollama) that streams one chat completion over SSE and records, for every
//! content chunk, when it arrived, plus what the server says about itself (usage, llama-server's
//! `timings`). The figures are derived in `metrics::remote`; this module only measures.
//!
//! The API key lives in [`ApiKey`], which never prints itself and goes only into the
//! `Authorization` header.

mod client;
mod error;
mod record;
mod sse;
mod wire;
mod worker;

use std::io::Read;
use std::path::Path;

pub(crate) use client::{ChatRequest, Endpoint, RemoteClient, RemoteTurn, StreamEnd};
pub(crate) use error::RemoteError;
pub(crate) use record::{record, RequestError, RequestRecord};
pub(crate) use worker::{is_url, spawn, Export, Main, ServerFacts, REMOTE_BACKEND};

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

    /// A key read from `path` (`--api-key-file`): a regular file of at most
    /// `MAX_KEY_FILE_BYTES`, never a device (`/dev/zero` never ends), a FIFO (which waits for a
    /// writer) or a directory.
    pub(crate) fn from_file(path: &Path) -> Result<Self, RemoteError> {
        let shown = path.display();
        let bad = |why: String| RemoteError::BadKey(format!("--api-key-file {shown}: {why}"));
        let unreadable = |e: std::io::Error| bad(format!("cannot read it: {e}"));
        let check = |meta: &std::fs::Metadata| {
            if !meta.is_file() {
                return Err(bad(format!(
                    "{}, not a regular file; put the key in a plain file",
                    file_kind(meta)
                )));
            }
            if meta.len() > MAX_KEY_FILE_BYTES {
                return Err(bad(format!(
                    "{} bytes: more than the {MAX_KEY_FILE_BYTES} bytes an API key file may hold; is it the right file?",
                    meta.len()
                )));
            }
            Ok(())
        };
        // Looked at before opening: opening a FIFO would wait for a writer.
        check(&std::fs::metadata(path).map_err(unreadable)?)?;
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        // Should the path become a FIFO between the two looks, opening it does not wait.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
        let file = options.open(path).map_err(unreadable)?;
        check(&file.metadata().map_err(unreadable)?)?;
        let mut bytes = Vec::new();
        file.take(MAX_KEY_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
            return Err(bad(format!(
                "more than the {MAX_KEY_FILE_BYTES} bytes an API key file may hold; is it the right file?"
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
        Self::new(&text).map_err(|e| match e {
            RemoteError::BadKey(why) => bad(why),
            other => other,
        })
    }

    pub(crate) fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

/// The most bytes an `--api-key-file` may hold (keys and tokens are far shorter).
pub(crate) const MAX_KEY_FILE_BYTES: u64 = 16 << 10;

/// What a path that is not a regular file is, in words.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        let kinds = [
            (t.is_fifo(), "a FIFO (named pipe)"),
            (t.is_char_device(), "a character device"),
            (t.is_block_device(), "a block device"),
            (t.is_socket(), "a socket"),
        ];
        if let Some((_, kind)) = kinds.into_iter().find(|(is, _)| *is) {
            return kind;
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}
