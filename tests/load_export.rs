//! `load --prometheus` and `--otlp` / `--otlp-file` (issue 35, item 5): tokscope's own figures
//! where dashboards live, read back by independent readers (prometheus_client's parser, and
//! opentelemetry-proto's classes through protobuf's strict JSON parser) and held against the
//! level's own report. The server is the scripted one of `remote_faults` (its chunks paced so
//! that the gaps are real); the collector a small thread here that keeps what it is sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::remote_faults::{chunk, fake, url, usage_event, Chat};

/// vLLM's `time_to_first_token_seconds` bounds, as a vLLM server's `/metrics` writes them.
const VLLM_TTFT_LE: &[&str] = &[
    "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
    "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf",
];

/// Three content chunks 15 ms apart, then 5 prompt and 3 output tokens of usage.
fn paced_answer() -> Chat {
    let gap = Duration::from_millis(15);
    Chat::Paced(vec![
        (Duration::ZERO, chunk("a").into_bytes()),
        (gap, chunk("b").into_bytes()),
        (gap, chunk("c").into_bytes()),
        (
            Duration::ZERO,
            (usage_event(5, 3) + "data: [DONE]\n\n").into_bytes(),
        ),
    ])
}

/// A collector stand-in on 127.0.0.1: keeps each POST's body and answers `status` (with
/// `body`); it stops by itself after 60 s.
pub(crate) fn collector(status: u16, body: &'static str) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&kept);
    std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let Ok((stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            let mut line = String::new();
            let mut first = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                if first.is_empty() {
                    first = line.clone();
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
                line.clear();
            }
            let mut payload = vec![0; length];
            let _ = reader.read_exact(&mut payload);
            if first.starts_with("POST /v1/metrics ") {
                keep.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&payload).into_owned());
            }
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, kept)
}

/// The real binary with its stderr read line by line on a thread (sent to the channel).
fn spawn(home: &Path, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tokscope"))
        .env("TOKSCOPE_DATA_DIR", home.join("data"))
        .env("TOKSCOPE_CONFIG_DIR", home.join("config"))
        .env("TOKSCOPE_CACHE_DIR", home.join("cache"))
        .env_remove("TOKSCOPE_PLANT_SCALE")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Waits (at most 60 s) for a stderr line holding `needle`; every line read so far on panic.
fn wait_for(lines: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            seen.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }
    panic!("no '{needle}' on stderr: {seen:#?}");
}

pub(crate) fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

/// Samples as prometheus_client's parser reads them: (name, labels) → value.
pub(crate) fn samples(text: &str, dir: &Path) -> BTreeMap<(String, BTreeMap<String, String>), f64> {
    let file = dir.join("exposition.txt");
    std::fs::write(&file, text).unwrap();
    common::python_reader("prom-parse.py", &[&file])
        .lines()
        .map(|l| {
            let (n, labels, v): (String, BTreeMap<String, String>, String) =
                serde_json::from_str(l).unwrap();
            ((n, labels), v.parse::<f64>().unwrap_or(f64::INFINITY))
        })
        .collect()
}

/// One OTLP export request per line, as opentelemetry-proto decodes it.
pub(crate) fn decoded(lines: &[String], dir: &Path) -> Vec<serde_json::Value> {
    let file = dir.join("otlp.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    common::python_reader("otlp-decode.py", &[&file])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1e-3)
}

#[test]
fn load_serves_and_sends_its_own_figures_and_both_readers_agree_with_its_report() {
    let server = fake(paced_answer(), 60);
    let (sink_port, received) = collector(200, "{}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("export.jsonl");
    let (sink, server_url) = (format!("http://127.0.0.1:{sink_port}"), url(&server));
    let (mut child, lines) = spawn(
        dir.path(),
        &[
            "load",
            "--url",
            &server_url,
            "--concurrency",
            "2",
            "--requests",
            "6",
            "--warmup",
            "1",
            "--input-len",
            "8",
            "--metrics-interval",
            "0",
            "-o",
            "json",
            "--prometheus",
            "127.0.0.1:0",
            "--prometheus-hold",
            "30",
            "--otlp",
            &sink,
            "--otlp-file",
            file.to_str().unwrap(),
        ],
    );
    let mut seen = Vec::new();
    let served = wait_for(&lines, "/metrics (Prometheus text)", &mut seen);
    let addr = served
        .split("http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    wait_for(&lines, "s more (Ctrl-C ends it)", &mut seen);
    let reply = get(&addr, "/metrics");
    let not_found = get(&addr, "/");
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(not_found.starts_with("HTTP/1.1 404"), "{not_found}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let level = &report["levels"][0];
    assert_eq!(level["completed"], 6, "{level}");
    let mean_s = |figure: &str| level[figure]["mean_ms"].as_f64().unwrap() / 1e3;
    let count = |figure: &str| level[figure]["count"].as_f64().unwrap();

    // Prometheus: vLLM's names with tokscope's prefix, vLLM's bounds, the report's figures.
    let text = reply.split("\r\n\r\n").nth(1).unwrap();
    let s = samples(text, dir.path());
    let labels = |extra: &[(&str, &str)]| -> BTreeMap<String, String> {
        [
            ("model_name", "fake-model"),
            ("level", level["level"].as_str().unwrap()),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    let at = |name: &str, extra: &[(&str, &str)]| {
        *s.get(&(name.to_string(), labels(extra)))
            .unwrap_or_else(|| panic!("no {name} {extra:?} in {s:#?}"))
    };
    let ttft_buckets: Vec<f64> = VLLM_TTFT_LE
        .iter()
        .map(|le| at("tokscope:time_to_first_token_seconds_bucket", &[("le", le)]))
        .collect();
    assert!(ttft_buckets.windows(2).all(|w| w[0] <= w[1]), "cumulative");
    assert_eq!(ttft_buckets.last().copied(), Some(6.0));
    assert_eq!(at("tokscope:time_to_first_token_seconds_count", &[]), 6.0);
    assert!(close(
        at("tokscope:time_to_first_token_seconds_sum", &[]) / 6.0,
        mean_s("ttft")
    ));
    // tokscope's per-token ITL under a name that says so; vLLM's name holds the per-chunk
    // gaps, as vLLM's own histogram does (issue 58, item 6).
    assert_eq!(
        at("tokscope:inter_token_latency_per_token_seconds_count", &[]),
        count("itl")
    );
    assert!(close(
        at("tokscope:inter_token_latency_per_token_seconds_sum", &[]) / count("itl"),
        mean_s("itl")
    ));
    assert!(at("tokscope:inter_token_latency_seconds_count", &[]) > 0.0);
    assert!(close(
        at("tokscope:e2e_request_latency_seconds_sum", &[]) / 6.0,
        mean_s("e2el")
    ));
    assert!(close(
        at("tokscope:request_time_per_output_token_seconds_sum", &[]) / count("tpot"),
        mean_s("tpot")
    ));
    assert_eq!(at("tokscope:request_success_total", &[]), 6.0);
    assert_eq!(
        at("tokscope:generation_tokens_total", &[]),
        level["completion_tokens"].as_f64().unwrap()
    );
    assert_eq!(
        at("tokscope:prompt_tokens_total", &[]),
        level["prompt_tokens"].as_f64().unwrap()
    );
    // 15 ms gaps: every ITL in (0.01, 0.025].
    assert_eq!(
        at(
            "tokscope:inter_token_latency_seconds_bucket",
            &[("le", "0.01")]
        ),
        0.0
    );

    // OTLP: the POST and the file hold the same request, decoded strictly.
    let posted = received.lock().unwrap().clone();
    assert_eq!(posted.len(), 1, "one export after the one level");
    let written: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(written.len(), 1);
    let requests = decoded(&[posted[0].clone(), written[0].clone()], dir.path());
    let mut names: Vec<&String> = requests[0].as_object().unwrap().keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "gen_ai.client.operation.duration",
            "gen_ai.client.operation.time_per_output_chunk",
            "gen_ai.client.operation.time_to_first_chunk",
            "gen_ai.client.token.usage",
            "tokscope.client.reasoning_token_count",
            "tokscope.client.time_to_first_output_token",
        ]
    );
    for request in &requests {
        let point = |name: &str, i: usize| request[name]["points"][i].clone();
        for (name, metric) in request.as_object().unwrap() {
            assert_eq!(metric["temporality"], 2, "{name}: cumulative");
            assert_eq!(metric["resource"]["service.name"], "tokscope");
            for p in metric["points"].as_array().unwrap() {
                let buckets: Vec<u64> = serde_json::from_value(p["bucket_counts"].clone()).unwrap();
                let bounds = p["explicit_bounds"].as_array().unwrap();
                assert_eq!(buckets.len(), bounds.len() + 1, "{name}");
                assert_eq!(
                    buckets.iter().sum::<u64>(),
                    p["count"].as_u64().unwrap(),
                    "{name}"
                );
                let a = &p["attributes"];
                assert_eq!(a["gen_ai.request.model"], "fake-model");
                assert_eq!(a["gen_ai.operation.name"], "chat");
                assert_eq!(a["server.address"], "127.0.0.1");
                assert_eq!(a["server.port"], server.port);
                assert!(p["start"].as_u64().unwrap() < p["time"].as_u64().unwrap());
            }
        }
        let duration = point("gen_ai.client.operation.duration", 0);
        assert_eq!(duration["count"], 6);
        assert!(close(
            duration["sum"].as_f64().unwrap() / 6.0,
            mean_s("e2el")
        ));
        let first = point("gen_ai.client.operation.time_to_first_chunk", 0);
        assert!(close(first["sum"].as_f64().unwrap() / 6.0, mean_s("ttft")));
        let per_chunk = point("gen_ai.client.operation.time_per_output_chunk", 0);
        assert_eq!(per_chunk["count"], 12, "two gaps in each of 6 answers");
        let usage = &request["gen_ai.client.token.usage"];
        assert_eq!(usage["unit"], "{token}");
        for p in usage["points"].as_array().unwrap() {
            let (kind, total) = match p["attributes"]["gen_ai.token.type"].as_str() {
                Some("input") => ("input", &level["prompt_tokens"]),
                Some("output") => ("output", &level["completion_tokens"]),
                other => panic!("gen_ai.token.type {other:?}"),
            };
            assert_eq!(p["sum"].as_f64(), total.as_f64(), "{kind}");
        }
    }
}

#[test]
fn a_collector_that_refuses_is_said_and_the_report_kept_with_exit_1() {
    let server = fake(paced_answer(), 40);
    let (sink_port, _) = collector(503, "collector overloaded");
    let dir = tempfile::tempdir().unwrap();
    let out = common::tokscope_cmd(dir.path())
        .env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
        .timeout(Duration::from_secs(60))
        .args(["load", "--url", &url(&server)])
        .args(["--concurrency", "2", "--requests", "4", "--warmup", "0"])
        .args(["--metrics-interval", "0", "-o", "json"])
        .args(["--otlp", &format!("http://127.0.0.1:{sink_port}/")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 503"), "{stderr}");
    assert!(stderr.contains("collector overloaded"), "{stderr}");
    assert!(stderr.contains("report above is complete"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["levels"][0]["completed"], 4);
}

#[test]
fn a_port_in_use_and_bad_export_flags_are_refused_before_anything_is_sent() {
    let server = fake(paced_answer(), 40);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("existing.jsonl");
    std::fs::write(&existing, "keep me\n").unwrap();
    let missing = dir.path().join("no/such/folder/x.jsonl");
    for (flags, needle) in [
        (vec!["--prometheus", taken.as_str()], "cannot listen there"),
        (vec!["--prometheus", "localhost"], "expected an address"),
        (vec!["--otlp", "ftp://127.0.0.1/x"], "http or https"),
        (
            vec!["--otlp-file", existing.to_str().unwrap()],
            "--force replaces it",
        ),
        (
            vec!["--otlp-file", missing.to_str().unwrap()],
            "does not exist",
        ),
        (
            vec!["--prometheus", "127.0.0.1:0", "--prometheus-hold=-1"],
            "--prometheus-hold",
        ),
    ] {
        let out = common::tokscope_cmd(dir.path())
            .env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
            .timeout(Duration::from_secs(30))
            .args(["load", "--url", &url(&server), "--requests", "2"])
            .args(&flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(needle), "{flags:?}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me\n");
    let asked: Vec<String> = server.requests.try_iter().collect();
    assert!(
        asked.iter().all(|r| !r.starts_with("POST")),
        "nothing was sent: {asked:?}"
    );
}

#[test]
fn chat_exporters_are_refused_on_a_port_in_use_a_bad_address_and_an_existing_file() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("existing.jsonl");
    std::fs::write(&existing, "keep me\n").unwrap();
    let existing = existing.to_str().unwrap();
    // Said before the screen opens and before the server is asked anything (none listens).
    for (args, needle) in [
        (
            vec![
                "--url",
                "http://127.0.0.1:9/v1",
                "--prometheus",
                taken.as_str(),
            ],
            "cannot listen there",
        ),
        (
            vec![
                "--url",
                "http://127.0.0.1:9/v1",
                "--prometheus",
                "localhost",
            ],
            "expected an address",
        ),
        (
            vec![
                "--url",
                "http://127.0.0.1:9/v1",
                "--otlp",
                "ftp://127.0.0.1/x",
            ],
            "http or https",
        ),
        (
            vec!["--url", "http://127.0.0.1:9/v1", "--otlp-file", existing],
            "--force replaces it",
        ),
    ] {
        let out = common::tokscope_cmd(dir.path())
            .env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
            .timeout(Duration::from_secs(30))
            .arg("chat")
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert_eq!(std::fs::read_to_string(existing).unwrap(), "keep me\n");
}

/// `run --otlp-file` on a local model (issue #59, item 8): its turns under the names a server's
/// requests are exported under, counted on the engine thread, and sent once when the run ends;
/// opentelemetry-proto reads back what `--json` reports. An existing file needs --force.
#[test]
fn a_local_run_exports_its_turns_as_a_remote_one_does() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let file = dir.path().join("run-otlp.jsonl");
    let run = |extra: &[&str]| {
        common::tokscope_cmd(dir.path())
            .env("TOKSCOPE_CACHE_DIR", dir.path().join("cache"))
            .timeout(Duration::from_secs(120))
            .args([
                "run",
                "-t",
                "1",
                "-p",
                "hello there",
                "-n",
                "6",
                "--temp",
                "0",
            ])
            .args(["--ignore-eos", "--turns", "2", "--json", "--otlp-file"])
            .arg(&file)
            .arg("-m")
            .arg(&model)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(out.status.success(), "{out:?}");
    let reports: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports.len(), 2, "{out:?}");
    let sum = |key: &str| -> f64 {
        reports
            .iter()
            .map(|r| {
                r["metrics"][key]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{key}: {r}"))
            })
            .sum()
    };
    let lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 1, "one export when the run ends: {lines:?}");
    let request = &decoded(&lines, dir.path())[0];
    let point = |name: &str| request[name]["points"][0].clone();
    let first = point("gen_ai.client.operation.time_to_first_chunk");
    assert_eq!(first["count"], 2, "{request}");
    assert_eq!(first["attributes"]["tokscope.load.level"], "run");
    let ttft_s = first["sum"].as_f64().unwrap();
    assert!(
        close(ttft_s * 1e3, sum("ttft_ms")),
        "exported TTFT {ttft_s} s, reported {} ms",
        sum("ttft_ms")
    );
    let e2e_s = point("gen_ai.client.operation.duration")["sum"]
        .as_f64()
        .unwrap();
    assert!(
        close(e2e_s * 1e3, sum("e2e_ms")),
        "{e2e_s} vs {}",
        sum("e2e_ms")
    );
    // Every gap between two tokens: 5 per turn.
    assert_eq!(
        point("gen_ai.client.operation.time_per_output_chunk")["count"],
        10
    );
    // Again without --force: refused before the model loads, the file kept.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--force"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 1);
}

#[test]
fn idle_connections_to_the_exporter_never_keep_a_scrape_waiting() {
    let server = fake(paced_answer(), 40);
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = spawn(
        dir.path(),
        &[
            "load",
            "--url",
            &url(&server),
            "--requests",
            "2",
            "--metrics-interval",
            "0",
            "-o",
            "json",
            "--prometheus",
            "127.0.0.1:0",
            "--prometheus-hold",
            "60",
        ],
    );
    let mut seen = Vec::new();
    let served = wait_for(&lines, "/metrics (Prometheus text)", &mut seen);
    let addr = served
        .split("http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    wait_for(&lines, "s more (Ctrl-C ends it)", &mut seen);
    // 300 connections that send nothing (each held open here), then a real scrape.
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    assert!(idle.len() >= 200, "{} idle connections opened", idle.len());
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let reply = get(&addr, "/metrics");
    let took = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    drop(idle);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        took < Duration::from_secs(2),
        "the scrape waited {took:?} behind idle connections"
    );
}
