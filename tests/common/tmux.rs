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
    pub fn start(name: &str, width: u16, height: u16, env: &[(&str, &Path)]) -> Self {
        let socket = format!("tokscope-e2e-{name}-{}", std::process::id());
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
