//! `tokscope results`: the results log of earlier bench runs, listed, or one run printed.

use std::io::Write;

use clap::Args;

use crate::bench::log;
use crate::commands::{Failure, FAILURE};

/// List earlier bench runs, or print one.
#[derive(Debug, Args, Default, Clone)]
pub struct ResultsArgs {
    /// A run's id (a unique prefix, or `last`): print its table.
    #[arg(value_name = "ID")]
    pub id: Option<String>,
    /// md (within 120 columns), md+ (every column, names whole) or, with an ID, json (its
    /// stored line, every field) [default: md].
    #[arg(short = 'o', long = "output", value_name = "FORMAT")]
    pub output: Option<String>,
}

/// `tokscope results [ID]`.
pub(crate) fn run(args: &ResultsArgs) -> Result<(), Failure> {
    let (json, wide) = match args.output.as_deref().map(str::trim) {
        None | Some("md") | Some("markdown") => (false, false),
        Some("md+") => (false, true),
        Some("json") => (true, false),
        Some(other) => {
            return Err(Failure::usage(format!(
                "invalid value `{other}` for -o/--output: one of md, md+, json"
            )))
        }
    };
    if json && args.id.is_none() {
        return Err(Failure::usage(
            "-o json prints one run: give its ID (or `last`)",
        ));
    }
    let path = log::results_path(&crate::paths::data_dir());
    let (runs, unreadable) = read_log(&path)?;
    if unreadable > 0 {
        eprintln!(
            "warning: {unreadable} line(s) of {} could not be read",
            path.display()
        );
    }
    let (text, shape) = match &args.id {
        Some(id) => {
            let run = log::find_run(&runs, id).map_err(Failure::usage)?;
            if json {
                let json = serde_json::to_string_pretty(&run.raw)
                    .map_err(|e| Failure::new(FAILURE, e.to_string()))?;
                (json + "\n", crate::text::Shape::Json)
            } else {
                (log::run_table(run, wide), crate::text::Shape::Human)
            }
        }
        None if runs.is_empty() => {
            eprintln!(
                "no bench runs yet in {} (run `tokscope bench`)",
                path.display()
            );
            return Ok(());
        }
        None => (log::listing(&runs, wide), crate::text::Shape::Human),
    };
    // The log holds file and model names from anywhere: the listing is neutralised wherever
    // it goes (`| tail` replays it), the JSON keeps them exact with the controls escaped.
    let text = crate::text::for_stdout(&text, shape);
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

/// The results log's runs and the number of lines that could not be read.
pub(crate) fn read_log(path: &std::path::Path) -> Result<(Vec<log::StoredRun>, usize), Failure> {
    log::read_runs(path).map_err(|e| {
        let message = format!("cannot read the results log {}: {e}", path.display());
        Failure::new(FAILURE, message)
    })
}
