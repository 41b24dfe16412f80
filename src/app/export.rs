//! What `/export` writes: the saved conversation (history's Markdown or JSON) with the
//! sampling settings in force, so an exported answer can be reproduced.

use std::path::Path;

use super::ExportFormat;
use crate::engine::SamplingParams;
use crate::history::SavedConversation;

/// An `f32` setting as the user typed it (0.8, not 0.800000011920929).
fn round(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// The sampling settings as a JSON object.
fn sampling_json(s: &SamplingParams, max_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "temperature": round(s.temperature),
        "top_k": s.top_k,
        "top_p": round(s.top_p),
        "min_p": round(s.min_p),
        "repeat_penalty": round(s.repeat_penalty),
        "repeat_last_n": s.repeat_last_n,
        "seed": s.seed,
        "max_tokens": max_tokens,
    })
}

/// The text of an export.
pub(crate) fn export_text(
    format: ExportFormat,
    conversation: &SavedConversation,
    sampling: &SamplingParams,
    max_tokens: u32,
) -> Result<String, String> {
    match format {
        ExportFormat::Markdown => {
            let text = crate::history::export_markdown(conversation);
            let line = format!(
                "*sampling: temperature {} · top_k {} · top_p {} · min_p {} · repeat_penalty {} (last {}) · seed {} · max {} tokens*\n\n",
                round(sampling.temperature),
                sampling.top_k,
                round(sampling.top_p),
                round(sampling.min_p),
                round(sampling.repeat_penalty),
                sampling.repeat_last_n,
                sampling.seed,
                max_tokens
            );
            // After the title and the details line.
            let mut parts = text.splitn(3, "\n\n");
            let (title, details, rest) = (parts.next(), parts.next(), parts.next());
            Ok(match (title, details, rest) {
                (Some(t), Some(d), Some(r)) => format!("{t}\n\n{d}\n\n{line}{r}"),
                _ => format!("{text}\n{line}"),
            })
        }
        ExportFormat::Json => {
            let mut value = serde_json::to_value(conversation).map_err(|e| e.to_string())?;
            if let Some(map) = value.as_object_mut() {
                map.insert("sampling".into(), sampling_json(sampling, max_tokens));
            }
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())
        }
    }
}

/// An export goes where the user said, into a folder that exists: a typo in the path is said,
/// not turned into new folders.
pub(crate) fn check_export_dir(path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => return Ok(()),
    };
    if dir.is_dir() {
        Ok(())
    } else if dir.exists() {
        Err(format!(
            "cannot export to {}: {} is not a folder",
            path.display(),
            dir.display()
        ))
    } else {
        Err(format!(
            "cannot export to {}: the folder {} does not exist (create it first, or choose another path)",
            path.display(),
            dir.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> SavedConversation {
        SavedConversation::new("20261130-084512-abcd".into(), 1_796_028_312)
    }

    #[test]
    fn exports_carry_the_sampling_settings_with_round_values() {
        let s = SamplingParams {
            temperature: 0.8,
            top_p: 0.95,
            seed: 7,
            ..SamplingParams::default()
        };
        let md = export_text(ExportFormat::Markdown, &conv(), &s, 128).unwrap();
        assert!(md.starts_with("# Conversation"), "{md}");
        assert!(
            md.contains("*sampling: temperature 0.8 · top_k 40 · top_p 0.95"),
            "{md}"
        );
        assert!(md.contains("seed 7 · max 128 tokens"), "{md}");
        let json = export_text(ExportFormat::Json, &conv(), &s, 128).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["sampling"]["temperature"], serde_json::json!(0.8));
        assert_eq!(v["sampling"]["max_tokens"], serde_json::json!(128));
        assert_eq!(v["id"], serde_json::json!("20261130-084512-abcd"));
        assert!(!json.contains("0.800000"), "{json}");
    }

    #[test]
    fn a_missing_export_folder_is_an_error_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/out.md");
        let err = check_export_dir(&missing).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        assert!(!dir.path().join("no").exists());
        assert!(check_export_dir(&dir.path().join("out.md")).is_ok());
        assert!(check_export_dir(Path::new("out.md")).is_ok());
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(check_export_dir(&file.join("out.md"))
            .unwrap_err()
            .contains("not a folder"));
    }
}
