//! `bench --spec`'s second baseline: plain decoding on llama.cpp's **default** kernels, what a
//! user had before turning speculation on, beside the sweep's own k = 0 on batch-invariant
//! kernels (`llama::invariant`). ggml reads its tiled-matmul switch once per process, so the
//! two kernel sets cannot share one: each measurement is a child `tokscope run` (the same
//! binary, model, prompt, threads and context; `--turns 2 --resend`), the first turn's prefill
//! (the whole prompt, a fresh context) and the second turn's decode (warm, as the sweep's turns
//! are after their warm-up). Both kernel sets are measured this way, one after the other in
//! alternating order each round, so that their prefill is compared like with like.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::Serialize;

use super::plan::{SpecBenchError, SpecPlan};
use crate::llama::error::EngineError;
use crate::metrics::median;

/// One child run's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ChildRun {
    pub prefill_tok_per_s: f64,
    pub decode_tok_per_s: f64,
}

/// The two kernel sets' plain runs over the sweep's rounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct KernelRuns {
    pub default: Vec<ChildRun>,
    pub invariant: Vec<ChildRun>,
}

/// What goes into every row of a sweep on batch-invariant kernels (docs/metrics.md, "bench
/// --spec").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DefaultKernels {
    /// Plain decode tok/s on the default kernels, each round.
    pub decode_tok_per_s: Vec<f64>,
    /// This row's tok/s ÷ the default kernels' plain decode, each round; their median and
    /// range.
    pub speedup_per_round: Vec<f64>,
    pub speedup_median: f64,
    pub speedup_min: f64,
    pub speedup_max: f64,
    /// Prefill tok/s of the whole prompt on each kernel set (medians over the rounds) and
    /// their ratio, invariant ÷ default: what the batch-invariant kernels cost a prompt.
    pub prefill_default_tok_per_s: f64,
    pub prefill_invariant_tok_per_s: f64,
    pub prefill_ratio: f64,
}

impl KernelRuns {
    /// The figures of a row whose tok/s were `row_tok_per_s` (round by round); `None` when
    /// nothing was measured.
    pub(crate) fn for_row(&self, row_tok_per_s: &[f64]) -> Option<DefaultKernels> {
        let decode: Vec<f64> = self.default.iter().map(|r| r.decode_tok_per_s).collect();
        let speedups: Vec<f64> = row_tok_per_s
            .iter()
            .zip(&decode)
            .filter(|(_, d)| **d > 0.0)
            .map(|(t, d)| t / d)
            .collect();
        let prefill = |runs: &[ChildRun]| {
            median(&runs.iter().map(|r| r.prefill_tok_per_s).collect::<Vec<_>>())
        };
        let (pd, pi) = (prefill(&self.default)?, prefill(&self.invariant)?);
        Some(DefaultKernels {
            decode_tok_per_s: decode,
            speedup_median: median(&speedups)?,
            speedup_min: speedups.iter().copied().fold(f64::INFINITY, f64::min),
            speedup_max: speedups.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            speedup_per_round: speedups,
            prefill_default_tok_per_s: pd,
            prefill_invariant_tok_per_s: pi,
            prefill_ratio: if pd > 0.0 { pi / pd } else { f64::NAN },
        })
    }
}

/// The sweep's prompt as a file for the child's `-f` (the user message the sweep answers).
pub(crate) fn prompt_file(plan: &SpecPlan) -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let prompt = plan
        .messages
        .iter()
        .rev()
        .find(|m| m.role == crate::engine::Role::User)
        .map(|m| m.content.clone())
        .unwrap_or_default();
    let mut file = tempfile::NamedTempFile::new()?;
    file.write_all(prompt.as_bytes())?;
    file.flush()?;
    Ok(file)
}

/// One child `tokscope run` of the sweep's prompt, plain decoding on the kernel set named.
pub(crate) fn child_run(
    plan: &SpecPlan,
    prompt: &Path,
    invariant: bool,
) -> Result<ChildRun, SpecBenchError> {
    let lane = format!(
        "plain decoding on the {} kernels (child run)",
        crate::llama::invariant::kernel_set_name(invariant)
    );
    let fail = |why| SpecBenchError::in_lane(lane.clone())(EngineError::Decode(why));
    let exe = std::env::current_exe().map_err(|e| fail(format!("cannot find tokscope: {e}")))?;
    let out = Command::new(exe)
        .arg("run")
        .arg("-m")
        .arg(&plan.model)
        .arg("-f")
        .arg(prompt)
        .args(["-n", &plan.n_gen.to_string(), "--ignore-eos", "--temp", "0"])
        .args(["--repeat-penalty", "1", "--draft-max", "0"])
        .args(["-t", &plan.engine.threads.to_string()])
        .args(["-c", &plan.engine.n_ctx.to_string()])
        .args(["--batch-invariant", if invariant { "on" } else { "off" }])
        .args(["--turns", "2", "--resend", "--json"])
        // This process already tried the file in a child (llama/probe.rs).
        .env(crate::llama::probe::PROBE_ENV, "0")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| fail(format!("cannot start `tokscope run`: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(fail(format!(
            "`tokscope run` failed ({}): {}",
            out.status,
            crate::text::terminal_safe(last.unwrap_or("no message"))
        )));
    }
    parse_child(&out.stdout)
        .ok_or_else(|| fail("`tokscope run --json` printed no two turns".into()))
}

/// Turn 1's prefill and turn 2's decode from `run --json --turns 2` (an array of the turns'
/// reports).
pub(crate) fn parse_child(stdout: &[u8]) -> Option<ChildRun> {
    let turns: Vec<serde_json::Value> = serde_json::from_slice(stdout).ok()?;
    let metric = |turn: &serde_json::Value, name: &str| turn["metrics"][name].as_f64();
    Some(ChildRun {
        prefill_tok_per_s: metric(turns.first()?, "prefill_tok_per_s")?,
        decode_tok_per_s: metric(turns.get(1)?, "decode_tok_per_s")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_of_a_row_against_the_default_kernels() {
        let run = |p, d| ChildRun {
            prefill_tok_per_s: p,
            decode_tok_per_s: d,
        };
        let runs = KernelRuns {
            default: vec![run(400.0, 50.0), run(500.0, 40.0), run(450.0, 50.0)],
            invariant: vec![run(360.0, 49.0), run(380.0, 48.0), run(370.0, 47.0)],
        };
        let row = runs.for_row(&[100.0, 100.0, 75.0]).unwrap();
        assert_eq!(row.speedup_per_round, vec![2.0, 2.5, 1.5]);
        assert_eq!(row.speedup_median, 2.0);
        assert_eq!((row.speedup_min, row.speedup_max), (1.5, 2.5));
        assert_eq!(row.prefill_default_tok_per_s, 450.0);
        assert_eq!(row.prefill_invariant_tok_per_s, 370.0);
        assert!((row.prefill_ratio - 370.0 / 450.0).abs() < 1e-12);
        assert_eq!(KernelRuns::default().for_row(&[1.0]), None);
    }

    #[test]
    fn a_child_run_is_read_from_its_two_turns() {
        let out = b"[{\"metrics\":{\"prefill_tok_per_s\":412.5,\"decode_tok_per_s\":10.0}},\n\
                    {\"metrics\":{\"prefill_tok_per_s\":20.0,\"decode_tok_per_s\":51.25}}]\n";
        assert_eq!(
            parse_child(out),
            Some(ChildRun {
                prefill_tok_per_s: 412.5,
                decode_tok_per_s: 51.25
            })
        );
        assert_eq!(parse_child(b"[{\"metrics\":{}}]\n"), None);
        assert_eq!(parse_child(b"not json"), None);
    }
}
