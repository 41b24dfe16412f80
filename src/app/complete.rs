//! Tab completion of the path after `/model ` and `/ab `: folders and `.gguf` files, `~` for
//! the home folder. The logic is pure: the caller lists the folder (the loop does, off
//! `update`), and the completed line comes back as `Msg::Completed`.

use std::path::{Path, PathBuf};

/// One entry of a listed folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub is_dir: bool,
}

/// What Tab did to the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The line after completion (unchanged when nothing could be added).
    pub line: String,
    /// The matching entries when there are several (folders end in `/`), for the hint line;
    /// empty for none or one.
    pub matches: Vec<String>,
    /// Whether anything matched at all.
    pub any: bool,
}

/// The commands whose argument is a model path.
const PATH_COMMANDS: &[&str] = &["/model ", "/ab "];

/// Whether Tab completes a path in `line` (a path command), rather than typing a space.
pub(crate) fn is_path_command(line: &str) -> bool {
    PATH_COMMANDS.iter().any(|c| line.starts_with(c))
}

impl super::App {
    /// Tab's completion is back: applied only if the input is still what was completed.
    pub(super) fn on_completed(&mut self, asked: &str, completion: Option<Completion>) {
        if self.input.text() != asked {
            return;
        }
        let Some(c) = completion else {
            self.notice(
                super::NoticeKind::Warning,
                "Tab completes a path after /model or /ab (no home folder for ~)",
            );
            return;
        };
        self.input.set(&c.line);
        if !c.any {
            self.notice(
                super::NoticeKind::Warning,
                "no folder or .gguf file starts with that",
            );
        } else if c.matches.is_empty() {
            self.notice = None;
        } else {
            let text = format!("{} matches: {}", c.matches.len(), c.matches.join("  "));
            self.notice(super::NoticeKind::Info, text);
        }
    }
}

/// The folder Tab must list for `line`, when `line` is a path command: `(folder to list,
/// the command and the typed folder part kept as typed, the name prefix typed so far)`.
pub(crate) fn target(line: &str, home: Option<&Path>) -> Option<(PathBuf, String, String)> {
    let cmd = PATH_COMMANDS.iter().find(|c| line.starts_with(**c))?;
    let typed = line[cmd.len()..].trim_start();
    let kept_cmd = &line[..line.len() - typed.len()];
    // A URL is not a path.
    if typed.contains("://") {
        return None;
    }
    let (dir_part, prefix) = match typed.rfind('/') {
        Some(i) => (&typed[..=i], &typed[i + 1..]),
        None if typed == "~" => ("~/", ""),
        None => ("", typed),
    };
    let listed = if dir_part.is_empty() {
        PathBuf::from(".")
    } else if let Some(rest) = dir_part.strip_prefix("~/") {
        home?.join(rest)
    } else {
        PathBuf::from(dir_part)
    };
    // `~` alone becomes `~/`.
    let dir_part = if typed == "~" { "~/" } else { dir_part };
    Some((listed, format!("{kept_cmd}{dir_part}"), prefix.to_string()))
}

/// Complete `prefix` among `entries` of the listed folder; `head` is the line up to the name.
pub(crate) fn complete(head: &str, prefix: &str, entries: &[Candidate]) -> Completion {
    let mut hits: Vec<&Candidate> = entries
        .iter()
        .filter(|c| c.name.starts_with(prefix))
        // Hidden entries only when asked for with a leading dot.
        .filter(|c| prefix.starts_with('.') || !c.name.starts_with('.'))
        .filter(|c| c.is_dir || crate::discover::has_gguf_extension(Path::new(&c.name)))
        .collect();
    hits.sort_by(|a, b| a.name.cmp(&b.name));
    let shown = |c: &&Candidate| format!("{}{}", c.name, if c.is_dir { "/" } else { "" });
    let (line, matches) = match hits.as_slice() {
        [] => (format!("{head}{prefix}"), Vec::new()),
        [one] => (format!("{head}{}", shown(one)), Vec::new()),
        several => {
            let common = several
                .iter()
                .map(|c| c.name.as_str())
                .reduce(common_prefix)
                .unwrap_or(prefix);
            (
                format!("{head}{common}"),
                several.iter().map(shown).collect(),
            )
        }
    };
    Completion {
        line,
        matches,
        any: !hits.is_empty(),
    }
}

/// The longest common prefix of two strings, on a char boundary.
pub(super) fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let end = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or_else(|| a.len().min(b.len()), |((i, _), _)| i);
    &a[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tests::*;
    use crate::app::{update, Effect, Msg};
    use crossterm::event::KeyCode;

    #[test]
    fn tab_asks_the_loop_after_a_path_command_and_types_a_space_elsewhere() {
        let mut app = ready_app();
        app.input.set("/model ~/mo");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Tab)), now());
        assert_eq!(fx, vec![Effect::CompletePath("/model ~/mo".into())]);
        let several = Completion {
            line: "/model ~/models/ll".into(),
            matches: vec!["lla.gguf".into(), "llb.gguf".into()],
            any: true,
        };
        let done = |c: &Completion| Msg::Completed {
            asked: "/model ~/mo".into(),
            completion: Some(c.clone()),
        };
        update(&mut app, done(&several), now());
        assert_eq!(app.input.text(), "/model ~/models/ll");
        let hint = app.notice.clone().unwrap().text;
        assert!(hint.contains("2 matches: lla.gguf  llb.gguf"), "{hint}");
        // A late answer for a line that has changed since is dropped.
        app.input.set("/model ~/mo");
        type_text(&mut app, "x");
        update(&mut app, done(&several), now());
        assert_eq!(app.input.text(), "/model ~/mox");
        let mut app = ready_app();
        app.input.set("hello");
        assert!(update(&mut app, Msg::Key(key(KeyCode::Tab)), now()).is_empty());
        assert_eq!(app.input.text(), "hello ");
    }

    fn entries() -> Vec<Candidate> {
        let e = |name: &str, is_dir| Candidate {
            name: name.into(),
            is_dir,
        };
        vec![
            e("llama-3-8b-q4.gguf", false),
            e("llama-3-8b-q8.gguf", false),
            e("llama-notes.txt", false),
            e("lmstudio", true),
            e("qwen.GGUF", false),
            e(".hidden", true),
            e("ünïcode-ä.gguf", false),
            e("ünïcode-ö.gguf", false),
        ]
    }

    fn tab(line: &str) -> Completion {
        let (_, head, prefix) = target(line, Some(Path::new("/home/u"))).unwrap();
        complete(&head, &prefix, &entries())
    }

    #[test]
    fn the_target_is_the_typed_folder_with_home_expanded() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            target("/model ~/models/ll", home),
            Some((
                PathBuf::from("/home/u/models/"),
                "/model ~/models/".into(),
                "ll".into()
            ))
        );
        assert_eq!(
            target("/ab ~", home),
            Some((PathBuf::from("/home/u/"), "/ab ~/".into(), String::new()))
        );
        assert_eq!(
            target("/model /srv/", home).map(|t| t.0),
            Some(PathBuf::from("/srv/"))
        );
        assert_eq!(
            target("/model  x", home).map(|t| t.0),
            Some(PathBuf::from("."))
        );
        assert_eq!(target("/model ~/x", None), None, "no home, nothing to list");
        assert_eq!(target("/temp 0.", home), None);
        assert_eq!(target("hello /model ", home), None);
        assert_eq!(target("/ab http://h:8080/v1", home), None);
    }

    #[test]
    fn one_match_completes_fully_and_folders_get_a_slash() {
        assert_eq!(tab("/model q").line, "/model qwen.GGUF");
        let dir = tab("/model ~/lms");
        assert_eq!(dir.line, "/model ~/lmstudio/");
        assert!(dir.any && dir.matches.is_empty());
    }

    #[test]
    fn several_matches_complete_the_common_prefix_and_are_listed() {
        let c = tab("/model ll");
        assert_eq!(c.line, "/model llama-3-8b-q");
        assert_eq!(c.matches, vec!["llama-3-8b-q4.gguf", "llama-3-8b-q8.gguf"]);
        let c = tab("/model l");
        assert_eq!(c.line, "/model l", "llama… and lmstudio/ share only `l`");
        assert_eq!(c.matches.len(), 3, "{:?}", c.matches);
        assert!(c.matches.contains(&"lmstudio/".to_string()));
        let c = tab("/ab ü");
        assert_eq!(c.line, "/ab ünïcode-", "cut on a char boundary");
    }

    #[test]
    fn other_files_and_hidden_folders_are_left_out_and_no_match_keeps_the_line() {
        let c = tab("/model llama-n");
        assert_eq!(c.line, "/model llama-n");
        assert!(!c.any);
        assert!(!tab("/model h").any);
        assert_eq!(tab("/model .h").line, "/model .hidden/");
        assert_eq!(tab("/model ").matches.len(), 6);
    }
}
