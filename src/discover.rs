//! Finding GGUF models where people keep them, for the chat's model picker: tokscope's own data
//! and cache dirs, the Hugging Face cache (its `snapshots/REV/FILE -> ../../blobs/HASH` links),
//! LM Studio's models folder, ollama's blob store (blobs recognised by the GGUF magic, named from
//! ollama's manifests) and the folders of config's `model_dirs`. Each model is described from
//! its GGUF header alone (no weights are read).
//!
//! The walk is bounded: it follows a link to a folder only once per real (canonical) folder, so
//! a symlink loop or two links to one tree cost one visit; it stops at a depth, an entry cap
//! and a deadline, and says so; a file it cannot read or that is no GGUF is skipped and counted.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::gguf::{self, GgufHeader, GgufValue};

/// How long a search may take before it stops and says so.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);
/// The most models one search lists.
pub const DEFAULT_MAX_MODELS: usize = 500;
/// Folders deeper than this below a root are not entered (a Hugging Face snapshot file is at
/// depth 3: `models--org--repo/snapshots/REV/file.gguf`).
const MAX_DEPTH: usize = 8;
/// The most folders one search reads, whatever the deadline.
const MAX_DIRS: usize = 20_000;
/// ollama's media type of a manifest layer that holds the model weights.
const OLLAMA_MODEL_MEDIA_TYPE: &str = "application/vnd.ollama.image.model";

/// Where a model was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// The folder of the model the chat runs (`-m`), searched first.
    ModelDir,
    /// tokscope's data or cache dir (the demo model, `compare --quantize` outputs).
    Tokscope,
    /// A folder of config's `model_dirs`.
    ConfigDir,
    HuggingFace,
    LmStudio,
    Ollama,
}

impl Origin {
    /// A short label for the picker's rows.
    pub fn label(self) -> &'static str {
        match self {
            Origin::ModelDir => "-m folder",
            Origin::Tokscope => "tokscope",
            Origin::ConfigDir => "model_dirs",
            Origin::HuggingFace => "hf",
            Origin::LmStudio => "lmstudio",
            Origin::Ollama => "ollama",
        }
    }
}

/// One GGUF model file, described from its header.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundModel {
    /// What the user knows it by: the file name, `org/repo/file` for Hugging Face,
    /// `model:tag` for ollama.
    pub name: String,
    /// The path to load (the link's path for Hugging Face snapshots, the blob for ollama).
    pub path: PathBuf,
    pub origin: Origin,
    /// `general.architecture` ("?" when missing).
    pub architecture: String,
    /// Elements of every tensor together.
    pub n_params: u64,
    /// `general.file_type`'s name, else the most common tensor type ("?" when neither).
    pub quantization: String,
    pub size_bytes: u64,
    /// Written by `tokscope synth` (random weights: speed only).
    pub synthetic: bool,
    /// The file the chat runs now (`Roots::in_use`).
    pub in_use: bool,
}

/// The folders one search looks in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Roots {
    pub tokscope: Vec<PathBuf>,
    pub config_dirs: Vec<PathBuf>,
    /// Hugging Face hub caches (`…/huggingface/hub`).
    pub hugging_face: Vec<PathBuf>,
    pub lm_studio: Vec<PathBuf>,
    /// ollama model stores (holding `blobs/` and `manifests/`).
    pub ollama: Vec<PathBuf>,
    /// The model file the chat runs: listed first and marked, and its folder searched (its
    /// own files, not its subfolders) before the well-known places.
    pub in_use: Option<PathBuf>,
}

impl Roots {
    /// The well-known places for this user: `$HOME`-relative defaults, overridden by
    /// `HF_HOME`, `HUGGINGFACE_HUB_CACHE` and `OLLAMA_MODELS` when set; `model_dirs` from config
    /// (a leading `~` expanded).
    pub fn for_user(model_dirs: &[PathBuf]) -> Self {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = env("HOME");
        let under_home = |rel: &str| home.as_ref().map(|h| h.join(rel));
        let hugging_face = match (env("HUGGINGFACE_HUB_CACHE"), env("HF_HOME")) {
            (Some(hub), _) => vec![hub],
            (None, Some(hf)) => vec![hf.join("hub")],
            (None, None) => under_home(".cache/huggingface/hub").into_iter().collect(),
        };
        let lm_studio = [".lmstudio/models", ".cache/lm-studio/models"]
            .iter()
            .filter_map(|rel| under_home(rel))
            .collect();
        let ollama = match env("OLLAMA_MODELS") {
            Some(dir) => vec![dir],
            None => under_home(".ollama/models")
                .into_iter()
                // Where the Linux system service keeps them.
                .chain([PathBuf::from("/usr/share/ollama/.ollama/models")])
                .collect(),
        };
        Self {
            tokscope: vec![crate::paths::data_dir(), crate::paths::cache_dir()],
            config_dirs: model_dirs
                .iter()
                .map(|d| crate::config::expand_home(d))
                .collect(),
            hugging_face,
            lm_studio,
            ollama,
            in_use: None,
        }
    }
}

/// The bounds of one search.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub max_models: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_DEADLINE,
            max_models: DEFAULT_MAX_MODELS,
        }
    }
}

/// What a search found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovery {
    /// Sorted by origin, then name.
    pub models: Vec<FoundModel>,
    /// Files named `.gguf` (or ollama blobs) that could not be read or are no GGUF.
    pub skipped: usize,
    /// Why the search stopped before the end (the deadline, the entry cap), if it did.
    pub cut_short: Option<String>,
    pub elapsed: Duration,
    /// Folders read: each real folder at most once, however many links lead to it.
    pub folders_read: usize,
}

struct Walk {
    started: Instant,
    limits: Limits,
    visited_dirs: HashSet<PathBuf>,
    /// ollama stores already searched (apart from `visited_dirs`: a `model_dirs` folder that
    /// holds an ollama store must not hide its named models).
    ollama_stores: HashSet<PathBuf>,
    seen_files: HashSet<PathBuf>,
    out: Discovery,
}

impl Walk {
    /// Whether to stop now (and why, recorded once).
    fn stop(&mut self) -> bool {
        if self.out.cut_short.is_some() {
            return true;
        }
        let reason = if self.started.elapsed() >= self.limits.deadline {
            format!(
                "stopped after {:.1} s: the list may be incomplete",
                self.limits.deadline.as_secs_f64()
            )
        } else if self.out.models.len() >= self.limits.max_models {
            format!(
                "stopped at {} models: put yours in model_dirs, or type a path",
                self.limits.max_models
            )
        } else if self.out.folders_read >= MAX_DIRS {
            format!("stopped after reading {MAX_DIRS} folders")
        } else {
            return false;
        };
        self.out.cut_short = Some(reason);
        true
    }

    /// Enter `dir` unless its real folder was already visited (a loop, or a second link).
    fn enter(&mut self, dir: &Path) -> bool {
        fs::canonicalize(dir).is_ok_and(|real| self.visited_dirs.insert(real))
    }

    /// Walk `dir` for `*.gguf` files, naming each with `name_of`.
    fn walk(
        &mut self,
        dir: &Path,
        depth: usize,
        origin: Origin,
        name_of: &dyn Fn(&Path) -> String,
    ) {
        if depth > MAX_DEPTH || self.stop() || !self.enter(dir) {
            return;
        }
        self.out.folders_read += 1;
        for path in sorted_entries(dir) {
            if self.stop() {
                return;
            }
            // `metadata` follows links: a link to a folder is walked (once per real folder), a
            // link to a file is read as that file; a dangling link is neither.
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                self.walk(&path, depth + 1, origin, name_of);
            } else if meta.is_file() && has_gguf_extension(&path) {
                let name = name_of(&path);
                self.add(&path, name, origin);
            }
        }
    }

    /// Describe one file from its header and list it (once per real file).
    fn add(&mut self, path: &Path, name: String, origin: Origin) {
        let real = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if !self.seen_files.insert(real) {
            return;
        }
        match describe(path, name, origin) {
            Some(model) => self.out.models.push(model),
            None => self.out.skipped += 1,
        }
    }

    fn ollama(&mut self, root: &Path) {
        let Ok(real) = fs::canonicalize(root) else {
            return;
        };
        if self.stop() || !real.is_dir() || !self.ollama_stores.insert(real) {
            return;
        }
        let names = ollama_names(&root.join("manifests"), self.started + self.limits.deadline);
        for blob in sorted_entries(&root.join("blobs")) {
            if self.stop() {
                return;
            }
            let Some(file) = blob.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(digest) = file.strip_prefix("sha256-") else {
                continue;
            };
            // Manifests, templates and parameters are blobs too: only GGUF ones are models.
            if !fs::metadata(&blob).is_ok_and(|m| m.is_file()) || !starts_with_gguf_magic(&blob) {
                continue;
            }
            let name = names.get(digest).cloned().unwrap_or_else(|| {
                format!("sha256-{} (no manifest)", &digest[..digest.len().min(12)])
            });
            self.add(&blob, name, Origin::Ollama);
        }
    }
}

/// Search every root within `limits`.
pub fn discover(roots: &Roots, limits: Limits) -> Discovery {
    let mut walk = Walk {
        started: Instant::now(),
        limits,
        visited_dirs: HashSet::new(),
        ollama_stores: HashSet::new(),
        seen_files: HashSet::new(),
        out: Discovery::default(),
    };
    // The model in use and its folder first (its own files only: a model kept in $HOME must
    // not cost the search its deadline), then the user's own folders: a file found twice
    // keeps the name of where it was listed.
    let in_use = roots.in_use.as_ref().filter(|p| p.is_file());
    if let Some(path) = in_use {
        walk.add(path, file_name(path), Origin::ModelDir);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            walk.walk(dir, MAX_DEPTH, Origin::ModelDir, &file_name);
        }
    }
    for dir in &roots.config_dirs {
        walk.walk(dir, 0, Origin::ConfigDir, &file_name);
    }
    for dir in &roots.tokscope {
        walk.walk(dir, 0, Origin::Tokscope, &file_name);
    }
    for dir in &roots.hugging_face {
        walk.walk(dir, 0, Origin::HuggingFace, &|p| hugging_face_name(dir, p));
    }
    for dir in &roots.lm_studio {
        walk.walk(dir, 0, Origin::LmStudio, &|p| {
            p.strip_prefix(dir)
                .map_or_else(|_| file_name(p), |r| r.to_string_lossy().into_owned())
        });
    }
    for dir in &roots.ollama {
        walk.ollama(dir);
    }
    if let Some(real) = in_use.and_then(|p| fs::canonicalize(p).ok()) {
        for m in &mut walk.out.models {
            m.in_use = fs::canonicalize(&m.path).is_ok_and(|p| p == real);
        }
    }
    // The model in use first, then by origin and name.
    walk.out
        .models
        .sort_by(|a, b| (!a.in_use, a.origin, &a.name).cmp(&(!b.in_use, b.origin, &b.name)));
    walk.out.elapsed = walk.started.elapsed();
    walk.out
}

/// The paths in `dir`, sorted (none when it cannot be read).
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

pub(crate) fn has_gguf_extension(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

fn starts_with_gguf_magic(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == gguf::GGUF_MAGIC
}

/// `org/repo/file.gguf` for `HUB/models--org--repo/snapshots/REV/file.gguf`.
fn hugging_face_name(hub: &Path, path: &Path) -> String {
    let file = file_name(path);
    let repo = path
        .strip_prefix(hub)
        .ok()
        .and_then(|r| r.components().next())
        .and_then(|c| c.as_os_str().to_str())
        .and_then(|c| c.strip_prefix("models--"))
        .map(|r| r.replace("--", "/"));
    match repo {
        Some(repo) => format!("{repo}/{file}"),
        None => file,
    }
}

/// The largest file read as an ollama manifest: real ones are about 1 KiB (a few layers'
/// digests); 3,000 files of 1 MiB each took the picker 112 s to parse.
const MANIFEST_MAX_BYTES: u64 = 64 << 10;

/// Model names by blob digest (hex, without `sha256:`), from ollama's manifests:
/// `manifests/REGISTRY/NAMESPACE/MODEL/TAG`, each a JSON whose model layer names the blob.
/// Stops at `until` (the search's deadline: the caller then says the list may be incomplete).
fn ollama_names(manifests: &Path, until: Instant) -> HashMap<String, String> {
    let mut names = HashMap::new();
    let mut stack = vec![(manifests.to_path_buf(), 0usize)];
    let mut seen = HashSet::new();
    while let Some((dir, depth)) = stack.pop() {
        if Instant::now() >= until {
            break;
        }
        if depth > 4 || !fs::canonicalize(&dir).is_ok_and(|real| seen.insert(real)) {
            continue;
        }
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if Instant::now() >= until {
                break;
            }
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push((path, depth + 1));
                continue;
            }
            // A manifest is about a KiB; anything much larger is not one.
            if !meta.is_file() || meta.len() > MANIFEST_MAX_BYTES {
                continue;
            }
            let Some(digest) = fs::read(&path)
                .ok()
                .and_then(|bytes| model_layer_digest(&bytes))
            else {
                continue;
            };
            let Ok(rel) = path.strip_prefix(manifests) else {
                continue;
            };
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if let [registry, namespace, model, tag] = parts.as_slice() {
                let name = if namespace == "library" && registry == "registry.ollama.ai" {
                    format!("{model}:{tag}")
                } else if registry == "registry.ollama.ai" {
                    format!("{namespace}/{model}:{tag}")
                } else {
                    format!("{registry}/{namespace}/{model}:{tag}")
                };
                // Two tags of one blob: the first in name order is kept.
                let kept = names.entry(digest).or_insert_with(|| name.clone());
                if name < *kept {
                    *kept = name;
                }
            }
        }
    }
    names
}

/// The hex digest of a manifest's model layer.
fn model_layer_digest(manifest: &[u8]) -> Option<String> {
    let json: serde_json::Value = serde_json::from_slice(manifest).ok()?;
    json.get("layers")?
        .as_array()?
        .iter()
        .find(|l| l.get("mediaType").and_then(|m| m.as_str()) == Some(OLLAMA_MODEL_MEDIA_TYPE))?
        .get("digest")?
        .as_str()?
        .strip_prefix("sha256:")
        .map(str::to_string)
}

/// A model's row, from its header; `None` when the file cannot be read or is no GGUF.
fn describe(path: &Path, name: String, origin: Origin) -> Option<FoundModel> {
    // The vocabulary is not needed for a row, and reading it is most of a header's cost.
    let header = gguf::read_metadata_without_arrays(path).ok()?;
    Some(FoundModel {
        name,
        path: path.to_path_buf(),
        origin,
        architecture: header
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .unwrap_or("?")
            .to_string(),
        n_params: header.tensors.iter().map(|t| t.n_elements()).sum(),
        quantization: quantization(&header),
        size_bytes: header.file_size_bytes,
        synthetic: matches!(
            header.get(gguf::SYNTHETIC_METADATA_KEY),
            Some(GgufValue::Bool(true))
        ),
        in_use: false,
    })
}

fn quantization(header: &GgufHeader) -> String {
    let named = header
        .get("general.file_type")
        .and_then(GgufValue::as_u64)
        .and_then(|t| u32::try_from(t).ok())
        .and_then(crate::llama::model_info::quantization_name);
    if let Some(name) = named {
        return name.to_string();
    }
    // Without a file type: the type holding the most elements.
    let mut by_type: HashMap<u32, u64> = HashMap::new();
    for t in &header.tensors {
        *by_type.entry(t.ggml_type.0).or_default() += t.n_elements();
    }
    by_type
        .into_iter()
        .max_by_key(|&(ty, n)| (n, std::cmp::Reverse(ty)))
        .and_then(|(ty, _)| gguf::GgmlType(ty).name())
        .map_or_else(|| "?".to_string(), |n| n.to_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugging_face_names_come_from_the_repo_folder() {
        let hub = Path::new("/h/hub");
        let p = hub.join("models--bartowski--Llama-3.2-1B-GGUF/snapshots/abc/x-Q4_K_M.gguf");
        assert_eq!(
            hugging_face_name(hub, &p),
            "bartowski/Llama-3.2-1B-GGUF/x-Q4_K_M.gguf"
        );
        assert_eq!(hugging_face_name(hub, Path::new("/else/y.gguf")), "y.gguf");
    }

    /// Every part of the search has the deadline and a size bound: 3,000 large manifests took
    /// 112 s before; an oversized manifest is not parsed, and a deadline already past stops
    /// the manifest walk at once.
    #[test]
    fn the_manifest_walk_has_the_deadline_and_a_size_bound() {
        let dir = tempfile::tempdir().unwrap();
        let manifests = dir.path().join("manifests/registry.ollama.ai/library");
        let layer = r#"{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:abc"}]}"#;
        for i in 0..200 {
            let m = manifests.join(format!("m{i}"));
            fs::create_dir_all(&m).unwrap();
            fs::write(m.join("latest"), layer).unwrap();
        }
        let big = manifests.join("big");
        fs::create_dir_all(&big).unwrap();
        let mut padded = layer.to_string();
        padded.push_str(&" ".repeat(MANIFEST_MAX_BYTES as usize));
        fs::write(big.join("latest"), &padded).unwrap();
        let root = dir.path().join("manifests");
        let far = Instant::now() + Duration::from_secs(60);
        let names = ollama_names(&root, far);
        assert_eq!(
            names.len(),
            1,
            "one digest, named by the first tag in order"
        );
        assert!(names["abc"].starts_with('m'), "{names:?}");
        let started = Instant::now();
        assert!(ollama_names(&root, Instant::now()).is_empty());
        assert!(started.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn the_model_layer_of_a_manifest_names_the_blob() {
        let manifest = br#"{"schemaVersion":2,"layers":[
            {"mediaType":"application/vnd.ollama.image.template","digest":"sha256:aaa"},
            {"mediaType":"application/vnd.ollama.image.model","digest":"sha256:bbb"}]}"#;
        assert_eq!(model_layer_digest(manifest).as_deref(), Some("bbb"));
        assert_eq!(model_layer_digest(b"{\"layers\":[]}"), None);
        assert_eq!(model_layer_digest(b"not json"), None);
    }
}
