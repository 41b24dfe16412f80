//! `--profile [parts|ops]` and `--profile-rate N` (docs/metrics.md, "Step profile"): the
//! flags, and the stderr table of where a decode step's time goes.

use clap::Args;

use crate::config::Settings;
use crate::metrics::profile::{Part, ProfileLevel, StepBreakdown, TurnProfile};
use crate::report::{table, Align};

/// The default: one decode step in 16 is profiled.
pub(crate) const DEFAULT_RATE: u32 = 16;

#[derive(Debug, Args, Default, Clone)]
pub struct ProfileArgs {
    /// Time sampled decode steps node by node and show where a step's time goes: `parts`
    /// (attention, FFN, output head, host; per layer) or `ops` (per operation type). The
    /// profiled steps are timed apart from the others (docs/metrics.md, "Step profile").
    #[arg(long, value_name = "LEVEL", num_args = 0..=1, default_missing_value = "parts")]
    pub profile: Option<ProfileLevel>,
    /// With --profile: profile one decode step in N (1: every step; 0: none).
    #[arg(
        long,
        value_name = "N",
        requires = "profile",
        allow_hyphen_values = true
    )]
    pub profile_rate: Option<u32>,
}

impl ProfileArgs {
    /// A server's steps cannot be profiled from here: --profile with --url is a usage error.
    pub(crate) fn refuse_remote(&self) -> Result<(), crate::commands::Failure> {
        match self.profile {
            Some(_) => Err(crate::commands::Failure::new(
                crate::commands::USAGE,
                "--profile times llama.cpp's graph in this process; a server's decode steps \
                 cannot be profiled from outside (leave out --url, or --profile)",
            )),
            None => Ok(()),
        }
    }

    pub(crate) fn apply(&self, s: &mut Settings) {
        s.engine.profile_rate = match self.profile {
            Some(_) => self.profile_rate.unwrap_or(DEFAULT_RATE),
            None => 0,
        };
    }
}

fn ms(v: f64) -> String {
    crate::fmt::sig(v, 3)
}

fn opt(v: Option<f64>, digits: u32) -> String {
    v.map_or_else(|| "—".to_string(), |v| crate::fmt::sig(v, digits))
}

/// The parts table of one breakdown.
fn parts_table(b: &StepBreakdown) -> String {
    let rows: Vec<Vec<String>> = b
        .parts
        .iter()
        .map(|p| {
            vec![
                p.part.to_string(),
                ms(p.ms),
                crate::metrics::fmt_pct(Some(p.share), 1),
                if p.weight_bytes + p.kv_bytes > 0 {
                    crate::fmt::bytes(p.weight_bytes + p.kv_bytes)
                } else {
                    "—".to_string()
                },
                opt(p.gb_per_s, 3),
                p.mbu_pct.map_or_else(|| "—".into(), |m| format!("{m:.0}%")),
                opt(p.gflop_per_s, 3),
            ]
        })
        .collect();
    table(
        &[
            ("part", Align::Left),
            ("ms", Align::Right),
            ("share", Align::Right),
            ("reads", Align::Right),
            ("GB/s", Align::Right),
            ("MBU", Align::Right),
            ("GFLOP/s", Align::Right),
        ],
        &rows,
    )
}

/// The operations table of one breakdown.
fn ops_table(b: &StepBreakdown) -> String {
    let mut rows: Vec<Vec<String>> = b
        .ops
        .iter()
        .map(|o| {
            vec![
                o.op.to_string(),
                o.nodes.to_string(),
                ms(o.ms),
                crate::metrics::fmt_pct(Some(o.share), 1),
            ]
        })
        .collect();
    // The step's time outside the graph's nodes, so that the rows add up to its wall time.
    let outside = [
        Part::Host,
        Part::GraphInputs,
        Part::Sync,
        Part::Output,
        Part::Profiling,
    ];
    for p in b
        .parts
        .iter()
        .filter(|p| outside.iter().any(|o| o.label() == p.part))
    {
        rows.push(vec![
            format!("({})", p.part),
            "—".into(),
            ms(p.ms),
            crate::metrics::fmt_pct(Some(p.share), 1),
        ]);
    }
    table(
        &[
            ("op", Align::Left),
            ("nodes", Align::Right),
            ("ms", Align::Right),
            ("share", Align::Right),
        ],
        &rows,
    )
}

/// The layer strip: each layer's time, and the slowest against the median.
fn layers_line(b: &StepBreakdown) -> Option<String> {
    let median = crate::metrics::median(&b.layers_ms)?;
    let (slowest, most) = b
        .layers_ms
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    Some(format!(
        "layers   {} ms each (median {}; slowest layer {slowest}: {}, {:.2}× the median)\n",
        b.layers_ms
            .iter()
            .map(|v| ms(*v))
            .collect::<Vec<_>>()
            .join(" "),
        ms(median),
        ms(*most),
        most / median.max(f64::MIN_POSITIVE),
    ))
}

/// The stderr block of a turn's profile.
pub(crate) fn human(p: &TurnProfile, level: ProfileLevel) -> String {
    let b = &p.mean;
    let mut out = format!(
        "profile  1 decode step in {} · {} sampled · mean per step, {} row{} at depth {}\n",
        p.rate,
        b.steps,
        b.rows,
        if b.rows == 1 { "" } else { "s" },
        b.depth,
    );
    if !b.by_name {
        out.push_str(
            "         this graph's weight names are not llama.cpp's usual ones: by operation only\n",
        );
    }
    if level == ProfileLevel::Parts && b.by_name {
        out.push_str(&parts_table(b));
        if let Some(line) = layers_line(b) {
            out.push_str(&line);
        }
    } else {
        out.push_str(&ops_table(b));
    }
    out.push_str(&format!(
        "         parts add up to {} of {} ms wall",
        ms(b.sum_ms),
        ms(b.wall_ms)
    ));
    if let (Some(on), Some(off), Some(cost)) =
        (p.profiled_call_ms, p.unprofiled_call_ms, p.sampled_cost())
    {
        out.push_str(&format!(
            " · a profiled decode call {} ms, an unprofiled one {} ms ({:+.1}%)",
            ms(on),
            ms(off),
            cost * 100.0
        ));
    }
    out.push('\n');
    if let (Some(without), Some(all)) = (p.decode_tok_per_s_unsampled, p.decode_tok_per_s_all) {
        out.push_str(&format!(
            "         decode {} tok/s without the profiled steps ({} with them)\n",
            crate::fmt::sig(without, 3),
            crate::fmt::sig(all, 3)
        ));
    }
    out
}

/// `--trace FILE.json` and `--force` (docs/metrics.md, "Trace").
#[derive(Debug, Args, Default, Clone)]
pub struct TraceArgs {
    /// Write the answer as Chrome Trace Event JSON to FILE (opens in ui.perfetto.dev and
    /// chrome://tracing): the engine thread's spans (template and tokenize, each prefill
    /// micro-batch, each decode call and the host gap before it), one event per token, and
    /// with --profile the profiled steps' nodes. With --turns, one process per turn.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<std::path::PathBuf>,
    /// With --trace: replace the file if it exists.
    #[arg(long, requires = "trace")]
    pub force: bool,
}

impl TraceArgs {
    /// Checked before the model loads: the folder exists, and the file does not (unless
    /// --force) or is a regular file.
    pub(crate) fn check(&self) -> Result<(), crate::commands::Failure> {
        let Some(path) = &self.trace else {
            return Ok(());
        };
        let fail = |why: String| {
            crate::commands::Failure::new(
                crate::commands::USAGE,
                format!("cannot write the trace to {}: {why}", path.display()),
            )
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(fail(format!(
                "the folder {} does not exist (create it first, or choose another path)",
                dir.display()
            )));
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_file() => Err(fail(
                "it is not a regular file (a directory, link or device): choose another path"
                    .into(),
            )),
            Ok(_) if !self.force => Err(fail(
                "the file exists; --force replaces it, or choose another path".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Writes the trace of `events` (every turn's), atomically.
    pub(crate) fn write(
        &self,
        events: Vec<serde_json::Value>,
    ) -> Result<(), crate::commands::Failure> {
        let Some(path) = &self.trace else {
            return Ok(());
        };
        let doc = crate::metrics::trace::document(events);
        let bytes = serde_json::to_vec(&doc)
            .map_err(|e| crate::commands::Failure::new(crate::commands::FAILURE, e.to_string()))?;
        crate::fsx::write_private(path, &bytes).map_err(|e| {
            crate::commands::Failure::new(
                crate::commands::FAILURE,
                format!("cannot write the trace: {e}"),
            )
        })
    }

    /// A server's stream is not traced (yet): --trace with --url is a usage error.
    pub(crate) fn refuse_remote(&self) -> Result<(), crate::commands::Failure> {
        match self.trace {
            Some(_) => Err(crate::commands::Failure::new(
                crate::commands::USAGE,
                "--trace records the engine thread in this process; a server's stream is not \
                 traced yet (leave out --url, or --trace)",
            )),
            None => Ok(()),
        }
    }
}
