//! `tokscope bench` and `tokscope results` from the outside, on real llama.cpp with synthetic
//! models: every output format parses back with the stamp and the synthetic flag, sweeps expand
//! in llama-bench's order, batch runs count B × n tokens, bad values exit 2, the results log
//! remembers runs and `--vs` names what changed, and the roofline columns are filled. One
//! thread per model run (`-t 1`) except where the sweep itself is the subject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::tiny;
use common::tokscope_cmd as tokscope;

use std::path::Path;

use predicates::prelude::*;
use serde_json::Value;

/// The binary, isolated from the real home: its own data and config dirs.
/// Run `bench` on `model` with `args` (no CPU probe: a fixed bandwidth where the test needs
/// one) and return stdout.
fn bench(home: &Path, model: &Path, args: &[&str]) -> String {
    let out = common::ok_stdout(
        tokscope(home)
            .arg("bench")
            .arg("-m")
            .arg(model)
            .args(["--no-probe"])
            .args(args),
    );
    String::from_utf8(out).unwrap()
}

fn json_rows(text: &str) -> Vec<Value> {
    serde_json::from_str::<Value>(text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn assert_stamped(row: &Value) {
    assert_eq!(row["synthetic"], true, "{row}");
    // The synthetic label comes first; a busy-machine warning may follow it.
    let warning = row["warning"].as_str().unwrap_or_default();
    assert!(
        warning.starts_with(tokscope::engine::ModelInfo::SYNTHETIC_LABEL),
        "{row}"
    );
    let stamp = &row["stamp"];
    assert_eq!(stamp["synthetic"], true);
    assert_eq!(stamp["model_file"], "tiny.gguf");
    assert_eq!(stamp["model_fingerprint"].as_str().unwrap().len(), 16);
    assert!(stamp["tokscope_version"].is_string() && stamp["llama_cpp"].is_string());
}

#[test]
fn every_output_format_parses_back() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let common_args = ["-t", "1", "-p", "16", "-n", "8", "-r", "2"];

    let md = bench(
        home.path(),
        &model,
        &[&common_args[..], &["-o", "md+"]].concat(),
    );
    let md_lines: Vec<&str> = md.lines().collect();
    let lines = &md_lines;
    assert!(
        lines[0].starts_with("| model") && lines[0].contains(" t/s |"),
        "{md}"
    );
    assert!(lines[1].starts_with("| ---"), "{md}");
    let body: Vec<&&str> = lines[2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(body.len(), 2, "one line per row: {md}");
    assert!(body[0].contains("pp16") && body[1].contains("tg8"), "{md}");
    assert!(md.contains(" ± "), "{md}");

    let csv = bench(
        home.path(),
        &model,
        &[&common_args[..], &["-o", "csv"]].concat(),
    );
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "header + 2 rows: {csv}");
    let header = common::csv_fields(lines[0]);
    assert!(header.len() > 40, "{header:?}");
    for line in &lines[1..] {
        assert_eq!(common::csv_fields(line).len(), header.len(), "{line}");
    }
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let first = common::csv_fields(lines[1]);
    assert_eq!(first[col("synthetic")], "true");
    assert_eq!(first[col("stamp.model_file")], "tiny.gguf");
    assert_eq!(first[col("test")], "pp16");

    let json = bench(
        home.path(),
        &model,
        &[&common_args[..], &["-o", "json"]].concat(),
    );
    let rows = json_rows(&json);
    assert_eq!(rows.len(), 2);
    rows.iter().for_each(assert_stamped);

    let jsonl = bench(
        home.path(),
        &model,
        &[&common_args[..], &["-o", "jsonl"]].concat(),
    );
    let rows: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    rows.iter().for_each(assert_stamped);
    for row in &rows {
        let samples = row["samples_tok_per_s"].as_array().unwrap();
        assert_eq!(samples.len(), 2, "one t/s per repetition");
        assert!(row["tok_per_s_mean"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(rows[1]["kind"], "tg");
    assert!(rows[1]["itl_p99_ms"].as_f64().unwrap() > 0.0);
    // A tg row has no prompt: its first step decodes a BOS, which is no TTFT.
    assert!(rows[1]["ttft_p50_ms"].is_null(), "{}", rows[1]);
    let cells = common::md_cells;
    let ttft_col = cells(md_lines[0])
        .iter()
        .position(|c| c == "TTFT p50 ms")
        .unwrap();
    assert_eq!(cells(body[1])[ttft_col], "—", "tg TTFT is shown as —: {md}");
}

/// Issue 58, item 14: every row's stamp records llama.cpp's CUDA runtime switches that are set
/// in the process (a name llama.cpp does not read is left out), in the JSON and as
/// `stamp.cuda_env` in the CSV. A CPU build has no CUDA backend: its `cuda_graphs` is null (a
/// CUDA build's says the switch turned them off).
#[test]
fn the_stamp_records_the_cuda_switches_set() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let run = |format: &str| {
        let out = common::ok_stdout(
            tokscope(home.path())
                .env("GGML_CUDA_DISABLE_GRAPHS", "0")
                .env("GGML_CUDA_NOT_A_SWITCH", "1")
                .arg("bench")
                .arg("-m")
                .arg(&model)
                .args(["--no-probe", "-t", "1", "-p", "8", "-n", "4", "-r", "1"])
                .args(["-o", format]),
        );
        String::from_utf8(out).unwrap()
    };
    let rows = json_rows(&run("json"));
    for row in &rows {
        let stamp = &row["stamp"];
        assert_eq!(
            stamp["cuda_env"]["GGML_CUDA_DISABLE_GRAPHS"], "0",
            "{stamp}"
        );
        assert!(
            stamp["cuda_env"]["GGML_CUDA_NOT_A_SWITCH"].is_null(),
            "{stamp}"
        );
        let graphs = stamp["cuda_graphs"].as_str();
        assert!(
            graphs.is_none_or(|g| g.starts_with("off: GGML_CUDA_DISABLE_GRAPHS=0")),
            "{stamp}"
        );
        assert!(stamp["fa_kv_kernel"].is_null(), "f16 K/V: {stamp}");
        assert!(stamp.get("gpu_driver").is_some() && stamp["gpu_power_limits"].is_array());
    }
    let csv = run("csv");
    let lines: Vec<&str> = csv.lines().collect();
    let header = common::csv_fields(lines[0]);
    let col = header.iter().position(|h| h == "stamp.cuda_env").unwrap();
    let cell = &common::csv_fields(lines[1])[col];
    assert!(cell.contains("GGML_CUDA_DISABLE_GRAPHS"), "{cell}");
}

#[test]
fn pg_ttft_is_the_chats_prefill_plus_first_sample() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    // A model whose decode step (milliseconds) is far above one sample's host time: on the
    // tiny model a step is about 0.1 ms and the comparison flaked on a busy machine.
    let model = common::synth_medium(home.path());
    let out = bench(
        home.path(),
        &model,
        &[
            "-t", "1", "-p", "0", "-n", "0", "-pg", "64,8", "-r", "1", "-o", "jsonl",
        ],
    );
    let row: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(row["kind"], "pg", "{row}");
    let ttft = row["ttft_p50_ms"].as_f64().unwrap();
    let prefill = row["prefill_ms_mean"].as_f64().unwrap();
    let step = row["itl_p50_ms"].as_f64().unwrap();
    // One repetition: TTFT = that run's prefill + the first token's sample and text, which
    // is far less than a decode step (the old definition added a whole decode step).
    assert!(ttft >= prefill, "TTFT {ttft} ms < prefill {prefill} ms");
    assert!(
        ttft - prefill < step,
        "TTFT {ttft} − prefill {prefill} ≥ a decode step {step}"
    );
    // One TTFT per repetition: the row says how many, and a p90 or p99 of one sample (its
    // largest, not a tail) is not given.
    assert_eq!(row["ttft_samples"], 1, "{row}");
    assert!(
        row["ttft_p90_ms"].is_null() && row["ttft_p99_ms"].is_null(),
        "{row}"
    );
    assert_eq!(row["itl_samples"], 7, "8 tokens, 7 gaps: {row}");
}

#[test]
fn sweeps_expand_to_the_cartesian_product_in_llama_bench_order() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let out = bench(
        home.path(),
        &model,
        &[
            "-t", "1,2", "-ctk", "f16,q8_0", "-p", "16", "-n", "8", "-r", "1", "-o", "jsonl",
        ],
    );
    let got: Vec<(String, u64, String)> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            (
                r["params"]["type_k"].as_str().unwrap().to_string(),
                r["params"]["threads"].as_u64().unwrap(),
                r["test"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, u64, String)> = [
        ("f16", 1, "pp16"),
        ("f16", 1, "tg8"),
        ("f16", 2, "pp16"),
        ("f16", 2, "tg8"),
        ("q8_0", 1, "pp16"),
        ("q8_0", 1, "tg8"),
        ("q8_0", 2, "pp16"),
        ("q8_0", 2, "tg8"),
    ]
    .iter()
    .map(|(k, t, n)| (k.to_string(), *t, n.to_string()))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn batch_runs_count_b_times_n_tokens() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let n = 6;
    let out = bench(
        home.path(),
        &model,
        &[
            "-t", "1", "-p", "8", "-n", "6", "-r", "2", "--batch", "1,2,4", "-o", "json",
        ],
    );
    let rows = json_rows(&out);
    let batch: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "batch").collect();
    assert_eq!(batch.len(), 3, "{out}");
    for (row, b) in batch.iter().zip([1u64, 2, 4]) {
        assert_eq!(row["params"]["batch_size"].as_u64(), Some(b));
        assert_eq!(row["n_tokens"].as_u64(), Some(b * n), "{row}");
        assert_eq!(row["test"], format!("B{b} pp8+tg6"));
        let agg = row["tok_per_s_mean"].as_f64().unwrap();
        let per_seq = row["per_sequence_tok_per_s"].as_f64().unwrap();
        assert!((agg / b as f64 - per_seq).abs() < 1e-6 * agg.max(1.0));
        assert!(row["prefill_ms_mean"].as_f64().unwrap() > 0.0);
        assert!(row["itl_p50_ms"].as_f64().unwrap() > 0.0);
        assert!(row["speedup_vs_b1"].as_f64().unwrap() > 0.0);
        assert!(row["latency_growth_vs_b1"].as_f64().unwrap() > 0.0);
        assert!(row["cost_per_million_tokens_usd"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(batch[0]["speedup_vs_b1"].as_f64(), Some(1.0));
    // The Markdown output has the batching table.
    let md = bench(
        home.path(),
        &model,
        &["-t", "1", "-p", "8", "-n", "6", "-r", "1", "--batch", "1,2"],
    );
    assert!(
        md.contains("t/s aggregate") && md.contains("B2 pp8+tg6"),
        "{md}"
    );
}

#[test]
fn bad_sweep_values_exit_2_and_a_missing_model_exits_3() {
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    for (args, flag, value) in [
        (&["-t", "0"][..], "-t/--threads", "0"),
        (&["--batch", "0"][..], "--batch", "0"),
        (&["-r", "0"][..], "-r/--repetitions", "0"),
        (&["-p", "many"][..], "-p/--n-prompt", "many"),
        (&["-ctk", "q3_k"][..], "-ctk/--cache-type-k", "q3_k"),
    ] {
        tokscope(home.path())
            .arg("bench")
            .arg("-m")
            .arg(&model)
            .args(args)
            .assert()
            .code(2)
            .stderr(
                predicate::str::contains(flag)
                    .and(predicate::str::contains(format!("`{value}`")))
                    .and(predicate::str::contains("panicked").not()),
            );
    }
    tokscope(home.path())
        .args(["bench", "-t", "1", "-m"])
        .arg(home.path().join("missing.gguf"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("not found"));
}

#[test]
fn results_log_appends_and_vs_names_the_changed_setting() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let args = ["-t", "1", "-p", "16", "-n", "8", "-r", "1"];
    tokscope(home.path())
        .args(["bench", "--vs", "last", "-m"])
        .arg(&model)
        .args(args)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no runs yet"));
    bench(home.path(), &model, &args);
    let second = bench(
        home.path(),
        &model,
        &[&args[..], &["-ctk", "q8_0", "--vs", "last"]].concat(),
    );
    assert!(second.contains("ctk f16 → q8_0"), "{second}");
    assert!(common::md_row(&second, "tg8").is_some(), "{second}");
    let log = std::fs::read_to_string(home.path().join("data/results.jsonl")).unwrap();
    let runs: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 2);
    for run in &runs {
        assert!(run["id"].is_string() && run["unix_time_s"].as_u64().unwrap() > 0);
        assert!(run["command_line"].as_str().unwrap().contains("bench"));
        assert_eq!(run["rows"].as_array().unwrap().len(), 2);
    }
    let listing = common::ok_stdout(tokscope(home.path()).arg("results"));
    let listing = String::from_utf8(listing).unwrap();
    for run in &runs {
        assert!(listing.contains(run["id"].as_str().unwrap()), "{listing}");
    }
    assert!(
        listing.contains("tiny.gguf") && listing.contains("tg8"),
        "{listing}"
    );
    let id = runs[0]["id"].as_str().unwrap();
    // One run as a table, llama-bench's shape; `-o json` gives the stored line.
    tokscope(home.path())
        .args(["results", id])
        .assert()
        .success()
        .stdout(
            predicate::str::contains(id)
                .and(predicate::str::contains("| model"))
                .and(predicate::str::contains("| tiny.gguf"))
                .and(predicate::str::contains("tg8"))
                .and(predicate::str::contains("\"rows\"").not()),
        );
    tokscope(home.path())
        .args(["results", id, "-o", "json"])
        .assert()
        .success()
        .stdout(predicate::str::contains(id).and(predicate::str::contains("\"rows\"")));
    tokscope(home.path())
        .args(["results", "-o", "json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("give its ID"));
}

#[test]
fn roofline_columns_are_present_and_finite_on_cpu() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let out = bench(
        home.path(),
        &model,
        &[
            "-t",
            "1",
            "-p",
            "16",
            "-n",
            "8",
            "-pg",
            "8,4",
            "-r",
            "1",
            "--bandwidth-gb-s",
            "10",
            "--price",
            "3",
            "-o",
            "json",
        ],
    );
    let rows = json_rows(&out);
    assert_eq!(rows.len(), 3);
    let finite = |row: &Value, key: &str| {
        let v = row[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {row}"));
        assert!(v.is_finite() && v > 0.0, "{key} = {v}");
        v
    };
    for row in &rows {
        assert_eq!(row["bandwidth_gb_s"].as_f64(), Some(10.0));
        assert_eq!(row["bandwidth_source"], "configured");
        assert_eq!(row["price_per_gpu_hour_usd"].as_f64(), Some(3.0));
        let cost = finite(row, "cost_per_million_tokens_usd");
        let tps = finite(row, "tok_per_s_mean");
        assert!((cost - 3.0 / (tps * 3600.0) * 1e6).abs() < 1e-9 * cost.max(1.0));
    }
    let pp = &rows[0];
    assert_eq!(pp["kind"], "pp");
    finite(pp, "achieved_gflop_per_s");
    assert!(pp["mbu_pct"].is_null() && pp["ceiling_tok_per_s"].is_null());
    for row in &rows[1..] {
        let bytes = finite(row, "bytes_per_token");
        let ceiling = finite(row, "ceiling_tok_per_s");
        assert!((ceiling - 10e9 / bytes).abs() < 1e-6 * ceiling);
        // MBU is the bytes the decode read per second over the bandwidth (docs/metrics.md):
        // the row's decode rate (its generated tokens over the generation phase, not the
        // whole run's t/s, which holds the prompt) × its bytes per token ÷ 10 GB/s.
        let decode = finite(row, "decode_tok_per_s");
        let mbu = finite(row, "mbu_pct");
        let expected = 100.0 * decode * bytes / 10e9;
        assert!(
            (mbu - expected).abs() <= 1e-6 * expected,
            "{}: MBU {mbu}% but decode {decode} tok/s × {bytes} B ÷ 10 GB/s is {expected}%",
            row["test"]
        );
    }
    // The Markdown table shows them too.
    let md = bench(
        home.path(),
        &model,
        &[
            "-t",
            "1",
            "-p",
            "16",
            "-n",
            "8",
            "-r",
            "1",
            "--bandwidth-gb-s",
            "10",
            "-o",
            "md+",
        ],
    );
    assert!(
        md.contains("10.0 GB/s configured") && md.contains('%'),
        "{md}"
    );
}

#[test]
fn plot_writes_the_roofline_and_batch_charts() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let png = home.path().join("charts.png");
    bench(
        home.path(),
        &model,
        &[
            "-p",
            "16",
            "-n",
            "8",
            "-r",
            "1",
            "-t",
            "1",
            "--batch",
            "1,2",
            "--bandwidth-gb-s",
            "10",
            "--plot",
            png.to_str().unwrap(),
        ],
    );
    for name in ["charts-roofline.png", "charts-batch.png"] {
        let bytes = std::fs::read(home.path().join(name)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
    }
    let svg = home.path().join("charts.svg");
    bench(
        home.path(),
        &model,
        &[
            "-p",
            "0",
            "-n",
            "8",
            "-r",
            "1",
            "-t",
            "1",
            "--bandwidth-gb-s",
            "10",
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(home.path().join("charts-roofline.svg")).unwrap();
    assert!(
        text.contains("<svg") && text.contains("ceiling"),
        "an SVG roofline"
    );
    // The subtitle says which model, backend, threads and test the chart shows.
    let model_name = model.file_name().unwrap().to_str().unwrap();
    let subtitle = text
        .lines()
        .find(|l| l.contains(" · ") && l.contains("thread(s)"))
        .unwrap_or_else(|| panic!("no subtitle in the roofline:\n{text}"));
    for part in [model_name, "CPU", "1 thread(s)", "tg8"] {
        assert!(subtitle.contains(part), "{part} missing from {subtitle:?}");
    }
    tokscope(home.path())
        .args(["bench", "-t", "1", "--plot", "chart.jpg", "-m"])
        .arg(&model)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("jpg"));
}

/// `bench` says it measures the memory bandwidth only when it does: a figure read from the
/// shared cache takes no time, and a line announcing seconds of probing would be false.
#[test]
fn the_probe_line_is_printed_only_when_the_probe_runs() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let cache = home.path().join("cache");
    let probe_file = cache.join("bandwidth-probe.json");
    let run = || {
        let out = tokscope(home.path())
            .env("TOKSCOPE_CACHE_DIR", &cache)
            .args(["bench", "-m"])
            .arg(&model)
            .args(["-t", "1", "-p", "0", "-n", "4", "-r", "1", "-o", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    const LINE: &str = "the shared probe";
    let first = run();
    assert!(first.contains(LINE), "a fresh probe is announced: {first}");
    let written = std::fs::read(&probe_file).expect("the probe is cached");
    let second = run();
    // Measured again only when the cached figure came from a busy machine that is quiet now:
    // then the cache changes, and the line is right to be there.
    let probed_again = std::fs::read(&probe_file).unwrap() != written;
    assert_eq!(
        second.contains(LINE),
        probed_again,
        "the line is printed exactly when the probe runs: {second}"
    );
}

/// Issue 60 item 2: a depth sweep's rows carry the KV bytes a step reads at each depth
/// (growing by the cells between the depths: the tiny model reads every cell on every layer),
/// the speed against depth 0 measured beside what the bytes predict, the depth table, and
/// the depth chart. Two repetitions: the second restores the depth's saved cache.
#[test]
fn a_depth_sweep_relates_each_depth_to_depth_0_by_its_bytes() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let args = [
        "-t",
        "1",
        "-p",
        "0",
        "-n",
        "4",
        "-d",
        "0,32,96",
        "-r",
        "2",
        "--bandwidth-gb-s",
        "10",
    ];
    let json = bench(home.path(), &model, &[&args[..], &["-o", "json"]].concat());
    let rows = json_rows(&json);
    assert_eq!(rows.len(), 3, "{json}");
    let f = |row: &Value, key: &str| {
        row[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {row}"))
    };
    // The KV bytes grow linearly with the depth: 64 more cells per step from 32 to 96 read
    // twice the bytes of 32 more from 0 to 32.
    let kv: Vec<f64> = rows.iter().map(|r| f(r, "kv_bytes_per_token")).collect();
    assert!(kv[0] > 0.0, "depth 0 still reads the steps' own cells");
    assert!(
        ((kv[2] - kv[1]) - 2.0 * (kv[1] - kv[0])).abs() < 1e-6 * kv[2],
        "{kv:?}"
    );
    // Depth 0 is 1×; deeper rows: measured t/s ÷ depth 0's, and depth 0's bytes ÷ theirs.
    assert_eq!(f(&rows[0], "speed_vs_d0"), 1.0);
    for row in &rows[1..] {
        let measured = f(row, "speed_vs_d0");
        let expected = f(row, "decode_tok_per_s") / f(&rows[0], "decode_tok_per_s");
        assert!((measured - expected).abs() < 1e-9, "{row}");
        let predicted = f(row, "predicted_speed_vs_d0");
        let bytes = f(&rows[0], "bytes_per_token") / f(row, "bytes_per_token");
        assert!(
            (predicted - bytes).abs() < 1e-12 && predicted < 1.0,
            "{row}"
        );
    }
    let svg = home.path().join("d.svg");
    let md = bench(
        home.path(),
        &model,
        &[&args[..], &["-o", "md", "--plot", svg.to_str().unwrap()]].concat(),
    );
    assert!(md.contains("Decode against depth"), "{md}");
    assert!(
        md.contains("| bytes predict |") && md.contains("tg4 @ d96"),
        "{md}"
    );
    let chart = std::fs::read_to_string(home.path().join("d-depth.svg")).unwrap();
    assert!(chart.contains("what the bytes predict"), "the depth chart");
}
