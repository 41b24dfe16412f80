//! `tokscope doctor`: checks of one part of a model against an independent reference.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::commands::{Failure, FAILURE, USAGE};
use crate::doctor;
use crate::llama::gpu::GpuStatus;

/// `tokscope doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(subcommand)]
    pub check: DoctorCheck,
}

/// The checks `doctor` runs.
#[derive(Debug, Subcommand)]
pub enum DoctorCheck {
    /// Tokenize a corpus with llama.cpp (the GGUF's vocabulary) and with the tokenizers crate
    /// (a tokenizer.json); report the mismatch rate and the first mismatches side by side.
    /// Exits 1 when any sample differs.
    Tokenizer(TokenizerCheckArgs),
    /// What this build and machine can use: backends, devices, driver and CUDA versions,
    /// compute capability, the CUDA libraries loaded and from where, and why no GPU is used
    /// when none is. Exits 1 when a CUDA build finds no usable GPU.
    Gpu,
    /// The CPU memory-bandwidth probes cached for the roofline (per CPU and thread count, with
    /// the load they were taken at); --reprobe measures again.
    Bandwidth(BandwidthArgs),
}

/// `tokscope doctor bandwidth`.
#[derive(Debug, Args)]
pub struct BandwidthArgs {
    /// Measure again before listing (a probe on a busy machine is not cached).
    #[arg(long)]
    pub reprobe: bool,
    /// With --reprobe: the thread counts to measure, a comma list (default: every one cached
    /// for this CPU, else all cores).
    #[arg(short = 't', long, value_name = "N,…", value_delimiter = ',')]
    pub threads: Vec<usize>,
}

/// `tokscope doctor tokenizer`.
#[derive(Debug, Args)]
pub struct TokenizerCheckArgs {
    /// The GGUF model whose vocabulary is checked (only the vocabulary is loaded).
    #[arg(short = 'm', long, value_name = "FILE")]
    pub model: PathBuf,
    /// The reference: a Hugging Face tokenizer.json.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: PathBuf,
    /// A text file to check instead of the built-in corpus (checked whole and line by line).
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// How many mismatches to show side by side.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub show: usize,
}

/// Runs `tokscope doctor`.
pub(crate) fn run(args: &DoctorArgs) -> Result<(), Failure> {
    match &args.check {
        DoctorCheck::Tokenizer(args) => tokenizer(args),
        DoctorCheck::Gpu => gpu(),
        DoctorCheck::Bandwidth(args) => {
            if !args.reprobe && !args.threads.is_empty() {
                return Err(Failure::new(USAGE, "-t goes with --reprobe"));
            }
            if args.threads.contains(&0) {
                return Err(Failure::new(USAGE, "-t: a thread count is at least 1"));
            }
            let report = crate::hw::bandwidth_report(args.reprobe.then_some(&args.threads[..]));
            print!("{}", crate::text::terminal_safe(&report));
            Ok(())
        }
    }
}

/// `tokscope doctor gpu`; exits 1 when a CUDA build finds no usable GPU.
fn gpu() -> Result<(), Failure> {
    let (report, status) = doctor::gpu::report();
    print!("{report}");
    match status {
        GpuStatus::NoDriver | GpuStatus::NoDevice { .. } | GpuStatus::DriverTooOld { .. } => {
            Err(Failure::new(FAILURE, status.note().unwrap_or_default()))
        }
        _ => Ok(()),
    }
}

fn tokenizer(args: &TokenizerCheckArgs) -> Result<(), Failure> {
    let samples = match &args.text {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::new(
                    USAGE,
                    format!("cannot read {} as UTF-8 text: {e}", path.display()),
                )
            })?;
            let label = path
                .file_name()
                .map_or_else(|| "text".to_owned(), |n| n.to_string_lossy().into_owned());
            doctor::samples_from_text(&label, &text)
        }
        None => doctor::builtin_corpus(),
    };
    let model = crate::tokcount::load_vocab_only(&args.model)?;
    let reference = crate::synth::llama3::open_tokenizer(&args.tokenizer)
        .map_err(|e| Failure::new(USAGE, e.to_string()))?;
    let comparison = doctor::compare(&model, &reference, &samples);
    print!(
        "{}",
        doctor::render_report(&comparison, &args.model, &args.tokenizer, args.show)
    );
    if comparison.mismatches.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            FAILURE,
            format!(
                "tokenizer check failed: {} of {} samples tokenize differently ({:.1}%)",
                comparison.mismatches.len(),
                comparison.samples,
                comparison.mismatch_rate() * 100.0
            ),
        ))
    }
}
