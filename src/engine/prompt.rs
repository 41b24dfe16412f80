//! Building the prompt from a conversation: which chat template to use (the model's own
//! Jinja template first, `template.rs`), the completion-style transcript for base models that
//! have none, the prompt's tokens (the template's markers as special tokens, the messages'
//! content as text), and the shared-prefix arithmetic behind KV-cache reuse across turns.

use std::path::Path;

use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use super::template::ChatTemplate;
use super::{ChatMessage, Role};
use crate::llama;
use crate::llama::error::EngineError;
use crate::llama::settings::TemplateChoice;

/// How prompts are built for the loaded model.
pub(crate) enum PromptStyle {
    /// A Hugging Face Jinja template (the GGUF's own, a named one in the GGUF, or a file),
    /// rendered as transformers renders it.
    Jinja(Box<ChatTemplate>),
    /// One of llama.cpp's built-in templates (by name, or the one its heuristics match to a
    /// GGUF template that cannot be rendered).
    Builtin(LlamaChatTemplate),
    Completion,
}

/// Builds the loaded model's prompts: the chosen template, and what tokenizing them needs.
pub(crate) struct PromptBuilder<'m> {
    model: &'m LlamaModel,
    pub(crate) style: PromptStyle,
    /// Where the template came from, for the stamp and the status line ("model", "file
    /// t.jinja", "chatml", "completion", …).
    pub(crate) label: String,
    /// Why that template was chosen, when it is not the model's own rendered as its makers
    /// render it.
    pub(crate) note: Option<String>,
    /// The model's `tokenizer.ggml.pre`: what text its tokenizer cannot take depends on it
    /// (`llama::runs`).
    tokenizer_kind: llama::runs::TokenizerKind,
    /// The texts of the vocabulary's control and user-defined tokens: in a message's content
    /// they are text, never tokens (a pasted `<|eot_id|>` must not end the user's turn).
    special_texts: Vec<String>,
}

/// Marks a message's place in the templated prompt, so the template's text around it can be
/// tokenized with its special tokens and the message without (private-use code points).
fn content_marker(i: usize) -> String {
    format!("\u{E000}tokscope-message-{i}\u{E001}")
}

impl<'m> PromptBuilder<'m> {
    /// The prompt builder `choice` asks for on `model` (`resolve_template`'s rule).
    pub(crate) fn new(model: &'m LlamaModel, choice: &TemplateChoice) -> Result<Self, EngineError> {
        let (style, label, note) = resolve_template(model, choice)?;
        Ok(Self {
            model,
            style,
            label,
            note,
            tokenizer_kind: llama::runs::TokenizerKind::of(model),
            special_texts: special_texts(model),
        })
    }

    pub(crate) fn is_completion(&self) -> bool {
        matches!(self.style, PromptStyle::Completion)
    }

    /// The conversation's prompt: its tokens and its text. The template's own markers are
    /// special tokens; the messages' content is tokenized as text, whatever it contains.
    pub(crate) fn tokenize_messages(
        &self,
        messages: &[ChatMessage],
    ) -> Result<(Vec<LlamaToken>, String), EngineError> {
        for m in messages {
            llama::runs::check(&m.content, &self.tokenizer_kind)?;
        }
        let vocab = self.model.vocab();
        if let PromptStyle::Completion = &self.style {
            // tokscope's own transcript has no control tokens: nothing in it is parsed as one.
            let prompt = completion_transcript(messages);
            let tokens = dedup_bos(vocab.tokenize(prompt.as_bytes(), true, false), vocab.bos());
            return Ok((tokens, prompt));
        }
        let real = self.build_prompt(messages)?;
        // A user's or system's text that looks like a special token stays text. The model's own
        // answers are given back as it wrote them (its `<think>` is its token), as llama-server
        // does, so that a template sees the markers it splits earlier thinking on.
        let guarded: Vec<usize> = (0..messages.len())
            .filter(|&i| {
                messages[i].role != Role::Assistant
                    && self
                        .special_texts
                        .iter()
                        .any(|s| messages[i].content.contains(s.as_str()))
            })
            .collect();
        if guarded.is_empty() {
            // Nothing in the content looks like a special token: one pass (as llama.cpp does).
            let tokens = self.tokenize(&real);
            return Ok((tokens, real));
        }
        let marked: Vec<ChatMessage> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| match guarded.contains(&i) {
                true => ChatMessage::new(m.role, content_marker(i)),
                false => m.clone(),
            })
            .collect();
        let skeleton = self.build_prompt(&marked)?;
        let mut rest = skeleton.as_str();
        let segments: Option<Vec<&str>> = guarded
            .iter()
            .map(|&i| {
                let marker = content_marker(i);
                let at = rest.find(&marker)?;
                let segment = &rest[..at];
                rest = &rest[at + marker.len()..];
                Some(segment)
            })
            .collect();
        // Templates insert the content as it is or trimmed: whichever rebuilds the real prompt.
        for trim in [false, true].into_iter().filter(|_| segments.is_some()) {
            let mut rebuilt = String::with_capacity(real.len());
            let mut tokens = Vec::new();
            for (k, (template_text, &i)) in segments.iter().flatten().zip(&guarded).enumerate() {
                let content = messages[i].content.replace('\0', "\u{FFFD}");
                let content = if trim { content.trim() } else { &content };
                rebuilt.push_str(template_text);
                rebuilt.push_str(content);
                tokens.extend(vocab.tokenize(template_text.as_bytes(), k == 0, true));
                tokens.extend(vocab.tokenize(content.as_bytes(), false, false));
            }
            rebuilt.push_str(rest);
            tokens.extend(vocab.tokenize(rest.as_bytes(), false, true));
            if rebuilt == real {
                return Ok((dedup_bos(tokens, vocab.bos()), real));
            }
        }
        // A template that rewrites the content: the special texts in it are broken up with a
        // zero-width joiner so they stay text.
        tracing::warn!(
            "the chat template rewrites message content; special-token texts in it are broken up"
        );
        let defused: Vec<ChatMessage> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut content = m.content.clone();
                for s in self.special_texts.iter().filter(|_| guarded.contains(&i)) {
                    let at = s.chars().next().map_or(0, char::len_utf8);
                    content = content.replace(s, &format!("{}\u{200D}{}", &s[..at], &s[at..]));
                }
                ChatMessage {
                    content,
                    ..m.clone()
                }
            })
            .collect();
        let text = self.build_prompt(&defused)?;
        Ok((self.tokenize(&text), text))
    }

    /// `text` (a prompt this builder made) with its special tokens located: each control or
    /// user-defined token of `tokens` found in the text from where the previous token ended.
    pub(crate) fn shown(&self, text: &str, tokens: &[LlamaToken]) -> super::PromptText {
        use llama_cpp_2::token_type::LlamaTokenAttr;
        let vocab = self.model.vocab();
        let mut special = Vec::new();
        let mut at = 0;
        for &t in tokens {
            let piece = vocab.token_to_piece(t, true, None);
            let piece = String::from_utf8_lossy(&piece);
            let attr = vocab.attr(t);
            if attr.contains(LlamaTokenAttr::Control) || attr.contains(LlamaTokenAttr::UserDefined)
            {
                if let Some(found) = text.get(at..).and_then(|rest| rest.find(piece.as_ref())) {
                    special.push(at + found..at + found + piece.len());
                    at += found + piece.len();
                }
            } else {
                // A text piece: move on by its length, never past a character boundary.
                at = (at + piece.len()).min(text.len());
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
            }
        }
        super::PromptText {
            text: text.to_string(),
            special,
        }
    }

    fn build_prompt(&self, messages: &[ChatMessage]) -> Result<String, EngineError> {
        // A NUL byte (a model can generate one) cannot cross into C: replace it rather than
        // fail every later turn of the conversation.
        let clean = |m: &ChatMessage| m.content.replace('\0', "\u{FFFD}");
        match &self.style {
            PromptStyle::Completion => Ok(completion_transcript(messages)),
            PromptStyle::Jinja(template) => {
                let messages: Vec<ChatMessage> = messages
                    .iter()
                    .map(|m| ChatMessage {
                        content: clean(m),
                        ..m.clone()
                    })
                    .collect();
                template
                    .render(&messages, true)
                    .map_err(|e| EngineError::Template(e.to_string()))
            }
            PromptStyle::Builtin(template) => {
                let chat = messages
                    .iter()
                    .map(|m| LlamaChatMessage::new(m.role.as_str().into(), clean(m)))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| EngineError::Template(e.to_string()))?;
                self.model
                    .apply_chat_template(template, &chat, true)
                    .map_err(|e| EngineError::Template(e.to_string()))
            }
        }
    }

    fn tokenize(&self, prompt: &str) -> Vec<LlamaToken> {
        let vocab = self.model.vocab();
        dedup_bos(vocab.tokenize(prompt.as_bytes(), true, true), vocab.bos())
    }
}

/// A token's text as a template sees it (`bos_token`, `eos_token`): its piece with special
/// tokens rendered, as llama-server gives it to `--jinja` templates; empty for none.
fn token_text(model: &LlamaModel, token: LlamaToken) -> String {
    if token.0 < 0 {
        return String::new();
    }
    String::from_utf8_lossy(&model.vocab().token_to_piece(token, true, None)).into_owned()
}

/// A Jinja template with the model's BOS and EOS texts, compiled and tried on one message.
fn jinja(model: &LlamaModel, source: &str) -> Result<PromptStyle, String> {
    let vocab = model.vocab();
    let t = ChatTemplate::new(
        source,
        &token_text(model, vocab.bos()),
        &token_text(model, vocab.eos()),
    )
    .map_err(|e| e.0)?;
    t.probe().map_err(|e| e.0)?;
    Ok(PromptStyle::Jinja(Box::new(t)))
}

/// The template file given to `--template FILE`, read with a bound on its size.
fn read_template_file(path: &Path) -> Result<String, EngineError> {
    use std::io::Read;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| {
        EngineError::Template(format!("cannot read the template file {shown}: {e}"))
    })?;
    let mut source = String::new();
    file.take(super::template::MAX_TEMPLATE_BYTES as u64 + 1)
        .read_to_string(&mut source)
        .map_err(|e| {
            EngineError::Template(format!(
                "cannot read the template file {shown}: {e} (a Jinja chat template is UTF-8 text)"
            ))
        })?;
    Ok(source)
}

/// The note of `--template completion` on a model that has a chat template of its own.
pub(crate) const COMPLETION_ON_A_CHAT_MODEL: &str = "completion-style transcript, but this model \
    has a chat template of its own: an instruct model often answers such a prompt with \
    nothing; leave out --template (or give --template model) to use its own";

/// Decide how prompts are built: (style, label for the stamp, note when not the model's own
/// rendered as its makers render it).
///
/// The model's own template (`tokenizer.chat_template`) is rendered as Jinja, as transformers
/// and llama-server `--jinja` render it. Only when it cannot be rendered does llama.cpp's
/// built-in template that its heuristics match to it stand in (they drop a template's default
/// system prompt, for one), and the note says so and why.
fn resolve_template(
    model: &LlamaModel,
    choice: &TemplateChoice,
) -> Result<(PromptStyle, String, Option<String>), EngineError> {
    let embedded = |name: Option<&str>| {
        model
            .chat_template(name)
            .ok()
            .and_then(|t| t.to_string().ok())
    };
    let builtin_probe = |t: &LlamaChatTemplate| -> Result<(), String> {
        let msg =
            LlamaChatMessage::new("user".into(), "hello".into()).map_err(|e| e.to_string())?;
        model
            .apply_chat_template(t, &[msg], true)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let named = |name: &str| -> Result<PromptStyle, EngineError> {
        let t = LlamaChatTemplate::new(name).map_err(|e| EngineError::Template(e.to_string()))?;
        builtin_probe(&t).map_err(|e| {
            EngineError::Template(format!(
                "llama.cpp has no built-in template named `{name}` ({e})"
            ))
        })?;
        Ok(PromptStyle::Builtin(t))
    };
    let completion = |note| Ok((PromptStyle::Completion, "completion".into(), note));
    match choice {
        // An instruct model given a bare transcript often answers nothing: say so up front.
        TemplateChoice::Completion => {
            completion(embedded(None).map(|_| COMPLETION_ON_A_CHAT_MODEL.to_string()))
        }
        TemplateChoice::File(path) => {
            let source = read_template_file(path)?;
            let style = jinja(model, &source).map_err(|e| {
                EngineError::Template(format!("the template file {}: {e}", path.display()))
            })?;
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            Ok((style, format!("file {name}"), None))
        }
        TemplateChoice::Named(name) => match embedded(Some(name)) {
            // The GGUF's own named template (`tokenizer.chat_template.<name>`: tool_use, rag).
            Some(source) => {
                let style = jinja(model, &source).map_err(|e| {
                    EngineError::Template(format!("the model's `{name}` template: {e}"))
                })?;
                Ok((style, format!("model {name}"), None))
            }
            None => Ok((named(name)?, name.clone(), None)),
        },
        TemplateChoice::Model => {
            let source = embedded(None)
                .ok_or_else(|| EngineError::Template("the GGUF carries no chat template".into()))?;
            let style = jinja(model, &source).map_err(|e| {
                EngineError::Template(format!("the model's chat template cannot be rendered: {e}"))
            })?;
            Ok((style, "model".into(), None))
        }
        TemplateChoice::Auto | TemplateChoice::Architecture => {
            if let Some(source) = embedded(None) {
                let why = match jinja(model, &source) {
                    Ok(style) => return Ok((style, "model".into(), None)),
                    Err(e) => e,
                };
                tracing::warn!("the model's chat template cannot be rendered: {why}");
                let matched = LlamaChatTemplate::new(&source)
                    .ok()
                    .filter(|t| builtin_probe(t).is_ok());
                return match matched {
                    Some(t) => Ok((
                        PromptStyle::Builtin(t),
                        "llama.cpp's match".into(),
                        Some(format!(
                            "the model's chat template cannot be rendered ({why}); llama.cpp's built-in template that matches it is used instead"
                        )),
                    )),
                    None => completion(Some(format!(
                        "the model's chat template cannot be rendered ({why}) and llama.cpp has no built-in match for it; using a completion-style transcript"
                    ))),
                };
            }
            if *choice == TemplateChoice::Auto {
                return completion(Some("no chat template in the GGUF (a base model): completion-style Question/Answer transcript".into()));
            }
            let arch = model
                .meta_val_str("general.architecture")
                .unwrap_or_default();
            let name =
                template_for_architecture(&arch, has_llama3_tokens(model)).ok_or_else(|| {
                    EngineError::Template(format!(
                        "no built-in template is known for architecture `{arch}`"
                    ))
                })?;
            Ok((
                named(name)?,
                name.to_string(),
                Some(format!(
                    "no chat template in the GGUF: llama.cpp's `{name}` for architecture `{arch}`"
                )),
            ))
        }
    }
}

fn has_llama3_tokens(model: &LlamaModel) -> bool {
    let vocab = model.vocab();
    let t = vocab.tokenize(b"<|eot_id|>", false, true);
    t.len() == 1 && vocab.is_eog(t[0])
}

/// A template that writes the BOS text itself would otherwise give two BOS tokens.
fn dedup_bos(mut tokens: Vec<LlamaToken>, bos: LlamaToken) -> Vec<LlamaToken> {
    if tokens.len() >= 2 && tokens[0] == bos && tokens[1] == bos {
        tokens.remove(0);
    }
    tokens
}

/// The texts of the model's control and user-defined tokens.
fn special_texts(model: &LlamaModel) -> Vec<String> {
    use llama_cpp_2::token_type::LlamaTokenAttr;
    let vocab = model.vocab();
    vocab
        .tokens()
        .filter(|&t| {
            let attr = vocab.attr(t);
            attr.contains(LlamaTokenAttr::Control) || attr.contains(LlamaTokenAttr::UserDefined)
        })
        .filter_map(|t| Some(vocab.text(t)?.to_str().ok()?.to_owned()))
        .filter(|s| s.len() > 1)
        .collect()
}

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
