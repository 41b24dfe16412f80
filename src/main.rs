//! tokscope's entry point: parse the command line, install the panic hook and logging, and
//! dispatch. Everything else lives in the library.

use clap::Parser;

use tokscope::cli::Cli;
use tokscope::commands;

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
    let cli = Cli::parse_from(commands::bench::rewrite_llama_bench_flags(
        std::env::args_os(),
    ));
    tokscope::logging::init(Some(&tokscope::paths::log_dir()));
    let code = match commands::dispatch(cli) {
        Ok(()) => commands::OK,
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.code
        }
    };
    std::process::exit(code);
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
