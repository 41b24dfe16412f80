//! The edge: one file per subcommand, and the process exit codes in one place so the CLI, the
//! README and the tests agree.

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
pub(crate) mod remote;
pub(crate) mod results;
pub(crate) mod run;
pub(crate) mod synth;

use crate::cli::{Cli, Command};
use crate::config::Settings;

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
}

impl From<crate::config::ConfigError> for Failure {
    fn from(e: crate::config::ConfigError) -> Self {
        Self::new(USAGE, e.to_string())
    }
}

impl From<crate::engine::EngineError> for Failure {
    fn from(e: crate::engine::EngineError) -> Self {
        let code = if e.is_model_problem() { MODEL } else { FAILURE };
        Self::new(code, e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::new(FAILURE, e.to_string())
    }
}

/// Runs the subcommand the command line names (the chat when it names none).
pub fn dispatch(cli: Cli) -> Result<(), Failure> {
    let explicit = cli.config.as_deref();
    let settings = || Settings::load(explicit);
    if cli.command.is_some() && cli.chat_flags_given() {
        return Err(Failure::new(
            USAGE,
            "the chat's flags (-m, --temp, …) go with the bare `tokscope` or after `chat`, not before another command",
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
        Some(Command::Doctor(args)) => doctor::run(args),
        Some(Command::Config { action }) => config::run(action, explicit),
    }
}
