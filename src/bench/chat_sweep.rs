//! The chat's sweeps (F2) as runs of the results log: one row per batch size, in the shape of
//! bench's batch rows (`kind` "batch", `test` "B4 pp64+tg32", `tok_per_s_mean` the
//! aggregate), or one per depth, in the shape of bench's tg rows at a depth (`kind` "tg",
//! `test` "tg32 @ d2048", `n_depth`), so that `tokscope results` lists it, `results ID` shows
//! it and `bench --vs ID` can compare with it. A sweep stopped with Esc is saved with the
//! points it has, marked.

use serde::Serialize;

use crate::engine::{ModelInfo, SamplingParams};
use crate::llama::measure::TestKind;
use crate::metrics::{BatchPoint, DepthRun};
use crate::stamp::Stamp;

/// What the sweep ran with (the stamp has the engine's settings as well).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChatSweepParams {
    pub model: String,
    pub batch_size: u32,
    pub n_prompt: u32,
    pub n_gen: u32,
    /// Tokens in the cache before the test (a depth sweep; 0 in a batch sweep).
    pub n_depth: u32,
    pub threads: u32,
    pub n_gpu_layers: u32,
    /// Each batch size is one timed run after one warm-up.
    pub repetitions: u32,
}

/// One batch size of the chat's sweep.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChatSweepRow {
    pub run_id: String,
    pub kind: TestKind,
    pub test: String,
    /// "chat F2": where the row was measured.
    pub source: &'static str,
    pub params: ChatSweepParams,
    /// B × generated tokens.
    pub n_tokens: u64,
    /// Aggregate tok/s over all sequences (llama-batched-bench's S_TG), as bench's batch rows.
    pub tok_per_s_mean: f64,
    pub per_sequence_tok_per_s: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    /// The B prompts' prefill together; `None` when it was not timed.
    pub prefill_ms_mean: Option<f64>,
    /// Aggregate ÷ that of B = 1 in the same sweep.
    pub speedup_vs_b1: Option<f64>,
    /// ITL p50 ÷ that of B = 1 in the same sweep.
    pub latency_growth_vs_b1: Option<f64>,
    /// The sweep was stopped with Esc before its last batch size.
    pub stopped: bool,
    pub stamp: Stamp,
}

/// The rows of one sweep: `points` are (point, prefill ms) in the order measured, then
/// `depths`; a point without an aggregate rate (nothing was timed) has no row.
pub(crate) fn rows(
    run_id: &str,
    (points, depths): (&[(BatchPoint, Option<f64>)], &[DepthRun]),
    (n_prompt, n_gen): (u32, u32),
    stopped: bool,
    info: &ModelInfo,
    sampling: &SamplingParams,
) -> Vec<ChatSweepRow> {
    let stamp = Stamp::new(info, sampling);
    let base = points.iter().find(|(p, _)| p.batch == 1).map(|(p, _)| p);
    let ratio =
        |a: Option<f64>, b: Option<f64>| a.zip(b).and_then(|(a, b)| crate::metrics::ratio(a, b));
    let batch_rows = points
        .iter()
        .filter_map(|(p, prefill_ms)| Some((p, prefill_ms, p.aggregate_tok_per_s?)))
        .map(|(p, prefill_ms, aggregate)| ChatSweepRow {
            run_id: run_id.to_string(),
            kind: TestKind::Batch,
            test: format!("B{} pp{n_prompt}+tg{n_gen}", p.batch),
            source: "chat F2",
            params: ChatSweepParams {
                model: info.path.display().to_string(),
                batch_size: p.batch,
                n_prompt,
                n_gen,
                n_depth: 0,
                threads: info.threads,
                n_gpu_layers: info.n_gpu_layers,
                repetitions: 1,
            },
            n_tokens: u64::from(p.batch) * u64::from(n_gen),
            tok_per_s_mean: aggregate,
            per_sequence_tok_per_s: p.per_sequence_tok_per_s,
            itl_p50_ms: p.itl_p50_ms,
            itl_p99_ms: p.itl_p99_ms,
            prefill_ms_mean: *prefill_ms,
            speedup_vs_b1: ratio(
                p.aggregate_tok_per_s,
                base.and_then(|b| b.aggregate_tok_per_s),
            ),
            latency_growth_vs_b1: ratio(p.itl_p50_ms, base.and_then(|b| b.itl_p50_ms)),
            stopped,
            stamp: stamp.clone(),
        });
    let depth_rows = depths.iter().map(|d| ChatSweepRow {
        run_id: run_id.to_string(),
        kind: TestKind::Tg,
        test: crate::llama::measure::TestSpec::Tg { n_gen: d.n_gen }.name(d.depth),
        source: "chat F2",
        params: ChatSweepParams {
            model: info.path.display().to_string(),
            batch_size: 1,
            n_prompt: 0,
            n_gen: d.n_gen,
            n_depth: d.depth,
            threads: info.threads,
            n_gpu_layers: info.n_gpu_layers,
            repetitions: 1,
        },
        n_tokens: u64::from(d.n_gen),
        tok_per_s_mean: d.tok_per_s,
        per_sequence_tok_per_s: Some(d.tok_per_s),
        itl_p50_ms: d.itl_p50_ms,
        itl_p99_ms: d.itl_p99_ms,
        prefill_ms_mean: None,
        speedup_vs_b1: None,
        latency_growth_vs_b1: None,
        stopped,
        stamp: stamp.clone(),
    });
    batch_rows.chain(depth_rows).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::metrics::tests::point;

    #[test]
    fn a_sweep_is_a_run_the_results_log_reads_back_as_batch_rows() {
        let dir = tempfile::tempdir().unwrap();
        let log = super::super::results_path(dir.path());
        let info = ModelInfo {
            file_name: "m.gguf".into(),
            fingerprint: "0123456789abcdef".into(),
            threads: 2,
            ..ModelInfo::default()
        };
        let points = [
            (point(1, 10.0, 100.0), Some(4.0)),
            (point(4, 30.0, 130.0), None),
        ];
        let rows = rows(
            "r1",
            (&points, &[]),
            (64, 32),
            true,
            &info,
            &SamplingParams::default(),
        );
        assert_eq!(rows[1].test, "B4 pp64+tg32");
        assert_eq!(rows[1].n_tokens, 128);
        assert_eq!(rows[1].speedup_vs_b1, Some(3.0));
        assert_eq!(rows[1].latency_growth_vs_b1, Some(1.3));
        let warning = super::super::append_run(&log, "r1", 5, "tokscope chat (F2)", &rows).unwrap();
        assert_eq!(warning, None);
        let (runs, bad) = super::super::log::read_runs(&log).unwrap();
        assert_eq!(bad, 0);
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(run.id, "r1");
        assert_eq!(run.rows.len(), 2);
        assert_eq!(run.rows[0].kind, "batch");
        assert_eq!(run.rows[1].tok_per_s_mean, 30.0);
        assert_eq!(run.rows[1].params["batch_size"], 4);
        assert_eq!(run.rows[0].stamp.model_fingerprint, "0123456789abcdef");
        assert_eq!(run.rows[0].stamp.threads, Some(2));
        assert_eq!(run.raw["rows"][0]["stopped"], true);
        assert_eq!(run.raw["rows"][0]["source"], "chat F2");
    }

    #[test]
    fn a_depth_sweep_is_a_run_of_tg_rows_at_their_depths() {
        let dir = tempfile::tempdir().unwrap();
        let log = super::super::results_path(dir.path());
        let info = ModelInfo {
            fingerprint: "0123456789abcdef".into(),
            ..ModelInfo::default()
        };
        let run = |depth, tok_per_s| DepthRun {
            depth,
            n_gen: 32,
            tok_per_s,
            itl_p50_ms: Some(1e3 / tok_per_s),
            itl_p99_ms: None,
            fill_ms: 1.0,
        };
        let depths = [run(0, 40.0), run(2048, 30.0)];
        let rows = rows(
            "r2",
            (&[], &depths),
            (64, 32),
            false,
            &info,
            &SamplingParams::default(),
        );
        assert_eq!(rows.len(), 2);
        // Named as bench names them: no "@ d0" at depth 0.
        assert_eq!(
            (rows[0].test.as_str(), rows[1].test.as_str()),
            ("tg32", "tg32 @ d2048")
        );
        super::super::append_run(&log, "r2", 5, "tokscope chat (F2 depth sweep)", &rows).unwrap();
        let (runs, _) = super::super::log::read_runs(&log).unwrap();
        let read = &runs[0].rows[1];
        assert_eq!(read.kind, "tg");
        assert_eq!(read.tok_per_s_mean, 30.0);
        assert_eq!(read.params["n_depth"], 2048);
        assert_eq!(read.params["n_gen"], 32);
    }
}
