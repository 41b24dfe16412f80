//! tokscope's entry point: parse the command line, install the panic hook and logging, and
//! dispatch. Everything else lives in the library.

use clap::Parser;

use tokscope::cli::{Cli, Command, ConfigAction};
use tokscope::commands::{self, Failure};
use tokscope::config::Settings;

fn main() {
    ignore_file_size_signal();
    std::panic::set_hook(Box::new(|info| {
        // A short message, no backtrace: the details are in the log file.
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!("panic{location}: {payload}");
        // Give the terminal back first, so the message lands on the user's normal screen.
        tokscope::tui::restore();
        eprintln!(
            "tokscope crashed: {payload}{location}\n  please report this; the log is in {}",
            tokscope::paths::log_dir().display()
        );
    }));
    // clap has no multi-letter short flags: llama-bench's -ngl, -ctk, … become long ones.
    let cli = Cli::parse_from(tokscope::bench::rewrite_llama_bench_flags(
        std::env::args_os(),
    ));
    tokscope::logging::init(Some(&tokscope::paths::log_dir()));
    let code = match dispatch(cli) {
        Ok(()) => commands::OK,
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.code
        }
    };
    std::process::exit(code);
}

fn dispatch(cli: Cli) -> Result<(), Failure> {
    let settings = || Settings::load(cli.config.as_deref());
    match &cli.command {
        Some(Command::Run(args)) => tokscope::commands::run::run(args, settings()?),
        Some(Command::Chat(args)) => tokscope::commands::chat::chat(args, settings()?),
        None => tokscope::commands::chat::chat(&Default::default(), settings()?),
        Some(Command::History) => tokscope::commands::chat::history(),
        Some(Command::Bench(args)) => tokscope::bench::bench(args, settings()?),
        Some(Command::Results(args)) => tokscope::bench::results(args),
        Some(Command::Compare(args)) => tokscope::compare::compare(args, settings()?),
        Some(Command::Synth(args)) => synth(args),
        Some(Command::FetchDemo) => fetch_demo(),
        Some(Command::Doctor(args)) => tokscope::doctor::run(args),
        Some(Command::Config { action }) => match action {
            ConfigAction::Path => {
                println!(
                    "{}",
                    cli.config
                        .clone()
                        .unwrap_or_else(tokscope::paths::config_file)
                        .display()
                );
                Ok(())
            }
            ConfigAction::Show => {
                let s = settings()?;
                let text = toml::to_string_pretty(&s)
                    .map_err(|e| Failure::new(commands::FAILURE, e.to_string()))?;
                print!("{text}");
                Ok(())
            }
        },
    }
}

fn fetch_demo() -> Result<(), Failure> {
    let data_dir = tokscope::paths::data_dir();
    let outcome = tokscope::demo::fetch_demo(&data_dir, &mut |line| eprintln!("{line}"))
        .map_err(|e| Failure::new(commands::FAILURE, e.to_string()))?;
    match outcome {
        tokscope::demo::FetchOutcome::AlreadyPresent(p) => {
            eprintln!("demo model already present and verified: {}", p.display())
        }
        tokscope::demo::FetchOutcome::Fetched(p) => {
            eprintln!("demo model fetched and verified: {}", p.display())
        }
    }
    Ok(())
}

fn synth(args: &tokscope::cli::SynthArgs) -> Result<(), Failure> {
    tokscope::commands::synth::run(args)
}

/// With a file-size limit (`ulimit -f`), the kernel kills a process that writes past it with
/// SIGXFSZ, leaving the terminal in raw mode. Ignored, the write fails with EFBIG instead, which
/// tokscope reports ("could not save … file too large") and survives.
#[allow(unsafe_code)]
fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN at start-up, before any other thread
    // exists, has no preconditions.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}
