//! `tokscope history`: the saved conversations, newest first.

use crate::commands::Failure;

/// `tokscope history`: the saved conversations.
pub(crate) fn run() -> Result<(), Failure> {
    let dir = crate::history::history_dir(&crate::paths::data_dir());
    let outcome = crate::history::list(&dir)
        .map_err(|e| Failure::new(crate::commands::FAILURE, e.to_string()))?;
    for (from, to) in &outcome.set_aside {
        eprintln!(
            "warning: {} is damaged and was moved aside to {} (it was not overwritten)",
            crate::text::path(from),
            crate::text::path(to)
        );
    }
    for path in &outcome.removed_temps {
        eprintln!(
            "note: removed {}, a temp file left by a save that was interrupted",
            crate::text::path(path)
        );
    }
    for (path, why) in &outcome.skipped {
        eprintln!(
            "warning: skipped {}: {}",
            crate::text::path(path),
            crate::text::terminal_safe(&why.to_string())
        );
    }
    let list = crate::history::format_list(&outcome.entries, crate::tui::now().unix_s);
    print!(
        "{}",
        crate::text::for_stdout(&list, crate::text::Shape::Human)
    );
    Ok(())
}
