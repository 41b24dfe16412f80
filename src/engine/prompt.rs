//! Building the prompt from a conversation: which chat template to use, the completion-style
//! transcript for base models that have none, and the shared-prefix arithmetic behind KV-cache
//! reuse across turns.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use super::{ChatMessage, Role};

/// How the prompt is built from the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TemplateChoice {
    /// The GGUF's own chat template; a completion-style transcript when it has none (a model
    /// without a template is almost always a base model, which chat markers make babble).
    #[default]
    Auto,
    /// The GGUF's own chat template, or an error when it has none.
    Model,
    /// The template llama.cpp associates with the model's architecture (gemma → gemma,
    /// llama with Llama 3 tokens → llama3, …), used when the GGUF carries none.
    Architecture,
    /// A plain `Question: …\nAnswer:` transcript, for base (not instruction-tuned) models.
    Completion,
    /// One of llama.cpp's built-in templates by name (llama3, gemma, chatml, mistral-v7, …).
    Named(String),
}

impl FromStr for TemplateChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s {
            "" => Err("must be auto, model, arch, completion or a llama.cpp template name".into()),
            "auto" => Ok(Self::Auto),
            "model" => Ok(Self::Model),
            "arch" | "architecture" => Ok(Self::Architecture),
            "completion" => Ok(Self::Completion),
            name if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
            {
                Ok(Self::Named(name.to_string()))
            }
            _ => Err("a template name is letters, digits, '-', '_' or '.'".into()),
        }
    }
}

impl fmt::Display for TemplateChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Model => f.write_str("model"),
            Self::Architecture => f.write_str("arch"),
            Self::Completion => f.write_str("completion"),
            Self::Named(n) => f.write_str(n),
        }
    }
}

impl Serialize for TemplateChoice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The llama.cpp built-in template for an architecture, when the GGUF carries none.
pub fn template_for_architecture(arch: &str, has_llama3_tokens: bool) -> Option<&'static str> {
    Some(match arch {
        "llama" if has_llama3_tokens => "llama3",
        "llama" => "llama2",
        a if a.starts_with("gemma") => "gemma",
        "qwen2" | "qwen3" | "qwen2moe" | "qwen3moe" => "chatml",
        "phi3" => "phi3",
        "mistral3" => "mistral-v7",
        "deepseek2" => "deepseek2",
        "command-r" => "command-r",
        _ => return None,
    })
}

/// Stop strings of the completion transcript: the model starting the next exchange.
pub const COMPLETION_STOPS: [&str; 2] = ["\nQuestion:", "\nAnswer:"];

/// A plain transcript for base models:
///
/// ```text
/// {system}
///
/// Question: {user}
/// Answer: {assistant}
///
/// Question: {user}
/// Answer:
/// ```
pub fn completion_transcript(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        let content = m.content.trim();
        match m.role {
            Role::System => {
                out.push_str(content);
                out.push_str("\n\n");
            }
            Role::User => {
                out.push_str("Question: ");
                out.push_str(content);
                out.push('\n');
            }
            Role::Assistant => {
                out.push_str("Answer: ");
                out.push_str(content);
                out.push_str("\n\n");
            }
        }
    }
    out.push_str("Answer:");
    out
}

/// Length of the shared prefix of two token sequences.
pub fn common_prefix_len<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_for_base_models() {
        let msgs = vec![
            ChatMessage::new(Role::System, "Be brief."),
            ChatMessage::new(Role::User, "What is the capital of France?"),
            ChatMessage::new(Role::Assistant, " Paris"),
            ChatMessage::new(Role::User, "And of Italy?"),
        ];
        assert_eq!(
            completion_transcript(&msgs),
            "Be brief.\n\nQuestion: What is the capital of France?\nAnswer: Paris\n\nQuestion: And of Italy?\nAnswer:"
        );
        // The earlier turns' text is a prefix of the longer conversation's: KV reuse works.
        let first = completion_transcript(&msgs[..2]);
        let second = completion_transcript(&msgs);
        assert!(second.starts_with(first.trim_end_matches("Answer:")));
    }

    #[test]
    fn template_choice_parses() {
        assert_eq!("auto".parse(), Ok(TemplateChoice::Auto));
        assert_eq!("completion".parse(), Ok(TemplateChoice::Completion));
        assert_eq!("arch".parse(), Ok(TemplateChoice::Architecture));
        assert_eq!("llama3".parse(), Ok(TemplateChoice::Named("llama3".into())));
        assert!("".parse::<TemplateChoice>().is_err());
        assert!("{% jinja %}".parse::<TemplateChoice>().is_err());
        assert_eq!(TemplateChoice::Named("gemma".into()).to_string(), "gemma");
    }

    #[test]
    fn architecture_table() {
        assert_eq!(template_for_architecture("gemma3", false), Some("gemma"));
        assert_eq!(template_for_architecture("llama", true), Some("llama3"));
        assert_eq!(template_for_architecture("llama", false), Some("llama2"));
        assert_eq!(template_for_architecture("mamba", false), None);
    }

    #[test]
    fn prefix() {
        assert_eq!(common_prefix_len(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix_len::<i32>(&[], &[1]), 0);
        assert_eq!(common_prefix_len(&[1, 2], &[1, 2]), 2);
    }
}
