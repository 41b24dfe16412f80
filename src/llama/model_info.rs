//! What is known about the loaded model and the machine running it: shown in the status line
//! and written into every report's reproducibility stamp. Also the pre-flight check of a model
//! path, which turns the common mistakes into clear errors before llama.cpp sees the file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::error::EngineError;

/// Facts about the loaded model, context and backend.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ModelInfo {
    pub path: PathBuf,
    pub file_name: String,
    pub file_size_bytes: u64,
    /// sha256 over the file size and its first and last MiB, first 16 hex digits: cheap on a
    /// 16 GB file and enough to tell two files apart.
    pub fingerprint: String,
    pub name: String,
    pub architecture: String,
    pub n_params: u64,
    pub n_layer: u32,
    pub n_embd: i32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_vocab: i32,
    pub n_ctx_train: u32,
    pub quantization: String,
    /// llama.cpp's own count of the tensor bytes (weights) in the model.
    pub weights_bytes: u64,
    pub n_ctx: u32,
    pub n_batch: u32,
    pub threads: u32,
    pub backend: String,
    pub devices: Vec<String>,
    pub n_gpu_layers: u32,
    /// The CPU kernel set the model runs on: "default" (llama.cpp's: weights repacked for
    /// this CPU, the tiled matmul on) or "batch-invariant" (the file layout and the tiled
    /// matmul off, see `llama::invariant`: speculation's default, slower prefill).
    pub kernels: String,
    /// llama.cpp repacked some of the weights for this CPU's kernels (its load log names a
    /// "CPU_REPACK" buffer): never on batch-invariant kernels.
    pub weights_repacked: bool,
    /// Why the CUDA flash-attention decode kernel is not the K/V pair's own on this build
    /// (`llama::fattn`: the pair not compiled, converted to f16 at every step); `None` when it
    /// is, or when no CUDA flash attention runs.
    pub fa_kv_kernel: Option<String>,
    /// How prompts are built: the GGUF's template, a llama.cpp built-in name, or completion.
    pub template: String,
    /// Why that template was chosen, when it was not the model's own.
    pub template_note: Option<String>,
    /// The file was written by `tokscope synth`: its speed is real, its text is noise.
    pub synthetic: bool,
    pub llama_cpp: String,
    /// The engine's load, from its start to the model being ready (the sum of the stages and
    /// the little between them).
    pub load_ms: f64,
    /// Where the load's time went.
    pub load_stages: LoadStages,
    /// What a decode step reads (from the GGUF's tensor directory), for the roofline.
    pub weight_bytes: Option<crate::metrics::roofline::WeightBytes>,
    /// The KV cache's shape with the context's cache types, for the roofline.
    pub kv_shape: Option<crate::metrics::roofline::KvShape>,
    /// The bytes llama.cpp allocated for the KV cache (`KvShape::allocated_bytes` of the
    /// context), said before the context is made; `None` when the shape is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_bytes: Option<u64>,
}

impl ModelInfo {
    /// "KV cache 27 MB for the 4096-token context (K f16, V f16)": said where the model is
    /// (the chat's welcome, `run`'s stderr); `None` when the size is unknown.
    pub fn kv_cache_line(&self) -> Option<String> {
        let bytes = self.kv_cache_bytes?;
        let types = self.kv_shape.map_or_else(String::new, |kv| {
            format!(" (K {}, V {})", kv.type_k.name(), kv.type_v.name())
        });
        Some(format!(
            "KV cache {} for the {}-token context{types}",
            crate::fmt::bytes(bytes),
            self.n_ctx
        ))
    }
}

/// The stages of a model load on the engine thread, in ms (docs/metrics.md, "Load").
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct LoadStages {
    /// The pre-flight checks of the file (header, sizes) and the child-process probe, which
    /// runs once per file (`llama::probe`) and is remembered after.
    pub checks_ms: f64,
    /// llama.cpp reading the weights (mapping the file, repacking for the CPU's kernels,
    /// copying to the GPU).
    pub weights_ms: f64,
    /// Creating the context: the KV cache (allocated and cleared) and compute buffers.
    pub context_ms: f64,
}

impl ModelInfo {
    /// Bytes read per decode step at `depth` cached tokens (see docs/metrics.md).
    pub(crate) fn bytes_per_token(&self, depth: u64) -> Option<f64> {
        self.weight_bytes
            .as_ref()
            .map(|w| crate::metrics::roofline::bytes_per_token(w, self.kv_shape.as_ref(), depth))
    }

    /// The label shown wherever a synthetic model's results appear.
    pub const SYNTHETIC_LABEL: &'static str = "synthetic weights — speed only, text is noise";
}

/// `TOKSCOPE_TRUST_MODEL=1` skips the validation of a model's contents (the file checks stay).
pub(crate) const TRUST_MODEL_ENV: &str = "TOKSCOPE_TRUST_MODEL";

/// Check a model path before handing it to llama.cpp.
pub fn check_model_file(path: &Path) -> Result<u64, EngineError> {
    let unreadable = |e: std::io::Error| EngineError::ModelUnreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => EngineError::ModelNotFound(path.to_path_buf()),
        _ => unreadable(e),
    })?;
    if meta.is_dir() {
        return Err(EngineError::ModelIsDirectory(path.to_path_buf()));
    }
    if meta.len() == 0 {
        return Err(EngineError::ModelEmpty(path.to_path_buf()));
    }
    let mut magic = [0u8; 4];
    let read = File::open(path)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(unreadable)?;
    if read < 4 || &magic != b"GGUF" {
        return Err(EngineError::NotGguf {
            path: path.to_path_buf(),
            reason: format!(
                "the file starts with {:02x?} instead of the GGUF magic \"GGUF\"",
                &magic[..read]
            ),
        });
    }
    let header = crate::gguf::read_metadata(path).map_err(|e| EngineError::NotGguf {
        path: path.to_path_buf(),
        reason: format!("its header is damaged: {e}"),
    })?;
    // What llama.cpp would abort on (instead of returning an error) is refused here, unless
    // the user vouches for the file (a check that wrongly refuses a good model must not lock
    // it out; the child-process probe still stands between llama.cpp and the session).
    if std::env::var(TRUST_MODEL_ENV).map_or(true, |v| v != "1") {
        crate::gguf::validate::validate_model(&header).map_err(|d| EngineError::InvalidModel {
            path: path.to_path_buf(),
            defect: d.to_string(),
        })?;
    }
    Ok(meta.len())
}

/// A cheap identity of a model file: sha256 of its size, first MiB and last MiB.
pub fn fingerprint(path: &Path) -> std::io::Result<String> {
    const CHUNK: u64 = 1 << 20;
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut hasher = Sha256::new();
    hasher.update(size.to_le_bytes());
    let mut buf = Vec::with_capacity(CHUNK as usize);
    file.by_ref().take(CHUNK).read_to_end(&mut buf)?;
    hasher.update(&buf);
    if size > CHUNK {
        buf.clear();
        file.seek(SeekFrom::Start(size.saturating_sub(CHUNK).max(CHUNK)))?;
        file.take(CHUNK).read_to_end(&mut buf)?;
        hasher.update(&buf);
    }
    let digest = hasher.finalize();
    Ok(crate::fmt::hex(&digest[..8]))
}

/// The name of a GGUF `general.file_type` (llama.cpp's `llama_ftype`).
pub fn quantization_name(file_type: u32) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn quantization_names() {
        assert_eq!(quantization_name(15), Some("Q4_K_M"));
        assert_eq!(quantization_name(7), Some("Q8_0"));
        assert_eq!(quantization_name(1), Some("F16"));
        assert_eq!(quantization_name(999), None);
    }

    #[test]
    fn preflight_names_each_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.gguf");
        assert!(matches!(
            check_model_file(&missing),
            Err(EngineError::ModelNotFound(_))
        ));
        assert!(matches!(
            check_model_file(dir.path()),
            Err(EngineError::ModelIsDirectory(_))
        ));
        let empty = dir.path().join("empty.gguf");
        File::create(&empty).unwrap();
        assert!(matches!(
            check_model_file(&empty),
            Err(EngineError::ModelEmpty(_))
        ));
        let junk = dir.path().join("junk.gguf");
        File::create(&junk)
            .unwrap()
            .write_all(b"PK\x03\x04 not a model")
            .unwrap();
        let e = check_model_file(&junk).unwrap_err();
        assert!(matches!(e, EngineError::NotGguf { .. }), "{e}");
        assert!(e.to_string().contains("GGUF"), "{e}");
        let short = dir.path().join("short.gguf");
        File::create(&short)
            .unwrap()
            .write_all(b"GGUF\x03\x00")
            .unwrap();
        assert!(matches!(
            check_model_file(&short),
            Err(EngineError::NotGguf { .. })
        ));
    }

    #[test]
    fn fingerprint_tells_files_apart() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, vec![1u8; 3 << 20]).unwrap();
        let mut other = vec![1u8; 3 << 20];
        other[(3 << 20) - 1] = 2;
        std::fs::write(&b, other).unwrap();
        let fa = fingerprint(&a).unwrap();
        assert_eq!(fa.len(), 16);
        assert_eq!(fa, fingerprint(&a).unwrap());
        assert_ne!(fa, fingerprint(&b).unwrap());
    }
}
