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

/// The folders the environment names, checked before anything is created in them: an override
/// must be an absolute path (a relative one would be made under whatever folder tokscope was
/// started in), and where a folder comes from `HOME`, `HOME` must be an existing folder (else
/// `run` would create it, as root if run as root). The message names the variable and what to do.
pub fn check_environment() -> Result<(), String> {
    let vars = [DATA_DIR_ENV, CONFIG_DIR_ENV, CACHE_DIR_ENV];
    for var in vars {
        if let Some(dir) = env_dir(var) {
            if dir.is_relative() {
                return Err(format!(
                    "{var}={} is a relative path: tokscope would create it under the folder it was started in; give an absolute path (e.g. {var}=\"$PWD/{}\")",
                    crate::text::path(&dir),
                    crate::text::path(&dir)
                ));
            }
        }
    }
    // The data dir is written by nearly every command (logs, history, results); the config dir
    // is only read, and the cache dir moves under the data dir when HOME is missing.
    if env_dir(DATA_DIR_ENV).is_none() {
        if let Some(home) = missing_home().filter(|h| data_dir().starts_with(h)) {
            return Err(format!(
                "HOME={} is not an existing folder: tokscope keeps its data under it (~/.local/share/tokscope) and will not create it; set HOME to your home folder, or {DATA_DIR_ENV} to an absolute folder",
                crate::text::path(&home),
            ));
        }
    }
    Ok(())
}

/// `HOME` when it is set but not an existing folder (a system user's `/nonexistent`).
fn missing_home() -> Option<PathBuf> {
    env_dir("HOME").filter(|h| !h.is_dir())
}

/// Overrides the cache dir (quantized models made by `compare --quantize`).
pub(crate) const CACHE_DIR_ENV: &str = "TOKSCOPE_CACHE_DIR";

/// Files tokscope can make again: the models `compare --quantize` writes.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(dir) = env_dir(CACHE_DIR_ENV) {
        return dir;
    }
    if missing_home().is_some() {
        // Never create a missing HOME for a cache: keep it with the data.
        return data_dir().join("cache");
    }
    project_dirs()
        .map(|d| d.cache_dir().to_path_buf())
        .unwrap_or_else(|| PathBuf::from(".tokscope-cache"))
}
