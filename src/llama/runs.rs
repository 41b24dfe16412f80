//! What text may be handed to llama.cpp's tokenizer without ending the process.
//!
//! Most of llama.cpp's BPE pre-tokenizers (deepseek-llm, falcon, bloom and dozens more) split
//! text with `std::wregex`, which recurses once per character of a match: a long run of one
//! character class (letters, digits, punctuation, ...) overflows the thread's stack, and the
//! process dies of SIGSEGV in the middle of a turn. Measured here: on a 2 MiB thread stack
//! (Rust's default) a run of 6,400 'A' or '!' crashed deepseek-llm, falcon and bloom alike,
//! about 330 bytes of stack per character.
//!
//! The design: every thread that tokenizes a user's text with llama.cpp (the engine, the live
//! token count) runs on a [`TOKENIZER_STACK_BYTES`] stack (reserved, not committed: only
//! what is touched is memory), which puts the crash near 200,000 characters; and text with a
//! run longer than [`MAX_RUN`], a quarter of that, is refused before llama.cpp sees it, with a
//! message that names the run. More refusals came out of the matrix test: whitespace past
//! [`MAX_SPACE_RUN`] (quadratic time in deepseek-llm's family: 20,000 spaces before CJK text
//! took 20 s, with no way to cancel), digits past [`MAX_DIGIT_RUN`] (superbpe: 16,000 digits
//! took 22 s), and, for the `whitespace` pre-tokenizer, two
//! whitespace characters in a row (llama.cpp aborts: `GGML_ASSERT(token_left.find(' ') ==
//! std::string::npos)` in its BPE merge lookup). `tests/pretokenizer_matrix.rs` tokenizes runs of `MAX_RUN` of
//! every class with every pre-tokenizer the linked llama.cpp ships, through the real binary.

use super::error::EngineError;

/// The stack of a thread that hands user text to llama.cpp's tokenizer.
pub const TOKENIZER_STACK_BYTES: usize = 64 << 20;

/// The longest run of one character class handed to llama.cpp's tokenizer.
pub const MAX_RUN: usize = 50_000;
/// The longest run of whitespace: a long run of whitespace followed by other text takes
/// deepseek-llm's pre-tokenizer (and its family's) time quadratic in the run.
pub const MAX_SPACE_RUN: usize = 2_000;
/// The longest run of digits: superbpe's `(?=(\d{3})+(?!\d))` takes time worse than
/// quadratic in it (8,000 digits 1.4 s, 16,000 digits 22 s).
pub const MAX_DIGIT_RUN: usize = 2_000;

/// The longest run of one character class handed to a SentencePiece (`llama`) vocabulary's
/// tokenizer: llama.cpp's SPM tokenizer takes time quadratic in a run of characters it has to
/// spell as bytes (byte fallback; measured on the synthetic tiny vocabulary: 10,000 '日' 0.04 s,
/// 20,000 0.15 s, 40,000 0.63 s; a run broken by a character the vocabulary has is linear).
pub const MAX_SPM_RUN: usize = 10_000;

/// What of a vocabulary decides which text its tokenizer takes: the BPE pre-tokenizer
/// (`tokenizer.ggml.pre`) and whether it is SentencePiece (`tokenizer.ggml.model` = `llama`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerKind {
    pub pre: Option<String>,
    pub spm: bool,
}

impl TokenizerKind {
    #[must_use]
    pub fn of(model: &llama_cpp_2::model::LlamaModel) -> Self {
        Self {
            pre: model.meta_val_str("tokenizer.ggml.pre").ok(),
            spm: model.meta_val_str("tokenizer.ggml.model").ok().as_deref() == Some("llama"),
        }
    }
}

/// The classes a pre-tokenizer's regexes match runs of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Digit
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}

/// The longest run of characters of one class in `text`, and the longest of whitespace: each
/// as its length in characters and its first character.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Runs {
    pub longest: Option<(usize, char)>,
    pub longest_space: Option<(usize, char)>,
    pub longest_digits: Option<(usize, char)>,
}

#[must_use]
pub fn runs(text: &str) -> Runs {
    let mut out = Runs::default();
    let mut current: Option<(Class, usize, char)> = None;
    for c in text.chars() {
        let k = class(c);
        let (ck, n, first) = match current {
            Some((ck, n, first)) if ck == k => (ck, n + 1, first),
            _ => (k, 1, c),
        };
        current = Some((ck, n, first));
        if out.longest.is_none_or(|(b, _)| n > b) {
            out.longest = Some((n, first));
        }
        if ck == Class::Space && out.longest_space.is_none_or(|(b, _)| n > b) {
            out.longest_space = Some((n, first));
        }
        if ck == Class::Digit && out.longest_digits.is_none_or(|(b, _)| n > b) {
            out.longest_digits = Some((n, first));
        }
    }
    out
}

/// Refuses text the tokenizer of a model of this kind would crash or hang on: a run past
/// [`MAX_RUN`] ([`MAX_SPM_RUN`] for SentencePiece); whitespace past [`MAX_SPACE_RUN`]; digits
/// past [`MAX_DIGIT_RUN`]; and, for the `whitespace` pre-tokenizer, two whitespace characters
/// in a row.
pub fn check(text: &str, kind: &TokenizerKind) -> Result<(), EngineError> {
    let pre = kind.pre.as_deref();
    let r = runs(text);
    let refuse = |(chars, starting): (usize, char), max: usize, why: &'static str| {
        Err(EngineError::RunTooLong {
            chars,
            starting,
            max,
            why,
        })
    };
    if pre == Some("whitespace") {
        if let Some(run) = r.longest_space.filter(|(n, _)| *n > 1) {
            return refuse(
                run,
                1,
                "this model's pre-tokenizer (`whitespace`) makes llama.cpp abort on two \
                 whitespace characters in a row (an assertion in its BPE merge lookup)",
            );
        }
    }
    if let Some(run) = r.longest_space.filter(|(n, _)| *n > MAX_SPACE_RUN) {
        return refuse(
            run,
            MAX_SPACE_RUN,
            "whitespace followed by other text takes some pre-tokenizers time quadratic in \
             the run (20,000 spaces before CJK: 20 s with deepseek-llm's)",
        );
    }
    if let Some(run) = r.longest_digits.filter(|(n, _)| *n > MAX_DIGIT_RUN) {
        return refuse(
            run,
            MAX_DIGIT_RUN,
            "a long run of digits takes some pre-tokenizers time worse than quadratic in it \
             (16,000 digits: 22 s with superbpe's)",
        );
    }
    match r.longest {
        Some(run) if kind.spm && run.0 > MAX_SPM_RUN => refuse(
            run,
            MAX_SPM_RUN,
            "SentencePiece takes time quadratic in a run of characters it spells as bytes \
             (40,000: 0.6 s)",
        ),
        Some(run) if run.0 > MAX_RUN => refuse(
            run,
            MAX_RUN,
            "its pre-tokenizer recurses once per character and would crash",
        ),
        _ => Ok(()),
    }
}

/// Tokenizes text read from a file or typed by a user with `model`'s vocabulary, as the
/// engine does: refused by [`check`] (with the model's own pre-tokenizer) when llama.cpp would
/// crash or hang on it, and tokenized on a thread of [`TOKENIZER_STACK_BYTES`] stack, so that
/// what passes the check cannot overflow the caller's (the main thread's 8 MiB holds about
/// 25,000 characters of one run, fewer than [`MAX_RUN`]). With a 2 MiB stack instead,
/// `tests/doctor.rs`'s 40,000 '!' under falcon's pre-tokenizer died of SIGSEGV.
pub fn tokenize_checked(
    model: &llama_cpp_2::model::LlamaModel,
    text: &str,
    add_bos: bool,
    parse_special: bool,
) -> Result<Vec<llama_cpp_2::token::LlamaToken>, EngineError> {
    check(text, &TokenizerKind::of(model))?;
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("tokenize".into())
            .stack_size(TOKENIZER_STACK_BYTES)
            .spawn_scoped(scope, || {
                model
                    .vocab()
                    .tokenize(text.as_bytes(), add_bos, parse_special)
            })
            .map_err(|e| EngineError::Thread(e.to_string()))?
            .join()
            .map_err(|_| EngineError::Thread("the tokenizer thread panicked".into()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_counted_per_class_in_characters() {
        assert_eq!(runs("").longest, None);
        assert_eq!(runs("ab  cde!!").longest, Some((3, 'c')));
        assert_eq!(runs("日本語です 12").longest, Some((5, '日')));
        assert_eq!(runs("a1a1a1").longest, Some((1, 'a')));
        assert_eq!(runs("xx!!!!y").longest, Some((4, '!')));
    }

    fn bpe(pre: &str) -> TokenizerKind {
        TokenizerKind {
            pre: Some(pre.into()),
            spm: false,
        }
    }

    fn any() -> TokenizerKind {
        TokenizerKind::default()
    }

    #[test]
    fn sentencepiece_has_a_shorter_bound() {
        let spm = TokenizerKind {
            pre: None,
            spm: true,
        };
        assert!(check(&"日".repeat(MAX_SPM_RUN), &spm).is_ok());
        let err = check(&"日".repeat(MAX_SPM_RUN + 1), &spm)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SentencePiece") && err.contains("10001"),
            "{err}"
        );
        assert!(check(&"日".repeat(MAX_SPM_RUN + 1), &any()).is_ok());
    }

    #[test]
    fn whitespace_has_its_own_bounds() {
        let spaced = format!("a{}b", " ".repeat(MAX_SPACE_RUN));
        assert!(check(&spaced, &bpe("llama-bpe")).is_ok());
        let long = format!("a{}b", " ".repeat(MAX_SPACE_RUN + 1));
        assert!(check(&long, &any())
            .unwrap_err()
            .to_string()
            .contains("quadratic"));
        assert!(check("a b", &bpe("whitespace")).is_ok());
        let err = check("a  b", &bpe("whitespace")).unwrap_err().to_string();
        assert!(err.contains("two whitespace characters"), "{err}");
        assert!(check("a  b", &bpe("deepseek-llm")).is_ok());
        assert!(check(&"7".repeat(MAX_DIGIT_RUN), &any()).is_ok());
        let digits = check(&"7".repeat(MAX_DIGIT_RUN + 1), &any())
            .unwrap_err()
            .to_string();
        assert!(digits.contains("digits"), "{digits}");
    }

    #[test]
    fn a_run_past_the_bound_is_refused_naming_it() {
        assert!(check(&"A".repeat(MAX_RUN), &any()).is_ok());
        let text = format!("hello {}", "!".repeat(MAX_RUN + 1));
        let err = check(&text, &any()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("50001"), "{message}");
        assert!(message.contains("'!'"), "{message}");
        assert!(message.contains("break"), "{message}");
    }
}
