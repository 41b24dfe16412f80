//! In-process quantization with llama.cpp's own quantizer (`llama_model_quantize`, which
//! llama-cpp-2 has no safe wrapper for), into a cache folder keyed by the source file's full
//! content hash (SHA-256, computed once and remembered by size, mtime and inode in
//! `content-hashes.json` beside the cache), so that a second `compare` reuses the files and a
//! different source that shares name, size and its first and last MiB never does. The output is written under a
//! temporary name and renamed into place, so an interrupted run never leaves a half file that
//! a later run would take for finished.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::check_model_file;

/// The memo of content hashes inside the cache folder.
const HASH_MEMO_FILE: &str = "content-hashes.json";
/// How many files the memo remembers (the most recent).
const HASH_MEMO_ENTRIES: usize = 256;

/// A file's content hash, remembered with what identifies that version of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct HashMemo {
    dev: u64,
    inode: u64,
    size_bytes: u64,
    mtime_ns: i128,
    sha256: String,
}

/// (dev, inode, size, mtime) of `meta`: a file rewritten in place changes its mtime or size,
/// and a replaced one its inode.
fn identity(meta: &std::fs::Metadata) -> (u64, u64, u64, i128) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (
            meta.dev(),
            meta.ino(),
            meta.size(),
            i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        )
    }
    #[cfg(not(unix))]
    {
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        (0, 0, meta.len(), mtime_ns)
    }
}

/// The SHA-256 of `source`'s whole contents (hex), read once per version of the file: the
/// result is remembered in `cache_dir` by device, inode, size and mtime, and reused while they
/// are unchanged.
pub fn content_hash(cache_dir: &Path, source: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    let before = std::fs::metadata(source)?;
    let (dev, inode, size_bytes, mtime_ns) = identity(&before);
    let memo_path = cache_dir.join(HASH_MEMO_FILE);
    let mut memo: Vec<HashMemo> =
        crate::fsx::read_regular(&memo_path, 4 * 1024 * 1024, "the hash memo")
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
    if let Some(known) = memo
        .iter()
        .find(|m| (m.dev, m.inode, m.size_bytes, m.mtime_ns) == (dev, inode, size_bytes, mtime_ns))
    {
        return Ok(known.sha256.clone());
    }
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut std::fs::File::open(source)?, &mut hasher)?;
    let sha256 = crate::fmt::hex(&hasher.finalize());
    // Remembered only if the file did not change while it was read.
    let after = std::fs::metadata(source)?;
    if identity(&after) == (dev, inode, size_bytes, mtime_ns) {
        memo.retain(|m| (m.dev, m.inode) != (dev, inode));
        memo.push(HashMemo {
            dev,
            inode,
            size_bytes,
            mtime_ns,
            sha256: sha256.clone(),
        });
        let excess = memo.len().saturating_sub(HASH_MEMO_ENTRIES);
        memo.drain(..excess);
        if let Ok(text) = serde_json::to_vec(&memo) {
            if let Err(e) = crate::fsx::write_private(&memo_path, &text) {
                tracing::warn!(error = %e, "could not remember a content hash");
            }
        }
    }
    Ok(sha256)
}

/// The tensors llama.cpp's quantizer could not give the type asked for (a row length its blocks
/// do not divide: a 256-wide k-quant on a 576-wide model) and gave another one instead: its
/// own count, from its warning "N of M tensor(s) required fallback quantization"
/// (`llama-quant.cpp`, `llama_model_quantize_impl`). Kept beside the cached file, since a
/// reused file is not quantized again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fallback {
    /// Tensors given another type than the one asked for.
    pub tensors: u32,
    /// Tensors in the file.
    pub of: u32,
}

impl Fallback {
    /// The share of tensors that fell back, 0 … 1.
    pub(crate) fn share(&self) -> f64 {
        if self.of == 0 {
            0.0
        } else {
            f64::from(self.tensors) / f64::from(self.of)
        }
    }

    /// `llama_model_quantize_impl: WARNING: 180 of 272 tensor(s) required fallback
    /// quantization` → 180 of 272.
    pub(crate) fn from_log(line: &str) -> Option<Self> {
        let head = line
            .split(" tensor(s) required fallback quantization")
            .next()?;
        if head.len() == line.len() {
            return None;
        }
        let mut words = head.split_whitespace().rev();
        let of = words.next()?.parse().ok()?;
        (words.next()? == "of").then_some(())?;
        let tensors = words.next()?.parse().ok()?;
        Some(Self { tensors, of })
    }

    /// What the quantizer said: its fallback warning, else none fell back out of the tensors
    /// its progress counter counted.
    fn of_last_run() -> Self {
        crate::logging::recent_llama_problems()
            .iter()
            .rev()
            .find_map(|l| Self::from_log(l))
            .unwrap_or(Self {
                tensors: 0,
                of: crate::logging::tensor_progress().map_or(0, |(_, total)| total),
            })
    }
}

/// Where the fallback count of a cached file is kept: `<stem>-<TYPE>.fallback.json`.
fn fallback_path(out: &Path) -> PathBuf {
    out.with_extension("fallback.json")
}

fn read_fallback(out: &Path) -> Option<Fallback> {
    let bytes = crate::fsx::read_regular(&fallback_path(out), 4096, "a fallback record").ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A quantization type tokscope can produce without an importance matrix: its name as users
/// type it (`q4_k_m`) and llama.cpp's `llama_ftype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuantType {
    pub name: &'static str,
    pub ftype: u32,
}

/// The types `--quantize` accepts, highest precision first. The IQ1/IQ2 types and Q2_K_S need
/// an importance matrix, which tokscope does not compute: they are left out rather than made
/// badly.
pub(crate) const QUANT_TYPES: &[QuantType] = &[
    QuantType::new("f16", 1),
    QuantType::new("bf16", 32),
    QuantType::new("q8_0", 7),
    QuantType::new("q6_k", 18),
    QuantType::new("q5_k_m", 17),
    QuantType::new("q5_k_s", 16),
    QuantType::new("q5_1", 9),
    QuantType::new("q5_0", 8),
    QuantType::new("q4_k_m", 15),
    QuantType::new("q4_k_s", 14),
    QuantType::new("iq4_xs", 30),
    QuantType::new("iq4_nl", 25),
    QuantType::new("q4_1", 3),
    QuantType::new("q4_0", 2),
    QuantType::new("q3_k_l", 13),
    QuantType::new("q3_k_m", 12),
    QuantType::new("q3_k_s", 11),
    QuantType::new("q2_k", 10),
];

impl QuantType {
    const fn new(name: &'static str, ftype: u32) -> Self {
        Self { name, ftype }
    }

    /// `Q4_K_M`, `q4_k_m` or `Q4-K-M`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let wanted = text.trim().to_ascii_lowercase().replace('-', "_");
        QUANT_TYPES
            .iter()
            .find(|t| t.name == wanted)
            .copied()
            .ok_or_else(|| {
                format!(
                    "unknown quantization type `{text}`; choose from {}",
                    QUANT_TYPES
                        .iter()
                        .map(|t| t.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

/// The cache file of `source` quantized to `ty`: `<first 16 hex digits of the contents'
/// sha256>/<stem>-<TYPE>.gguf` (the stem cut to 64 characters), so the name a person reads
/// is short and the folder keeps two sources of one name apart.
pub(crate) fn cache_path(
    cache_dir: &Path,
    source: &Path,
    ty: QuantType,
) -> std::io::Result<PathBuf> {
    let stem: String = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string())
        .chars()
        .take(64)
        .collect();
    let print: String = content_hash(cache_dir, source)?.chars().take(16).collect();
    Ok(cache_dir
        .join(print)
        .join(format!("{stem}-{}.gguf", ty.name.to_ascii_uppercase())))
}

/// A file `quantize_cached` gives: where, whether it was reused, and how many of its tensors
/// fell back to another type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Quantized {
    pub path: PathBuf,
    pub reused: bool,
    pub fallback: Fallback,
}

/// Quantize `source` to `ty` into the cache, or reuse the file already there (with its
/// fallback record: a file without one, from an older tokscope, is quantized again so that its
/// fallback count is known). `progress` is called a few times a second with (tensors done,
/// tensors in all) while llama.cpp works.
pub(crate) fn quantize_cached(
    source: &Path,
    ty: QuantType,
    cache_dir: &Path,
    threads: u32,
    allow_requantize: bool,
    mut progress: impl FnMut(u32, u32),
) -> Result<Quantized, String> {
    let out = cache_path(cache_dir, source, ty)
        .map_err(|e| format!("cannot read {}: {e}", source.display()))?;
    // The cached file is there and loads as a GGUF model header.
    if let (Ok(_), Some(fallback)) = (check_model_file(&out), read_fallback(&out)) {
        return Ok(Quantized {
            path: out,
            reused: true,
            fallback,
        });
    }
    let folder = out.parent().unwrap_or(cache_dir);
    for dir in [cache_dir, folder] {
        crate::fsx::ensure_private_dir(dir)
            .map_err(|e| format!("cannot create the cache folder {}: {e}", dir.display()))?;
    }
    let partial = out.with_extension(format!("partial-{}", std::process::id()));
    let done = Arc::new(AtomicBool::new(false));
    crate::logging::reset_tensor_progress();
    let result = std::thread::scope(|scope| {
        let worker = {
            let done = Arc::clone(&done);
            let partial = partial.clone();
            scope.spawn(move || {
                let r = quantize_file(source, &partial, ty, threads, allow_requantize);
                done.store(true, Ordering::Release);
                r
            })
        };
        while !done.load(Ordering::Acquire) {
            if let Some((d, t)) = crate::logging::tensor_progress() {
                progress(d, t);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        worker
            .join()
            .unwrap_or_else(|_| Err("the quantizer thread panicked".to_string()))
    });
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    let fallback = Fallback::of_last_run();
    std::fs::rename(&partial, &out).map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        format!("cannot move the quantized file into {}: {e}", out.display())
    })?;
    match serde_json::to_vec(&fallback) {
        Ok(json) => {
            if let Err(e) = crate::fsx::write_private(&fallback_path(&out), &json) {
                tracing::warn!(error = %e, "could not keep the fallback count");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not keep the fallback count"),
    }
    Ok(Quantized {
        path: out,
        reused: false,
        fallback,
    })
}

/// One call of llama.cpp's quantizer.
fn quantize_file(
    source: &Path,
    out: &Path,
    ty: QuantType,
    threads: u32,
    allow_requantize: bool,
) -> Result<(), String> {
    let c_path = |p: &Path| {
        CString::new(p.to_string_lossy().as_bytes())
            .map_err(|_| format!("{} contains a NUL byte", p.display()))
    };
    let input = c_path(source)?;
    let output = c_path(out)?;
    crate::llama::backend().map_err(|e| format!("llama.cpp did not start: {e}"))?;
    crate::logging::clear_llama_problems();
    let status = ffi::quantize(&input, &output, ty.ftype, threads, allow_requantize);
    if status == 0 {
        Ok(())
    } else {
        let said = crate::logging::recent_llama_problems();
        Err(format!(
            "llama.cpp could not quantize {} to {} (status {status}){}",
            source.display(),
            ty.name.to_ascii_uppercase(),
            said.last().map(|m| format!(": {m}")).unwrap_or_default()
        ))
    }
}

/// The one place tokscope calls llama.cpp's C API directly.
#[allow(unsafe_code)]
mod ffi {
    use std::ffi::CStr;

    use llama_cpp_sys_2 as sys;

    /// `llama_model_quantize` with llama.cpp's default parameters but the file type, the
    /// thread count and whether a quantized source is allowed.
    pub(crate) fn quantize(
        input: &CStr,
        output: &CStr,
        ftype: u32,
        threads: u32,
        allow_requantize: bool,
    ) -> u32 {
        // SAFETY: `llama_model_quantize_default_params` returns a plain struct by value; its
        // pointer fields are null (no imatrix, overrides or pruning), which the quantizer
        // accepts. The two paths are valid NUL-terminated strings that outlive the call, and
        // `params` is a live local for its whole duration.
        unsafe {
            let mut params = sys::llama_model_quantize_default_params();
            params.ftype = ftype as sys::llama_ftype;
            params.nthread = i32::try_from(threads).unwrap_or(0);
            params.allow_requantize = allow_requantize;
            sys::llama_model_quantize(input.as_ptr(), output.as_ptr(), &params)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_parse_in_any_case() {
        assert_eq!(QuantType::parse("Q4_K_M").unwrap().ftype, 15);
        assert_eq!(QuantType::parse("q8_0").unwrap().ftype, 7);
        assert_eq!(QuantType::parse("q4-0").unwrap().ftype, 2);
        let e = QuantType::parse("q9_9").unwrap_err();
        assert!(e.contains("unknown quantization type `q9_9`"), "{e}");
        assert!(e.contains("q4_k_m"), "{e}");
    }

    #[test]
    fn the_cache_key_is_the_whole_content_and_is_hashed_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        // Same name, same size, same first and last MiB: only the middle differs.
        let mut bytes = vec![7u8; 3 << 20];
        let a_dir = dir.path().join("a");
        let b_dir = dir.path().join("b");
        std::fs::create_dir_all(&a_dir).unwrap();
        std::fs::create_dir_all(&b_dir).unwrap();
        std::fs::write(a_dir.join("m.gguf"), &bytes).unwrap();
        bytes[(3 << 20) / 2] = 8;
        std::fs::write(b_dir.join("m.gguf"), &bytes).unwrap();
        let ty = QuantType::parse("q8_0").unwrap();
        let a = cache_path(&cache, &a_dir.join("m.gguf"), ty).unwrap();
        let b = cache_path(&cache, &b_dir.join("m.gguf"), ty).unwrap();
        assert_ne!(a, b);
        // A short name a person reads, in a folder named by the contents.
        assert_eq!(a.file_name().unwrap(), "m-Q8_0.gguf");
        assert_eq!(a.parent().unwrap().parent().unwrap(), cache);
        assert_eq!(a.parent().unwrap().file_name().unwrap().len(), 16);
        // The second time the memo answers (a planted value proves it is not re-read).
        let memo_path = cache.join(HASH_MEMO_FILE);
        let mut memo: Vec<HashMemo> =
            serde_json::from_slice(&std::fs::read(&memo_path).unwrap()).unwrap();
        assert_eq!(memo.len(), 2);
        memo[0].sha256 = "planted".into();
        std::fs::write(&memo_path, serde_json::to_vec(&memo).unwrap()).unwrap();
        assert_eq!(
            content_hash(&cache, &a_dir.join("m.gguf")).unwrap(),
            "planted"
        );
        // A changed file (new mtime and size) is hashed again.
        bytes.push(0);
        std::fs::write(a_dir.join("m.gguf"), &bytes).unwrap();
        let again = content_hash(&cache, &a_dir.join("m.gguf")).unwrap();
        assert_eq!(again.len(), 64);
        assert_ne!(again, "planted");
    }

    #[test]
    fn the_fallback_count_is_read_from_llama_cpps_warning() {
        let line = "llama_model_quantize_impl: WARNING: 180 of 272 tensor(s) required fallback \
                    quantization";
        let f = Fallback::from_log(line).unwrap();
        assert_eq!(
            f,
            Fallback {
                tensors: 180,
                of: 272
            }
        );
        assert!((f.share() - 180.0 / 272.0).abs() < 1e-12);
        assert_eq!(
            Fallback::from_log("llama_model_quantize_impl: model size = 10 MB"),
            None
        );
        assert_eq!(
            Fallback::from_log("x: WARNING: many of 272 tensor(s) required fallback quantization"),
            None
        );
        // Kept beside the cached file, and read back for a reused one.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("m-Q4_K_M.gguf");
        assert_eq!(read_fallback(&out), None);
        std::fs::write(fallback_path(&out), serde_json::to_vec(&f).unwrap()).unwrap();
        assert_eq!(
            fallback_path(&out),
            dir.path().join("m-Q4_K_M.fallback.json")
        );
        assert_eq!(read_fallback(&out), Some(f));
    }

    #[test]
    fn every_type_name_matches_llama_cpps_ftype_name() {
        for t in QUANT_TYPES {
            let name = crate::engine::quantization_name(t.ftype).unwrap();
            assert_eq!(name, t.name.to_ascii_uppercase());
        }
    }
}
