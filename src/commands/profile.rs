//! `--profile [parts|ops]`, `--profile-rate N` (docs/metrics.md, "Step profile") and
//! `--trace FILE.json [--force]` ("Trace"): the flags of `run`, `chat` and `bench`.

use clap::Args;

use crate::commands::{Failure, FAILURE};
use crate::config::Settings;
use crate::metrics::profile::ProfileLevel;

/// The default: one decode step in 16 is profiled.
pub(crate) const DEFAULT_RATE: u32 = 16;

#[derive(Debug, Args, Default, Clone)]
pub struct ProfileArgs {
    /// Time sampled decode steps node by node and show where a step's time goes: `parts`
    /// (attention, FFN, output head, host; per layer) or `ops` (per operation type). The
    /// profiled steps are timed apart from the others (docs/metrics.md, "Step profile").
    #[arg(long, value_name = "LEVEL", num_args = 0..=1, default_missing_value = "parts")]
    pub profile: Option<ProfileLevel>,
    /// With --profile: profile one decode step in N (1: every step but 1 in 4, left unprofiled
    /// to measure what profiling costs; 0: none).
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
    pub(crate) fn refuse_remote(&self) -> Result<(), Failure> {
        match self.profile {
            Some(_) => Err(Failure::usage(
                "--profile times llama.cpp's graph in this process; a server's decode steps \
                 cannot be profiled from outside (leave out --url, or --profile)",
            )),
            None => Ok(()),
        }
    }

    pub(crate) fn apply(&self, s: &mut Settings) {
        s.engine.profile_rate = self.rate();
    }

    /// One decode step in this many is profiled (0: none).
    pub(crate) fn rate(&self) -> u32 {
        self.profile
            .map_or(0, |_| self.profile_rate.unwrap_or(DEFAULT_RATE))
    }
}

/// `--trace FILE.json` and `--force` (docs/metrics.md, "Trace").
#[derive(Debug, Args, Default, Clone)]
pub struct TraceArgs {
    /// Write the answer as Chrome Trace Event JSON to FILE (opens in ui.perfetto.dev and
    /// chrome://tracing): the engine thread's spans (template and tokenize, each prefill
    /// micro-batch, each decode call and the host gap before it), one event per token, and
    /// with --profile the profiled steps' nodes; with --url, the server's stream (request sent,
    /// headers, each chunk). With --turns, one process per turn, each at its submission.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<std::path::PathBuf>,
    /// Replace the output files that exist (--trace; run's --report and --otlp-file; bench's --plot charts), if
    /// they are regular files: a link, FIFO or device is never written to.
    #[arg(long)]
    pub force: bool,
}

impl TraceArgs {
    /// `--force` says which files it may replace: alone it is a usage error naming them.
    /// `others` are the command's other output flags, given or not.
    pub(crate) fn check_force(&self, others: &[(&str, bool)]) -> Result<(), Failure> {
        if !self.force || self.trace.is_some() || others.iter().any(|(_, given)| *given) {
            return Ok(());
        }
        let mut flags = vec!["--trace"];
        flags.extend(others.iter().map(|(flag, _)| *flag));
        Err(Failure::usage(format!(
            "--force replaces an existing output file; give the output: {}",
            flags.join(" or ")
        )))
    }

    /// Checked before the model loads: the folder exists, and the file does not (unless
    /// --force) or is a regular file.
    pub(crate) fn check(&self) -> Result<(), Failure> {
        let Some(path) = &self.trace else {
            return Ok(());
        };
        let fail = |why: String| {
            Failure::usage(format!(
                "cannot write the trace to {}: {why}",
                path.display()
            ))
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

    /// Writes the trace of `events` (every turn's), whole or not at all.
    pub(crate) fn write(&self, events: Vec<serde_json::Value>) -> Result<(), Failure> {
        let Some(path) = &self.trace else {
            return Ok(());
        };
        let doc = crate::metrics::trace::document(events);
        let bytes = serde_json::to_vec(&doc).map_err(|e| Failure::new(FAILURE, e.to_string()))?;
        // fsx::Output's rule, as at `check`: a file that appeared meanwhile is replaced only
        // with --force, a link never written through.
        crate::fsx::Output::new(path, self.force)
            .write(&bytes)
            .map_err(|e| Failure::new(FAILURE, format!("cannot write the trace: {e}")))
    }
}
