//! The house rules of `../shared/ARCHITECTURE.md`, checked on the source: imports point down.
//! The ground floor (`gguf`, `metrics`, `ids`, `fsx`, `paths`, `logging`) imports nothing above
//! it, and the engine and the llama.cpp toolkit never reach up into the features or the UI.
//! Items marked `#[cfg(test)]` (a test module, a test-only helper) are not part of the
//! layering; everything around them is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const GROUND: &[&str] = &["gguf", "metrics", "ids", "fsx", "paths", "logging", "text"];
const ENGINE_LEVEL: &[&str] = &["engine", "llama"];
const ABOVE_ENGINE: &[&str] = &[
    "commands", "app", "tui", "ui", "bench", "compare", "plot", "cli", "synth", "doctor",
    "history", "demo", "load", "remote", "discover",
];

/// One import that breaks the rules: (the importing top-level module, its file, the module it
/// imports).
type Violation = (String, String, String);

/// `source` without the items marked `#[cfg(test)]`: each from the attribute to the end of its
/// item (the `;` of a one-line item, or the brace that closes its block). Braces inside string
/// literals are not told apart; the crate's sources have none that unbalance an item.
fn without_test_items(source: &str) -> String {
    let mut out = String::new();
    let mut rest = source;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, ch) in item.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The top-level crate modules a piece of source refers to (`crate::x…` and `crate::{x, …}`),
/// comments and test-only items left out.
fn crate_modules(source: &str) -> BTreeSet<String> {
    let code = without_test_items(source)
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::b, c}`: the first segment of each item, at nesting depth 0.
            let mut depth = 0usize;
            let mut item = String::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push_first_segment(&item, &mut found);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(ch);
                }
            }
            push_first_segment(&item, &mut found);
        } else {
            push_first_segment(rest, &mut found);
        }
    }
    found
}

fn push_first_segment(text: &str, found: &mut BTreeSet<String>) {
    let name: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if !name.is_empty() && name != "self" {
        found.insert(name);
    }
}

/// The rule for one importing module: may `from` import `to`?
fn allowed(from: &str, to: &str) -> bool {
    if from == to {
        return true;
    }
    if GROUND.contains(&from) {
        return GROUND.contains(&to);
    }
    if ENGINE_LEVEL.contains(&from) {
        return !ABOVE_ENGINE.contains(&to);
    }
    true
}

fn violations(files: &[(String, String)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (file, source) in files {
        let top = file
            .split('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string();
        for to in crate_modules(source) {
            if !allowed(&top, &to) {
                out.push((top.clone(), file.clone(), to));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

fn source_tree() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&src)
                .expect("under src")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&p).expect("readable source");
            (rel, text)
        })
        .collect()
}

#[test]
fn imports_point_down() {
    let files = source_tree();
    assert!(
        files.len() > 50,
        "found only {} source files: is the path right?",
        files.len()
    );
    let found = violations(&files);
    assert!(
        found.is_empty(),
        "imports that point up (importer, file, imported module):\n{}",
        found
            .iter()
            .map(|(from, file, to)| format!("  {from} ({file}) -> {to}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_check_catches_planted_upward_imports() {
    let planted = vec![
        (
            "metrics/mod.rs".to_string(),
            "use crate::engine::EngineEvent;\n".to_string(),
        ),
        (
            "gguf/mod.rs".to_string(),
            "use crate::{fsx, synth::llama3};\n".to_string(),
        ),
        (
            "llama/mod.rs".to_string(),
            "fn f() { crate::bench::run(); }\n".to_string(),
        ),
        (
            "engine/worker.rs".to_string(),
            "use crate::{\n    metrics::TurnTimeline,\n    app::Msg,\n};\n".to_string(),
        ),
        // Code after a test-only item, or after the test module, is still checked.
        (
            "fsx.rs".to_string(),
            "#[cfg(test)]\nfn helper() { crate::app::x(); }\nuse crate::history::H;\n".to_string(),
        ),
        (
            "ids.rs".to_string(),
            "#[cfg(test)]\nmod tests { use crate::ui::X; }\nfn late() { crate::tui::y(); }\n"
                .to_string(),
        ),
    ];
    let found: Vec<(String, String)> = violations(&planted)
        .into_iter()
        .map(|(from, _, to)| (from, to))
        .collect();
    assert_eq!(
        found,
        vec![
            ("metrics".to_string(), "engine".to_string()),
            ("gguf".to_string(), "synth".to_string()),
            ("llama".to_string(), "bench".to_string()),
            ("engine".to_string(), "app".to_string()),
            ("fsx".to_string(), "history".to_string()),
            ("ids".to_string(), "tui".to_string()),
        ]
    );
    // What is allowed stays allowed: downward imports, comments and test modules.
    let fine = vec![
        (
            "engine/worker.rs".to_string(),
            "use crate::{llama, metrics::TurnTimeline};\n// crate::app is not imported\n"
                .to_string(),
        ),
        (
            "metrics/mod.rs".to_string(),
            "use crate::gguf::GgmlType;\n#[cfg(test)]\nmod tests { use crate::engine::X; }\n"
                .to_string(),
        ),
        (
            "gguf/mod.rs".to_string(),
            "#[cfg(test)]\nuse crate::synth::Z;\n#[cfg(test)]\npub(crate) fn add_i32() { crate::bench::w(); }\n"
                .to_string(),
        ),
        (
            "commands/chat.rs".to_string(),
            "use crate::app::App;\n".to_string(),
        ),
    ];
    assert!(violations(&fine).is_empty(), "{:?}", violations(&fine));
}
