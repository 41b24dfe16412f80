//! The documentation holds together: every relative Markdown link in README.md, docs/,
//! BENCHMARKS.md and benchmarks/notes/ points at a file that exists (and, for `#anchor` links
//! into a Markdown file, at a heading that exists, slugged as GitHub slugs it), and every
//! `tokscope …` command shown in README.md's code blocks parses: `--help` of its subcommand
//! succeeds and lists every flag the line uses. No network, no model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    for dir in ["docs", "benchmarks/notes"] {
        let mut in_dir: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|entry| entry.unwrap().path())
            .filter(|p| p.extension().is_some_and(|ext| ext == "md"))
            .collect();
        in_dir.sort();
        files.extend(in_dir);
    }
    files
}

/// The lines of a Markdown text inside (`in_code`) or outside fenced code blocks, with their
/// line numbers.
fn fenced_lines(text: &str, in_code: bool) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced == in_code {
            out.push((i + 1, line));
        }
    }
    out
}

/// The lines outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    fenced_lines(text, false)
}

/// The lines inside fenced code blocks.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    fenced_lines(text, true)
}

/// A line with its inline code spans blanked out (a link inside backticks is not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links and images on a line: `[text](target)`, `![alt](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].trim();
        // `[text](target "title")`: the target is the first word.
        let target = target.split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            targets.push(target.to_string());
        }
        rest = &after[end..];
    }
    targets
}

/// GitHub's heading anchor: lower case, every character that is not a letter, digit, space,
/// hyphen or underscore dropped, spaces turned into hyphens.
fn slug(heading: &str) -> String {
    // Links in a heading count by their text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](") {
            Some(mid) => {
                let mid = open + mid;
                let close = rest[mid..].find(')').map_or(rest.len(), |c| mid + c + 1);
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..mid]);
                rest = &rest[close..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file's headings give, duplicates numbered as GitHub numbers them.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        if !trimmed.starts_with('#') {
            continue;
        }
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        let heading = &trimmed[level..];
        if level > 6 || !(heading.is_empty() || heading.starts_with(' ')) {
            continue;
        }
        let base = slug(heading.trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every broken relative link in these files, as "file:line: target (why)".
fn broken_links(files: &[PathBuf]) -> Vec<String> {
    let root = repo();
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let resolved: PathBuf = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap_or(Path::new(".")).join(path)
                };
                if !resolved.exists() {
                    broken.push(format!("{shown}:{n}: {target} (no such file)"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if resolved.extension().is_some_and(|ext| ext == "md") {
                    let target_text = std::fs::read_to_string(&resolved).unwrap();
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!(
                            "{shown}:{n}: {target} (no heading with that anchor)"
                        ));
                    }
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let files = documents();
    assert!(files.len() > 10, "the docs were not found: {files:?}");
    let broken = broken_links(&files);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_sees_a_broken_link_and_a_missing_anchor() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("other.md"),
        "# Other page\n\n## The `run` flags\n",
    )
    .unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Page\n\n[good](other.md#the-run-flags) [self](#page) [web](https://example.com/x)\n\
         [gone](missing.md) [bad anchor](other.md#nope) `[code](not-a-link.md)`\n\n\
         ```sh\n[fenced](not-a-link-either.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&[page]);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].contains("missing.md (no such file)"),
        "{broken:?}"
    );
    assert!(
        broken[1].contains("other.md#nope (no heading"),
        "{broken:?}"
    );
}

#[test]
fn headings_slug_as_github_slugs_them() {
    assert_eq!(
        slug("The chat: `tokscope chat --url`"),
        "the-chat-tokscope-chat---url"
    );
    assert_eq!(
        slug("Agreement with llama.cpp's own counters"),
        "agreement-with-llamacpps-own-counters"
    );
    assert_eq!(
        slug("`tokscope bench` (`src/bench/`)"),
        "tokscope-bench-srcbench"
    );
    let a = anchors("# A\n## Same\n## Same\n```\n# not a heading\n```\n");
    assert!(a.contains("same") && a.contains("same-1") && !a.contains("not-a-heading"));
}

/// A shell line split into words: quotes grouped, a `#` comment (after a space) dropped.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut has_word = false;
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                has_word = true;
            }
            None if c == '#' && prev.is_whitespace() => break,
            None if c.is_whitespace() => {
                if has_word {
                    words.push(std::mem::take(&mut word));
                    has_word = false;
                }
            }
            None => {
                word.push(c);
                has_word = true;
            }
        }
        prev = c;
    }
    if has_word {
        words.push(word);
    }
    words
}

fn help_of(path: &[String]) -> String {
    let out = Command::cargo_bin("tokscope")
        .unwrap()
        .args(path)
        .arg("--help")
        .env_remove("TOKSCOPE_PLANT_SCALE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`tokscope {} --help` failed: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The names listed under "Commands:" in a --help text.
fn subcommands(help: &str) -> HashSet<String> {
    let mut names = HashSet::new();
    let mut in_list = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            in_list = true;
            continue;
        }
        if in_list {
            if !line.starts_with("  ") {
                break;
            }
            if let Some(name) = line.split_whitespace().next() {
                if !line.starts_with("   ") {
                    names.insert(name.to_string());
                }
            }
        }
    }
    names
}

/// Whether `flag` stands in `help` as a word of its own (not inside a longer flag).
fn lists_flag(help: &str, flag: &str) -> bool {
    let is_part = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    help.match_indices(flag).any(|(at, _)| {
        let before = help[..at].chars().next_back();
        let after = help[at + flag.len()..].chars().next();
        !before.is_some_and(is_part) && !after.is_some_and(is_part)
    })
}

/// What is wrong with one `tokscope …` line: a subcommand whose --help fails panics; a flag
/// its --help does not list is returned.
fn unknown_flags(words: &[String]) -> Vec<String> {
    assert_eq!(words[0], "tokscope");
    let mut path: Vec<String> = Vec::new();
    let mut help = help_of(&path);
    let mut rest = &words[1..];
    while let Some(next) = rest.first() {
        if !subcommands(&help).contains(next.as_str()) {
            break;
        }
        path.push(next.clone());
        help = help_of(&path);
        rest = &rest[1..];
    }
    rest.iter()
        .filter(|w| w.starts_with('-') && w.len() > 1 && *w != "--")
        .map(|w| w.split('=').next().unwrap().to_string())
        .filter(|flag| !lists_flag(&help, flag))
        .map(|flag| format!("tokscope {}: {flag}", path.join(" ")))
        .collect()
}

fn readme_commands(text: &str) -> Vec<(usize, Vec<String>)> {
    code_lines(text)
        .into_iter()
        .map(|(n, line)| (n, shell_words(line)))
        .filter(|(_, words)| words.first().is_some_and(|w| w == "tokscope"))
        .collect()
}

#[test]
fn every_command_in_the_readme_parses() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let commands = readme_commands(&text);
    assert!(commands.len() >= 5, "too few commands found: {commands:?}");
    let mut wrong = Vec::new();
    for (n, words) in &commands {
        for flag in unknown_flags(words) {
            wrong.push(format!("README.md:{n}: {flag} is not in its --help"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_command_check_sees_a_bogus_flag() {
    let words =
        shell_words(r#"tokscope run -m model.gguf -p "a # b" --no-such-flag   # comment --json"#);
    assert_eq!(
        words,
        [
            "tokscope",
            "run",
            "-m",
            "model.gguf",
            "-p",
            "a # b",
            "--no-such-flag"
        ]
    );
    assert_eq!(unknown_flags(&words), ["tokscope run: --no-such-flag"]);
    // A flag that is the start of a real one is not taken for it.
    assert_eq!(
        unknown_flags(&shell_words("tokscope bench --bat 1")),
        ["tokscope bench: --bat"]
    );
    assert!(unknown_flags(&shell_words("tokscope doctor gpu")).is_empty());
}
