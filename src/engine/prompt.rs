//! Building the prompt from a conversation: which chat template to use, the completion-style
//! transcript for base models that have none, and the shared-prefix arithmetic behind KV-cache
//! reuse across turns.

use super::{ChatMessage, Role};

/// The llama.cpp built-in template for an architecture, when the GGUF carries none.
pub(crate) fn template_for_architecture(
    arch: &str,
    has_llama3_tokens: bool,
) -> Option<&'static str> {
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
        let (before, after) = match m.role {
            Role::System => ("", "\n\n"),
            Role::User => ("Question: ", "\n"),
            Role::Assistant => ("Answer: ", "\n\n"),
        };
        out.push_str(before);
        out.push_str(m.content.trim());
        out.push_str(after);
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
