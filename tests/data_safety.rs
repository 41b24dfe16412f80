//! Nothing lost, nothing hung: the real binary against the data dir's failure modes. A copied
//! conversation resumed in the chat, two chats on one conversation (tmux: the chat needs a
//! terminal), a torn results log, temp files left by `kill -9`, and FIFOs or device nodes
//! where history files should be.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, SystemTime};

use assert_cmd::Command;
use common::tmux::{exit_line, send, start_chat, wait_idle_after_answers, Tmux};
use predicates::prelude::*;
use tokscope::synth::TensorType;

fn tokscope(home: &Path) -> Command {
    let mut cmd = common::tokscope_cmd(home);
    cmd.timeout(Duration::from_secs(120));
    cmd
}

fn history_files(data: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data.join("history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

fn users(path: &Path) -> Vec<String> {
    tokscope::history::load(path)
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.user)
        .collect()
}

fn mkfifo(path: &Path) {
    assert!(StdCommand::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success());
}

fn quit(tmux: &Tmux) {
    tmux.keys(&["C-q"]);
    tmux.wait_for("the chat to end", Duration::from_secs(20), |s| {
        exit_line(s).is_some()
    });
}

#[test]
fn two_chats_on_one_conversation_and_a_resumed_copy_lose_no_turn() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let data = dir.path().join("data");
    let env = [("TOKSCOPE_DATA_DIR", data.as_path())];
    let first = Tmux::start("twochats-a", 200, 50, &env);
    start_chat(&first, &model, "-n 2");
    send(&first, "first turn");
    wait_idle_after_answers(&first, 1);
    quit(&first);
    let files = history_files(&data);
    assert_eq!(files.len(), 1);
    let original = files[0].clone();
    let id = original.file_stem().unwrap().to_str().unwrap().to_string();

    // Two chats resume the same conversation; each adds a turn.
    let second = Tmux::start("twochats-b", 200, 50, &env);
    first.tmux(&["send-keys", "-t", "main", "clear", "Enter"]);
    start_chat(&first, &model, &format!("-n 2 --resume {id}"));
    start_chat(&second, &model, &format!("-n 2 --resume {id}"));
    send(&first, "from chat A");
    wait_idle_after_answers(&first, 2);
    send(&second, "from chat B");
    let screen = second.wait_for("the fork notice", Duration::from_secs(60), |s| {
        s.contains("changed by another")
    });
    assert!(!screen.contains("could not save"), "{screen}");
    send(&first, "A again");
    wait_idle_after_answers(&first, 3);
    quit(&first);
    quit(&second);
    assert_eq!(users(&original), ["first turn", "from chat A", "A again"]);
    let files = history_files(&data);
    assert_eq!(files.len(), 2, "{files:?}");
    let fork = files.iter().find(|p| **p != original).unwrap();
    assert_eq!(users(fork), ["first turn", "from chat B"]);

    // A copy of the conversation, resumed, saves to the copy; the original is untouched.
    let before = std::fs::read(&original).unwrap();
    let copy = data.join("history").join("mycopy.json");
    std::fs::copy(&original, &copy).unwrap();
    first.tmux(&["send-keys", "-t", "main", "clear", "Enter"]);
    start_chat(&first, &model, "-n 2 --resume mycopy");
    first.wait_for("the copy notice", Duration::from_secs(10), |s| {
        s.contains("copy of conversation")
    });
    send(&first, "in the copy");
    wait_idle_after_answers(&first, 4);
    quit(&first);
    assert_eq!(std::fs::read(&original).unwrap(), before);
    assert_eq!(
        users(&copy),
        ["first turn", "from chat A", "A again", "in the copy"]
    );
    assert_eq!(tokscope::history::load(&copy).unwrap().id, "mycopy");
    assert_eq!(history_files(&data).len(), 3);
}

/// Starts `tokscope chat` without `-m` (the default model is $TOKSCOPE_MODEL), resuming the
/// latest conversation, and waits until it is ready.
fn resume_latest(tmux: &Tmux) -> String {
    tmux.tmux(&["send-keys", "-t", "main", "clear", "Enter"]);
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$") && exit_line(s).is_none()
    });
    tmux.type_text(&format!(
        "{} chat -t 1 --temp 0 -n 2 --resume; echo exit=$?",
        common::tmux::bin()
    ));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the resumed chat to be ready", common::tmux::READY, |s| {
        common::tmux::status_line(s).contains("ready") && s.contains("resumed ")
    });
    flat(&screen)
}

/// The screen with each run of spaces and line breaks as one space: a notice wraps.
fn flat(screen: &str) -> String {
    screen.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The model each saved turn of the only conversation ran on.
fn turn_models(data: &Path) -> Vec<PathBuf> {
    let files = history_files(data);
    assert_eq!(files.len(), 1, "{files:?}");
    tokscope::history::load(&files[0])
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.model.expect("each turn says its model").path)
        .collect()
}

#[test]
fn resume_reloads_the_model_it_ran_on_and_says_when_it_is_gone_or_changed() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = common::synth(dir.path(), "model-a.gguf", "tiny", TensorType::F32, 1);
    let b = common::synth(dir.path(), "model-b.gguf", "tiny", TensorType::F32, 2);
    let data = dir.path().join("data");
    // B is the default model; the conversation is started on A.
    let env = [
        ("TOKSCOPE_DATA_DIR", data.as_path()),
        ("TOKSCOPE_MODEL", b.as_path()),
    ];
    let tmux = Tmux::start("resume-model", 200, 50, &env);
    start_chat(&tmux, &a, "-n 2");
    send(&tmux, "on model a");
    wait_idle_after_answers(&tmux, 1);
    quit(&tmux);
    let conv = tokscope::history::load(&history_files(&data)[0]).unwrap();
    let id = conv.id.clone();
    let saved = conv.turns[0].model.clone().unwrap();
    assert_eq!(saved.path, a);
    assert_eq!(
        saved.fingerprint.as_deref(),
        Some(tokscope::engine::fingerprint(&a).unwrap().as_str())
    );

    // Resumed without -m: on A again, not the default B.
    let screen = resume_latest(&tmux);
    assert!(
        screen.contains(&format!("resumed {id} (1 turn) on model-a.gguf")),
        "{screen}"
    );
    send(&tmux, "still on a");
    wait_idle_after_answers(&tmux, 2);
    quit(&tmux);
    assert_eq!(turn_models(&data), [a.clone(), a.clone()]);

    // -m wins over the model it ran on, with a word.
    tmux.tmux(&["send-keys", "-t", "main", "clear", "Enter"]);
    start_chat(&tmux, &b, "-n 2 --resume");
    let screen = flat(
        &tmux.wait_for("the resume notice", Duration::from_secs(10), |s| {
            s.contains("resumed ")
        }),
    );
    assert!(screen.contains("as -m asks"), "{screen}");
    assert!(screen.contains("ran on model-a.gguf: no MBU"), "{screen}");
    quit(&tmux);

    // Another model written over A: the default, saying why; the old answers are not set
    // against B's ceiling.
    common::synth(dir.path(), "model-a.gguf", "tiny", TensorType::F32, 3);
    let screen = resume_latest(&tmux);
    assert!(
        screen.contains(&format!("resumed {id} (2 turns)")),
        "{screen}"
    );
    assert!(screen.contains("has changed since"), "{screen}");
    assert!(
        screen.contains("continuing on the default model"),
        "{screen}"
    );
    assert!(screen.contains("ran on model-a.gguf: no MBU"), "{screen}");
    send(&tmux, "now on b");
    wait_idle_after_answers(&tmux, 3);
    let screen = tmux.screen();
    assert!(!screen.contains("no MBU"), "{screen}");
    quit(&tmux);
    assert_eq!(turn_models(&data), [a.clone(), a.clone(), b.clone()]);

    // B gone as well (the conversation last ran on B): the default is B's path no more, so
    // resuming says so and names the missing file instead of failing silently.
    std::fs::remove_file(&a).unwrap();
    let moved = dir.path().join("model-b-moved.gguf");
    std::fs::rename(&b, &moved).unwrap();
    tmux.tmux(&["send-keys", "-t", "main", "clear", "Enter"]);
    tmux.type_text(&format!(
        "TOKSCOPE_MODEL={} {} chat -t 1 -n 2 --resume; echo exit=$?",
        moved.display(),
        common::tmux::bin()
    ));
    tmux.keys(&["Enter"]);
    let screen = flat(
        &tmux.wait_for("the resumed chat", common::tmux::READY, |s| {
            common::tmux::status_line(s).contains("ready") && s.contains("resumed ")
        }),
    );
    assert!(screen.contains("is gone"), "{screen}");
    assert!(screen.contains("model-b-moved.gguf"), "{screen}");
    quit(&tmux);
}

/// A conversation as an older tokscope saved it (format 1): the model's file name only, one
/// system prompt, every turn's finish time that of the last save.
const FORMAT_1_FILE: &str = include_str!("fixtures/history-format-1.json");

#[test]
fn an_old_format_file_still_lists_and_a_corrupt_one_refuses_to_resume_with_a_message() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("data").join("history");
    std::fs::create_dir_all(&dir).unwrap();
    let old = dir.join("20261101-101500-ab12.json");
    std::fs::write(&old, FORMAT_1_FILE).unwrap();
    let torn = dir.join("20261102-000000-dead.json");
    std::fs::write(&torn, "{\"version\": 2, \"id\": \"20261102-0").unwrap();
    tokscope(home.path())
        .args(["chat", "--resume", "20261102"])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("not a readable saved conversation")
                .and(predicate::str::contains("truncated"))
                .and(predicate::str::contains("panicked").not()),
        );
    assert!(torn.exists(), "resuming never moves or rewrites the file");
    tokscope(home.path())
        .arg("history")
        .assert()
        .success()
        .stdout(
            predicate::str::contains("20261101-101500-ab12")
                .and(predicate::str::contains("llama3-8b-q4_k_m.gguf")),
        );
    assert_eq!(std::fs::read_to_string(&old).unwrap(), FORMAT_1_FILE);
    let conv = tokscope::history::load(&old).unwrap();
    assert_eq!(conv.turns[0].user, "Hello");
    assert!(conv.turns[0].model.is_none() && conv.turns[0].settings.is_none());
}

#[test]
fn a_torn_results_log_is_repaired_not_merged() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = common::synth(home.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let log = home.path().join("data").join("results.jsonl");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    // An earlier run whose append was cut short by a full disk.
    std::fs::write(
        &log,
        "{\"id\":\"20250101-000000-aaaa\",\"rows\":[]}\n{\"id\":\"2025",
    )
    .unwrap();
    tokscope(home.path())
        .args([
            "bench",
            "--no-probe",
            "-t",
            "1",
            "-p",
            "8",
            "-n",
            "4",
            "-r",
            "1",
            "-m",
        ])
        .arg(&model)
        .assert()
        .success()
        .stderr(predicate::str::contains("ended in an unfinished line"));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.ends_with('\n'));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is a whole record"))
        .collect();
    assert_eq!(lines.len(), 2);
    let aside: Vec<PathBuf> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("results.jsonl.torn-"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read(&aside[0]).unwrap(), b"{\"id\":\"2025");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "the results log is the user's only, like history"
        );
    }
    // The listing reads every run: nothing was merged into a broken line.
    tokscope(home.path())
        .arg("results")
        .assert()
        .success()
        .stderr(predicate::str::contains("could not be read").not());
}

#[test]
fn history_removes_stale_temps_and_skips_fifos_and_devices_without_hanging() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("data").join("history");
    std::fs::create_dir_all(&dir).unwrap();
    let conv = tokscope::history::SavedConversation::new("20250101-000000-aaaa".into(), 1);
    tokscope::history::save(&dir, &conv).unwrap();
    // Left by a save killed with kill -9 an hour ago, and one being written right now.
    let stale = dir.join(".20250101-000000-aaaa.json.tmp-4242-0-0badf00d");
    let fresh = dir.join(".20250101-000000-aaaa.json.tmp-4243-0-0badf00d");
    std::fs::write(&stale, b"{\"half").unwrap();
    std::fs::write(&fresh, b"{\"half").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    mkfifo(&dir.join("20250102-000000-ffff.json"));
    #[cfg(unix)]
    std::os::unix::fs::symlink("/dev/zero", dir.join("20250103-000000-0000.json")).unwrap();
    tokscope(home.path())
        .arg("history")
        .timeout(Duration::from_secs(20))
        .assert()
        .success()
        .stdout(predicate::str::contains("20250101-000000-aaaa"))
        .stderr(
            predicate::str::contains("removed").and(predicate::str::contains("not a regular file")),
        );
    assert!(!stale.exists(), "the stale temp file is removed");
    assert!(
        fresh.exists(),
        "a temp file a live save may be writing is kept"
    );
}

#[cfg(unix)]
#[test]
fn writes_replace_regular_files_only_and_reads_refuse_fifos_devices_and_giants() {
    let home = tempfile::tempdir().unwrap();
    let precious = home.path().join("precious.txt");
    std::fs::write(&precious, b"keep").unwrap();
    let link = home.path().join("link.gguf");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let fifo = home.path().join("fifo.gguf");
    mkfifo(&fifo);
    // synth -o onto a symbolic link, a FIFO or a device node: refused, nothing replaced.
    for target in [&link, &fifo, &PathBuf::from("/dev/null")] {
        tokscope(home.path())
            .args(["synth", "--preset", "tiny", "-o"])
            .arg(target)
            .timeout(Duration::from_secs(20))
            .assert()
            .failure()
            .stderr(predicate::str::contains("not a regular file"));
    }
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep");

    // --config that is a FIFO (would hang), a device (would read forever) or huge.
    let big = home.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; 2 * 1024 * 1024]).unwrap();
    for config in [fifo.as_path(), Path::new("/dev/zero"), big.as_path()] {
        let out = tokscope(home.path())
            .arg("--config")
            .arg(config)
            .args(["config", "show"])
            .timeout(Duration::from_secs(20))
            .assert()
            .failure()
            .get_output()
            .stderr
            .clone();
        let err = String::from_utf8_lossy(&out);
        assert!(
            err.contains("not a regular file") || err.contains("the limit for settings"),
            "{err}"
        );
    }

    // compare --text from a device: refused before anything is read or loaded.
    let model = common::synth(home.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    tokscope(home.path())
        .args(["compare", "--no-speed", "--text", "/dev/zero", "-m"])
        .arg(&model)
        .timeout(Duration::from_secs(60))
        .assert()
        .failure()
        .stderr(predicate::str::contains("not a regular file"));

    // The log is the user's only, like history.
    let log = home.path().join("data").join("logs").join("tokscope.log");
    assert!(log.exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// A link planted at `at` to a file holding "keep", which must stay so.
fn planted_link(dir: &Path, at: &Path) -> PathBuf {
    let precious = dir.join(format!(
        "precious-{}",
        at.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&precious, b"keep").unwrap();
    std::os::unix::fs::symlink(&precious, at).unwrap();
    precious
}

#[test]
fn report_plot_and_otlp_files_never_go_through_a_link_a_fifo_or_over_a_file() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = common::synth(home.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let run = |report: &Path, force: bool| {
        let mut cmd = tokscope(home.path());
        cmd.args(["run", "-p", "Hi", "-n", "2", "-t", "1", "-m"])
            .arg(&model)
            .arg("--report")
            .arg(report)
            .timeout(Duration::from_secs(60));
        if force {
            cmd.arg("--force");
        }
        cmd.assert()
    };
    // run --report: a link (with or without --force), a FIFO (never waited on), a file that
    // exists (only with --force).
    let link = home.path().join("link.jsonl");
    let precious = planted_link(home.path(), &link);
    let fifo = home.path().join("fifo.jsonl");
    mkfifo(&fifo);
    for (path, force) in [(&link, false), (&link, true), (&fifo, false), (&fifo, true)] {
        run(path, force)
            .code(2)
            .stderr(predicate::str::contains("not a regular file"));
    }
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep");
    let existing = home.path().join("old.jsonl");
    std::fs::write(&existing, b"keep").unwrap();
    run(&existing, false)
        .code(2)
        .stderr(predicate::str::contains("exists: --force replaces it"));
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep");
    run(&existing, true).success();
    let written = std::fs::read_to_string(&existing).unwrap();
    assert!(
        written.starts_with('{') && written.contains("\"metrics\""),
        "{written}"
    );

    // bench --plot lk/pl.png writes lk/pl-roofline.png: a link planted under that derived
    // name is refused before anything is measured, as is an existing chart without --force.
    let lk = home.path().join("lk");
    std::fs::create_dir(&lk).unwrap();
    let derived = lk.join("pl-roofline.png");
    let precious = planted_link(home.path(), &derived);
    let bench = |force: bool| {
        let mut cmd = tokscope(home.path());
        cmd.args(["bench", "-p", "0", "-n", "4", "-r", "1", "-t", "1"])
            .args(["--bandwidth-gb-s", "10", "--plot"])
            .arg(lk.join("pl.png"))
            .arg("-m")
            .arg(&model)
            .timeout(Duration::from_secs(60));
        if force {
            cmd.arg("--force");
        }
        cmd.assert()
    };
    for force in [false, true] {
        bench(force)
            .code(2)
            .stderr(predicate::str::contains("pl-roofline.png"))
            .stderr(predicate::str::contains("not a regular file"));
    }
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep");
    std::fs::remove_file(&derived).unwrap();
    std::fs::write(&derived, b"old chart").unwrap();
    bench(false)
        .code(2)
        .stderr(predicate::str::contains("exists: --force replaces it"));
    assert_eq!(std::fs::read(&derived).unwrap(), b"old chart");
    bench(true).success();
    assert!(std::fs::read(&derived).unwrap().starts_with(b"\x89PNG"));
    let leftovers: Vec<_> = std::fs::read_dir(&lk)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");

    // load --otlp-file --force onto a link: refused, the link's target untouched.
    let otlp = home.path().join("otlp.jsonl");
    let precious = planted_link(home.path(), &otlp);
    tokscope(home.path())
        .args(["load", "--url", "http://127.0.0.1:9/v1", "--requests", "1"])
        .arg("--otlp-file")
        .arg(&otlp)
        .arg("--force")
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a regular file"));
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep");
}

#[test]
fn a_bad_cached_bandwidth_is_ignored_with_a_warning_naming_the_file() {
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let file = cache.join("bandwidth-probe.json");
    let entry = |threads: u32, read: f64| {
        serde_json::json!({
            "cpu": "some CPU", "method": "stream-v2", "measured_unix_s": 1_700_000_000u64,
            "probe": {
                "threads": threads, "footprint_bytes": 1 << 30, "runs": 3,
                "read_bytes_per_s": read, "copy_bytes_per_s": 1e10, "triad_bytes_per_s": 1e10
            }
        })
    };
    let cache_json = serde_json::json!({
        "entries": [entry(1, 0.0), entry(2, -1.0), entry(3, 1e308), entry(4, 2e10)]
    });
    std::fs::write(&file, serde_json::to_vec(&cache_json).unwrap()).unwrap();
    let out = tokscope(home.path())
        .env("TOKSCOPE_CACHE_DIR", &cache)
        .args(["doctor", "bandwidth"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8_lossy(&out);
    for threads in [1, 2, 3] {
        assert!(
            out.contains(&format!("ignored the cached {threads}-thread bandwidth in")),
            "{out}"
        );
    }
    assert!(out.contains("bandwidth-probe.json"), "{out}");
    assert!(out.contains("--reprobe"), "{out}");
    assert!(out.contains("20.0 GB/s"), "the good entry is listed: {out}");
    assert!(
        !out.contains("-0.0 GB/s") && !out.contains("-1.0 GB/s"),
        "{out}"
    );
    assert!(
        out.lines().all(|l| l.len() < 400),
        "no 300-digit figure: {out}"
    );
    // A typed figure passes the same check.
    tokscope(home.path())
        .args([
            "bench",
            "--bandwidth-gb-s",
            "1e308",
            "-m",
            "/nonexistent.gguf",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at most 1000000 GB/s"));
}
