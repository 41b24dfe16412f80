//! The comparisons log: every `compare` run appended as one JSON line in the data dir, so that
//! the chat's compare screen can show the latest table.

use std::path::{Path, PathBuf};

use super::report::Comparison;

pub(crate) const COMPARISONS_FILE: &str = "comparisons.jsonl";

pub fn comparisons_path(data_dir: &Path) -> PathBuf {
    data_dir.join(COMPARISONS_FILE)
}

/// Append one comparison as one line, whole or not at all, as the results log does.
pub(crate) use crate::bench::log::append;

/// Where a comparison sits in the log: `back` steps before the newest (0 is the newest) of
/// `total` readable ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Place {
    pub back: usize,
    pub total: usize,
}

/// The newest comparison that parses (damaged lines are skipped), if any.
pub fn latest(path: &Path) -> std::io::Result<Option<Comparison>> {
    Ok(at(path, 0)?.map(|(c, _)| c))
}

/// The comparison `back` steps before the newest readable one (clamped to the oldest), and
/// where it sits; `None` when the log has none.
pub fn at(path: &Path, back: usize) -> std::io::Result<Option<(Comparison, Place)>> {
    let text = crate::bench::log::read_if_present(path)?;
    let mut all: Vec<Comparison> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Comparison>(l).ok())
        .collect();
    let total = all.len();
    if total == 0 {
        return Ok(None);
    }
    let back = back.min(total - 1);
    let c = all.swap_remove(total - 1 - back);
    Ok(Some((c, Place { back, total })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::report::tests::{comparison, row};
    use std::io::Write;

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
        assert_eq!(latest(&path).unwrap(), Some(second.clone()));
        // Earlier ones by steps back from the newest, clamped to the oldest.
        let (c, place) = at(&path, 1).unwrap().unwrap();
        assert_eq!((c, place), (first.clone(), Place { back: 1, total: 2 }));
        assert_eq!(
            at(&path, 9).unwrap().unwrap().1,
            Place { back: 1, total: 2 }
        );
    }
}
