//! `tokscope config`: where the configuration lives, and the effective settings.

use std::path::Path;

use clap::Subcommand;

use crate::commands::{Failure, FAILURE};
use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Print the path of the config file tokscope reads.
    Path,
    /// Print the effective settings (defaults < file < environment) as TOML-like lines.
    Show,
}

/// Runs `tokscope config ACTION`; `explicit` is `--config FILE` when given.
pub(crate) fn run(action: &ConfigAction, explicit: Option<&Path>) -> Result<(), Failure> {
    match action {
        ConfigAction::Path => {
            println!(
                "{}",
                explicit
                    .map(Path::to_path_buf)
                    .unwrap_or_else(crate::paths::config_file)
                    .display()
            );
            Ok(())
        }
        ConfigAction::Show => {
            let s = Settings::load(explicit)?;
            let text =
                toml::to_string_pretty(&s).map_err(|e| Failure::new(FAILURE, e.to_string()))?;
            print!("{text}");
            Ok(())
        }
    }
}
