//! What `/export` writes: the saved conversation (history's Markdown or JSON) with the
//! sampling settings in force, so an exported answer can be reproduced.

use std::path::Path;

use super::ExportFormat;
use crate::history::{round_setting as round, SavedConversation, TurnSettings};

/// The sampling settings as a JSON object.
fn sampling_json(s: &TurnSettings) -> serde_json::Value {
    let p = &s.sampling;
    serde_json::json!({
        "temperature": round(p.temperature),
        "top_k": p.top_k,
        "top_p": round(p.top_p),
        "min_p": round(p.min_p),
        "repeat_penalty": round(p.repeat_penalty),
        "repeat_last_n": p.repeat_last_n,
        "seed": p.seed,
        "max_tokens": s.max_tokens,
    })
}

/// The text of an export. `current`: the settings in force now; each turn carries its own.
pub(crate) fn export_text(
    format: ExportFormat,
    conversation: &SavedConversation,
    current: &TurnSettings,
) -> Result<String, String> {
    match format {
        // Markdown is read by a person (`cat`, a viewer): the model's and the file's bytes are
        // neutralised; the JSON keeps them exact with the unsafe characters escaped.
        ExportFormat::Markdown => Ok(crate::text::terminal_safe(&crate::history::export_markdown(
            conversation,
            current,
        ))
        .into_owned()),
        ExportFormat::Json => {
            let mut value = serde_json::to_value(conversation).map_err(|e| e.to_string())?;
            if let Some(map) = value.as_object_mut() {
                // The settings the next turn would use; each turn has its own `settings`.
                map.insert("sampling".into(), sampling_json(current));
            }
            serde_json::to_string_pretty(&value)
                .map(|json| crate::text::json_safe(&json).into_owned())
                .map_err(|e| e.to_string())
        }
    }
}

/// An export goes where the user said, into a folder that exists: a typo in the path is said,
/// not turned into new folders.
pub(crate) fn check_export_dir(path: &Path) -> Result<(), String> {
    let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
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
        let s = TurnSettings {
            sampling: crate::engine::SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                seed: 7,
                ..Default::default()
            },
            max_tokens: 128,
            ignore_eos: false,
            system_prompt: None,
        };
        let md = export_text(ExportFormat::Markdown, &conv(), &s).unwrap();
        assert!(md.starts_with("# Conversation"), "{md}");
        assert!(
            md.contains("*sampling: temperature 0.8 · top_k 40 · top_p 0.95"),
            "{md}"
        );
        assert!(md.contains("seed 7 · max 128 tokens"), "{md}");
        let json = export_text(ExportFormat::Json, &conv(), &s).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["sampling"]["temperature"], serde_json::json!(0.8));
        assert_eq!(v["sampling"]["max_tokens"], serde_json::json!(128));
        assert_eq!(v["id"], serde_json::json!("20261130-084512-abcd"));
        assert!(!json.contains("0.800000"), "{json}");
    }

    #[test]
    fn exports_never_carry_a_control_sequence_and_json_stays_exact() {
        let hostile = "evil\u{1b}]52;c;cm0gLXJm\u{7}\u{9b}2J\u{202e}fdp.gguf";
        let mut c = conv();
        c.model_file = Some(hostile.to_string());
        c.system_prompt = Some(format!("be {hostile}"));
        let s = TurnSettings {
            sampling: crate::engine::SamplingParams::default(),
            max_tokens: 64,
            ignore_eos: false,
            system_prompt: None,
        };
        let md = export_text(ExportFormat::Markdown, &c, &s).unwrap();
        assert!(!md.chars().any(crate::text::is_unsafe), "{md:?}");
        assert!(md.contains("evil␛]52;c;cm0gLXJm␇"), "{md}");
        let json = export_text(ExportFormat::Json, &c, &s).unwrap();
        assert!(!json.chars().any(crate::text::is_unsafe), "{json:?}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["model_file"], serde_json::json!(hostile));
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
