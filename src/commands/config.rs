//! `tokscope config`: where the configuration lives, the effective settings as a valid config
//! file, and a commented starting file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::commands::{Failure, FAILURE};
use crate::config::{Settings, MODEL_ENV};

/// The commented example config, every key at its built-in default.
const EXAMPLE: &str = include_str!("../../config.example.toml");

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Print the path of the config file tokscope reads.
    Path,
    /// Print the effective settings (defaults < file < environment) as a valid config file in
    /// config.example.toml's schema, each value's source in a comment.
    Show,
    /// Write the commented example config (every key at its default) to the config path;
    /// refuses to replace an existing file.
    Init,
}

/// Runs `tokscope config ACTION`; `explicit` is `--config FILE` when given.
pub(crate) fn run(action: &ConfigAction, explicit: Option<&Path>) -> Result<(), Failure> {
    let path = explicit
        .map(Path::to_path_buf)
        .unwrap_or_else(crate::paths::config_file);
    match action {
        ConfigAction::Path => {
            println!("{}", path.display());
            Ok(())
        }
        ConfigAction::Show => {
            let settings = Settings::load(explicit)?;
            let in_file = keys_in_file(&path);
            print!("{}", show(&settings, &path, &in_file));
            Ok(())
        }
        ConfigAction::Init => init(&path),
    }
}

fn init(path: &Path) -> Result<(), Failure> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(Failure::usage(format!(
            "{} already exists: edit it, or remove it first to start from the example",
            path.display()
        )));
    }
    if let Some(dir) = path.parent() {
        crate::fsx::ensure_private_dir(dir)
            .map_err(|e| Failure::new(FAILURE, format!("cannot create {}: {e}", dir.display())))?;
    }
    crate::fsx::write_private(path, EXAMPLE.as_bytes())
        .map_err(|e| Failure::new(FAILURE, format!("cannot write {}: {e}", path.display())))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The dotted keys the config file sets (`sampling.top_k`), empty when there is no file. The
/// file was already read and validated by `Settings::load`.
fn keys_in_file(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for (key, value) in &table {
        match value.as_table() {
            Some(inner) => keys.extend(inner.keys().map(|k| format!("{key}.{k}"))),
            None => keys.push(key.clone()),
        }
    }
    keys
}

/// A TOML string literal.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A float as the user would write it: the shortest text that reads back as the same `f32`
/// (0.8, not 0.800000011920929), with a decimal point so TOML keeps it a float.
fn float(v: f32) -> String {
    let text = format!("{v}");
    if text.contains('.') || text.contains('e') || text.contains("inf") || text.contains("NaN") {
        text
    } else {
        format!("{text}.0")
    }
}

fn float64(v: f64) -> String {
    float(v as f32)
}

/// The effective settings as a config file in config.example.toml's schema.
fn show(s: &Settings, path: &Path, in_file: &[String]) -> String {
    let file_note = format!("# from {}", path.display());
    let source = |key: &str| -> String {
        if key == "model" && std::env::var_os(MODEL_ENV).is_some_and(|v| !v.is_empty()) {
            format!("# from the environment ({MODEL_ENV})")
        } else if in_file.iter().any(|k| k == key) {
            file_note.clone()
        } else {
            "# default".to_string()
        }
    };
    let mut out = format!(
        "# tokscope's effective settings (built-in defaults < {} < environment).\n# A valid config file: every key as config.example.toml names it.\n\n",
        path.display()
    );
    let (e, p, sp) = (&s.engine, &s.sampling, &s.engine.spec);
    let file = |p: &Option<PathBuf>| p.as_ref().map(|p| quoted(&p.to_string_lossy()));
    let layers = |n: Option<u32>| Some(n.map_or_else(|| "-1".to_string(), |n| n.to_string()));
    let dirs: Vec<String> = s
        .model_dirs
        .iter()
        .map(|d| quoted(&d.to_string_lossy()))
        .collect();
    let batch_invariant = match sp.batch_invariant {
        None => "auto",
        Some(true) => "on",
        Some(false) => "off",
    };
    let rows = [
        ("model", file(&s.model)),
        ("n_ctx", Some(e.n_ctx.to_string())),
        ("threads", Some(e.threads.to_string())),
        ("n_batch", Some(e.n_batch.to_string())),
        ("n_ubatch", Some(e.n_ubatch.to_string())),
        ("cache_type_k", Some(quoted(e.type_k.name()))),
        ("cache_type_v", Some(quoted(e.type_v.name()))),
        ("flash_attn", Some(quoted(&e.flash_attn.to_string()))),
        ("n_gpu_layers", layers(e.n_gpu_layers)),
        ("template", Some(quoted(&e.template.to_string()))),
        (
            "system_prompt",
            Some(quoted(s.system_prompt.as_deref().unwrap_or(""))),
        ),
        ("max_tokens", Some(s.max_tokens.to_string())),
        (
            "price_per_gpu_hour_usd",
            Some(float64(s.price_per_gpu_hour_usd)),
        ),
        ("bandwidth_gb_s", s.bandwidth_gb_s.map(float64)),
        ("price_per_kwh", s.price_per_kwh.map(float64)),
        ("model_dirs", Some(format!("[{}]", dirs.join(", ")))),
        ("sampling.temperature", Some(float(p.temperature))),
        ("sampling.top_k", Some(p.top_k.to_string())),
        ("sampling.top_p", Some(float(p.top_p))),
        ("sampling.min_p", Some(float(p.min_p))),
        ("sampling.repeat_penalty", Some(float(p.repeat_penalty))),
        ("sampling.repeat_last_n", Some(p.repeat_last_n.to_string())),
        ("sampling.seed", Some(p.seed.to_string())),
        ("sampling.mode", Some(quoted(e.sampling.name()))),
        ("spec.mode", Some(quoted(sp.mode.name()))),
        ("spec.draft", file(&sp.draft_model)),
        ("spec.draft_max", Some(sp.draft_max.to_string())),
        ("spec.draft_min", Some(sp.draft_min.to_string())),
        ("spec.draft_p_min", Some(float(sp.draft_p_min))),
        ("spec.draft_ngl", layers(sp.draft_n_gpu_layers)),
        ("spec.ngram_n", Some(sp.ngram_n.to_string())),
        ("spec.batch_invariant", Some(quoted(batch_invariant))),
        ("quality.ref", file(&s.reference)),
    ];
    // A table's header before its first key.
    let mut table = "";
    for (key, value) in rows {
        let (in_table, name) = key.rsplit_once('.').unwrap_or(("", key));
        if in_table != table {
            table = in_table;
            let _ = write!(out, "\n[{table}]\n");
        }
        let _ = match value {
            Some(v) => writeln!(out, "{name} = {v}  {}", source(key)),
            None => writeln!(out, "# {name} is not set  {}", source(key)),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_a_user_would() {
        assert_eq!(float(0.8), "0.8");
        assert_eq!(float(0.95), "0.95");
        assert_eq!(float(0.05), "0.05");
        assert_eq!(float(1.0), "1.0");
        assert_eq!(float64(2.0), "2.0");
    }

    #[test]
    fn show_is_a_valid_config_that_reads_back_the_same() {
        let mut s = Settings::default();
        let path = Path::new("/nonexistent/tokscope/config.toml");
        s.apply_toml(
            "n_ctx = 2048\ntemplate = \"completion\"\nmodel_dirs = [\"/srv/m\"]\n[sampling]\ntop_p = 0.9\n",
            path,
        )
        .unwrap();
        let text = show(
            &s,
            path,
            &[
                "n_ctx".into(),
                "template".into(),
                "model_dirs".into(),
                "sampling.top_p".into(),
            ],
        );
        assert!(text.contains("top_p = 0.9  # from /nonexistent"), "{text}");
        assert!(text.contains("temperature = 0.8  # default"), "{text}");
        assert!(text.contains("model_dirs = [\"/srv/m\"]  # from"), "{text}");
        assert!(!text.contains("0.800000"), "{text}");
        let mut back = Settings::default();
        back.apply_toml(&text, path).unwrap();
        assert_eq!(back, s, "{text}");
    }

    #[test]
    fn the_example_is_a_valid_config_of_the_defaults() {
        let path = Path::new("config.example.toml");
        let mut s = Settings::default();
        s.apply_toml(EXAMPLE, path).unwrap();
        assert_eq!(s.sampling, Settings::default().sampling);
        assert_eq!(s.max_tokens, Settings::default().max_tokens);
        assert_eq!(s.engine.spec, Settings::default().engine.spec);
    }
}
