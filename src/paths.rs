//! Where tokscope keeps its files: the config file, the data dir (models, history, results) and
//! the log file. Platform locations come from `directories`; environment variables override
//! them so tests and sandboxes never touch a real home directory.

use std::path::PathBuf;

use directories::ProjectDirs;

/// Overrides the data dir (models, history, logs).
pub(crate) const DATA_DIR_ENV: &str = "TOKSCOPE_DATA_DIR";
/// Overrides the config dir (where `config.toml` is looked for).
pub(crate) const CONFIG_DIR_ENV: &str = "TOKSCOPE_CONFIG_DIR";

fn project_dirs() -> Option<ProjectDirs> {
    ProjectDirs::from("", "", "tokscope")
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The data dir: models, conversation history, results log and log files.
pub fn data_dir() -> PathBuf {
    env_dir(DATA_DIR_ENV)
        .or_else(|| project_dirs().map(|d| d.data_dir().to_path_buf()))
        .unwrap_or_else(|| PathBuf::from(".tokscope"))
}

/// The directory holding the user's `config.toml`.
pub(crate) fn config_dir() -> PathBuf {
    env_dir(CONFIG_DIR_ENV)
        .or_else(|| project_dirs().map(|d| d.config_dir().to_path_buf()))
        .unwrap_or_else(|| PathBuf::from(".tokscope"))
}

/// The user's config file (it need not exist).
pub(crate) fn config_file() -> PathBuf {
    config_dir().join("config.toml")
}

/// The directory for log files (llama.cpp's and tokscope's own).
pub fn log_dir() -> PathBuf {
    data_dir().join("logs")
}

/// Overrides the cache dir (quantized models made by `compare --quantize`).
pub(crate) const CACHE_DIR_ENV: &str = "TOKSCOPE_CACHE_DIR";

/// Files tokscope can make again: the models `compare --quantize` writes.
pub(crate) fn cache_dir() -> PathBuf {
    env_dir(CACHE_DIR_ENV)
        .or_else(|| project_dirs().map(|d| d.cache_dir().to_path_buf()))
        .unwrap_or_else(|| PathBuf::from(".tokscope-cache"))
}
