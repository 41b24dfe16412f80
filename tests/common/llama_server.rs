//! A real llama-server for the remote tests: the binary scripts/llama-tools.sh builds from the
//! llama.cpp vendored in the llama-cpp-python sdist on PyPI (`--source pypi`, 0.3.36 by
//! default; another llama.cpp revision than the one tokscope links through llama-cpp-sys-2,
//! which is fine here: the tests hold tokscope's client against a real server's wire
//! format, not two engines' figures) (`$TOKSCOPE_LLAMA_SERVER`, set by scripts/test.sh, or
//! built here on first use), started on 127.0.0.1 at a free port with `--metrics`, one thread, and
//! killed by its PID when dropped. A test that needs it FAILS when it cannot be had.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn llama_server_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("TOKSCOPE_LLAMA_SERVER") {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "TOKSCOPE_LLAMA_SERVER={} is not a file",
                p.display()
            );
            return p;
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new("bash")
            .arg(root.join("scripts/llama-tools.sh"))
            .args(["--source", "pypi"])
            .env("LLAMA_TOOLS_SERVER", "1")
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run scripts/llama-tools.sh");
        assert!(
            out.status.success(),
            "scripts/llama-tools.sh --source pypi failed: llama-server could not be built"
        );
        let dir = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_string();
        let bin = Path::new(&dir).join("bin/llama-server");
        assert!(bin.is_file(), "no llama-server at {}", bin.display());
        bin
    })
    .clone()
}

pub struct LlamaServer {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl LlamaServer {
    /// Starts llama-server on `model` with `parallel` slots and waits (up to 120 s) for
    /// `/health` to answer 200.
    pub fn start(model: &Path, parallel: u32, extra: &[&str], log_dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = log_dir.join(format!("llama-server-{port}.log"));
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(llama_server_binary())
            .args(["-m", model.to_str().unwrap()])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--metrics",
                "-t",
                "1",
                "-tb",
                "1",
                "-c",
                &(1024 * parallel).to_string(),
            ])
            .args(["--parallel", &parallel.to_string()])
            .args(extra)
            .stdout(Stdio::from(log_file.try_clone().unwrap()))
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("cannot start llama-server");
        let mut server = Self { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "llama-server exited ({status}) while starting: {}",
                    std::fs::read_to_string(&server.log).unwrap_or_default()
                );
            }
            if server.get("/health").is_some_and(|(code, _)| code == 200) {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "llama-server did not become healthy in 120 s: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// A plain blocking GET: (status, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
        )
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((code, body))
    }

    /// A plain blocking POST of a JSON body: (status, the JSON reply).
    pub fn post_json(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let body = body.to_string();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let code = text.split_whitespace().nth(1).unwrap().parse().unwrap();
        let (_, reply) = text.split_once("\r\n\r\n").unwrap();
        let json = serde_json::from_str(reply)
            .unwrap_or_else(|e| panic!("POST {path}: not JSON ({e}): {reply}"));
        (code, json)
    }

    /// A counter of `/metrics` (Prometheus text), e.g. `llamacpp:tokens_predicted_total`.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.get("/metrics").expect("no /metrics");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == name).then(|| v.trim().parse().ok()).flatten()
            })
            .unwrap_or_else(|| panic!("{name} not in /metrics: {body}"))
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
