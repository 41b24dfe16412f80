//! Logging: tokscope's own `tracing` events and llama.cpp/ggml's log lines (routed through
//! llama-cpp-2 into `tracing`) go to a log file, never to the terminal. The last warnings and
//! errors from llama.cpp are also kept in memory, so that a failed model load can tell the user
//! what llama.cpp said instead of a bare "failed".

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The environment variable holding the log filter (`tracing_subscriber::EnvFilter` syntax).
pub(crate) const LOG_FILTER_ENV: &str = "TOKSCOPE_LOG";
/// The `tracing` target under which llama-cpp-2 emits llama.cpp's and ggml's log lines.
const LLAMA_TARGET: &str = "llama-cpp-2";
const KEPT_MESSAGES: usize = 16;

static RECENT_LLAMA_PROBLEMS: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// The most recent llama.cpp warnings and errors, oldest first.
pub(crate) fn recent_llama_problems() -> Vec<String> {
    RECENT_LLAMA_PROBLEMS
        .lock()
        .map(|q| q.iter().cloned().collect())
        .unwrap_or_default()
}

/// Forget the kept llama.cpp messages (done before each model load so that an error message
/// quotes only what that load said).
pub(crate) fn clear_llama_problems() {
    if let Ok(mut q) = RECENT_LLAMA_PROBLEMS.lock() {
        q.clear();
    }
}

/// llama.cpp's quantizer logs `[  12/ 201] name - …` per tensor: the latest (done, total),
/// packed as `done << 32 | total`, 0 before any.
static TENSOR_PROGRESS: AtomicU64 = AtomicU64::new(0);

/// The latest `[done/total]` tensor counter llama.cpp's quantizer logged, if any.
pub(crate) fn tensor_progress() -> Option<(u32, u32)> {
    let packed = TENSOR_PROGRESS.load(Ordering::Relaxed);
    let (done, total) = ((packed >> 32) as u32, packed as u32);
    (total > 0).then_some((done, total))
}

/// Forget the tensor counter (before a quantization starts).
pub(crate) fn reset_tensor_progress() {
    TENSOR_PROGRESS.store(0, Ordering::Relaxed);
}

/// `[  12/ 201] …` → (12, 201).
fn parse_tensor_counter(message: &str) -> Option<(u32, u32)> {
    let inner = message.trim_start().strip_prefix('[')?;
    let (counter, _) = inner.split_once(']')?;
    let (done, total) = counter.split_once('/')?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// What llama.cpp's model loader logged about where it put the layers (`load_tensors`, INFO,
/// `llama-model.cpp` lines 1913-1926 of llama-cpp-sys-2 0.1.160): "offloading output layer to
/// GPU" and "offloaded N/M layers to GPU". A CPU build logs neither (llama.cpp supports no
/// offload there). Its third line, "offloading N repeating layers to GPU", is not read: it
/// counts `min(ngl, n_layer) - 1`, one short of what the loader placed at full offload
/// (`i_gpu_start = 0` puts every repeating layer on the GPU, lines 1591-1616).
/// Also whether any weights were repacked for the CPU's kernels: the loader names each model
/// buffer ("%12s model buffer size", line 1932), and ggml's repacking buffer type is
/// "CPU_REPACK" (`ggml-cpu/repack.cpp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OffloadLog {
    /// "offloading output layer to GPU" was logged.
    pub output_layer: bool,
    /// "offloaded N/M layers to GPU".
    pub offloaded: Option<(u32, u32)>,
    /// "CPU_REPACK model buffer size = …" was logged.
    pub repacked: bool,
}

impl OffloadLog {
    /// Takes what one log line says, if it is one of those read.
    fn note(&mut self, message: &str) {
        let message = message.trim();
        if message.ends_with("offloading output layer to GPU") {
            self.output_layer = true;
        } else if message.contains("CPU_REPACK model buffer size") {
            self.repacked = true;
        } else if let Some(counts) = parse_offloaded(message) {
            self.offloaded = Some(counts);
        }
    }
}

thread_local! {
    /// Each load's lines are logged on the thread that loads (llama.cpp calls the log callback
    /// from inside `llama_model_load_from_file`), so a load reads only its own lines: a target
    /// and its draft loaded one after the other, or two engines loading at once, each keep
    /// their own placement.
    static OFFLOAD_LOG: std::cell::Cell<OffloadLog> = const {
        std::cell::Cell::new(OffloadLog {
            output_layer: false,
            offloaded: None,
            repacked: false,
        })
    };
}

/// What this thread's latest model load logged about its offload (since
/// [`reset_offload_log`]).
pub(crate) fn offload_log() -> OffloadLog {
    OFFLOAD_LOG.with(std::cell::Cell::get)
}

/// Forget this thread's offload lines (before a model load).
pub(crate) fn reset_offload_log() {
    OFFLOAD_LOG.with(|c| c.set(OffloadLog::default()));
}

/// `load_tensors: offloaded 33/33 layers to GPU` → (33, 33).
fn parse_offloaded(message: &str) -> Option<(u32, u32)> {
    let rest = message.split("offloaded ").nth(1)?;
    let (counter, tail) = rest.split_once(' ')?;
    if !tail.starts_with("layers to GPU") {
        return None;
    }
    let (n, m) = counter.split_once('/')?;
    Some((n.trim().parse().ok()?, m.trim().parse().ok()?))
}

#[derive(Default)]
struct MessageVisitor(String);

impl Visit for MessageVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

/// Keeps llama.cpp's warnings and errors in memory.
struct LlamaProblemCapture;

impl<S: Subscriber> Layer<S> for LlamaProblemCapture {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        // Debug and trace lines say nothing kept here.
        if meta.target() != LLAMA_TARGET || *meta.level() > Level::INFO {
            return;
        }
        let mut visitor = MessageVisitor::default();
        event.record(&mut visitor);
        if *meta.level() == Level::INFO {
            if let Some((done, total)) = parse_tensor_counter(&visitor.0) {
                TENSOR_PROGRESS.store(u64::from(done) << 32 | u64::from(total), Ordering::Relaxed);
            }
            OFFLOAD_LOG.with(|c| {
                let mut log = c.get();
                log.note(&visitor.0);
                c.set(log);
            });
        }
        // A warning or an error.
        let message = visitor.0.trim();
        if *meta.level() <= Level::WARN && !message.is_empty() {
            if let Ok(mut q) = RECENT_LLAMA_PROBLEMS.lock() {
                if q.len() == KEPT_MESSAGES {
                    q.pop_front();
                }
                q.push_back(message.to_string());
            }
        }
    }
}

/// The log's file name inside the log dir; the previous one is kept as `tokscope.log.1`.
pub const LOG_FILE: &str = "tokscope.log";
/// The size at which the log rotates: `tokscope.log` becomes `tokscope.log.1` (replacing the
/// older one) and a new log starts, so the logs never take more than about twice this.
pub const LOG_ROTATE_BYTES: u64 = 10 * 1024 * 1024;
/// The longest event written to the log: a model with a 10 MB `general.name` (which llama.cpp
/// logs on every load) costs this much, not 10 MB.
pub const LOG_EVENT_MAX_BYTES: usize = 4096;

/// The log file: user-only (0600, like history), appended to, every event cut to
/// `LOG_EVENT_MAX_BYTES`, rotated at `LOG_ROTATE_BYTES`.
pub struct LogFile {
    path: PathBuf,
    file: Option<std::fs::File>,
    size_bytes: u64,
    rotate_bytes: u64,
}

impl LogFile {
    /// Opens (or creates) the log at `path`, its folder created user-only.
    pub fn open(path: &Path, rotate_bytes: u64) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::fsx::ensure_private_dir(dir)?;
        }
        let mut log = Self {
            path: path.to_path_buf(),
            file: None,
            size_bytes: 0,
            rotate_bytes,
        };
        log.reopen()?;
        Ok(log)
    }

    fn reopen(&mut self) -> std::io::Result<()> {
        let (file, size_bytes) = crate::fsx::open_append_private(&self.path, false)?
            .ok_or_else(crate::fsx::not_a_regular_file)?;
        self.size_bytes = size_bytes;
        self.file = Some(file);
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file = None;
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        std::fs::rename(&self.path, PathBuf::from(old))?;
        self.reopen()
    }
}

/// `event` cut to `max_bytes` (at a character boundary), saying how much was cut.
fn cut_event(event: &[u8], max_bytes: usize) -> std::borrow::Cow<'_, [u8]> {
    if event.len() <= max_bytes {
        return std::borrow::Cow::Borrowed(event);
    }
    let mut end = max_bytes;
    while end > 0 && (event[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    let mut cut = event[..end].to_vec();
    cut.extend_from_slice(format!("… [{} bytes cut]\n", event.len() - end).as_bytes());
    std::borrow::Cow::Owned(cut)
}

impl std::io::Write for LogFile {
    /// One call is one event (the fmt layer writes each formatted event at once).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let event = cut_event(buf, LOG_EVENT_MAX_BYTES);
        if self.size_bytes > 0 && self.size_bytes + event.len() as u64 > self.rotate_bytes {
            // A log that cannot rotate keeps appending rather than losing the event.
            if self.rotate().is_err() && self.file.is_none() {
                self.reopen()?;
            }
        }
        if let Some(file) = self.file.as_mut() {
            file.write_all(&event)?;
            self.size_bytes += event.len() as u64;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().map_or(Ok(()), std::io::Write::flush)
    }
}

/// Install the global subscriber: the in-memory capture always, and a log file when `log_dir`
/// is given (created if missing). Returns the log file's path. Calling it twice is harmless
/// (the first subscriber stays), which lets every test call it.
pub fn init(log_dir: Option<&Path>) -> Option<PathBuf> {
    let filter = EnvFilter::try_from_env(LOG_FILTER_ENV).unwrap_or_else(|_| EnvFilter::new("info"));
    let file_layer = log_dir.and_then(|dir| {
        let log = LogFile::open(&dir.join(LOG_FILE), LOG_ROTATE_BYTES).ok()?;
        Some(
            tracing_subscriber::fmt::layer()
                .with_writer(Mutex::new(log))
                .with_ansi(false)
                .with_filter(filter),
        )
    });
    let path = file_layer.as_ref().and(log_dir.map(|d| d.join(LOG_FILE)));
    // An error here means a subscriber is already installed (a second call): keep that one.
    let _ = tracing_subscriber::registry()
        .with(LlamaProblemCapture)
        .with(file_layer)
        .try_init();
    // llama.cpp and ggml print to stderr unless told otherwise; route them into tracing.
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizer_tensor_counters_parse() {
        assert_eq!(
            parse_tensor_counter("[  12/ 201]                token_embd.weight - [ 2048, 128256,     1,     1], type =    f16, "),
            Some((12, 201))
        );
        assert_eq!(
            parse_tensor_counter("llama_model_loader: loaded meta data"),
            None
        );
        assert_eq!(parse_tensor_counter("[x/2] no"), None);
    }

    #[test]
    fn the_log_is_private_cut_per_event_and_rotates() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs").join(LOG_FILE);
        let mut log = LogFile::open(&path, 10_000).unwrap();
        let huge_name = format!("general.name str = {}\n", "é".repeat(1_000_000));
        log.write_all(huge_name.as_bytes()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() < LOG_EVENT_MAX_BYTES + 64, "{}", text.len());
        assert!(
            text.ends_with("bytes cut]\n"),
            "{}",
            &text[text.len() - 40..]
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        for i in 0..10 {
            log.write_all(format!("{i}: {}\n", "x".repeat(1000)).as_bytes())
                .unwrap();
        }
        let rotated = dir.path().join("logs").join(format!("{LOG_FILE}.1"));
        assert!(rotated.exists());
        assert!(std::fs::metadata(&path).unwrap().len() <= 10_000);
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .ends_with(&format!("{}\n", "x".repeat(1000))));
    }

    #[test]
    fn offload_lines_parse() {
        assert_eq!(
            parse_offloaded("load_tensors: offloaded 33/33 layers to GPU"),
            Some((33, 33))
        );
        assert_eq!(
            parse_offloaded("load_tensors: offloaded 0/29 layers to GPU\n"),
            Some((0, 29))
        );
        assert_eq!(
            parse_offloaded("load_tensors: offloading output layer to GPU"),
            None
        );
        assert_eq!(parse_offloaded("offloaded 3 things"), None);
        let mut log = OffloadLog::default();
        for line in [
            "load_tensors: offloading output layer to GPU\n",
            "load_tensors: offloading 15 repeating layers to GPU\n",
            "load_tensors: offloaded 16/33 layers to GPU\n",
            "load_tensors:          CPU model buffer size =   100.00 MiB\n",
        ] {
            log.note(line);
        }
        assert_eq!(
            log,
            OffloadLog {
                output_layer: true,
                offloaded: Some((16, 33)),
                repacked: false,
            }
        );
        log.note("load_tensors:   CPU_REPACK model buffer size =    72.50 MiB\n");
        assert!(log.repacked, "the repacking buffer is read from its name");
    }

    /// A target's load and its draft's, each through the real capture layer: the draft's lines
    /// (logged after the target's, on another thread here as in a second engine, or later on
    /// the same thread after a reset) never become the target's.
    #[test]
    fn offload_log_is_each_loads_own() {
        init(None);
        let target_load = || {
            reset_offload_log();
            tracing::info!(target: "llama-cpp-2", "load_tensors: offloading output layer to GPU");
            tracing::info!(target: "llama-cpp-2", "load_tensors: offloaded 16/33 layers to GPU");
            offload_log()
        };
        let target = target_load();
        assert_eq!(
            target,
            OffloadLog {
                output_layer: true,
                offloaded: Some((16, 33)),
                repacked: false,
            }
        );
        std::thread::spawn(|| {
            reset_offload_log();
            tracing::info!(target: "llama-cpp-2", "load_tensors: offloaded 0/9 layers to GPU");
            assert_eq!(offload_log().offloaded, Some((0, 9)));
        })
        .join()
        .unwrap();
        assert_eq!(offload_log(), target);
        // A draft loaded next on this thread starts from a reset: its own lines only.
        reset_offload_log();
        tracing::info!(target: "llama-cpp-2", "load_tensors: offloaded 3/9 layers to GPU");
        assert_eq!(
            offload_log(),
            OffloadLog {
                output_layer: false,
                offloaded: Some((3, 9)),
                repacked: false,
            }
        );
    }
}
