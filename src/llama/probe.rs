//! Trying a model in a short-lived child process before this process loads it.
//!
//! llama.cpp answers some defects with `GGML_ASSERT`, `abort()` or an uncaught C++ exception,
//! which no Rust code can catch: the process dies, and with it a chat's conversation screen or a
//! bench's finished results. [`crate::gguf::validate`] refuses the defects known by class; this
//! module catches the rest. The first time a session loads a file, a child (`tokscope
//! __probe-model FILE`, a re-exec of this binary) loads it on the CPU in its file layout (no
//! repacking: a fraction of a load, 1.5 s against 5.4 s for a synthetic Llama 3 8B Q4_K_M on
//! two cores; repacked as the parent's load is where ggml's AMX kernels run, see
//! `amx_in_use`), tokenizes and detokenizes a text with non-ASCII characters, decodes its first two
//! tokens as one batch (the multi-row matmul path) and one sampled token (the one-row path) on
//! all cores, and checks the logits are finite. What it catches: llama.cpp aborting while it
//! loads the file, builds or computes a decode graph, or tokenizes; non-finite logits. What it
//! does not, without AMX: a crash in the CPU repacking of weights or in the repacked kernels
//! (only the parent's load runs them); nor, anywhere, one in paths of more than two rows (a long
//! prefill). No known file triggers those outside AMX, and [`crate::gguf::validate`] refuses
//! the shapes they depend on. If the child dies of a signal or hangs, the
//! load becomes an [`EngineError::ModelCrashed`] naming the file, the cause and llama.cpp's last
//! words from the child's stderr; otherwise this process goes on to load the file itself.
//! Verdicts are remembered for the session by (path, size, mtime, inode), so a file is probed
//! once until it changes; a file that **passed** is also remembered across sessions
//! (`probe-verdicts.json` in the cache dir) by that key, a sha256 of its header and tensor
//! table, and the identity of this binary (its version, size and mtime: another llama.cpp may
//! crash where this one did not). A crash is never remembered across sessions: it is probed
//! again. What a remembered pass gives up: a file rewritten in its tensor data with the same
//! size, header and mtime is not probed again (the in-process load still validates it).
//!
//! Probing is switched on by the binary's `main` ([`enable`]); library users (the tests that
//! drive the engine directly) load in-process as before.

use std::collections::HashMap;
use std::io::Read;
use std::num::NonZeroU32;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;

use super::error::{decode_error, EngineError};

/// The hidden subcommand the child runs.
pub const PROBE_SUBCOMMAND: &str = "__probe-model";
/// The probing process's pid, given to the child: a child whose parent is already gone when it
/// starts ends at once.
const PROBE_PARENT_ENV: &str = "TOKSCOPE_PROBE_PARENT";
/// Overrides the probe's time limit (seconds).
pub(crate) const PROBE_TIMEOUT_ENV: &str = "TOKSCOPE_PROBE_TIMEOUT_S";
/// Switches probing off (`0`), e.g. when a model is known good and its load is slow.
pub(crate) const PROBE_ENV: &str = "TOKSCOPE_PROBE";
/// The child's exit code for an ordinary load failure (llama.cpp returned an error): the
/// parent then loads the file itself and reports llama.cpp's own error.
const CHILD_LOAD_FAILED: i32 = 3;
/// The child's exit code for a model whose first decode gives NaN or infinite logits: it
/// loads, and then llama.cpp's sampler would abort at the first answer.
const CHILD_NON_FINITE: i32 = 4;
/// How long a probe may take before it counts as hung: a large model on a slow disk loads
/// in minutes.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The text the child tokenizes and decodes: ASCII, accented Latin, CJK, an emoji and a
/// newline, so missing byte tokens and broken merges show.
const PROBE_TEXT: &str = "Hello, world! é ü ß 日本語 😀\n";

static EXE: OnceLock<PathBuf> = OnceLock::new();

/// Probe every model before loading it, by re-running `exe` (the tokscope binary).
pub fn enable(exe: PathBuf) {
    let _ = EXE.set(exe);
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileKey {
    path: PathBuf,
    size: u64,
    mtime_ns: i128,
    dev: u64,
    inode: u64,
}

fn file_key(path: &Path) -> Option<FileKey> {
    let meta = std::fs::metadata(path).ok()?;
    Some(FileKey {
        path: path.canonicalize().ok()?,
        size: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        dev: meta.dev(),
        inode: meta.ino(),
    })
}

fn verdicts() -> &'static Mutex<HashMap<FileKey, Result<(), EngineError>>> {
    static VERDICTS: OnceLock<Mutex<HashMap<FileKey, Result<(), EngineError>>>> = OnceLock::new();
    VERDICTS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Whether this process may load `path`: Ok when probing is off, when the file was probed
/// before in this session and survived, or when a child just loaded and decoded it (or failed
/// with an ordinary error, which the in-process load will report).
pub(crate) fn ensure_survivable(path: &Path) -> Result<(), EngineError> {
    let Some(exe) = EXE.get() else {
        return Ok(());
    };
    if std::env::var(PROBE_ENV).is_ok_and(|v| v == "0") {
        return Ok(());
    }
    let Some(key) = file_key(path) else {
        // Unreadable: the pre-flight check reports it.
        return Ok(());
    };
    let mut map = verdicts().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = map.get(&key) {
        return v.clone();
    }
    let store = passed_store_path();
    let persistent = persistent_key(&key, path);
    if let Some(k) = &persistent {
        if passed_before(&store, k) {
            tracing::info!("probe of {}: passed before (cached)", path.display());
            map.insert(key, Ok(()));
            return Ok(());
        }
    }
    let timeout = std::env::var(PROBE_TIMEOUT_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&s| s >= 1)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let verdict = probe(exe, path, timeout);
    tracing::info!("probe of {}: {:?}", path.display(), verdict);
    if let (Ok(()), Some(k)) = (&verdict, persistent) {
        remember_pass(&store, k);
    }
    map.insert(key, verdict.clone());
    verdict
}

/// Passed probes kept across sessions (newest last), at most this many.
const MAX_REMEMBERED: usize = 256;
/// How much of a file's start the header hash reads at the most (a header with a 262k-token
/// vocabulary is about 10 MB).
const HEADER_HASH_MAX_BYTES: u64 = 64 << 20;

/// A passed probe, as remembered across sessions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct PassedProbe {
    path: PathBuf,
    size: u64,
    mtime_ns: i128,
    dev: u64,
    inode: u64,
    /// sha256 of the header and tensor table (the bytes before the tensor data).
    header_sha256: String,
    /// The binary that probed it: version, size and mtime.
    prober: String,
}

fn passed_store_path() -> PathBuf {
    crate::paths::cache_dir().join("probe-verdicts.json")
}

/// This binary's identity: a rebuild (another llama.cpp, other flags) probes again.
fn prober_identity() -> String {
    let exe = EXE.get().and_then(|e| std::fs::metadata(e).ok());
    format!(
        "tokscope {} {} {}",
        env!("CARGO_PKG_VERSION"),
        exe.as_ref().map_or(0, |m| m.len()),
        exe.as_ref().map_or(0, |m| m.mtime())
    )
}

/// The key a pass is remembered by, or `None` when the header cannot be read (the load then
/// reports why).
fn persistent_key(key: &FileKey, path: &Path) -> Option<PassedProbe> {
    use sha2::{Digest, Sha256};
    let header = crate::gguf::read_metadata_without_arrays(path).ok()?;
    let n = header.data_offset_bytes.min(HEADER_HASH_MAX_BYTES);
    let mut file = std::fs::File::open(path).ok()?.take(n);
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    let digest = hasher.finalize();
    Some(PassedProbe {
        path: key.path.clone(),
        size: key.size,
        mtime_ns: key.mtime_ns,
        dev: key.dev,
        inode: key.inode,
        header_sha256: crate::fmt::hex(&digest),
        prober: prober_identity(),
    })
}

fn read_passed(store: &Path) -> Vec<PassedProbe> {
    // A regular file only: a FIFO planted in the cache dir is not waited on.
    crate::fsx::read_regular(store, 16 * 1024 * 1024, "the probe verdicts")
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn passed_before(store: &Path, key: &PassedProbe) -> bool {
    read_passed(store).iter().any(|p| p == key)
}

/// Adds a pass (replacing any older one of the same path); a store that cannot be written
/// costs a probe next time and nothing else.
fn remember_pass(store: &Path, key: PassedProbe) {
    let mut all = read_passed(store);
    all.retain(|p| p.path != key.path);
    all.push(key);
    let drop = all.len().saturating_sub(MAX_REMEMBERED);
    all.drain(..drop);
    if let Ok(text) = serde_json::to_vec_pretty(&all) {
        if let Some(dir) = store.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = crate::fsx::write_private(store, &text) {
            tracing::warn!("could not remember the probe: {e}");
        }
    }
}

/// `TOKSCOPE_PROBE_TIMEOUT_S`, when set, must be a whole number of seconds of at least 1: a 0
/// killed every probe at once and the file was then blamed for a crash.
pub fn check_environment() -> Result<(), String> {
    match std::env::var(PROBE_TIMEOUT_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(()),
        Ok(v) if v.trim().parse::<u64>().is_ok_and(|s| s >= 1) => Ok(()),
        Ok(v) => Err(format!(
            "{PROBE_TIMEOUT_ENV}={} is not a number of seconds of at least 1 (the default is {} s); unset it or give e.g. {PROBE_TIMEOUT_ENV}=600",
            crate::text::one_line(&v),
            DEFAULT_TIMEOUT.as_secs()
        )),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{PROBE_TIMEOUT_ENV} is not valid UTF-8; unset it or give e.g. {PROBE_TIMEOUT_ENV}=600"
        )),
    }
}

fn probe(exe: &Path, path: &Path, timeout: Duration) -> Result<(), EngineError> {
    let crashed = |cause: String, stderr: &[u8]| EngineError::ModelCrashed {
        path: path.to_path_buf(),
        cause,
        llama_says: last_words(stderr),
    };
    let mut child = match Command::new(exe)
        .arg(PROBE_SUBCOMMAND)
        .arg(path)
        .env("GGML_NO_BACKTRACE", "1")
        .env(PROBE_PARENT_ENV, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            // Without a child there is no protection, but no reason to refuse the file either.
            tracing::warn!("could not start the model probe {}: {e}", exe.display());
            return Ok(());
        }
    };
    // The child's stderr is read on a thread so a chatty child never blocks on a full pipe;
    // only its tail is kept.
    let reader = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 64 << 10 {
                    tail.drain(..tail.len() - (32 << 10));
                }
            }
            tail
        })
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                tracing::warn!("waiting for the model probe failed: {e}");
                return Ok(());
            }
        }
    };
    let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    match status {
        None => Err(crashed(
            format!(
                "loading and decoding it did not finish in {} s",
                timeout.as_secs()
            ),
            &stderr,
        )),
        Some(s) if s.success() || s.code() == Some(CHILD_LOAD_FAILED) => Ok(()),
        Some(s) if s.code() == Some(CHILD_NON_FINITE) => Err(EngineError::InvalidModel {
            path: path.to_path_buf(),
            defect: "its first decode gives NaN or infinite logits (broken weights), so no answer could be sampled".to_owned(),
        }),
        Some(s) => Err(crashed(
            match s.signal() {
                Some(sig) => format!("killed by {}", signal_name(sig)),
                None => format!("exit code {}", s.code().unwrap_or(-1)),
            },
            &stderr,
        )),
    }
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGABRT => "SIGABRT (an assertion or abort in llama.cpp)",
        libc::SIGSEGV => "SIGSEGV (an invalid memory access)",
        libc::SIGBUS => "SIGBUS (a bad memory access, e.g. a truncated mapped file)",
        libc::SIGFPE => "SIGFPE (an arithmetic fault such as a division by zero)",
        libc::SIGILL => "SIGILL (an illegal instruction)",
        libc::SIGKILL => "SIGKILL (out of memory?)",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// The last few non-empty lines of the child's stderr, control characters neutralised, as a
/// suffix for the error message.
fn last_words(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let unsafe_char = |c: char| c.is_control() || crate::text::is_unsafe(c);
            let mut clean: String = l
                .chars()
                .take(300)
                .map(|c| if unsafe_char(c) { '?' } else { c })
                .collect();
            if l.chars().count() > 300 {
                clean.push('…');
            }
            clean
        })
        .collect();
    super::error::says(&lines)
}

/// The child's side (`tokscope __probe-model FILE`): load the file on the CPU, tokenize the
/// probe text, decode it and one sampled token. Returns the exit code: 0 when all went well,
/// 3 when llama.cpp refused the file with an ordinary error. A defect llama.cpp cannot handle
/// kills the child, which is the point.
pub fn child_main(path: &Path) -> i32 {
    if !die_with_parent() {
        return CHILD_LOAD_FAILED;
    }
    match child_probe(path) {
        Ok(()) => 0,
        Err(e @ EngineError::NonFiniteLogits { .. }) => {
            eprintln!("{e}");
            CHILD_NON_FINITE
        }
        Err(e) => {
            eprintln!("{e}");
            CHILD_LOAD_FAILED
        }
    }
}

/// The child ends when the process that probes dies (killed, or its terminal closed): its
/// time limit is kept by that process, so an orphan would run as long as llama.cpp does (a
/// crafted vocabulary's load ran for hours). Linux's parent-death signal; false when the
/// parent is gone already.
#[allow(unsafe_code)]
fn die_with_parent() -> bool {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory of ours;
    // getppid cannot fail.
    let parent = unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        libc::getppid()
    };
    let expected = std::env::var(PROBE_PARENT_ENV).ok();
    expected
        .and_then(|p| p.parse::<libc::pid_t>().ok())
        .is_none_or(|expected| parent == expected)
}

/// Whether this build's CPU backend has ggml's AMX kernels (llama.cpp's system info says
/// `AMX_INT8 = 1` only when they were compiled in, which a native build does on a CPU with AMX).
fn amx_in_use() -> bool {
    super::system_info().contains("AMX_INT8 = 1")
}

fn child_probe(path: &Path) -> Result<(), EngineError> {
    let backend = super::backend()?;
    // The file layout: no repacking for the CPU's kernels (a copy of every weight), so that
    // the probe costs a fraction of a load; the parent's own load repacks. Except where
    // ggml's AMX kernels run: their known crash on K-quants (ggml-org/llama.cpp#20824) lives
    // in the repacked weights, so there the child repacks as the parent will.
    let params = LlamaModelParams::default()
        .with_n_gpu_layers(0)
        .with_use_extra_bufts(amx_in_use());
    let model = LlamaModel::load_from_file(backend, path, &params).map_err(|e| {
        EngineError::LoadFailed {
            path: path.to_path_buf(),
            llama_says: format!(": {e}"),
        }
    })?;
    let vocab = model.vocab();
    let tokens = vocab.tokenize(PROBE_TEXT.as_bytes(), true, false);
    for t in &tokens {
        let _ = vocab.token_to_piece(*t, true, None);
    }
    // Two rows: the batched matmul path as well as the one-row path of the token after.
    let n = u32::try_from(tokens.len()).unwrap_or(u32::MAX).clamp(1, 2);
    // The machine's cores: the parent waits for this child and runs nothing meanwhile.
    let threads =
        std::thread::available_parallelism().map_or(1, |n| i32::try_from(n.get()).unwrap_or(1));
    let ctx_params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(128))
        .with_n_batch(128)
        .with_n_ubatch(128)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut ctx =
        model
            .new_context(backend, ctx_params)
            .map_err(|e| EngineError::ContextFailed {
                n_ctx: 128,
                llama_says: format!(": {e}"),
            })?;
    let mut batch = LlamaBatch::new(128, 1);
    let take = n as usize;
    for (i, t) in tokens.iter().take(take).enumerate() {
        let pos = i32::try_from(i).unwrap_or(0);
        batch
            .add(*t, pos, &[0], i + 1 == take.min(tokens.len()))
            .map_err(decode_error)?;
    }
    if tokens.is_empty() {
        return Ok(());
    }
    ctx.decode(&mut batch).map_err(decode_error)?;
    // Greedy decoding never trips on NaN (it never wins), but the default sampler's chain
    // aborts on a row without a finite logit: refuse such a model here.
    if !ctx
        .get_logits_ith(batch.n_tokens() - 1)
        .iter()
        .all(|v| v.is_finite())
    {
        return Err(EngineError::NonFiniteLogits { at_token: 0 });
    }
    let mut sampler = LlamaSampler::greedy();
    let next = sampler.sample(&ctx, batch.n_tokens() - 1);
    let _ = vocab.token_to_piece(next, true, None);
    batch.clear();
    batch
        .add(next, i32::try_from(take).unwrap_or(0), &[0], true)
        .map_err(decode_error)?;
    ctx.decode(&mut batch).map_err(decode_error)?;
    let _ = sampler.sample(&ctx, 0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_words_keep_the_tail_and_no_control_characters() {
        let s = b"a\nb\n\x1b]52;c;x\x07 assert\n\nlast\n";
        let w = last_words(s);
        assert!(w.contains("last"), "{w}");
        assert!(!w.contains('\x1b') && !w.contains('\x07'), "{w:?}");
        assert!(!w.contains("llama.cpp says: a\n"), "{w}");
        assert_eq!(last_words(b""), "");
    }

    #[test]
    fn signals_are_named() {
        assert!(signal_name(libc::SIGABRT).contains("SIGABRT"));
        assert_eq!(signal_name(64), "signal 64");
    }

    /// A pass is remembered by the file's identity and header and this binary's; a changed
    /// header or binary is another key, and the store keeps one entry per path.
    #[test]
    fn a_pass_is_remembered_by_file_header_and_binary() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        let spec = crate::synth::SynthSpec::preset("tiny").unwrap();
        crate::synth::write_model(&model, &spec).unwrap();
        let store = dir.path().join("probe-verdicts.json");
        let key = file_key(&model).unwrap();
        let k = persistent_key(&key, &model).unwrap();
        assert_eq!(k.header_sha256.len(), 64);
        assert!(!passed_before(&store, &k));
        remember_pass(&store, k.clone());
        assert!(passed_before(&store, &k));
        let mut other_binary = k.clone();
        other_binary.prober.push_str(" rebuilt");
        assert!(!passed_before(&store, &other_binary));
        let mut other_header = k.clone();
        other_header.header_sha256 = "0".repeat(64);
        assert!(!passed_before(&store, &other_header));
        remember_pass(&store, other_header.clone());
        assert_eq!(read_passed(&store).len(), 1, "one entry per path");
        assert!(!passed_before(&store, &k));
    }
}
