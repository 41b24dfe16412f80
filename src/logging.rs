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

fn remember_llama_problem(message: String) {
    if let Ok(mut q) = RECENT_LLAMA_PROBLEMS.lock() {
        if q.len() == KEPT_MESSAGES {
            q.pop_front();
        }
        q.push_back(message);
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

/// llama.cpp's model loader logs `load_tensors: offloaded N/M layers to GPU`: the layers it
/// really put on the GPU, packed as `n << 32 | m`, `u64::MAX` before any.
static OFFLOADED_LAYERS: AtomicU64 = AtomicU64::new(u64::MAX);

/// The latest "offloaded N/M layers to GPU" that llama.cpp logged, as (N, M).
pub(crate) fn offloaded_layers() -> Option<(u32, u32)> {
    let packed = OFFLOADED_LAYERS.load(Ordering::Relaxed);
    (packed != u64::MAX).then_some(((packed >> 32) as u32, packed as u32))
}

/// Forget the offload line (before a model load).
pub(crate) fn reset_offloaded_layers() {
    OFFLOADED_LAYERS.store(u64::MAX, Ordering::Relaxed);
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
        if meta.target() == LLAMA_TARGET && *meta.level() == Level::INFO {
            let mut visitor = MessageVisitor::default();
            event.record(&mut visitor);
            if let Some((done, total)) = parse_tensor_counter(&visitor.0) {
                TENSOR_PROGRESS.store(u64::from(done) << 32 | u64::from(total), Ordering::Relaxed);
            }
            if let Some((n, m)) = parse_offloaded(&visitor.0) {
                OFFLOADED_LAYERS.store(u64::from(n) << 32 | u64::from(m), Ordering::Relaxed);
            }
        }
        if meta.target() == LLAMA_TARGET && *meta.level() <= Level::WARN {
            let mut visitor = MessageVisitor::default();
            event.record(&mut visitor);
            let message = visitor.0.trim().to_string();
            if !message.is_empty() {
                remember_llama_problem(message);
            }
        }
    }
}

/// Install the global subscriber: the in-memory capture always, and a log file when `log_dir`
/// is given (created if missing). Returns the log file's path. Calling it twice is harmless
/// (the first subscriber stays), which lets every test call it.
pub fn init(log_dir: Option<&Path>) -> Option<PathBuf> {
    let filter = EnvFilter::try_from_env(LOG_FILTER_ENV).unwrap_or_else(|_| EnvFilter::new("info"));
    let file_layer = log_dir.and_then(|dir| {
        std::fs::create_dir_all(dir).ok()?;
        let appender = tracing_appender::rolling::never(dir, "tokscope.log");
        Some(
            tracing_subscriber::fmt::layer()
                .with_writer(appender)
                .with_ansi(false)
                .with_filter(filter),
        )
    });
    let path = file_layer
        .as_ref()
        .and(log_dir.map(|d| d.join("tokscope.log")));
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
    }
}
