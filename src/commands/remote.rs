//! The remote flags shared by `run --url` and `load`, how they become an [`Endpoint`], and
//! `tokscope run --url`: one streamed answer from an OpenAI-compatible server, measured.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::commands::{Failure, FAILURE, USAGE};
use crate::config::Settings;
use crate::metrics::remote::RemoteSummary;
use crate::metrics::{fmt_opt, ms};
use crate::remote::{ApiKey, ChatRequest, Endpoint, RemoteClient, RemoteError, StreamEnd};

/// Where the remote server is and how to authenticate.
#[derive(Debug, Args, Clone)]
pub struct RemoteArgs {
    /// An OpenAI-compatible API base, e.g. http://127.0.0.1:8080/v1 (llama-server, vLLM,
    /// SGLang, TGI, ollama). With it, `-m/--model` is the server's model name (default: the
    /// first of GET /v1/models).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The name of the environment variable that holds the API key.
    #[arg(long, value_name = "VAR", conflicts_with = "api_key_file")]
    pub api_key_env: Option<String>,
    /// A file that holds the API key.
    #[arg(long, value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
    /// Seconds to wait for the response headers and between two reads of the stream.
    #[arg(long, value_name = "S", default_value_t = DEFAULT_TIMEOUT_S)]
    pub timeout: f64,
}

/// The `--timeout` default, in seconds.
const DEFAULT_TIMEOUT_S: f64 = 60.0;

// By hand, so that a default `RemoteArgs` equals an empty command line's (the bare command
// tells whether chat flags were given by comparing with the default).
impl Default for RemoteArgs {
    fn default() -> Self {
        Self {
            url: None,
            api_key_env: None,
            api_key_file: None,
            timeout: DEFAULT_TIMEOUT_S,
        }
    }
}

impl RemoteArgs {
    pub(crate) fn endpoint(&self, url: &str) -> Result<Endpoint, Failure> {
        let key = match (&self.api_key_env, &self.api_key_file) {
            (Some(var), _) => {
                let raw = std::env::var(var).map_err(|_| {
                    Failure::new(
                        USAGE,
                        format!("--api-key-env {var}: the environment variable is not set"),
                    )
                })?;
                Some(ApiKey::new(&raw).map_err(|e| Failure::new(USAGE, e.to_string()))?)
            }
            (None, Some(path)) => {
                Some(ApiKey::from_file(path).map_err(|e| Failure::new(USAGE, e.to_string()))?)
            }
            (None, None) => None,
        };
        let timeout = self.endpoint_timeout()?;
        Endpoint::new(url, key, timeout).map_err(|e| Failure::new(USAGE, e.to_string()))
    }

    /// `--timeout` as a duration, checked.
    pub(crate) fn endpoint_timeout(&self) -> Result<Duration, Failure> {
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 86_400.0) {
            return Err(Failure::new(
                USAGE,
                format!(
                    "--timeout {}: expected seconds between 0 and 86400",
                    self.timeout
                ),
            ));
        }
        Ok(Duration::from_millis((self.timeout * 1000.0).round() as u64))
    }
}

impl From<RemoteError> for Failure {
    fn from(e: RemoteError) -> Self {
        let code = match e {
            RemoteError::BadUrl { .. } | RemoteError::BadKey(_) => USAGE,
            _ => FAILURE,
        };
        Failure::new(code, e.to_string())
    }
}

/// A current-thread tokio runtime for the remote commands.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(FAILURE, format!("cannot start the async runtime: {e}")))
}

/// Everything `run --url --json` prints. The key is never part of it.
#[derive(Debug, Serialize)]
pub(crate) struct RemoteRunReport {
    pub text: String,
    /// "done", "cancelled", or the error that ended the stream early.
    pub end: String,
    pub finish_reason: Option<String>,
    pub metrics: RemoteSummary,
    /// What the token counts are based on, in words.
    pub token_count_source: &'static str,
    /// Offset of each content chunk from the request, in ms.
    pub chunk_ms: Vec<f64>,
    /// What the server reported that could not be true and was ignored.
    pub notes: Vec<String>,
    pub server: ServerStamp,
}

#[derive(Debug, Serialize)]
pub(crate) struct ServerStamp {
    /// Scheme, host and port only.
    pub host: String,
    pub model: String,
    /// The client machine's CPU, where it can be read.
    pub client_cpu: Option<String>,
}

/// `tokscope run --url URL`.
pub(crate) fn run_remote(
    args: &crate::commands::run::RunArgs,
    url: &str,
    settings: &Settings,
) -> Result<(), Failure> {
    let endpoint = args.remote.endpoint(url)?;
    let prompt = crate::commands::run::read_prompt(args)?;
    let messages = crate::commands::model::single_turn(settings, &prompt);
    let rt = runtime()?;
    let client = RemoteClient::new(endpoint)?;
    let json = args.json;
    let model_flag = args
        .model
        .model
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned());
    let turn = rt.block_on(async {
        let rtt = client.probe_rtt().await?;
        let model = match model_flag {
            Some(m) => m,
            None => client.default_model().await?,
        };
        let request = ChatRequest {
            model: model.clone(),
            messages,
            max_tokens: Some(settings.max_tokens),
            temperature: Some(settings.sampling.temperature),
            top_p: Some(settings.sampling.top_p),
            seed: Some(settings.sampling.seed),
            ignore_eos: args.ignore_eos,
        };
        let mut stdout = std::io::stdout();
        // --token-lines: one line per streamed chunk (the server's unit; a chunk may hold
        // several tokens), indexed in arrival order.
        let mut chunk = 0usize;
        let mut on_text = |text: &str, _at: Duration| {
            if args.token_lines {
                let line = serde_json::json!({ "index": chunk, "text": text });
                chunk += 1;
                let _ = writeln!(stdout, "{line}");
                let _ = stdout.flush();
            } else if !json {
                let _ = stdout.write_all(text.as_bytes());
                let _ = stdout.flush();
            }
        };
        let turn = client
            .stream_chat(&request, Some(rtt), &|| false, &mut on_text)
            .await?;
        Ok::<_, RemoteError>((turn, model))
    });
    let (turn, model) = turn?;
    let summary = turn.timeline.summary();
    let report = RemoteRunReport {
        text: turn.text.clone(),
        end: match &turn.end {
            Ok(StreamEnd::Done) => "done".into(),
            Ok(StreamEnd::Cancelled) => "cancelled".into(),
            Err(e) => e.to_string(),
        },
        finish_reason: turn.finish_reason.clone(),
        token_count_source: summary.token_count_source.label(),
        chunk_ms: turn.timeline.chunks.iter().map(|c| ms(c.at)).collect(),
        notes: turn.notes.clone(),
        metrics: summary,
        server: ServerStamp {
            host: client.endpoint().host_label(),
            model: turn.model.clone().unwrap_or(model),
            client_cpu: crate::hw::cpu_name(),
        },
    };
    let mut stdout = std::io::stdout().lock();
    if json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure::new(FAILURE, e.to_string()))?;
        writeln!(stdout, "{text}")?;
    } else {
        if !args.token_lines {
            writeln!(stdout)?;
        }
        eprint!("{}", human_summary(&report));
    }
    stdout.flush()?;
    match turn.end {
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The stderr summary of `run --url`.
pub(crate) fn human_summary(r: &RemoteRunReport) -> String {
    let m = &r.metrics;
    let opt_u = |v: Option<u64>| v.map_or("—".to_string(), |v| v.to_string());
    let mut out = format!("── {} · model {}\n", r.server.host, r.server.model);
    out.push_str(&format!(
        "prompt   {} tokens ({} from the server's cache)\n",
        opt_u(m.prompt_tokens),
        opt_u(m.server_cached_tokens)
    ));
    out.push_str(&format!(
        "TTFT     {} ms (network RTT {} ms, server prompt {} ms, queue+transport {} ms)\n",
        fmt_opt(m.ttft_ms, 1),
        fmt_opt(m.network_rtt_ms, 2),
        fmt_opt(m.server_prompt_ms, 1),
        fmt_opt(m.queue_transport_ms, 1),
    ));
    out.push_str(&format!(
        "decode   {} tokens in {} chunks · {} tok/s · TPOT {} ms (server {} ms)\n",
        m.tokens_generated,
        m.chunks,
        fmt_opt(m.decode_tok_per_s, 1),
        fmt_opt(m.tpot_ms, 2),
        fmt_opt(m.server_tpot_ms, 2),
    ));
    out.push_str(&format!("tokens   {}\n", r.token_count_source));
    if let Some(itl) = &m.itl {
        out.push_str(&format!(
            "ITL      mean {:.2} · p50 {:.2} · p90 {:.2} · p99 {:.2} · max {:.2} ms\n",
            itl.mean_ms, itl.p50_ms, itl.p90_ms, itl.p99_ms, itl.max_ms
        ));
    }
    out.push_str(&format!("E2E      {:.1} ms · end: {}\n", m.e2e_ms, r.end));
    for note in &r.notes {
        out.push_str(&format!("note     {note}\n"));
    }
    out
}
