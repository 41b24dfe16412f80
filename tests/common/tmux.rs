//! A real terminal for end-to-end tests: tmux on its own socket, keys in, screen out, polling
//! with deadlines instead of fixed sleeps.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    /// [`Tmux::start`] with the data and config dirs under `home`.
    pub fn start_in(name: &str, width: u16, height: u16, home: &Path) -> Self {
        let (data, config) = (home.join("data"), home.join("config"));
        Self::start(
            name,
            width,
            height,
            &[
                ("TOKSCOPE_DATA_DIR", &data),
                ("TOKSCOPE_CONFIG_DIR", &config),
            ],
        )
    }

    pub fn start(name: &str, width: u16, height: u16, env: &[(&str, &Path)]) -> Self {
        // Unique per terminal: a test binary holds several areas' tests, run side by side.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("tokscope-e2e-{name}-{}-{n}", std::process::id());
        let tmux = Self { socket };
        let mut cmd = Command::new("tmux");
        cmd.args([
            "-L",
            &tmux.socket,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "main",
        ])
        .args(["-x", &width.to_string(), "-y", &height.to_string()]);
        for (k, v) in env {
            cmd.arg("-e").arg(format!("{k}={}", v.display()));
        }
        cmd.args([
            "env",
            "PS1=e2e$ ",
            "TERM=xterm-256color",
            "bash",
            "--norc",
            "--noprofile",
        ]);
        let status = cmd
            .status()
            .expect("tmux must be installed (scripts/test.sh installs it)");
        assert!(status.success(), "tmux could not start");
        tmux
    }

    pub fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "main"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "main", "-l", text]);
    }

    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "main"])
    }

    pub fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if pred(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the screen was:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

// Driving the chat: start it on a model, send messages, read the status line.

pub const READY: Duration = Duration::from_secs(60);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tokscope")
}

pub fn status_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

pub fn start_chat(tmux: &Tmux, model: &Path, extra: &str) {
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    tmux.type_text(&format!(
        "{} chat -m {} -t 1 --temp 0 {extra}; echo exit=$?",
        bin(),
        model.display()
    ));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the model to be ready", READY, |s| {
        status_line(s).contains("ready")
    });
}

pub fn send(tmux: &Tmux, text: &str) {
    tmux.type_text(text);
    tmux.keys(&["Enter"]);
}

pub fn wait_idle_after_answers(tmux: &Tmux, answers: usize) -> String {
    tmux.wait_for("the answers", Duration::from_secs(60), |s| {
        s.matches("─ TTFT").count() >= answers && status_line(s).contains("ready")
    })
}

pub fn exit_line(screen: &str) -> Option<&str> {
    screen.lines().find(|l| l.starts_with("exit="))
}

pub fn tokscope_pid(tmux: &Tmux) -> String {
    let shell = tmux.tmux(&["display", "-p", "-t", "main", "#{pane_pid}"]);
    let out = Command::new("pgrep")
        .args(["-P", shell.trim(), "tokscope"])
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!pid.is_empty(), "tokscope is running");
    pid
}

pub fn saved_turns(data: &Path) -> usize {
    let dir = data.join("history");
    let mut turns = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let conv = tokscope::history::load(&path).expect("every saved file loads");
            turns += conv.turns.len();
        }
    }
    turns
}
