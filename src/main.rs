//! tokscope's entry point: parse the command line, install the panic hook and logging, and
//! dispatch. Everything else lives in the library.

use clap::Parser;

use tokscope::commands;
use tokscope::commands::Cli;

fn main() {
    // ggml's abort path otherwise attaches gdb to this process and prints a backtrace over the
    // user's screen; set before any thread exists (the environment is not thread-safe).
    std::env::set_var("GGML_NO_BACKTRACE", "1");
    ignore_file_size_signal();
    // The child that tries a model before this process loads it (see llama/probe.rs): no
    // logging set-up (its stderr goes to the parent), no terminal, no config.
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|a| a == tokscope::llama::probe::PROBE_SUBCOMMAND)
    {
        let code = match args.next() {
            Some(path) => {
                tokscope::logging::init(None);
                tokscope::llama::probe::child_main(std::path::Path::new(&path))
            }
            None => commands::USAGE,
        };
        std::process::exit(code);
    }
    tokscope::fatal::install();
    if let Ok(exe) = std::env::current_exe() {
        tokscope::llama::probe::enable(exe);
    }
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
        say(&format!(
            "tokscope crashed: {payload}{location}\n  please report this; the log is in {}",
            tokscope::paths::log_dir().display()
        ));
    }));
    // clap has no multi-letter short flags: llama-bench's -ngl, -ctk, … become long ones.
    let cli = Cli::parse_from(commands::bench::rewrite_llama_bench_flags(
        std::env::args_os(),
    ));
    // The environment's folders and settings, before anything is created from them.
    if let Err(message) = tokscope::paths::check_environment()
        .and_then(|()| tokscope::llama::probe::check_environment())
    {
        say(&format!(
            "error: {}",
            tokscope::text::terminal_safe(&message)
        ));
        std::process::exit(commands::USAGE);
    }
    tokscope::logging::init(Some(&tokscope::paths::log_dir()));
    let code = match commands::dispatch(cli) {
        Ok(()) => commands::OK,
        Err(f) => {
            // Messages name files and quote models: neutralised like everything else that
            // reaches a terminal.
            tracing::info!(code = f.code, "exit: {}", f.message);
            say(&format!(
                "error: {}",
                tokscope::text::terminal_safe(&f.message)
            ));
            f.code
        }
    };
    std::process::exit(code);
}

/// One line to stderr. A closed terminal (the window was closed: EIO) or a closed pipe
/// cannot take it, and that is no reason to panic: the line is dropped (the log has it).
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
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
