//! The built-in vocabulary and chat template of synthetic models.
//!
//! Owns a small SentencePiece-style (`tokenizer.ggml.model = "llama"`) vocabulary that
//! llama.cpp's SPM tokenizer can use unchanged: control tokens, the 256 byte-fallback tokens,
//! the Llama 3 chat control tokens, then word pieces. Any text tokenizes (bytes are the
//! fallback) and detokenizes back exactly, so the engine's streaming, UTF-8 handling and chat
//! formatting run against a real tokenizer even though the weights are noise.
//!
//! How llama.cpp's SPM tokenizer uses this (llama-vocab.cpp, `llm_tokenizer_spm_session`): text
//! is split into UTF-8 characters, spaces become "▁", then adjacent symbols are merged while
//! their concatenation is a token, highest score first; leftovers become `<0xXX>` tokens. A
//! merge needs both halves to exist, so every word piece here comes with all of its prefixes
//! ("▁t", "▁th", "▁the"), and longer pieces score higher so whole words win.

use std::collections::HashSet;
use std::sync::OnceLock;

/// SentencePiece token types, as `enum llama_token_type` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum TokenType {
    /// A piece of text.
    Normal = 1,
    /// The unknown token.
    Unknown = 2,
    /// Control tokens (BOS, EOS, chat markers): never produced from plain text.
    Control = 3,
    /// `<0xXX>` byte-fallback tokens.
    Byte = 6,
}

/// Id of `<unk>`.
pub(crate) const UNK_TOKEN_ID: u32 = 0;
/// Id of the first byte token `<0x00>`; byte `b` is `BYTE_TOKEN_BASE_ID + b`.
pub(crate) const BYTE_TOKEN_BASE_ID: u32 = 3;
/// Id of `<|begin_of_text|>`, the BOS token.
pub(crate) const BOS_TOKEN_ID: u32 = BYTE_TOKEN_BASE_ID + 256;
/// Id of `<|start_header_id|>`.
#[cfg(test)]
pub(crate) const START_HEADER_TOKEN_ID: u32 = BOS_TOKEN_ID + 1;
/// Id of `<|end_header_id|>`.
#[cfg(test)]
pub(crate) const END_HEADER_TOKEN_ID: u32 = BOS_TOKEN_ID + 2;
/// Id of `<|eot_id|>`, both EOS and EOT so that generation stops at the end of a turn.
pub(crate) const EOT_TOKEN_ID: u32 = BOS_TOKEN_ID + 3;

/// The SentencePiece word-boundary marker (U+2581) that stands for a space.
pub(crate) const SPACE_MARKER: &str = "\u{2581}";

/// Meta-Llama-3-8B-Instruct's chat template, verbatim. llama.cpp recognises it as `llama3`
/// from the `<|start_header_id|>`/`<|end_header_id|>` markers (llama-chat.cpp).
pub(crate) const LLAMA3_CHAT_TEMPLATE: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

/// Common English words; each becomes "▁word" with all its prefixes.
const WORDS: &[&str] = &[
    "a",
    "about",
    "after",
    "all",
    "also",
    "am",
    "an",
    "and",
    "answer",
    "any",
    "are",
    "as",
    "ask",
    "assistant",
    "at",
    "be",
    "because",
    "been",
    "before",
    "but",
    "by",
    "can",
    "code",
    "could",
    "data",
    "day",
    "did",
    "do",
    "does",
    "each",
    "even",
    "first",
    "for",
    "from",
    "get",
    "give",
    "go",
    "good",
    "great",
    "had",
    "has",
    "have",
    "he",
    "hello",
    "help",
    "her",
    "here",
    "him",
    "his",
    "how",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "just",
    "know",
    "like",
    "look",
    "make",
    "many",
    "me",
    "model",
    "more",
    "most",
    "my",
    "new",
    "no",
    "not",
    "now",
    "of",
    "on",
    "one",
    "only",
    "or",
    "other",
    "our",
    "out",
    "over",
    "people",
    "question",
    "say",
    "see",
    "she",
    "so",
    "some",
    "system",
    "take",
    "tell",
    "test",
    "than",
    "thank",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "thing",
    "think",
    "this",
    "time",
    "to",
    "token",
    "two",
    "up",
    "us",
    "use",
    "user",
    "very",
    "want",
    "was",
    "way",
    "we",
    "well",
    "were",
    "what",
    "when",
    "which",
    "who",
    "will",
    "with",
    "word",
    "work",
    "world",
    "would",
    "write",
    "year",
    "yes",
    "you",
    "your",
];

/// Pieces that also appear without a leading space: capitalised sentence starters, which
/// begin a text that has no space prefix, and common suffixes.
const BARE_PIECES: &[&str] = &[
    "Hello", "Hi", "How", "I", "It", "The", "This", "What", "When", "Why", "You", "ing", "ed",
    "er", "ly", "tion", "es", "est", "ment", "ness", "'s", "'t", "'re", "'ll",
];

/// The vocabulary as the three parallel arrays GGUF stores.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Vocabulary {
    /// Token texts; the index is the token id.
    pub tokens: Vec<String>,
    /// Merge priorities (higher merges first).
    pub scores: Vec<f32>,
    /// Token types.
    pub token_types: Vec<TokenType>,
}

impl Vocabulary {
    /// The built-in vocabulary, built once. Deterministic: the same ids in every build.
    #[must_use]
    pub(crate) fn builtin() -> &'static Self {
        static BUILTIN: OnceLock<Vocabulary> = OnceLock::new();
        BUILTIN.get_or_init(Self::build)
    }

    fn build() -> Self {
        let mut vocab = Self {
            tokens: Vec::new(),
            scores: Vec::new(),
            token_types: Vec::new(),
        };
        let mut seen = HashSet::new();
        let mut push = |vocab: &mut Self, text: String, score: f32, token_type: TokenType| {
            // llama.cpp asserts that no two ids share a text, so duplicates are skipped here.
            if seen.insert(text.clone()) {
                vocab.tokens.push(text);
                vocab.scores.push(score);
                vocab.token_types.push(token_type);
            }
        };

        push(&mut vocab, "<unk>".into(), 0.0, TokenType::Unknown);
        push(&mut vocab, "<s>".into(), 0.0, TokenType::Control);
        push(&mut vocab, "</s>".into(), 0.0, TokenType::Control);
        for byte in 0..=255_u8 {
            // Upper-case hex: llama.cpp looks byte tokens up by exactly this spelling.
            push(&mut vocab, format!("<0x{byte:02X}>"), 0.0, TokenType::Byte);
        }
        for control in [
            "<|begin_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ] {
            push(&mut vocab, control.into(), 0.0, TokenType::Control);
        }

        push(&mut vocab, SPACE_MARKER.into(), 1.0, TokenType::Normal);
        // Printable ASCII except space (which the tokenizer has already turned into "▁").
        for c in '!'..='~' {
            push(&mut vocab, c.to_string(), 1.0, TokenType::Normal);
        }
        let with_prefixes = |word: &str| -> Vec<String> {
            let chars: Vec<char> = word.chars().collect();
            (2..=chars.len())
                .map(|n| chars[..n].iter().collect())
                .collect()
        };
        let words = WORDS.iter().map(|word| format!("{SPACE_MARKER}{word}"));
        let bare = BARE_PIECES.iter().map(|bare| bare.to_string());
        for piece in words.chain(bare).flat_map(|w| with_prefixes(&w)) {
            let score = piece.chars().count() as f32;
            push(&mut vocab, piece, score, TokenType::Normal);
        }
        vocab
    }

    /// Number of tokens.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }
}

/// Number of tokens in the built-in vocabulary (`n_vocab` of every synthetic model).
#[must_use]
pub fn vocab_size() -> u32 {
    // A few hundred entries: always fits.
    Vocabulary::builtin().len() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_ids_match_their_tokens() {
        let vocab = Vocabulary::builtin();
        let text = |id: u32| vocab.tokens[id as usize].as_str();
        assert_eq!(text(UNK_TOKEN_ID), "<unk>");
        assert_eq!(text(BYTE_TOKEN_BASE_ID), "<0x00>");
        assert_eq!(text(BYTE_TOKEN_BASE_ID + 0x0A), "<0x0A>");
        assert_eq!(text(BYTE_TOKEN_BASE_ID + 255), "<0xFF>");
        assert_eq!(text(BOS_TOKEN_ID), "<|begin_of_text|>");
        assert_eq!(text(START_HEADER_TOKEN_ID), "<|start_header_id|>");
        assert_eq!(text(END_HEADER_TOKEN_ID), "<|end_header_id|>");
        assert_eq!(text(EOT_TOKEN_ID), "<|eot_id|>");
        assert_eq!(vocab.token_types[EOT_TOKEN_ID as usize], TokenType::Control);
        assert_eq!(vocab.token_types[UNK_TOKEN_ID as usize], TokenType::Unknown);
    }

    #[test]
    fn tokens_are_unique_non_empty_and_arrays_parallel() {
        let vocab = Vocabulary::builtin();
        let unique: HashSet<&String> = vocab.tokens.iter().collect();
        assert_eq!(unique.len(), vocab.len());
        assert!(vocab.tokens.iter().all(|t| !t.is_empty()));
        assert_eq!(vocab.scores.len(), vocab.len());
        assert_eq!(vocab.token_types.len(), vocab.len());
        assert_eq!(vocab_size() as usize, vocab.len());
        let normal = vocab
            .token_types
            .iter()
            .filter(|&&t| t == TokenType::Normal)
            .count();
        assert!((300..1200).contains(&normal), "{normal} normal pieces");
    }

    #[test]
    fn every_multi_char_piece_has_its_prefix() {
        // SPM only reaches a piece through merges of pieces that exist.
        let vocab = Vocabulary::builtin();
        let all: HashSet<&str> = vocab.tokens.iter().map(String::as_str).collect();
        for (text, token_type) in vocab.tokens.iter().zip(&vocab.token_types) {
            let chars: Vec<char> = text.chars().collect();
            if *token_type != TokenType::Normal || chars.len() < 2 {
                continue;
            }
            let prefix: String = chars[..chars.len() - 1].iter().collect();
            let last = chars[chars.len() - 1].to_string();
            assert!(all.contains(prefix.as_str()), "{text}: missing {prefix}");
            assert!(all.contains(last.as_str()), "{text}: missing {last}");
        }
    }

    #[test]
    fn template_is_the_llama3_one() {
        assert!(LLAMA3_CHAT_TEMPLATE.starts_with("{% set loop_messages = messages %}"));
        assert!(LLAMA3_CHAT_TEMPLATE.contains("<|start_header_id|>"));
        assert!(LLAMA3_CHAT_TEMPLATE.contains("<|end_header_id|>\\n\\n"));
        assert!(LLAMA3_CHAT_TEMPLATE.contains("<|eot_id|>"));
    }
}
