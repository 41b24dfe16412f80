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
}

/// Why a write failed, in terms a user can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteProblem {
    ReadOnlyFileSystem,
    PermissionDenied,
    DiskFull,
    FileTooLarge,
    NotADirectory,
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
            WriteProblem::Other => "unexpected I/O error (see the cause)",
        };
        f.write_str(text)
    }
}

/// Writes `contents` to `path` atomically and readable by the user only (0600 on unix),
/// creating its directory (0700) if missing. Readers see the old file or the new one, never a
/// part; on any error the temp file is removed and an earlier file at `path` is unchanged.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), WriteError> {
    let write_error = |source: io::Error| WriteError::Write {
        path: path.to_path_buf(),
        problem: WriteProblem::classify(&source),
        source,
    };
    let Some(file_name) = path.file_name() else {
        return Err(WriteError::NoFileName {
            path: path.to_path_buf(),
        });
    };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    ensure_private_dir(&dir).map_err(write_error)?;
    let (temp_path, file) = create_temp(&dir, file_name).map_err(write_error)?;
    let mut temp = TempFile(Some(temp_path));
    fill_and_sync(file, contents).map_err(write_error)?;
    temp.rename_to(path).map_err(write_error)?;
    match sync_dir(&dir) {
        Ok(()) => Ok(()),
        // Some file systems cannot sync a directory, and a write-only directory cannot be
        // opened to sync it. The contents are synced and the rename has happened, so a "could
        // not write" here would be false; other errors (EIO) mean it may not be durable.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::InvalidInput
                    | io::ErrorKind::Unsupported
                    | io::ErrorKind::PermissionDenied
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(write_error(e)),
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
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // Keeps the temp name within file-name limits whatever the target's length.
    let base: String = target_name.to_string_lossy().chars().take(64).collect();
    let mut last_error = None;
    for _ in 0..16 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            ".{base}.tmp-{}-{}-{nanos:08x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let temp_path = dir.join(name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            // From the start, so the contents are never readable by others, even briefly.
            options.mode(0o600);
        }
        match options.open(&temp_path) {
            Ok(file) => return Ok((temp_path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("could not create a temp file")))
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

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    // Makes the rename itself durable, not only the file's contents.
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
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

    #[test]
    fn write_private_needs_a_file_name() {
        assert!(matches!(
            write_private(Path::new("/"), b"x"),
            Err(WriteError::NoFileName { .. })
        ));
    }
}
