//! `tokscope config`: where the configuration lives, the effective settings as a valid config
//! file, and a commented starting file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::commands::{Failure, FAILURE, USAGE};
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
        return Err(Failure::new(
            USAGE,
            format!(
                "{} already exists: edit it, or remove it first to start from the example",
                path.display()
            ),
        ));
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
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# tokscope's effective settings (built-in defaults < {} < environment).\n# A valid config file: every key as config.example.toml names it.\n",
        path.display()
    );
    let line = |out: &mut String, key: &str, value: Option<String>| {
        let dotted = key.to_string();
        let name = dotted.rsplit('.').next().unwrap_or(key);
        match value {
            Some(v) => {
                let _ = writeln!(out, "{name} = {v}  {}", source(&dotted));
            }
            None => {
                let _ = writeln!(out, "# {name} is not set  {}", source(&dotted));
            }
        }
    };
    let e = &s.engine;
    let model = s
        .model
        .as_ref()
        .map(|p: &PathBuf| quoted(&p.to_string_lossy()));
    line(&mut out, "model", model);
    line(&mut out, "n_ctx", Some(e.n_ctx.to_string()));
    line(&mut out, "threads", Some(e.threads.to_string()));
    line(&mut out, "n_batch", Some(e.n_batch.to_string()));
    line(&mut out, "n_ubatch", Some(e.n_ubatch.to_string()));
    line(&mut out, "cache_type_k", Some(quoted(e.type_k.name())));
    line(&mut out, "cache_type_v", Some(quoted(e.type_v.name())));
    line(
        &mut out,
        "flash_attn",
        Some(quoted(&e.flash_attn.to_string())),
    );
    let ngl = e
        .n_gpu_layers
        .map_or_else(|| "-1".to_string(), |n| n.to_string());
    line(&mut out, "n_gpu_layers", Some(ngl));
    line(&mut out, "template", Some(quoted(&e.template.to_string())));
    line(
        &mut out,
        "system_prompt",
        Some(quoted(s.system_prompt.as_deref().unwrap_or(""))),
    );
    line(&mut out, "max_tokens", Some(s.max_tokens.to_string()));
    line(
        &mut out,
        "price_per_gpu_hour_usd",
        Some(float64(s.price_per_gpu_hour_usd)),
    );
    line(&mut out, "bandwidth_gb_s", s.bandwidth_gb_s.map(float64));
    line(&mut out, "price_per_kwh", s.price_per_kwh.map(float64));
    let dirs: Vec<String> = s
        .model_dirs
        .iter()
        .map(|d| quoted(&d.to_string_lossy()))
        .collect();
    line(
        &mut out,
        "model_dirs",
        Some(format!("[{}]", dirs.join(", "))),
    );
    let p = &s.sampling;
    out.push_str("\n[sampling]\n");
    line(&mut out, "sampling.temperature", Some(float(p.temperature)));
    line(&mut out, "sampling.top_k", Some(p.top_k.to_string()));
    line(&mut out, "sampling.top_p", Some(float(p.top_p)));
    line(&mut out, "sampling.min_p", Some(float(p.min_p)));
    line(
        &mut out,
        "sampling.repeat_penalty",
        Some(float(p.repeat_penalty)),
    );
    line(
        &mut out,
        "sampling.repeat_last_n",
        Some(p.repeat_last_n.to_string()),
    );
    line(&mut out, "sampling.seed", Some(p.seed.to_string()));
    line(&mut out, "sampling.mode", Some(quoted(e.sampling.name())));
    let sp = &e.spec;
    out.push_str("\n[spec]\n");
    line(&mut out, "spec.mode", Some(quoted(sp.mode.name())));
    line(
        &mut out,
        "spec.draft",
        sp.draft_model
            .as_ref()
            .map(|p: &PathBuf| quoted(&p.to_string_lossy())),
    );
    line(&mut out, "spec.draft_max", Some(sp.draft_max.to_string()));
    line(&mut out, "spec.draft_min", Some(sp.draft_min.to_string()));
    line(&mut out, "spec.draft_p_min", Some(float(sp.draft_p_min)));
    let dngl = sp
        .draft_n_gpu_layers
        .map_or_else(|| "-1".to_string(), |n| n.to_string());
    line(&mut out, "spec.draft_ngl", Some(dngl));
    line(&mut out, "spec.ngram_n", Some(sp.ngram_n.to_string()));
    let bi = match sp.batch_invariant {
        None => "auto",
        Some(true) => "on",
        Some(false) => "off",
    };
    line(&mut out, "spec.batch_invariant", Some(quoted(bi)));
    out.push_str("\n[quality]\n");
    line(
        &mut out,
        "quality.ref",
        s.reference
            .as_ref()
            .map(|p: &PathBuf| quoted(&p.to_string_lossy())),
    );
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
