//! The comparisons log: every `compare` run appended as one JSON line in the data dir, so that
//! the chat's compare screen can show the latest table.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::report::Comparison;

pub(crate) const COMPARISONS_FILE: &str = "comparisons.jsonl";

pub fn comparisons_path(data_dir: &Path) -> PathBuf {
    data_dir.join(COMPARISONS_FILE)
}

/// Append one comparison (the file and its folder are created user-only).
pub(crate) fn append(path: &Path, c: &Comparison) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::fsx::ensure_private_dir(dir)?;
    }
    let mut line = serde_json::to_string(c).map_err(std::io::Error::other)?;
    line.push('\n');
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    // One write call per line: concurrent appenders do not interleave within a line.
    file.write_all(line.as_bytes())
}

/// The newest comparison that parses (damaged lines are skipped), if any.
pub fn latest(path: &Path) -> std::io::Result<Option<Comparison>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Comparison>(l).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::report::tests::{comparison, row};

    #[test]
    fn the_latest_parsable_comparison_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = comparisons_path(dir.path());
        assert_eq!(latest(&path).unwrap(), None);
        let first = comparison(vec![row("a", 10.0, 0.0)]);
        let mut second = comparison(vec![row("b", 20.0, 0.0)]);
        second.id = "second".into();
        append(&path, &first).unwrap();
        append(&path, &second).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{broken\n")
            .unwrap();
        assert_eq!(latest(&path).unwrap(), Some(second));
    }
}
