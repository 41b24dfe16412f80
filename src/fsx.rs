//! Private file writes: atomic replacement through a user-only temp file, user-only
//! directories, and the classification of write errors into advice a user can act on.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A write that failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("could not write {path}: {problem}")]
    Write {
        path: PathBuf,
        problem: WriteProblem,
        #[source]
        source: io::Error,
    },
    #[error("{path} has no file name to write to")]
    NoFileName { path: PathBuf },
    #[error("{path} exists: --force replaces it, or choose another path")]
    Exists { path: PathBuf },
    #[error(
        "cannot write {path}: the folder {dir} does not exist (create it first, or choose \
         another path)"
    )]
    NoFolder { path: PathBuf, dir: PathBuf },
}

impl WriteError {
    /// A write of `path` that failed with `source`, its problem sorted.
    pub(crate) fn at(path: &Path, source: io::Error) -> Self {
        WriteError::Write {
            path: path.to_path_buf(),
            problem: WriteProblem::classify(&source),
            source,
        }
    }
}

/// Why a write failed, in terms a user can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteProblem {
    ReadOnlyFileSystem,
    PermissionDenied,
    DiskFull,
    FileTooLarge,
    NotADirectory,
    /// A FIFO, device node, directory or symbolic link where a regular file should be.
    NotARegularFile,
    Other,
}

impl WriteProblem {
    /// Sorts an I/O error from creating, writing, syncing or renaming a file.
    pub(crate) fn classify(err: &io::Error) -> Self {
        #[cfg(unix)]
        {
            // Raw numbers as well as kinds: the kinds below are recent, and an error built
            // from a raw code by other code may not carry them.
            match err.raw_os_error() {
                Some(27) => return WriteProblem::FileTooLarge, // EFBIG
                Some(28) => return WriteProblem::DiskFull,     // ENOSPC
                Some(30) => return WriteProblem::ReadOnlyFileSystem, // EROFS
                #[cfg(target_os = "linux")]
                Some(40) => return WriteProblem::NotARegularFile, // ELOOP: O_NOFOLLOW met a link
                #[cfg(target_os = "macos")]
                Some(62) => return WriteProblem::NotARegularFile, // ELOOP
                Some(6) => return WriteProblem::NotARegularFile, // ENXIO: a FIFO with no reader
                #[cfg(target_os = "linux")]
                Some(122) => return WriteProblem::DiskFull, // EDQUOT
                #[cfg(target_os = "macos")]
                Some(69) => return WriteProblem::DiskFull, // EDQUOT
                _ => {}
            }
        }
        match err.kind() {
            io::ErrorKind::ReadOnlyFilesystem => WriteProblem::ReadOnlyFileSystem,
            io::ErrorKind::PermissionDenied => WriteProblem::PermissionDenied,
            io::ErrorKind::StorageFull => WriteProblem::DiskFull,
            io::ErrorKind::FileTooLarge => WriteProblem::FileTooLarge,
            io::ErrorKind::NotADirectory => WriteProblem::NotADirectory,
            _ => WriteProblem::Other,
        }
    }
}

impl fmt::Display for WriteProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            WriteProblem::ReadOnlyFileSystem => {
                "the data dir is read-only: choose a writable location (for history, set \
                 TOKSCOPE_DATA_DIR to a writable directory)"
            }
            WriteProblem::PermissionDenied => {
                "permission denied: check the owner and permissions of the directory, or choose \
                 another location (for history, set TOKSCOPE_DATA_DIR)"
            }
            WriteProblem::DiskFull => {
                "disk full (or quota exceeded): free some space and try again; any earlier \
                 version of the file is unchanged"
            }
            WriteProblem::FileTooLarge => {
                "file too large for the file system or the process's file size limit \
                 (ulimit -f); any earlier version of the file is unchanged"
            }
            WriteProblem::NotADirectory => {
                "a file is in the way where a directory should be: move it or choose another \
                 location"
            }
            WriteProblem::NotARegularFile => {
                "it is not a regular file (a FIFO, device node, directory or symbolic link): \
                 tokscope writes regular files only; remove it or choose another path"
            }
            WriteProblem::Other => "unexpected I/O error (see the cause)",
        };
        f.write_str(text)
    }
}

/// Writes `contents` to `path` atomically and readable by the user only (0600 on unix),
/// creating its directory (0700) if missing. Readers see the old file or the new one, never a
/// part; on any error the temp file is removed and an earlier file at `path` is unchanged.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), WriteError> {
    let write_error = |source| WriteError::at(path, source);
    let Some(file_name) = path.file_name() else {
        return Err(WriteError::NoFileName {
            path: path.to_path_buf(),
        });
    };
    let dir = parent_dir(path);
    check_writable_target(path).map_err(|source| match source.kind() {
        io::ErrorKind::InvalidInput => WriteError::Write {
            path: path.to_path_buf(),
            problem: WriteProblem::NotARegularFile,
            source,
        },
        _ => WriteError::at(path, source),
    })?;
    ensure_private_dir(dir).map_err(write_error)?;
    let (temp_path, file) = create_temp(dir, file_name).map_err(write_error)?;
    let mut temp = TempFile(Some(temp_path));
    fill_and_sync(file, contents).map_err(write_error)?;
    temp.rename_to(path).map_err(write_error)?;
    match sync_dir(dir) {
        // Some file systems cannot sync a directory, and a write-only directory cannot be
        // opened to sync it. The contents are synced and the rename has happened, so a "could
        // not write" here would be false; other errors (EIO) mean it may not be durable.
        Err(e)
            if !matches!(
                e.kind(),
                io::ErrorKind::InvalidInput
                    | io::ErrorKind::Unsupported
                    | io::ErrorKind::PermissionDenied
            ) =>
        {
            Err(write_error(e))
        }
        _ => Ok(()),
    }
}

/// The folder `path` is in (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The error for a path that holds something other than a regular file.
pub fn not_a_regular_file() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "it is not a regular file (a symbolic link, FIFO, device node, socket or directory): \
         tokscope writes regular files only and does not replace it; remove it or choose \
         another path",
    )
}

/// Refuses to replace anything at `path` but a regular file: a rename would replace a device
/// node, FIFO or symbolic link (the link itself, silently breaking what it pointed to). A
/// missing file is fine.
pub fn check_writable_target(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => Ok(()),
        Ok(_) => Err(not_a_regular_file()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `dir` (and its parents) readable by the user only (0700 on unix); an existing
/// directory is left as it is.
pub(crate) fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        // An existing directory is the user's choice (an export target, say): leave its mode.
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        builder.create(dir)?;
        // The umask may have narrowed it to something we cannot even write into.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
    }
    #[cfg(not(unix))]
    {
        builder.create(dir)
    }
}

/// A new, empty, user-only file next to the target. The name carries the process id and a
/// counter and the file is created exclusively, so concurrent writers (threads or other
/// tokscope processes) never share one.
fn create_temp(dir: &Path, target_name: &std::ffi::OsStr) -> io::Result<(PathBuf, File)> {
    create_unique(dir, target_name, "tmp", |path| {
        create_private(path).map(|file| (path.to_path_buf(), file))
    })
}

/// Creates something new beside `target_name` in `dir` with `create`, under a name that
/// carries the process id, a counter and the clock's nanoseconds (kept within file-name limits
/// whatever the target's length); a name taken already is tried again, 16 times at most.
fn create_unique<T>(
    dir: &Path,
    target_name: &std::ffi::OsStr,
    kind: &str,
    create: impl Fn(&Path) -> io::Result<T>,
) -> io::Result<T> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base: String = target_name.to_string_lossy().chars().take(64).collect();
    let mut last_error = None;
    for _ in 0..16 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            ".{base}.{kind}-{}-{}-{nanos:08x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        match create(&dir.join(name)) {
            Ok(made) => return Ok(made),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other(format!("could not create a {kind}"))))
}

/// A new file at `path` (never an existing one), user-only (0600 on unix) from the start, so
/// its contents are never readable by others, even briefly.
fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Opens `path` to append to, created user-only (0600 on unix), without blocking on a FIFO or
/// following a link planted where the file should be; `read` also opens it for reading. `None`
/// when something other than a regular file is there. A file others could read (as logs
/// written by older versions, 0644) is made 0600, as history is.
pub(crate) fn open_append_private(path: &Path, read: bool) -> io::Result<Option<(File, u64)>> {
    let mut options = OpenOptions::new();
    options.read(read).append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            file.set_permissions(fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(Some((file, meta.len())))
}

fn fill_and_sync(mut file: File, contents: &[u8]) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The umask may have taken the user's own write bit; make it exactly 0600.
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(contents)?;
    file.sync_all()
}

/// Makes a rename in `dir` itself durable, not only the file's contents: without syncing the
/// directory, a crash right after the rename can bring back the old directory entry.
#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// A temp file that is removed when dropped unless it was renamed into place.
struct TempFile(Option<PathBuf>);

impl TempFile {
    fn rename_to(&mut self, target: &Path) -> io::Result<()> {
        if let Some(temp_path) = &self.0 {
            fs::rename(temp_path, target)?;
            self.0 = None;
        }
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(temp_path) = self.0.take() {
            let _ = fs::remove_file(temp_path);
        }
    }
}

/// A file the user named (`--report`, `--plot`, `--otlp-file`, …) or one tokscope derives from
/// such a name (`bench --plot x.png` → `x-roofline.png`), and whether `--force` lets it replace
/// an existing regular file. Every such file is written by the methods below, under one rule:
/// never through a symbolic link, never into a FIFO or device (no wait on one), an existing
/// file replaced only with `--force` (and only a regular one), and exports written whole
/// (temp + rename) or not at all. docs/safety.md, "Every file tokscope writes".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub path: PathBuf,
    pub force: bool,
}

impl Output {
    pub fn new(path: impl Into<PathBuf>, force: bool) -> Self {
        Self {
            path: path.into(),
            force,
        }
    }

    /// The output named `FILE-suffix.ext` beside `FILE.ext`, under the same `--force`.
    pub fn derived(&self, suffix: &str) -> Self {
        let text = |s: Option<&std::ffi::OsStr>| {
            s.map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let (stem, ext) = (text(self.path.file_stem()), text(self.path.extension()));
        let name = if ext.is_empty() {
            format!("{stem}-{suffix}")
        } else {
            format!("{stem}-{suffix}.{ext}")
        };
        Self::new(self.path.with_file_name(name), self.force)
    }

    fn refused(&self, source: io::Error) -> WriteError {
        WriteError::Write {
            path: self.path.clone(),
            problem: WriteProblem::NotARegularFile,
            source,
        }
    }

    /// Whether the file can be written, checked before any work (a model load, a sweep): it has
    /// a name, its folder exists, and nothing but a regular file is there, which only with
    /// `--force`. The write checks again.
    pub fn check(&self) -> Result<(), WriteError> {
        if self.path.file_name().is_none() {
            return Err(WriteError::NoFileName {
                path: self.path.clone(),
            });
        }
        let dir = parent_dir(&self.path);
        if !dir.is_dir() {
            return Err(WriteError::NoFolder {
                path: self.path.clone(),
                dir: dir.to_path_buf(),
            });
        }
        match fs::symlink_metadata(&self.path) {
            Ok(meta) if !meta.file_type().is_file() => Err(self.refused(not_a_regular_file())),
            Ok(_) if !self.force => Err(WriteError::Exists {
                path: self.path.clone(),
            }),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(WriteError::at(&self.path, e)),
        }
    }

    /// Writes `contents` whole (user-only, 0600) or not at all.
    pub fn write(&self, contents: &[u8]) -> Result<(), WriteError> {
        let staged = self.stage()?;
        let file = create_private(staged.path()).map_err(|e| WriteError::at(&self.path, e))?;
        fill_and_sync(file, contents).map_err(|e| WriteError::at(&self.path, e))?;
        staged.commit()
    }

    /// A private folder beside the file, for a writer that wants a path (an image encoder):
    /// write to `Staged::path` (the same file name, so its extension still says the format),
    /// then `Staged::commit`. Nothing else can write into the folder (0700, created new), so
    /// no link can be planted under the name being written.
    pub fn stage(&self) -> Result<Staged, WriteError> {
        self.check()?;
        let Some(file_name) = self.path.file_name() else {
            return Err(WriteError::NoFileName {
                path: self.path.clone(),
            });
        };
        let dir = parent_dir(&self.path);
        let temp_dir =
            create_temp_dir(dir, file_name).map_err(|e| WriteError::at(&self.path, e))?;
        Ok(Staged {
            file: temp_dir.join(file_name),
            dir: Some(temp_dir),
            target: self.clone(),
        })
    }

    /// Opens the file for a stream of lines written as they come (`--report`, `--otlp-file`):
    /// created new (0600), or with `--force` an existing regular file emptied. A link, FIFO or
    /// device at the path is refused without following or waiting on it.
    pub fn create_stream(&self) -> Result<File, WriteError> {
        self.check()?;
        let mut options = OpenOptions::new();
        options.write(true);
        if self.force {
            options.create(true);
        } else {
            // O_CREAT|O_EXCL: fails on anything already there, a link included.
            options.create_new(true);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
            options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        }
        let file = match options.open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Planted after the check: say what is there now.
                return Err(match fs::symlink_metadata(&self.path) {
                    Ok(m) if m.file_type().is_file() => WriteError::Exists {
                        path: self.path.clone(),
                    },
                    _ => self.refused(not_a_regular_file()),
                });
            }
            Err(e) => return Err(WriteError::at(&self.path, e)),
        };
        let meta = file.metadata().map_err(|e| WriteError::at(&self.path, e))?;
        if !meta.is_file() {
            return Err(self.refused(not_a_regular_file()));
        }
        if self.force {
            file.set_len(0).map_err(|e| WriteError::at(&self.path, e))?;
        }
        Ok(file)
    }
}

/// A bare path is an output without `--force`: nothing is replaced.
impl From<&Path> for Output {
    fn from(path: &Path) -> Self {
        Self::new(path, false)
    }
}

impl From<&PathBuf> for Output {
    fn from(path: &PathBuf) -> Self {
        Self::new(path.as_path(), false)
    }
}

impl From<&Output> for Output {
    fn from(out: &Output) -> Self {
        out.clone()
    }
}

/// A file being written in a private folder beside its target (`Output::stage`); dropped
/// without `commit`, it and the folder are removed.
pub struct Staged {
    file: PathBuf,
    dir: Option<PathBuf>,
    target: Output,
}

impl Staged {
    /// Where to write.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// Puts the written file in place: without `--force` only where nothing is (the link
    /// fails if a file appeared meanwhile), with it replacing a regular file only. The rename
    /// replaces a name; it never writes through a link.
    pub fn commit(mut self) -> Result<(), WriteError> {
        let target = self.target.path.clone();
        let target = &target;
        let at = |e| WriteError::at(target, e);
        match fs::symlink_metadata(&self.file) {
            Ok(m) if m.file_type().is_file() => {}
            Ok(_) => return Err(self.target.refused(not_a_regular_file())),
            Err(e) => return Err(at(e)),
        }
        {
            let mut options = OpenOptions::new();
            options.read(true).write(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW);
            let file = options.open(&self.file).map_err(at)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(fs::Permissions::from_mode(0o600))
                    .map_err(at)?;
            }
            file.sync_all().map_err(at)?;
        }
        if self.target.force {
            check_writable_target(target).map_err(|e| match e.kind() {
                io::ErrorKind::InvalidInput => self.target.refused(e),
                _ => at(e),
            })?;
            fs::rename(&self.file, target).map_err(at)?;
        } else {
            match fs::hard_link(&self.file, target) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(match fs::symlink_metadata(target) {
                        Ok(m) if m.file_type().is_file() => WriteError::Exists {
                            path: target.clone(),
                        },
                        _ => self.target.refused(not_a_regular_file()),
                    });
                }
                // A file system without hard links (FAT, some network mounts): check, then
                // rename.
                Err(_) => {
                    if fs::symlink_metadata(target).is_ok() {
                        return Err(WriteError::Exists {
                            path: target.clone(),
                        });
                    }
                    fs::rename(&self.file, target).map_err(at)?;
                }
            }
        }
        let dir = parent_dir(target).to_path_buf();
        self.clean();
        match sync_dir(&dir) {
            Err(e)
                if !matches!(
                    e.kind(),
                    io::ErrorKind::InvalidInput
                        | io::ErrorKind::Unsupported
                        | io::ErrorKind::PermissionDenied
                ) =>
            {
                Err(at(e))
            }
            _ => Ok(()),
        }
    }

    fn clean(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _ = fs::remove_file(&self.file);
            let _ = fs::remove_dir(&dir);
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        self.clean();
    }
}

/// A new folder (0700) beside the target, named like `create_temp`'s files.
fn create_temp_dir(dir: &Path, target_name: &std::ffi::OsStr) -> io::Result<PathBuf> {
    create_unique(dir, target_name, "tmpdir", |path| {
        let mut builder = fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(path).map(|()| path.to_path_buf())
    })
}

/// A read that was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("could not read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path} is not a regular file (a FIFO, device node, socket or directory): tokscope reads \
         {what} from regular files only"
    )]
    NotRegular { path: PathBuf, what: &'static str },
    #[error(
        "{path} is larger than {limit_bytes} bytes, the limit for {what}: it cannot be one; \
         check the path"
    )]
    TooLarge {
        path: PathBuf,
        limit_bytes: u64,
        what: &'static str,
    },
}

impl ReadError {
    /// Whether the file does not exist (callers often treat that as empty).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Reads `path` whole if it is a regular file of at most `limit_bytes`. A FIFO is refused
/// without blocking on it, a device node (`/dev/zero`) without reading it, and a file that
/// grows past the limit while being read is refused too. `what` names the contents in errors
/// ("a saved conversation").
pub fn read_regular(
    path: &Path,
    limit_bytes: u64,
    what: &'static str,
) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let io_error = |source: io::Error| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Opening a FIFO for reading otherwise waits for a writer.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(io_error)?;
    let meta = file.metadata().map_err(io_error)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            what,
        });
    }
    let too_large = || ReadError::TooLarge {
        path: path.to_path_buf(),
        limit_bytes,
        what,
    };
    if meta.len() > limit_bytes {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > limit_bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

/// How old a temp file of ours must be before `remove_stale_temps` removes it: a save takes
/// milliseconds, so one this old was left by a process that died (`kill -9`, power loss).
pub const STALE_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether `name` is one of `create_temp`'s names: `.<target>.tmp-<pid>-<counter>-<8 hex>`.
pub fn is_our_temp_name(name: &str) -> bool {
    let Some((_, tail)) = name.strip_prefix('.').and_then(|r| r.rsplit_once(".tmp-")) else {
        return false;
    };
    let parts: Vec<&str> = tail.split('-').collect();
    matches!(parts.as_slice(), [pid, counter, nanos]
        if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
            && !counter.is_empty() && counter.bytes().all(|b| b.is_ascii_digit())
            && nanos.len() >= 8 && nanos.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Removes the temp files of our naming pattern in `dir` that are older than `min_age` (left
/// by a process killed during a save) and returns the paths removed. Nothing else is touched;
/// a missing dir has none.
pub fn remove_stale_temps(dir: &Path, min_age: std::time::Duration) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_str().is_some_and(is_our_temp_name) {
            continue;
        }
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= min_age);
        if meta.is_file() && old && fs::remove_file(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// An exclusive advisory lock (`flock`) on an open file or directory, released when dropped
/// (and by the kernel when the process dies, so a `kill -9` leaves no stale lock).
pub struct FileLock {
    _file: File,
}

/// Waits for the exclusive lock on `file`.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn lock_exclusive(file: File) -> io::Result<FileLock> {
    use std::os::unix::io::AsRawFd;
    loop {
        // SAFETY: the descriptor belongs to `file`, which is open for the whole call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(FileLock { _file: file });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(not(unix))]
pub fn lock_exclusive(file: File) -> io::Result<FileLock> {
    Ok(FileLock { _file: file })
}

/// What `append_line` found and repaired before appending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// How many bytes the unfinished last line had.
    pub bytes: u64,
    /// Where they were moved (`<file>.torn-<unix time>[-n]`), or `None` when they could not be
    /// kept and were dropped.
    pub moved_to: Option<PathBuf>,
}

/// Appends `line` plus a newline to `path` as a whole line or not at all: the file (created
/// 0600, its folder 0700) is locked against other appenders, an unfinished last line left by
/// an earlier crash or full disk is first moved aside (never merged with the new record), and
/// a write that fails part-way is cut back off. Returns what was repaired, if anything.
pub fn append_line(path: &Path, line: &[u8]) -> Result<Option<TornLine>, WriteError> {
    let write_error = |source| WriteError::at(path, source);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        ensure_private_dir(dir).map_err(write_error)?;
    }
    let Some((file, _)) = open_append_private(path, true).map_err(write_error)? else {
        return Err(WriteError::Write {
            path: path.to_path_buf(),
            problem: WriteProblem::NotARegularFile,
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
        });
    };
    let lock = lock_exclusive(file).map_err(write_error)?;
    let file = &lock._file;
    let torn = repair_torn_tail(path, file).map_err(write_error)?;
    let before = file.metadata().map_err(write_error)?.len();
    let whole = [line, b"\n"].concat();
    let mut writer = file;
    if let Err(e) = writer.write_all(&whole).and_then(|()| file.sync_data()) {
        // Whole lines or nothing: cut off what part of the line made it.
        let _ = file.set_len(before);
        return Err(write_error(e));
    }
    Ok(torn)
}

/// Moves an unfinished last line (no final newline) of the locked `file` aside and cuts it off.
fn repair_torn_tail(path: &Path, file: &File) -> io::Result<Option<TornLine>> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let mut reader = file;
    let mut last = [0u8; 1];
    reader.seek(SeekFrom::Start(len - 1))?;
    reader.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(None);
    }
    // Find the start of the last line, reading backwards in blocks.
    let mut start = 0u64;
    let mut end = len;
    let mut block = vec![0u8; 64 * 1024];
    'search: while end > 0 {
        let from = end.saturating_sub(block.len() as u64);
        let n = (end - from) as usize;
        reader.seek(SeekFrom::Start(from))?;
        reader.read_exact(&mut block[..n])?;
        if let Some(i) = block[..n].iter().rposition(|&b| b == b'\n') {
            start = from + i as u64 + 1;
            break 'search;
        }
        end = from;
    }
    let torn_len = len - start;
    // Keep the fragment (it may be most of a record) unless it is absurdly large.
    let moved_to = if torn_len <= 64 * 1024 * 1024 {
        let mut fragment = Vec::with_capacity(torn_len as usize);
        reader.seek(SeekFrom::Start(start))?;
        reader.take(torn_len).read_to_end(&mut fragment)?;
        keep_fragment(path, &fragment).ok()
    } else {
        None
    };
    file.set_len(start)?;
    Ok(Some(TornLine {
        bytes: torn_len,
        moved_to,
    }))
}

impl TornLine {
    /// The warning to print: what was found in `log` and where it went.
    pub fn warning(&self, log: &Path) -> String {
        let kept = match &self.moved_to {
            Some(aside) => format!("moved to {}", aside.display()),
            None => "dropped (too large to keep)".to_string(),
        };
        format!(
            "warning: {} ended in an unfinished line ({} bytes, left by an interrupted write \
             or a full disk); it was {kept} so that it is not merged with the next record",
            self.bytes,
            log.display()
        )
    }
}

/// The paths a file is set aside under beside `path`, in the order to try: `NAME.TAG-T`, then
/// `NAME.TAG-T-1`, `-2`, …, a thousand in all.
pub(crate) fn aside_names<'a>(
    path: &'a Path,
    name: &'a str,
    tag: &'a str,
    now_s: u64,
) -> impl Iterator<Item = PathBuf> + 'a {
    (0..1000u32).map(move |attempt| {
        let n = if attempt == 0 {
            String::new()
        } else {
            format!("-{attempt}")
        };
        path.with_file_name(format!("{name}.{tag}-{now_s}{n}"))
    })
}

fn keep_fragment(path: &Path, fragment: &[u8]) -> io::Result<PathBuf> {
    let now_s = crate::ids::now_unix_s();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for aside in aside_names(path, &name, "torn", now_s) {
        match create_private(&aside) {
            Ok(mut f) => {
                f.write_all(fragment)?;
                f.sync_all()?;
                return Ok(aside);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "too many torn fragments set aside already",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_errors_map_to_advice() {
        let cases = [
            (
                io::Error::from_raw_os_error(28),
                WriteProblem::DiskFull,
                "disk full",
            ),
            (
                io::Error::from_raw_os_error(27),
                WriteProblem::FileTooLarge,
                "too large",
            ),
            (
                io::Error::from(io::ErrorKind::StorageFull),
                WriteProblem::DiskFull,
                "free some space",
            ),
            (
                io::Error::from(io::ErrorKind::FileTooLarge),
                WriteProblem::FileTooLarge,
                "ulimit",
            ),
            (
                io::Error::from(io::ErrorKind::ReadOnlyFilesystem),
                WriteProblem::ReadOnlyFileSystem,
                "the data dir is read-only",
            ),
            (
                io::Error::from(io::ErrorKind::PermissionDenied),
                WriteProblem::PermissionDenied,
                "permission denied",
            ),
            (
                io::Error::from(io::ErrorKind::NotADirectory),
                WriteProblem::NotADirectory,
                "a file is in the way",
            ),
            (io::Error::other("boom"), WriteProblem::Other, "unexpected"),
        ];
        for (err, problem, advice) in cases {
            assert_eq!(WriteProblem::classify(&err), problem, "{err}");
            let wrapped = WriteError::Write {
                path: PathBuf::from("/data/history/x.json"),
                problem,
                source: err,
            };
            let message = wrapped.to_string();
            assert!(
                message.starts_with("could not write /data/history/x.json: "),
                "{message}"
            );
            assert!(message.contains(advice), "{message}");
        }
        #[cfg(unix)]
        {
            assert_eq!(
                WriteProblem::classify(&io::Error::from_raw_os_error(30)),
                WriteProblem::ReadOnlyFileSystem
            );
            assert_eq!(
                WriteProblem::classify(&io::Error::from_raw_os_error(13)),
                WriteProblem::PermissionDenied
            );
        }
        #[cfg(target_os = "linux")]
        assert_eq!(
            WriteProblem::classify(&io::Error::from_raw_os_error(122)),
            WriteProblem::DiskFull
        );
    }

    #[cfg(unix)]
    #[test]
    fn reads_regular_files_only_and_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok");
        fs::write(&ok, b"12345").unwrap();
        assert_eq!(read_regular(&ok, 5, "a test").unwrap(), b"12345");
        let err = read_regular(&ok, 4, "a test").unwrap_err().to_string();
        assert!(
            err.contains("larger than 4 bytes, the limit for a test"),
            "{err}"
        );
        let err = read_regular(Path::new("/dev/zero"), 4, "a test").unwrap_err();
        assert!(matches!(err, ReadError::NotRegular { .. }), "{err}");
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let err = read_regular(&fifo, 4, "a test").unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(read_regular(&dir.path().join("missing"), 4, "a test")
            .unwrap_err()
            .is_not_found());
    }

    #[test]
    fn temp_names_are_recognised_and_nothing_else() {
        assert!(is_our_temp_name(".abc.json.tmp-123-0-0a1b2c3d"));
        assert!(is_our_temp_name(".a.tmp-b.json.tmp-1-22-deadbeef"));
        for other in [
            "abc.json",
            ".abc.json",
            "abc.json.tmp-1-2-deadbeef",
            ".abc.json.tmp-x-2-deadbeef",
            ".abc.json.tmp-1-2",
            ".abc.json.tmp-1-2-xyz",
        ] {
            assert!(!is_our_temp_name(other), "{other}");
        }
    }

    #[test]
    fn stale_temps_are_removed_and_fresh_ones_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".x.json.tmp-1-0-00000000");
        let fresh = dir.path().join(".y.json.tmp-1-1-00000000");
        let other = dir.path().join(".keep.tmp");
        for p in [&stale, &fresh, &other] {
            fs::write(p, b"x").unwrap();
        }
        let old = SystemTime::now() - std::time::Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(
            remove_stale_temps(dir.path(), STALE_TEMP_AGE),
            vec![stale.clone()]
        );
        assert!(!stale.exists() && fresh.exists() && other.exists());
    }

    #[test]
    fn append_repairs_a_torn_last_line_and_keeps_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sub").join("r.jsonl");
        assert_eq!(append_line(&log, b"{\"a\":1}").unwrap(), None);
        let mut f = OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"{\"half\":").unwrap();
        let torn = append_line(&log, b"{\"b\":2}").unwrap().unwrap();
        assert_eq!(torn.bytes, 8);
        let aside = torn.moved_to.unwrap();
        assert_eq!(fs::read(&aside).unwrap(), b"{\"half\":");
        assert_eq!(fs::read_to_string(&log).unwrap(), "{\"a\":1}\n{\"b\":2}\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&log).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            let mode = fs::metadata(&aside).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        // A torn file of one line only.
        let only = dir.path().join("only.jsonl");
        fs::write(&only, b"partial").unwrap();
        append_line(&only, b"x").unwrap().unwrap();
        assert_eq!(fs::read_to_string(&only).unwrap(), "x\n");
    }

    #[cfg(unix)]
    #[test]
    fn append_refuses_a_fifo_and_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.jsonl");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let err = append_line(&fifo, b"x").unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let target = dir.path().join("target");
        fs::write(&target, b"").unwrap();
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = append_line(&link, b"x").unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert_eq!(fs::read(&target).unwrap(), b"");
    }

    #[cfg(unix)]
    #[test]
    fn write_private_replaces_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        fs::write(&target, b"keep").unwrap();
        let link = dir.path().join("link.md");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let fifo = dir.path().join("fifo.md");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for path in [&link, &fifo, &PathBuf::from("/dev/null")] {
            let err = write_private(path, b"new").unwrap_err().to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        let plain = dir.path().join("plain.md");
        write_private(&plain, b"one").unwrap();
        write_private(&plain, b"two").unwrap();
        assert_eq!(fs::read(&plain).unwrap(), b"two");
    }

    #[test]
    fn write_private_needs_a_file_name() {
        assert!(matches!(
            write_private(Path::new("/"), b"x"),
            Err(WriteError::NoFileName { .. })
        ));
    }

    #[test]
    fn derived_outputs_keep_the_extension_and_the_force() {
        let out = Output::new("lk/pl.png", true);
        assert_eq!(
            out.derived("roofline"),
            Output::new("lk/pl-roofline.png", true)
        );
        assert_eq!(
            Output::new("x", false).derived("spec").path,
            PathBuf::from("x-spec")
        );
    }

    #[cfg(unix)]
    #[test]
    fn outputs_refuse_links_fifos_and_existing_files_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let precious = dir.path().join("precious");
        fs::write(&precious, b"keep").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&precious, &link).unwrap();
        let fifo = dir.path().join("fifo.json");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for force in [false, true] {
            for path in [&link, &fifo] {
                let out = Output::new(path, force);
                for err in [
                    out.check().unwrap_err(),
                    out.write(b"x").unwrap_err(),
                    out.create_stream().unwrap_err(),
                ] {
                    assert!(err.to_string().contains("not a regular file"), "{err}");
                }
            }
        }
        assert_eq!(fs::read(&precious).unwrap(), b"keep");
        // A link planted after the check, under the name being written: never followed.
        let late = dir.path().join("late.json");
        let staged = Output::new(&late, false).stage().unwrap();
        fs::write(staged.path(), b"new").unwrap();
        std::os::unix::fs::symlink(&precious, &late).unwrap();
        let err = staged.commit().unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        assert_eq!(fs::read(&precious).unwrap(), b"keep");
        // An existing regular file: only with --force, and then replaced whole.
        let plain = dir.path().join("plain.json");
        fs::write(&plain, b"old").unwrap();
        let err = Output::new(&plain, false).write(b"new").unwrap_err();
        assert!(matches!(err, WriteError::Exists { .. }), "{err}");
        assert!(matches!(
            Output::new(&plain, false).create_stream(),
            Err(WriteError::Exists { .. })
        ));
        assert_eq!(fs::read(&plain).unwrap(), b"old");
        Output::new(&plain, true).write(b"new").unwrap();
        assert_eq!(fs::read(&plain).unwrap(), b"new");
        let mut stream = Output::new(&plain, true).create_stream().unwrap();
        stream.write_all(b"line\n").unwrap();
        assert_eq!(fs::read(&plain).unwrap(), b"line\n");
        // A missing folder is said as such; nothing is left behind.
        let err = Output::new(dir.path().join("no/x.json"), false)
            .write(b"x")
            .unwrap_err();
        assert!(matches!(err, WriteError::NoFolder { .. }), "{err}");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(names.is_empty(), "{names:?}");
    }
}
