//! What text may be handed to llama.cpp's tokenizer without ending the process.
//!
//! Most of llama.cpp's BPE pre-tokenizers (deepseek-llm, falcon, bloom and dozens more) split
//! text with `std::wregex`, which recurses once per character of a match; and a match may run
//! across letters, digits and punctuation alike (bloom's ` ?[^(\s|.,!?…。，、।۔،)]+` takes
//! "a1a1…" or base64 whole). Guessing which runs a regex matches (the guard before this one
//! counted runs of one character class, and "a1" × 150,000 still crashed bloom's) is closed
//! by design instead: every thread that hands outside text to llama.cpp's tokenizer (the
//! engine, the live token count, [`tokenize_checked`]) has a stack of
//! [`TOKENIZER_STACK_BYTES`], enough for any match of [`MAX_CHARS`] characters at the worst
//! pre-tokenizer's measured [`STACK_BYTES_PER_CHAR`], twice over; and a text longer than
//! [`MAX_CHARS`] is refused by its length. The stack is reserved, not committed: the kernel
//! maps what a tokenization touches, so a short message costs what it did on a 2 MiB stack.
//! One match lies within one message (the chat templates and tokscope's own transcript put a
//! line break or a special token between messages, and no pre-tokenizer's match runs past a
//! line break into the next line's text: `tests/pretokenizer_matrix.rs` checks it).
//!
//! The other refusals are not about the stack: whitespace past [`MAX_SPACE_RUN`] (quadratic
//! time in deepseek-llm's family: 20,000 spaces before CJK text took 20 s, with no way to
//! cancel), digits past [`MAX_DIGIT_RUN`] (superbpe: 16,000 digits took 22 s), and, for the
//! `whitespace` pre-tokenizer, two whitespace characters in a row (llama.cpp aborts:
//! `GGML_ASSERT(token_left.find(' ') == std::string::npos)` in its BPE merge lookup).

use super::error::EngineError;

/// The most characters of one text handed to llama.cpp's tokenizer: 8 Mi, the chat's input
/// limit in bytes (`app::INPUT_MAX_BYTES`, which holds at most as many characters); a prompt
/// file or a piped prompt may be longer, and is refused.
pub const MAX_CHARS: usize = 8 << 20;

/// Stack bytes per character of one match that llama.cpp's regex pre-tokenizers take: measured
/// by `tests/pretokenizer_matrix.rs` (`measure_stack_bytes_per_char`, by hand) as a 4 MiB
/// stack divided by the shortest text that crashed on it: 316 for bloom's and deepseek-llm's,
/// whichever text crashed them (a run of letters, "a1", "क०", base64).
pub const STACK_BYTES_PER_CHAR: usize = 320;

/// The stack of a thread that hands outside text to llama.cpp's tokenizer: what a match of
/// [`MAX_CHARS`] characters takes, and half again (3.75 GiB). Reserved address space, not
/// memory: the kernel maps pages as the recursion touches them (a whole 8 MiB paste of base64
/// under bloom's pre-tokenizer touches 2.6 GB, which the thread keeps until it ends), and a
/// message of a few thousand characters touches what it did on a 2 MiB stack.
pub const TOKENIZER_STACK_BYTES: usize = STACK_BYTES_PER_CHAR * MAX_CHARS / 2 * 3;

/// The longest run of whitespace: a long run of whitespace followed by other text takes
/// deepseek-llm's pre-tokenizer (and its family's) time quadratic in the run.
pub const MAX_SPACE_RUN: usize = 2_000;
/// The longest run of digits: superbpe's `(?=(\d{3})+(?!\d))` takes time worse than
/// quadratic in it (8,000 digits 1.4 s, 16,000 digits 22 s).
pub const MAX_DIGIT_RUN: usize = 2_000;

/// The most work llama.cpp's SentencePiece tokenizer is given, in tokens it copies (see
/// [`spm_copies`]): about 0.7 s on the 2-core machine that measured 1.4 to 1.7 billion
/// copies a second (`measure_spm_time` in `tests/pretokenizer_matrix.rs`).
pub const MAX_SPM_COPIES: u64 = 1_000_000_000;

/// Copies a second, for the message (the slowest rate measured).
const SPM_COPIES_PER_S: f64 = 1.4e9;

/// What of a vocabulary decides which text its tokenizer takes: the BPE pre-tokenizer
/// (`tokenizer.ggml.pre`) and, for SentencePiece (`tokenizer.ggml.model` = `llama`), the
/// characters it has a token of their own for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerKind {
    pub pre: Option<String>,
    pub spm: Option<std::sync::Arc<SpmChars>>,
}

/// The characters a SentencePiece vocabulary has a token of their own for: any other
/// character it spells as bytes (byte fallback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpmChars {
    ascii: [bool; 128],
    other: std::collections::HashSet<char>,
}

impl SpmChars {
    /// From the vocabulary's token texts (SentencePiece's "▁" stands for a space).
    pub fn new<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut chars = Self {
            ascii: [false; 128],
            other: std::collections::HashSet::new(),
        };
        for text in texts {
            let mut it = text.chars();
            if let (Some(c), None) = (it.next(), it.next()) {
                let c = if c == '\u{2581}' { ' ' } else { c };
                match usize::try_from(u32::from(c)).ok().filter(|&i| i < 128) {
                    Some(i) => chars.ascii[i] = true,
                    None => {
                        chars.other.insert(c);
                    }
                }
            }
        }
        chars
    }

    fn has(&self, c: char) -> bool {
        match usize::try_from(u32::from(c)).ok().filter(|&i| i < 128) {
            Some(i) => self.ascii[i],
            None => self.other.contains(&c),
        }
    }
}

impl TokenizerKind {
    #[must_use]
    pub fn of(model: &llama_cpp_2::model::LlamaModel) -> Self {
        let spm = model.meta_val_str("tokenizer.ggml.model").ok().as_deref() == Some("llama");
        Self {
            pre: model.meta_val_str("tokenizer.ggml.pre").ok(),
            spm: spm.then(|| {
                let vocab = model.vocab();
                let texts: Vec<String> = vocab
                    .tokens()
                    .filter_map(|t| Some(vocab.text(t)?.to_string_lossy().into_owned()))
                    .collect();
                std::sync::Arc::new(SpmChars::new(texts.iter().map(String::as_str)))
            }),
        }
    }
}

/// The tokens llama.cpp's SentencePiece tokenizer copies from one allocation of its output
/// to the next on `text`, as a simulation of its output vector counts them (a token for each
/// character it has, as if none merged; a token for each byte of one it spells). Its
/// `resegment` reserves the vector to exactly its size plus a spelled character's bytes
/// (`output.reserve(output.size() + symbol.n)`) before writing them: when that is past the
/// capacity, the whole output moves to an allocation with no room to spare, so every spelled
/// character after it moves it again, until a token it has doubles the capacity. A run of
/// spelled characters is quadratic: "日১" × 50,000 (100,000 characters, neither a token of the
/// tiny vocabulary) took 22.5 s. Linear in `text`.
#[must_use]
pub fn spm_copies(text: &str, chars: &SpmChars) -> u64 {
    let (mut size, mut capacity, mut copies) = (0u64, 0u64, 0u64);
    for c in text.chars() {
        if chars.has(c) {
            if size == capacity {
                copies += size;
                capacity = (2 * capacity).max(1);
            }
            size += 1;
        } else {
            let bytes = c.len_utf8() as u64;
            if size + bytes > capacity {
                copies += size;
                capacity = size + bytes;
            }
            size += bytes;
        }
    }
    copies
}

/// The classes of characters whose runs are bounded.
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

/// The longest run of whitespace in `text`, and the longest of digits: each as its length in
/// characters and its first character.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Runs {
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
        if ck == Class::Space && out.longest_space.is_none_or(|(b, _)| n > b) {
            out.longest_space = Some((n, first));
        }
        if ck == Class::Digit && out.longest_digits.is_none_or(|(b, _)| n > b) {
            out.longest_digits = Some((n, first));
        }
    }
    out
}

/// Refuses text the tokenizer of a model of this kind would crash or hang on: longer than
/// [`MAX_CHARS`] (what the tokenizer threads' stacks are sized for); work past
/// [`MAX_SPM_COPIES`] for SentencePiece; whitespace past [`MAX_SPACE_RUN`]; digits past
/// [`MAX_DIGIT_RUN`]; and, for the `whitespace` pre-tokenizer, two whitespace characters in a
/// row.
pub fn check(text: &str, kind: &TokenizerKind) -> Result<(), EngineError> {
    if text.len() > MAX_CHARS {
        let chars = text.chars().count();
        if chars > MAX_CHARS {
            return Err(EngineError::TextTooLong {
                chars,
                max: MAX_CHARS,
            });
        }
    }
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
    if let Some(chars) = &kind.spm {
        let copies = spm_copies(text, chars);
        if copies > MAX_SPM_COPIES {
            let spelled = text.chars().filter(|c| !chars.has(*c)).count();
            let example = text.chars().find(|c| !chars.has(*c)).unwrap_or(' ');
            return Err(EngineError::SpellingTooSlow {
                spelled,
                example,
                seconds: copies as f64 / SPM_COPIES_PER_S,
            });
        }
    }
    Ok(())
}

/// Tokenizes text read from a file or typed by a user with `model`'s vocabulary, as the
/// engine does: refused by [`check`] (with the model's own pre-tokenizer) when llama.cpp would
/// crash or hang on it, and tokenized on a thread of [`TOKENIZER_STACK_BYTES`] stack, for
/// callers on a thread of their own size (the main thread's 8 MiB holds about 25,000
/// characters of one match).
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
        assert_eq!(runs("").longest_space, None);
        assert_eq!(runs("ab  cde!!\t\t\t").longest_space, Some((3, '\t')));
        assert_eq!(runs("日本語 12 ৩৪৫x").longest_digits, Some((3, '৩')));
        assert_eq!(runs("a1a1a1").longest_digits, Some((1, '1')));
    }

    fn bpe(pre: &str) -> TokenizerKind {
        TokenizerKind {
            pre: Some(pre.into()),
            spm: None,
        }
    }

    fn any() -> TokenizerKind {
        TokenizerKind::default()
    }

    #[test]
    fn sentencepiece_work_is_bounded_by_what_it_copies() {
        let chars = SpmChars::new(["a", "b", "\u{2581}", "日", "<0xE6>", "ab"]);
        let spm = TokenizerKind {
            pre: None,
            spm: Some(std::sync::Arc::new(chars.clone())),
        };
        // Characters it has (a space as "▁") grow the output by doubling; each spelled one
        // past the capacity moves the output so far.
        assert_eq!(spm_copies("ab aж", &chars), 1 + 2 + 4);
        assert_eq!(spm_copies("ab aжbж", &chars), 1 + 2 + 4 + 6);
        assert_eq!(spm_copies("ж১", &chars), 2);
        assert_eq!(spm_copies("১১১", &chars), 3 + 6);
        // Quadratic in a run of spelled characters, linear when they alternate with others.
        let n = 20_000u64;
        let alternating = "ж১".repeat(n as usize / 2);
        assert!(spm_copies(&alternating, &chars) > n * n);
        let mixed = spm_copies(&"жa".repeat(n as usize), &chars);
        assert!(mixed < 20 * n, "{mixed}");
        let slow = "ж".repeat(10_000);
        assert!(check(&slow, &spm).is_ok(), "{}", spm_copies(&slow, &chars));
        let slow = "ж".repeat(40_000);
        let err = check(&slow, &spm).unwrap_err().to_string();
        assert!(
            err.contains("40000 characters") && err.contains("'ж'"),
            "{err}"
        );
        assert!(err.contains("spaces"), "{err}");
        // A BPE vocabulary spells nothing this way.
        assert!(check(&slow, &any()).is_ok());
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
    fn only_the_length_bounds_a_run_of_one_class() {
        // A run of one class as long as the bound is given to llama.cpp: the stack holds it.
        assert!(check(&"A".repeat(100_000), &any()).is_ok());
        assert!(check(&"a1".repeat(150_000), &bpe("bloom")).is_ok());
        let at_bound = "a".repeat(MAX_CHARS);
        assert!(check(&at_bound, &any()).is_ok());
        let err = check(&(at_bound + "b"), &any()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{} characters", MAX_CHARS + 1)),
            "{err}"
        );
        assert!(err.contains("in parts"), "{err}");
        // Characters, not bytes: 8 Mi two-byte characters pass.
        assert!(check(&"é".repeat(MAX_CHARS), &any()).is_ok());
    }
}
