//! The house rules of `../shared/ARCHITECTURE.md`, checked on the source: every top-level
//! module (a directory under `src/` or a top-level `.rs` file) stands on one floor of `FLOORS`,
//! an import goes from a floor to the same floor or one below it, never up, and no import
//! circle joins top-level modules (not even on one floor), nor the files of one module. Items
//! marked `#[cfg(test)]` (a test module, a test-only helper) are not part of the layering;
//! everything around them is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors from the ground up, as ARCHITECTURE.md numbers them. `fmt` and `report` are
/// listed before they exist (ARCHITECTURE.md marks them to do), so that they land on the
/// ground floor.
const FLOORS: &[&[&str]] = &[
    // 1, the ground floor.
    &[
        "ids", "fsx", "paths", "pip", "text", "fatal", "logging", "demo", "fmt", "report", "gguf",
    ],
    // 2, pure figures.
    &["metrics"],
    // 3. `plot` is not in ARCHITECTURE.md's list: it imports only `metrics`, and stands on the
    // lowest floor above it rather than beside the pure figures.
    &["synth", "hw", "plot"],
    // 4, the llama.cpp toolkit.
    &["llama"],
    // 5, the chat's engine thread and the same handle over a server.
    &["engine", "remote"],
    // 6
    &["config", "history", "stamp", "discover", "tokcount"],
    // 7, the features.
    &["bench", "compare", "load", "doctor"],
    // 8, pure state.
    &["app"],
    // 9, pure draw.
    &["ui"],
    // 10, the runtime.
    &["tui"],
    // 11, the edge (the command line's parser included).
    &["commands"],
    // 12: the binary's entry point, and `lib.rs`, the crate root that only declares modules.
    &["main", "lib"],
];

/// The floor a top-level module stands on (0 is the ground), if it is on one.
fn floor(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

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
    segments_after(source, "crate::")
}

/// The first path segment after each `prefix` (`crate::`, `super::`) in `source`, groups
/// (`prefix{a::b, c}`) read item by item, comments and test-only items left out.
fn segments_after(source: &str, prefix: &str) -> BTreeSet<String> {
    let code = without_test_items(source)
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
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

/// The rule for one importing module: may `from` import `to`? A module on no floor may
/// neither import nor be imported.
fn allowed(from: &str, to: &str) -> bool {
    if from == to {
        return true;
    }
    matches!((floor(from), floor(to)), (Some(a), Some(b)) if b <= a)
}

/// The top-level module a source file (a path relative to `src/`) belongs to.
fn top_module(file: &str) -> String {
    file.split('/')
        .next()
        .unwrap_or_default()
        .trim_end_matches(".rs")
        .to_string()
}

/// Which top-level modules each top-level module imports (itself left out).
fn import_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, source) in files {
        let top = top_module(file);
        let imports = graph.entry(top.clone()).or_default();
        imports.extend(crate_modules(source).into_iter().filter(|to| *to != top));
    }
    graph
}

/// Which files of one top-level module import which others of it, each file named
/// `module/file` (a file of a sub-directory stands for its directory): `super::x` in a file
/// directly under the module, or `crate::module::x` anywhere in it. `mod.rs` is left out: a
/// parent and the children it declares are one room.
fn file_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let room = |file: &str| -> Option<(String, String)> {
        let (top, rest) = file.split_once('/')?;
        let name = rest.split('/').next()?.trim_end_matches(".rs");
        (name != "mod").then(|| (top.to_string(), name.to_string()))
    };
    let siblings: BTreeSet<(String, String)> = files.iter().filter_map(|(f, _)| room(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, source) in files {
        let Some((top, name)) = room(file) else {
            continue;
        };
        let mut names = segments_after(source, &format!("crate::{top}::"));
        if file.matches('/').count() == 1 {
            names.extend(segments_after(source, "super::"));
        }
        let imports = graph.entry(format!("{top}/{name}")).or_default();
        imports.extend(
            names
                .into_iter()
                .filter(|to| *to != name && siblings.contains(&(top.clone(), to.clone())))
                .map(|to| format!("{top}/{to}")),
        );
    }
    graph
}

/// One import circle among top-level modules, as the path that closes it (`a -> b -> a`), or
/// `None` when there is none. A depth-first search: a module met again while it is still on
/// the path closes a circle.
fn import_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_string());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

fn violations(files: &[(String, String)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (file, source) in files {
        let top = top_module(file);
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
fn every_module_stands_on_a_floor() {
    let modules: BTreeSet<String> = source_tree().iter().map(|(f, _)| top_module(f)).collect();
    let homeless: Vec<&String> = modules.iter().filter(|m| floor(m).is_none()).collect();
    assert!(
        homeless.is_empty(),
        "top-level modules on no floor of FLOORS (place each one): {homeless:?}"
    );
}

#[test]
fn no_import_circle_among_top_level_modules() {
    let graph = import_graph(&source_tree());
    assert!(graph.len() > 20, "found only {} modules", graph.len());
    if let Some(circle) = import_circle(&graph) {
        panic!("an import circle: {}", circle.join(" -> "));
    }
}

#[test]
fn no_import_circle_among_the_files_of_a_module() {
    let graph = file_graph(&source_tree());
    assert!(graph.len() > 100, "found only {} files", graph.len());
    if let Some(circle) = import_circle(&graph) {
        panic!("an import circle: {}", circle.join(" -> "));
    }
}

#[test]
fn the_file_circle_check_catches_a_planted_circle() {
    let file = |path: &str, source: &str| (path.to_string(), source.to_string());
    // The circle item 4 of issue #61 took apart: the plan types now live in bench/plan.rs.
    let planted = vec![
        file(
            "bench/kernel_baseline.rs",
            "use super::spec::{SpecBenchError, SpecPlan};\n",
        ),
        file(
            "bench/spec.rs",
            "fn f() -> super::kernel_baseline::KernelRuns { todo!() }\n",
        ),
        file("bench/mod.rs", "pub(crate) mod spec;\nuse spec::X;\n"),
        file("bench/plan.rs", "use crate::bench::sweep::Sweep;\n"),
    ];
    assert_eq!(
        import_circle(&file_graph(&planted)),
        Some(vec![
            "bench/kernel_baseline".to_string(),
            "bench/spec".to_string(),
            "bench/kernel_baseline".to_string()
        ])
    );
    // Through `crate::module::`, from a file of a sub-directory.
    let deep = vec![
        file(
            "commands/run.rs",
            "const A: u8 = crate::commands::chat::B;\n",
        ),
        file(
            "commands/chat/more.rs",
            "use crate::commands::{flags, run::C};\n",
        ),
    ];
    assert!(import_circle(&file_graph(&deep)).is_some());
    // One way only, a parent and its children, and a test module's import make no circle.
    let fine = vec![
        file(
            "bench/kernel_baseline.rs",
            "use super::plan::{SpecBenchError, SpecPlan};\n",
        ),
        file(
            "bench/spec.rs",
            "use super::{kernel_baseline::K, plan::SpecPlan};\n",
        ),
        file(
            "bench/plan.rs",
            "#[cfg(test)]\nmod tests { use super::super::spec::S; }\n",
        ),
        file("bench/mod.rs", "use spec::X;\n"),
    ];
    assert_eq!(import_circle(&file_graph(&fine)), None);
}

#[test]
fn the_circle_check_catches_planted_circles() {
    let file = |path: &str, source: &str| (path.to_string(), source.to_string());
    // Two modules of one floor that import each other: no import points up, yet a circle.
    let pair = vec![
        file(
            "engine/handle.rs",
            "use crate::{llama, remote::Endpoint};\n",
        ),
        file("remote/mod.rs", "use crate::engine::EngineEvent;\n"),
        file("llama/mod.rs", "use crate::gguf::GgmlType;\n"),
    ];
    assert!(violations(&pair).is_empty(), "{:?}", violations(&pair));
    assert_eq!(
        import_circle(&import_graph(&pair)),
        Some(vec![
            "engine".to_string(),
            "remote".to_string(),
            "engine".to_string()
        ])
    );
    // A longer circle, closed through several files of one module.
    let ring = vec![
        file("config.rs", "fn f() { crate::history::load(); }\n"),
        file("history.rs", "use crate::stamp::Stamp;\n"),
        file("stamp.rs", "use crate::fsx;\n"),
        file("stamp/more.rs", "use crate::discover::x;\n"),
        file("discover.rs", "use crate::{gguf, config::Settings};\n"),
    ];
    let circle = import_circle(&import_graph(&ring)).expect("the ring is a circle");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 5, "{circle:?}");
    // A test-only import, a comment and a one-way import make no circle.
    let fine = vec![
        file("engine/handle.rs", "use crate::llama;\n// crate::remote\n"),
        file(
            "remote/mod.rs",
            "use crate::engine::E;\n#[cfg(test)]\nmod tests { use crate::tui::X; }\n",
        ),
        file("tui/mod.rs", "use crate::remote::R;\n"),
    ];
    assert_eq!(import_circle(&import_graph(&fine)), None);
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
        // Above the engine: a feature that reaches into the runtime or the edge, and a floor
        // that reaches one up.
        (
            "bench/spec.rs".to_string(),
            "let pace = id.map(|_| crate::tui::STREAM_FRAME_INTERVAL);\n".to_string(),
        ),
        (
            "doctor/gpu.rs".to_string(),
            "use crate::commands::{self, Failure};\n".to_string(),
        ),
        (
            "history.rs".to_string(),
            "use crate::load::Plan;\n".to_string(),
        ),
        // A module on no floor, and an import of a module on no floor.
        ("newfeature.rs".to_string(), "use crate::ids;\n".to_string()),
        (
            "ui/mod.rs".to_string(),
            "use crate::unplaced::X;\n".to_string(),
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
            ("bench".to_string(), "tui".to_string()),
            ("doctor".to_string(), "commands".to_string()),
            ("history".to_string(), "load".to_string()),
            ("newfeature".to_string(), "ids".to_string()),
            ("ui".to_string(), "unplaced".to_string()),
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
        (
            "bench/spec.rs".to_string(),
            "let pace = id.map(|_| crate::engine::STREAM_FRAME_INTERVAL);\n".to_string(),
        ),
        (
            "compare/mod.rs".to_string(),
            "use crate::{bench, plot, config::Settings};\n".to_string(),
        ),
    ];
    assert!(violations(&fine).is_empty(), "{:?}", violations(&fine));
}
