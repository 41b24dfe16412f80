//! Security properties of the real binary: it opens no network connection (checked with
//! strace over a whole `run`, model load included), and what it writes for the user (history,
//! exports) is readable by the user only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use tokscope::synth::TensorType;

#[test]
fn run_opens_no_network_socket() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let trace = dir.path().join("trace.txt");
    let status = Command::new("strace")
        .args(["-f", "-e", "trace=socket,connect,bind", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_tokscope"))
        .args(["run", "-p", "hello", "-n", "4", "-t", "1", "--json", "-m"])
        .arg(&model)
        .env("TOKSCOPE_DATA_DIR", dir.path().join("data"))
        .env("TOKSCOPE_CONFIG_DIR", dir.path().join("config"))
        .output()
        .expect("strace must be installed (scripts/test.sh installs it)");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let calls = std::fs::read_to_string(&trace).unwrap();
    let network: Vec<&str> = calls
        .lines()
        .filter(|l| l.contains("AF_INET") || l.contains("AF_INET6") || l.contains("AF_PACKET"))
        .collect();
    assert!(network.is_empty(), "network syscalls: {network:#?}");
    // The trace really covered the run (the process exited normally under strace).
    assert!(calls.contains("+++ exited with 0 +++"), "{calls}");
}

#[test]
fn exports_and_history_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let conv = tokscope::history::SavedConversation::new("20261130-000000-abcd".into(), 0);
    let saved = tokscope::history::save(&dir.path().join("history"), &conv).unwrap();
    let export = dir.path().join("export.md");
    tokscope::fsx::write_private(&export, b"# hi\n").unwrap();
    for path in [saved, export] {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    let mode = std::fs::metadata(dir.path().join("history"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
}
