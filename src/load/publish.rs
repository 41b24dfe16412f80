//! Where a load test's own figures go besides its report (issue 35, item 5): a Prometheus
//! endpoint served while it runs (`--prometheus ADDR`) and OpenTelemetry GenAI metrics sent
//! over OTLP/HTTP (`--otlp URL`) or written to a file (`--otlp-file PATH`). What is written is
//! `metrics::exposition`'s; this module only serves, sends and writes it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::exposition::ClientMetrics;

/// The most of a scrape's request read: a request head is a few hundred bytes.
const MAX_REQUEST_HEAD: usize = 8 << 10;
/// A scraper that has not sent its whole request in this long is hung up on.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections held at once. One more hangs up on the oldest still open (an idle one: a
/// scrape is answered in milliseconds), so that idle connections can never keep a real
/// scrape waiting, and never take more than this many file descriptors.
const MAX_CONNECTIONS: usize = 64;
/// How long an OTLP export may take, and how much of a refusal's body is shown.
const OTLP_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_REFUSAL_EXCERPT: usize = 300;

/// The figures a load test shares with the exporters.
pub(crate) type Shared = Arc<Mutex<ClientMetrics>>;

/// A running `/metrics` endpoint; it stops when dropped.
pub(crate) struct Exposition {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Exposition {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What `--prometheus`, `--otlp` and `--otlp-file` asked for (`load` and `chat --url` take the
/// same flags), checked before anything runs.
pub(crate) struct Exporters {
    pub prometheus: Option<SocketAddr>,
    pub otlp: Vec<OtlpSink>,
}

impl Exporters {
    /// The flags read: an address to listen on, a collector URL, a new file (an existing one
    /// only with `force`). Each refusal names the flag.
    pub(crate) fn new(
        prometheus: Option<&str>,
        otlp: Option<&str>,
        otlp_file: Option<&Path>,
        force: bool,
    ) -> Result<Self, String> {
        let prometheus = prometheus.map(listen_addr).transpose()?;
        let mut sinks = Vec::new();
        if let Some(url) = otlp {
            sinks.push(OtlpSink::http(url)?);
        }
        if let Some(path) = otlp_file {
            sinks.push(OtlpSink::file(path, force)?);
        }
        Ok(Self {
            prometheus,
            otlp: sinks,
        })
    }

    /// The figures they share, of the server at `host` and `port`; `None` when nothing
    /// exports.
    pub(crate) fn figures(&self, (host, port): (String, u16)) -> Option<Shared> {
        if self.prometheus.is_none() && self.otlp.is_empty() {
            return None;
        }
        Some(Arc::new(Mutex::new(ClientMetrics::new("", &host, port))))
    }
}

/// `--prometheus ADDR` read: an address and port to listen on.
fn listen_addr(addr: &str) -> Result<SocketAddr, String> {
    addr.parse::<SocketAddr>().map_err(|_| {
        format!(
            "--prometheus {}: expected an address and port to listen on, e.g. 127.0.0.1:9464",
            crate::text::one_line(addr)
        )
    })
}

/// A command's exporters on a thread and runtime of their own, for a command whose own work
/// runs elsewhere (`chat --url`: its remote worker's runtime is busy with the turns): the
/// `/metrics` endpoint, and an OTLP export to each sink whenever `counted` is notified. It
/// stops when dropped.
pub(crate) struct Beside {
    /// Where `/metrics` is served, when it is.
    pub addr: Option<SocketAddr>,
    /// Notified after each request is counted: the OTLP sinks are sent the figures so far.
    pub counted: Arc<tokio::sync::Notify>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Beside {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the exporters of `metrics` on a thread: `/metrics` at `prometheus` (a port in use,
/// or any address that cannot be listened on, is said now, before the command goes on), and
/// `otlp`'s sinks after each notified count. The first failed export is handed to `failed`
/// (once: the figures stay cumulative, so a later export carries all of them).
pub(crate) fn serve_beside(
    exporters: Exporters,
    metrics: Shared,
    failed: Box<dyn Fn(String) + Send>,
) -> Result<Beside, String> {
    let Exporters { prometheus, otlp } = exporters;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let counted = Arc::new(tokio::sync::Notify::new());
    let notified = Arc::clone(&counted);
    let thread = std::thread::Builder::new()
        .name("exporters".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("the exporters' runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let served = match prometheus {
                    Some(addr) => serve(addr, Arc::clone(&metrics)).await.map(Some),
                    None => Ok(None),
                };
                let bound = served.as_ref().map(|s| s.as_ref().map(|s| s.addr));
                let _ = ready_tx.send(bound.map_err(Clone::clone));
                let Ok(served) = served else { return };
                let mut said = false;
                // Until the command is done (or gone); quitting does not wait for an export to
                // a collector that does not answer.
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => break,
                        () = notified.notified() => {}
                    }
                    let export = async {
                        for sink in &otlp {
                            if let Err(why) = sink.export(&metrics).await {
                                if !said {
                                    said = true;
                                    failed(format!(
                                        "OTLP export to {} failed: {why}",
                                        sink.label()
                                    ));
                                }
                            }
                        }
                    };
                    tokio::select! {
                        _ = &mut stop_rx => break,
                        () = export => {}
                    }
                }
                drop(served);
            });
        })
        .map_err(|e| format!("cannot start the exporters' thread: {e}"))?;
    let mut beside = Beside {
        addr: None,
        counted,
        stop: Some(stop_tx),
        thread: Some(thread),
    };
    // On a failure `beside` is dropped, which stops and joins the thread.
    beside.addr = ready_rx
        .recv()
        .map_err(|_| "the exporters' thread ended before it started".to_string())??;
    Ok(beside)
}

/// Listens on `addr` and answers `GET /metrics` with the figures so far (anything else: 404).
/// Fails at once when the address cannot be listened on, naming why.
pub(crate) async fn serve(addr: SocketAddr, metrics: Shared) -> Result<Exposition, String> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (another process has it: pick another port, or port 0 for any free one)"
        } else {
            ""
        };
        format!("--prometheus {addr}: cannot listen there: {e}{hint}")
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("--prometheus {addr}: {e}"))?;
    let task = tokio::spawn(async move {
        // One sender per open connection, oldest first; dropping one hangs that one up.
        let mut open: std::collections::VecDeque<tokio::sync::oneshot::Sender<()>> =
            std::collections::VecDeque::new();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            open.retain(|hang_up| !hang_up.is_closed());
            if open.len() >= MAX_CONNECTIONS {
                open.pop_front();
            }
            let (hang_up, hung_up) = tokio::sync::oneshot::channel::<()>();
            open.push_back(hang_up);
            let metrics = Arc::clone(&metrics);
            // Each connection on its own task: the accept loop never waits for one.
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &metrics)) => {}
                    _ = hung_up => {}
                }
            });
        }
    });
    Ok(Exposition { addr, task })
}

/// One scrape: reads the request head (bounded), writes the reply, closes.
async fn answer(mut stream: TcpStream, metrics: &Shared) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = if method == "GET" && path == "/metrics" {
        let text = metrics.lock().map(|m| m.prometheus()).unwrap_or_default();
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "tokscope serves only GET /metrics here\n".to_string(),
        )
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

/// Where the OTLP export requests go.
#[derive(Debug, Clone)]
pub(crate) enum OtlpSink {
    /// POSTed as JSON to this URL (a collector's `/v1/metrics`).
    Http(String),
    /// Written to this file, one request per line (the OpenTelemetry Collector's file
    /// exporter format).
    File(PathBuf),
}

impl OtlpSink {
    /// `--otlp URL`: an http(s) URL; a bare `http://host:4318` gets OTLP's `/v1/metrics` path,
    /// as the SDKs' `OTEL_EXPORTER_OTLP_ENDPOINT` does.
    pub(crate) fn http(url: &str) -> Result<Self, String> {
        let parsed =
            reqwest::Url::parse(url).map_err(|e| format!("--otlp {url}: not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "--otlp {url}: expected an http or https URL (a collector's OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318)"
            ));
        }
        let url = if matches!(parsed.path(), "" | "/") {
            format!("{}/v1/metrics", url.trim_end_matches('/'))
        } else {
            url.to_string()
        };
        Ok(Self::Http(url))
    }

    /// `--otlp-file PATH`: a new file in a folder that exists (an existing one only with
    /// `force`); created empty now, so a bad path is said before anything is measured.
    pub(crate) fn file(path: &Path, force: bool) -> Result<Self, String> {
        // fsx::Output's rule: never through a link, no wait on a FIFO, an existing regular
        // file only with --force.
        crate::fsx::Output::new(path, force)
            .create_stream()
            .map_err(|e| format!("--otlp-file: {e}"))?;
        Ok(Self::File(path.to_path_buf()))
    }

    pub(crate) fn label(&self) -> String {
        match self {
            Self::Http(url) => crate::text::one_line(url).into_owned(),
            Self::File(path) => crate::text::path(path),
        }
    }

    /// Sends (or appends) one export of every level so far.
    pub(crate) async fn export(&self, metrics: &Shared) -> Result<(), String> {
        let body = {
            let m = metrics.lock().map_err(|_| "the figures are not readable")?;
            m.otlp(SystemTime::now()).to_string()
        };
        let body = crate::text::json_safe(&body).into_owned();
        match self {
            // Appended without following a link planted since the file was created.
            Self::File(path) => crate::fsx::open_append_private(path, false)
                .and_then(|f| f.ok_or_else(crate::fsx::not_a_regular_file))
                .and_then(|(mut f, _)| writeln!(f, "{body}"))
                .map_err(|e| format!("cannot write {}: {e}", self.label())),
            Self::Http(url) => post(url, body).await,
        }
    }
}

async fn post(url: &str, body: String) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(OTLP_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tokscope/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())?;
    let shown = crate::text::one_line(url).into_owned();
    let mut reply = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                format!("{shown}: no answer in {} s", OTLP_TIMEOUT.as_secs())
            } else {
                format!("{shown}: cannot send: {e}")
            }
        })?;
    let status = reply.status();
    if status.is_success() {
        return Ok(());
    }
    // A refusal's body says why; only its start is read and shown.
    let mut excerpt = Vec::new();
    while excerpt.len() < MAX_REFUSAL_EXCERPT {
        let Ok(Some(c)) = reply.chunk().await else {
            break;
        };
        excerpt.extend_from_slice(&c);
    }
    excerpt.truncate(MAX_REFUSAL_EXCERPT);
    let text = String::from_utf8_lossy(&excerpt);
    let text = crate::text::one_line(text.trim());
    Err(format!(
        "{shown} answered HTTP {status}{}",
        if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        }
    ))
}
