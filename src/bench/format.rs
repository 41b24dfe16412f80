//! The output formats of `bench`: a Markdown table like llama-bench's (plus a batching table),
//! CSV, a JSON array and JSON lines. The machine formats carry every field of every row,
//! reproducibility stamp and synthetic flag included.

use std::collections::BTreeSet;

use serde_json::Value;

use super::plan::OutputFormat;
use super::report::Row;
use crate::fmt::times;
use crate::llama::measure::TestKind;
use crate::report::{cell, csv_lines, Align};

/// The rows in `format`, ready for stdout.
pub(crate) fn render(rows: &[Row], format: OutputFormat) -> Result<String, serde_json::Error> {
    Ok(match format {
        OutputFormat::Markdown => markdown(rows, false),
        OutputFormat::MarkdownWide => markdown(rows, true),
        OutputFormat::Csv => csv(rows)?,
        OutputFormat::Json => crate::report::json(rows)?,
        OutputFormat::JsonLines => crate::report::json_lines(rows)?,
    })
}

fn params_count(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2} B", n as f64 / 1e9)
    } else {
        format!("{:.2} M", n as f64 / 1e6)
    }
}

/// The short form of a bandwidth source label (the full one is in the notes).
fn bandwidth(row: &Row) -> String {
    match (row.bandwidth_gb_s, &row.bandwidth_source) {
        (Some(gb), Some(source)) => {
            let kind = source.split(',').next().unwrap_or(source);
            format!("{gb:.1} GB/s {kind}")
        }
        _ => "—".into(),
    }
}

/// `mean ± sd`, or, with one repetition, `mean ± — (n=1)`: one run has no spread, and a
/// "± 0.00" would claim a precision nobody measured.
fn mean_spread(r: &Row) -> String {
    let sd = (r.samples_tok_per_s.len() >= 2).then_some(r.tok_per_s_sd);
    crate::fmt::mean_sd(r.tok_per_s_mean, sd)
}

/// An MBU (already in percent) as a cell; `—` when undefined.
pub(crate) fn mbu_cell(v: Option<f64>) -> String {
    v.map_or_else(
        || "—".into(),
        |v| crate::metrics::roofline::mbu_pct_cell(v, 1),
    )
}

fn dollars(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("${v:.3}"))
}

fn itl(row: &Row) -> String {
    match (row.itl_p50_ms, row.itl_p90_ms, row.itl_p99_ms) {
        (Some(a), Some(b), Some(c)) => format!("{a:.2}/{b:.2}/{c:.2}"),
        _ => "—".into(),
    }
}

/// A table column: its header, alignment and cell.
pub(crate) type Column<R = Row> = (&'static str, Align, fn(&R) -> String);

const MAIN_COLUMNS: &[Column] = &[
    ("model", Align::Left, |r| r.stamp.model_file.clone()),
    ("size", Align::Right, |r| {
        crate::fmt::bytes(r.stamp.model_size_bytes)
    }),
    ("params", Align::Right, |r| params_count(r.stamp.n_params)),
    ("backend", Align::Left, |r| {
        if r.params.placement.is_empty() {
            r.stamp.backend.clone()
        } else {
            format!("{} ({})", r.stamp.backend, r.params.placement)
        }
    }),
    ("ngl", Align::Right, |r| r.stamp.n_gpu_layers.to_string()),
    ("threads", Align::Right, |r| r.params.threads.to_string()),
    ("n_batch", Align::Right, |r| r.params.n_batch.to_string()),
    ("n_ubatch", Align::Right, |r| r.params.n_ubatch.to_string()),
    ("type_k", Align::Left, |r| r.params.type_k.to_string()),
    ("type_v", Align::Left, |r| r.params.type_v.to_string()),
    ("fa", Align::Left, |r| r.params.flash_attn.to_string()),
    ("test", Align::Right, |r| r.test.clone()),
    ("t/s", Align::Right, mean_spread),
    ("TTFT p50 ms", Align::Right, |r| {
        crate::fmt::opt(r.ttft_p50_ms, 2)
    }),
    ("ITL p50/p90/p99 ms", Align::Right, itl),
    ("host µs/tok", Align::Right, |r| {
        crate::fmt::opt(r.host_us_per_token, 1)
    }),
    ("bytes/token", Align::Right, |r| {
        crate::fmt::bytes_opt(r.bytes_per_token)
    }),
    ("bandwidth", Align::Left, bandwidth),
    ("ceiling t/s", Align::Right, |r| {
        crate::fmt::opt(r.ceiling_tok_per_s, 1)
    }),
    ("MBU", Align::Right, |r| mbu_cell(r.mbu_pct)),
    ("GFLOP/s", Align::Right, |r| {
        crate::fmt::opt(r.achieved_gflop_per_s, 1)
    }),
    ("$/1M tok", Align::Right, |r| {
        dollars(r.cost_per_million_tokens_usd)
    }),
    ("J/out tok", Align::Right, |r| {
        crate::fmt::opt(r.gpu.gpu_joules_per_output_token, 3)
    }),
];

const BATCH_COLUMNS: &[Column] = &[
    ("model", Align::Left, |r| r.stamp.model_file.clone()),
    ("threads", Align::Right, |r| r.params.threads.to_string()),
    ("ngl", Align::Right, |r| r.stamp.n_gpu_layers.to_string()),
    ("type_k", Align::Left, |r| r.params.type_k.to_string()),
    ("fa", Align::Left, |r| r.params.flash_attn.to_string()),
    ("test", Align::Right, |r| r.test.clone()),
    ("B", Align::Right, |r| r.params.batch_size.to_string()),
    ("t/s aggregate", Align::Right, mean_spread),
    ("t/s per seq", Align::Right, |r| {
        crate::fmt::opt(r.per_sequence_tok_per_s, 2)
    }),
    ("ITL p50 ms", Align::Right, |r| {
        crate::fmt::opt(r.itl_p50_ms, 2)
    }),
    ("ITL p99 ms", Align::Right, |r| {
        crate::fmt::opt(r.itl_p99_ms, 2)
    }),
    ("prefill ms", Align::Right, |r| {
        crate::fmt::opt(r.prefill_ms_mean, 1)
    }),
    ("speed-up", Align::Right, |r| times(r.speedup_vs_b1)),
    ("ITL growth", Align::Right, |r| {
        times(r.latency_growth_vs_b1)
    }),
    ("MBU", Align::Right, |r| mbu_cell(r.mbu_pct)),
    ("$/1M tok", Align::Right, |r| {
        dollars(r.cost_per_million_tokens_usd)
    }),
];

/// The depth sweep's table (`-d` with two depths or more): per depth, the decode speed, the
/// bytes a step reads there (weights + the KV cache as the attention kernel reads it), the
/// ceiling and MBU, and the slowdown against depth 0, measured beside what the bytes predict.
const DEPTH_COLUMNS: &[Column] = &[
    ("model", Align::Left, |r| r.stamp.model_file.clone()),
    ("threads", Align::Right, |r| r.params.threads.to_string()),
    ("type_k", Align::Left, |r| r.params.type_k.to_string()),
    ("test", Align::Right, |r| r.test.clone()),
    ("depth", Align::Right, |r| r.params.n_depth.to_string()),
    ("decode t/s", Align::Right, |r| {
        crate::fmt::opt(r.decode_tok_per_s, 2)
    }),
    ("KV/token", Align::Right, |r| {
        crate::fmt::bytes_opt(r.kv_bytes_per_token)
    }),
    ("bytes/token", Align::Right, |r| {
        crate::fmt::bytes_opt(r.bytes_per_token)
    }),
    ("ceiling t/s", Align::Right, |r| {
        crate::fmt::opt(r.ceiling_tok_per_s, 1)
    }),
    ("MBU", Align::Right, |r| mbu_cell(r.mbu_pct)),
    ("t/s vs d0", Align::Right, |r| times(r.speed_vs_d0)),
    ("bytes predict", Align::Right, |r| {
        times(r.predicted_speed_vs_d0)
    }),
];

/// The rows under `table`'s columns, only those named in `keep` (all when `None`).
pub(crate) fn rows_table<'r, R: 'r>(
    table: &[Column<R>],
    rows: impl IntoIterator<Item = &'r R>,
    keep: Option<&[&str]>,
) -> String {
    let headers: Vec<(&str, Align)> = table.iter().map(|&(h, a, _)| (h, a)).collect();
    let cells = (rows.into_iter()).map(|r| table.iter().map(|c| (c.2)(r)).collect());
    let (h, c) = columns(&headers, cells.collect(), keep);
    crate::report::table(&h, &c)
}

/// The columns of the default table: llama-bench's (model, size, params, backend, threads,
/// test, t/s) and the GPU layers, which fit about 120 columns; `-o md+` shows them all.
const MAIN_NARROW: &[&str] = &[
    "model", "size", "params", "backend", "ngl", "threads", "test", "t/s",
];
const BATCH_NARROW: &[&str] = &[
    "model",
    "threads",
    "test",
    "B",
    "t/s aggregate",
    "t/s per seq",
    "ITL p50 ms",
    "speed-up",
    "ITL growth",
];

/// `headers` and `cells` with only the columns named in `keep` (all when `keep` is `None`).
pub(crate) fn columns(
    headers: &[(&'static str, Align)],
    cells: Vec<Vec<String>>,
    keep: Option<&[&str]>,
) -> (Vec<(&'static str, Align)>, Vec<Vec<String>>) {
    let Some(keep) = keep else {
        return (headers.to_vec(), cells);
    };
    let kept: Vec<usize> = (0..headers.len())
        .filter(|&i| keep.contains(&headers[i].0))
        .collect();
    (
        kept.iter().map(|&i| headers[i]).collect(),
        cells
            .into_iter()
            .map(|row| kept.iter().filter_map(|&i| row.get(i).cloned()).collect())
            .collect(),
    )
}

/// The tables, then notes: how t/s is counted, every bandwidth source, synthetic warnings.
/// `wide`: every column; else llama-bench's, within about 120 columns.
pub(crate) fn markdown(rows: &[Row], wide: bool) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let (batch, main): (Vec<&Row>, Vec<&Row>) =
        rows.iter().partition(|r| r.kind == TestKind::Batch);
    let mut out = String::new();
    if !main.is_empty() {
        out.push_str(&rows_table(
            MAIN_COLUMNS,
            main,
            (!wide).then_some(MAIN_NARROW),
        ));
    }
    if !batch.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&rows_table(
            BATCH_COLUMNS,
            batch,
            (!wide).then_some(BATCH_NARROW),
        ));
    }
    let sweeps = super::report::depth_sweeps(rows);
    if !sweeps.is_empty() {
        out.push_str("\nDecode against depth (bytes/token = weights + the KV cache the attention kernel reads at that depth; \"bytes predict\" = depth 0's bytes ÷ these, the speed at depth 0's MBU):\n");
        let swept = sweeps.iter().flatten().map(|(i, _)| &rows[*i]);
        out.push_str(&rows_table(DEPTH_COLUMNS, swept, None));
    }
    if !wide {
        out.push_str(
            "\n-o md+ adds TTFT, ITL, host µs/tok, bytes/token, bandwidth, ceiling t/s, MBU, GFLOP/s, $/1M tok and J/tok (every figure is in -o json and csv).",
        );
    }
    out.push_str(&notes(rows));
    for r in rows {
        if let Some(p) = &r.profile {
            out.push_str(&format!("\n\nWhere a {} step's time goes:\n", r.test));
            out.push_str(&super::profile::human(p, r.profile_level));
        }
    }
    out
}

fn notes(rows: &[Row]) -> String {
    let mut out = String::new();
    let reps = rows.first().map_or(0, |r| r.params.repetitions);
    if reps < 2 {
        out.push_str(
            "\nn=1: one repetition has no spread, so no difference between these rows can be vouched for; rerun with -r 3 or more.",
        );
    }
    out.push_str(&format!(
        "\nt/s: mean ± sd over {reps} repetitions (pg: prompt + generated tokens over the whole run; batch: B × generated tokens over the generation steps). MBU and ceiling describe decoding, at the mean KV depth of the generated tokens.\n"
    ));
    let sources: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.bandwidth_source.as_deref())
        .collect();
    for s in sources {
        out.push_str(&format!("bandwidth: {s}\n"));
    }
    if rows.iter().all(|r| r.bandwidth_source.is_none()) {
        out.push_str("bandwidth: unknown (give --bandwidth-gb-s for the roofline columns)\n");
    }
    // GPU telemetry: where J/tok comes from, or why it is empty ("no NVIDIA driver ...").
    if let Some(t) = rows
        .iter()
        .map(|r| r.gpu.gpu_telemetry.as_str())
        .find(|t| !t.is_empty())
    {
        if t == "NVML" {
            let devices: BTreeSet<&str> = rows.iter().map(|r| r.gpu.gpu_devices.as_str()).collect();
            let devices: Vec<&str> = devices.into_iter().collect();
            out.push_str(&format!(
                "J/out tok: NVML's energy counter on the GPUs used (PCI {}) over the timed \
                 windows ÷ output tokens{}\n",
                devices.join(", "),
                rows.iter()
                    .find_map(|r| r.gpu.gpu_idle_power_w)
                    .map(|w| format!("; idle {w:.0} W before loading"))
                    .unwrap_or_default()
            ));
        } else if crate::llama::gpu::CUDA_BUILD {
            // A CPU build has no GPU to read: nothing to say there.
            out.push_str(&format!("GPU telemetry: {t}\n"));
        }
    }
    if rows.iter().any(|r| r.mbu_pct.is_some_and(|m| m > 100.0)) {
        out.push_str(&format!(
            "MBU ↑: {} (give --bandwidth-gb-s, or rerun the probe on an idle machine)\n",
            crate::metrics::roofline::ABOVE_CEILING
        ));
    }
    let warnings: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.warning.as_deref())
        .flat_map(|w| w.split("; "))
        .collect();
    for w in warnings {
        out.push_str(&format!("!! {w}\n"));
    }
    out
}

/// Row-level CSV columns, in order (`params.*` and `stamp.*` columns follow).
const ROW_COLUMNS: &[&str] = &[
    "run_id",
    "kind",
    "test",
    "n_tokens",
    "tok_per_s_mean",
    "tok_per_s_sd",
    "samples_tok_per_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "ttft_samples",
    "itl_samples",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "prefill_ms_mean",
    "decode_tok_per_s",
    "host_us_per_token",
    "per_sequence_tok_per_s",
    "speedup_vs_b1",
    "latency_growth_vs_b1",
    "kv_depth_mean",
    "bytes_per_token",
    "kv_bytes_per_token",
    "speed_vs_d0",
    "predicted_speed_vs_d0",
    "bandwidth_gb_s",
    "bandwidth_source",
    "ceiling_tok_per_s",
    "mbu_pct",
    "achieved_gflop_per_s",
    "price_per_gpu_hour_usd",
    "cost_per_million_tokens_usd",
    "gpu_telemetry",
    "gpu_devices",
    "gpu_joules_per_output_token",
    "gpu_joules_per_total_token",
    "gpu_tokens_per_kwh",
    "gpu_energy_cost_per_million_tokens",
    "gpu_idle_power_w",
    "gpu_joules_per_output_token_above_idle",
    "gpu_energy_resolution_pct",
    "gpu_power_w",
    "gpu_power_max_w",
    "gpu_vram_used_bytes",
    "gpu_vram_process_bytes",
    "gpu_vram_process_source",
    "gpu_sm_clock_mhz",
    "gpu_sm_clock_min_mhz",
    "gpu_mem_clock_mhz",
    "gpu_temperature_c",
    "gpu_utilization_pct",
    "synthetic",
    "warning",
];

/// `params` columns in their natural order.
const PARAM_COLUMNS: &[&str] = &[
    "model",
    "n_gpu_layers",
    "threads",
    "n_batch",
    "n_ubatch",
    "type_k",
    "type_v",
    "flash_attn",
    "n_prompt",
    "n_gen",
    "n_depth",
    "batch_size",
    "repetitions",
    "warmup",
    "n_ctx",
    "placement",
];

/// (column, value) pairs of a row: the row's own fields, `params.*`, then every stamp field
/// (`stamp.*`, the stamp's own nested values as compact JSON).
fn csv_fields(row: &Row, profiled: bool) -> Result<Vec<(String, String)>, serde_json::Error> {
    let value = serde_json::to_value(row)?;
    let mut fields: Vec<(String, String)> = ROW_COLUMNS
        .iter()
        .map(|k| (k.to_string(), cell(value.get(k))))
        .collect();
    // `--profile`: a column group of each part's mean ms (empty in rows not profiled), in
    // every row of the file, so its column count stays fixed.
    if profiled {
        fields.extend(crate::metrics::profile::Part::ALL.iter().map(|part| {
            let ms = row.profile.as_ref().and_then(|p| {
                p.mean
                    .parts
                    .iter()
                    .find(|x| x.part == part.label())
                    .map(|x| x.ms)
            });
            (
                format!("profile.{}_ms", part.label()),
                ms.map_or_else(String::new, |v| v.to_string()),
            )
        }));
    }
    let params = value.get("params");
    fields.extend(
        PARAM_COLUMNS
            .iter()
            .map(|k| (format!("params.{k}"), cell(params.and_then(|p| p.get(k))))),
    );
    if let Some(Value::Object(stamp)) = value.get("stamp") {
        fields.extend(
            stamp
                .iter()
                .map(|(k, v)| (format!("stamp.{k}"), cell(Some(v)))),
        );
    }
    Ok(fields)
}

pub(crate) fn csv(rows: &[Row]) -> Result<String, serde_json::Error> {
    Ok(csv_lines(
        &rows
            .iter()
            .map(|r| csv_fields(r, rows.iter().any(|r| r.profile.is_some())))
            .collect::<Result<Vec<_>, _>>()?,
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::report::BenchParams;
    use super::*;
    use crate::engine::{ModelInfo, SamplingParams};
    use crate::llama::settings::{FlashAttn, KvType};
    use crate::stamp::Stamp;

    pub(crate) fn sample_row(kind: TestKind, test: &str, batch_size: u32) -> Row {
        let info = ModelInfo {
            path: "/m/tiny, \"quoted\".gguf".into(),
            file_name: "tiny, \"quoted\".gguf".into(),
            file_size_bytes: 2_000_000,
            fingerprint: "0123456789abcdef".into(),
            name: "tiny".into(),
            architecture: "llama".into(),
            n_params: 500_000,
            n_layer: 2,
            n_embd: 128,
            n_head: 4,
            n_head_kv: 2,
            n_vocab: 300,
            n_ctx_train: 2048,
            quantization: "F32".into(),
            weights_bytes: 2_000_000,
            n_ctx: 256,
            n_batch: 256,
            threads: 1,
            backend: "CPU".into(),
            devices: vec!["CPU (CPU: x)".into()],
            n_gpu_layers: 0,
            kernels: "default".into(),
            weights_repacked: false,
            fa_kv_kernel: None,
            template: String::new(),
            template_note: None,
            synthetic: true,
            llama_cpp: "llama-cpp-sys-2 0.1.160".into(),
            load_ms: 1.0,
            load_stages: Default::default(),
            weight_bytes: None,
            kv_shape: None,
            kv_cache_bytes: None,
        };
        Row {
            run_id: "20250101-000000-abcd".into(),
            kind,
            test: test.into(),
            params: BenchParams {
                model: "/m/tiny.gguf".into(),
                n_gpu_layers: -1,
                threads: 1,
                n_batch: 2048,
                n_ubatch: 512,
                type_k: KvType::F16,
                type_v: KvType::Q8_0,
                flash_attn: FlashAttn::Auto,
                n_prompt: 16,
                n_gen: 8,
                n_depth: 0,
                batch_size,
                repetitions: 2,
                warmup: true,
                n_ctx: 24,
                placement: String::new(),
            },
            n_tokens: 8,
            samples_tok_per_s: vec![100.0, 110.0],
            tok_per_s_mean: 105.0,
            tok_per_s_sd: 7.07,
            ttft_p50_ms: Some(1.5),
            ttft_p90_ms: Some(1.6),
            ttft_p99_ms: Some(1.7),
            ttft_samples: Some(100),
            itl_samples: Some(500),
            itl_mean_ms: Some(9.0),
            itl_p50_ms: Some(9.5),
            itl_p90_ms: Some(10.0),
            itl_p99_ms: Some(11.0),
            prefill_ms_mean: None,
            decode_tok_per_s: Some(105.0),
            host_us_per_token: Some(3.5),
            per_sequence_tok_per_s: None,
            speedup_vs_b1: None,
            latency_growth_vs_b1: None,
            kv_depth_mean: 3.5,
            bytes_per_token: Some(1.9e6),
            kv_bytes_per_token: Some(0.0),
            speed_vs_d0: None,
            predicted_speed_vs_d0: None,
            bandwidth_gb_s: Some(10.0),
            bandwidth_source: Some("configured".into()),
            ceiling_tok_per_s: Some(5263.2),
            mbu_pct: Some(2.0),
            achieved_gflop_per_s: None,
            price_per_gpu_hour_usd: 2.0,
            cost_per_million_tokens_usd: Some(5.29),
            gpu: super::super::gpu::GpuColumns::default(),
            synthetic: true,
            warning: Some(ModelInfo::SYNTHETIC_LABEL.to_string()),
            profile: None,
            profile_level: Default::default(),
            stamp: Stamp::new(&info, &SamplingParams::default()),
        }
    }

    fn rows() -> Vec<Row> {
        vec![
            sample_row(TestKind::Pp, "pp16", 1),
            sample_row(TestKind::Tg, "tg8", 1),
            sample_row(TestKind::Batch, "B2 pp16+tg8", 2),
        ]
    }

    /// A minimal CSV reader (quoted fields, doubled quotes), enough to check our writer.
    fn parse_csv_line(line: &str) -> Vec<String> {
        let mut fields = vec![String::new()];
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    fields.last_mut().unwrap().push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(String::new()),
                (c, _) => fields.last_mut().unwrap().push(c),
            }
        }
        fields
    }

    #[test]
    fn markdown_has_a_header_and_one_line_per_row() {
        let md = markdown(&rows(), true);
        let lines: Vec<&str> = md.lines().collect();
        assert!(
            lines[0].starts_with("| model") && lines[0].contains("t/s") && lines[0].contains("MBU")
        );
        assert!(lines[1].starts_with("| ---") || lines[1].starts_with("| -"));
        let main: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("| pp16 |") || l.contains(" tg8 |"))
            .collect();
        assert_eq!(main.len(), 2, "{md}");
        assert!(
            md.contains("t/s aggregate") && md.contains("B2 pp16+tg8"),
            "{md}"
        );
        assert!(md.contains("105.00 ± 7.07"), "{md}");
        assert!(md.contains("10.0 GB/s configured"), "{md}");
        assert!(md.contains(ModelInfo::SYNTHETIC_LABEL), "{md}");
        // Every table line has the same number of cells as its header.
        for block in md.split("\n\n") {
            let table: Vec<&str> = block.lines().filter(|l| l.starts_with('|')).collect();
            if let Some(h) = table.first() {
                let n = h.matches(" | ").count();
                assert!(
                    table.iter().all(|l| l.matches(" | ").count() == n),
                    "{block}"
                );
            }
        }
    }

    /// The default table has llama-bench's shape within 120 columns (it was 298 wide);
    /// `-o md+` keeps every column.
    #[test]
    fn the_default_table_fits_120_columns_and_md_plus_has_every_column() {
        let narrow = markdown(&rows(), false);
        for line in narrow.lines().filter(|l| l.starts_with('|')) {
            assert!(
                line.chars().count() <= 120,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        let header = narrow.lines().next().unwrap();
        for col in [
            "model", "size", "params", "backend", "threads", "test", "t/s",
        ] {
            assert!(header.contains(&format!(" {col} ")), "{header}");
        }
        assert!(!header.contains("MBU"), "{header}");
        assert!(narrow.contains("-o md+ adds"), "{narrow}");
        let wide = markdown(&rows(), true);
        let wide_header = wide.lines().next().unwrap();
        assert!(wide_header.contains("MBU") && wide_header.contains("ceiling t/s"));
        assert!(wide_header.chars().count() > 120);
    }

    #[test]
    fn csv_round_trips_with_a_fixed_column_count() {
        let text = csv(&rows()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        let header = parse_csv_line(lines[0]);
        for line in &lines[1..] {
            assert_eq!(parse_csv_line(line).len(), header.len(), "{line}");
        }
        let first = parse_csv_line(lines[1]);
        let col = |name: &str| header.iter().position(|h| h == name).unwrap();
        assert_eq!(first[col("stamp.model_file")], "tiny, \"quoted\".gguf");
        assert_eq!(first[col("synthetic")], "true");
        assert_eq!(first[col("params.type_v")], "q8_0");
        assert_eq!(first[col("samples_tok_per_s")], "100.0;110.0");
        assert_eq!(first[col("achieved_gflop_per_s")], "");
    }

    #[test]
    fn csv_columns_cover_every_row_field() {
        let value = serde_json::to_value(sample_row(TestKind::Tg, "tg8", 1)).unwrap();
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.retain(|k| *k != "params" && *k != "stamp");
        let mut listed = ROW_COLUMNS.to_vec();
        keys.sort_unstable();
        listed.sort_unstable();
        assert_eq!(keys, listed);
        let params: Vec<&str> = value["params"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(params.len(), PARAM_COLUMNS.len());
    }

    #[test]
    fn json_and_jsonl_parse_back_with_stamp_and_flag() {
        let json = render(&rows(), OutputFormat::Json).unwrap();
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 3);
        let jsonl = render(&rows(), OutputFormat::JsonLines).unwrap();
        for line in jsonl.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["synthetic"], true);
            assert_eq!(v["stamp"]["model_fingerprint"], "0123456789abcdef");
            assert_eq!(v["warning"], ModelInfo::SYNTHETIC_LABEL);
        }
    }
}
