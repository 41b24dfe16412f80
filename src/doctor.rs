//! `tokscope doctor`: checks that hold one part of a model against an independent reference.
//!
//! `doctor tokenizer` owns the tokenizer check: a corpus (built in from `assets/`, or a file)
//! is tokenized by llama.cpp with the GGUF's own vocabulary (loaded vocabulary-only) and by the
//! Hugging Face tokenizers crate from a tokenizer.json; the report gives the share of samples
//! that tokenize differently and the first differences side by side. A mismatch means the
//! token counts, prompts and speeds measured with that GGUF are not those of the real model.

use std::fmt::Write as _;
use std::path::Path;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use tokenizers::Tokenizer;

pub(crate) mod gpu;

/// One text to tokenize, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// `file:line`, or `file` for the whole text.
    pub label: String,
    /// The text.
    pub text: String,
}

/// The built-in corpus (`assets/tokenizer-corpus/`), each file whole and line by line.
#[must_use]
pub fn builtin_corpus() -> Vec<Sample> {
    CORPUS
        .iter()
        .flat_map(|(name, text)| samples_from_text(name, text))
        .collect()
}

/// The corpus files, each `(name, text)`.
macro_rules! corpus {
    ($($name:literal),+ $(,)?) => {
        [$(($name, include_str!(concat!("../assets/tokenizer-corpus/", $name)))),+]
    };
}

const CORPUS: [(&str, &str); 8] = corpus!(
    "prose.txt",
    "code.txt",
    "numbers.txt",
    "whitespace.txt",
    "emoji.txt",
    "cjk.txt",
    "vietnamese.txt",
    "special.txt",
);

/// A text as samples: the whole text, then each line with its line ending (a line's end is
/// where pre-tokenizers disagree most).
#[must_use]
pub(crate) fn samples_from_text(label: &str, text: &str) -> Vec<Sample> {
    let mut samples = vec![Sample {
        label: label.to_owned(),
        text: text.to_owned(),
    }];
    for (index, line) in text.split_inclusive('\n').enumerate() {
        samples.push(Sample {
            label: format!("{label}:{}", index + 1),
            text: line.to_owned(),
        });
    }
    samples.retain(|s| !s.text.is_empty());
    samples
}

/// A token as shown in a report: its id and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownToken {
    /// Token id.
    pub id: u32,
    /// The token's text (lossy for partial UTF-8).
    pub text: String,
}

/// One sample that tokenized differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Which sample.
    pub label: String,
    /// Index of the first differing token.
    pub position: usize,
    /// Tokens on llama.cpp's side, from a little before the difference.
    pub llama: Vec<ShownToken>,
    /// Tokens on the tokenizers crate's side, from the same index.
    pub reference: Vec<ShownToken>,
    /// Token counts of the whole sample (llama.cpp, tokenizers).
    pub counts: (usize, usize),
}

/// What [`compare`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Comparison {
    /// Samples checked.
    pub samples: usize,
    /// Tokens llama.cpp produced over all samples.
    pub llama_tokens: usize,
    /// Tokens the tokenizers crate produced over all samples.
    pub reference_tokens: usize,
    /// Every sample that differed, in corpus order.
    pub mismatches: Vec<Mismatch>,
    /// Samples not given to llama.cpp's tokenizer (a run it would crash or hang on: see
    /// `llama::runs`), with the reason; they are not counted as checked.
    pub refused: Vec<(String, String)>,
}

impl Comparison {
    /// Share of samples that tokenized differently (0 when there were none).
    #[must_use]
    pub(crate) fn mismatch_rate(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.mismatches.len() as f64 / self.samples as f64
        }
    }
}

/// Tokens shown before the first difference, for context.
const CONTEXT_BEFORE: usize = 2;
/// Tokens shown from the first difference on.
const SHOWN_FROM_DIFFERENCE: usize = 6;

/// Tokenizes every sample both ways (no BOS; special tokens parsed, as the engine does) and
/// collects the differences.
#[must_use]
pub(crate) fn compare(model: &LlamaModel, reference: &Tokenizer, samples: &[Sample]) -> Comparison {
    let mut comparison = Comparison {
        samples: samples.len(),
        ..Comparison::default()
    };
    let vocab = model.vocab();
    for sample in samples {
        // Text llama.cpp's tokenizer would crash or hang on is not given to it: such a sample
        // counts as a mismatch with the refusal as llama.cpp's side.
        let llama: Vec<u32> =
            match crate::llama::runs::tokenize_checked(model, &sample.text, false, true) {
                Ok(tokens) => tokens.iter().map(|t| t.0 as u32).collect(),
                Err(e) => {
                    comparison
                        .refused
                        .push((sample.label.clone(), e.to_string()));
                    continue;
                }
            };
        let theirs: Vec<u32> = reference
            .encode_fast(sample.text.as_str(), false)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_default();
        comparison.llama_tokens += llama.len();
        comparison.reference_tokens += theirs.len();
        if llama == theirs {
            continue;
        }
        let position = llama
            .iter()
            .zip(&theirs)
            .position(|(a, b)| a != b)
            .unwrap_or(llama.len().min(theirs.len()));
        let start = position.saturating_sub(CONTEXT_BEFORE);
        // Each side's tokens from a little before the difference, with their texts.
        let shown = |ids: &[u32], text: &dyn Fn(u32) -> String| -> Vec<ShownToken> {
            let end = (position + SHOWN_FROM_DIFFERENCE).min(ids.len());
            ids[start..end]
                .iter()
                .map(|&id| ShownToken { id, text: text(id) })
                .collect()
        };
        let piece = |id: u32| vocab.token_to_piece(LlamaToken(id as i32), true, None);
        comparison.mismatches.push(Mismatch {
            label: sample.label.clone(),
            position,
            llama: shown(&llama, &|id| {
                String::from_utf8_lossy(&piece(id)).into_owned()
            }),
            reference: shown(&theirs, &|id| {
                reference.decode(&[id], false).unwrap_or_default()
            }),
            counts: (llama.len(), theirs.len()),
        });
    }
    comparison.samples -= comparison.refused.len();
    comparison
}

/// The report `doctor tokenizer` prints.
#[must_use]
pub(crate) fn render_report(
    comparison: &Comparison,
    model: &Path,
    tokenizer: &Path,
    show: usize,
) -> String {
    let mut out = format!(
        "tokenizer check\n  model (llama.cpp, vocabulary only): {}\n  reference (tokenizers crate):       {}\n  {} samples · {} tokens (llama.cpp) · {} tokens (tokenizers)\n  mismatching samples: {} ({:.1}%)\n",
        model.display(),
        tokenizer.display(),
        comparison.samples,
        comparison.llama_tokens,
        comparison.reference_tokens,
        comparison.mismatches.len(),
        comparison.mismatch_rate() * 100.0
    );
    for (label, why) in &comparison.refused {
        let _ = writeln!(out, "  not checked: {label}: {why}");
    }
    if comparison.mismatches.is_empty() {
        let _ = writeln!(out, "PASS: every sample tokenizes identically");
        return out;
    }
    let _ = writeln!(
        out,
        "FAIL: the GGUF's vocabulary does not tokenize like the tokenizer.json"
    );
    for mismatch in comparison.mismatches.iter().take(show) {
        let _ = writeln!(
            out,
            "\n{} — first difference at token {} ({} vs {} tokens in the sample)",
            mismatch.label, mismatch.position, mismatch.counts.0, mismatch.counts.1
        );
        let _ = writeln!(out, "  {:<38} tokenizers", "llama.cpp");
        let start = mismatch.position.saturating_sub(CONTEXT_BEFORE);
        let rows = mismatch.llama.len().max(mismatch.reference.len());
        for row in 0..rows {
            let cell = |tokens: &[ShownToken]| {
                tokens
                    .get(row)
                    .map_or_else(String::new, |t| format!("{:>6} {:?}", t.id, t.text))
            };
            let marker = if start + row == mismatch.position {
                ">"
            } else {
                " "
            };
            let _ = writeln!(
                out,
                "{marker} {:<38} {}",
                cell(&mismatch.llama),
                cell(&mismatch.reference)
            );
        }
    }
    if comparison.mismatches.len() > show {
        let _ = writeln!(
            out,
            "\n… and {} more (--show N to see more)",
            comparison.mismatches.len() - show
        );
    }
    out
}

/// `doctor scoring`'s report: what was scored and the figures, named as
/// `llama-perplexity --kl-divergence` names them.
pub fn scoring_report(
    model: &str,
    reference: &str,
    text: &str,
    n_ctx: u32,
    chunks: usize,
    q: &crate::metrics::quality::QualityStats,
) -> String {
    let opt = crate::fmt::opt;
    format!(
        "model:     {model}\nreference: {reference}\ntext:      {text}, {chunks} chunks of {n_ctx} tokens, {} positions scored (the chat's scoring path)\n\
         Mean PPL(Q) : {:.6} ± {:.6}\nMean    KLD : {} ± {}\nMedian  KLD : {}\n99.0%   KLD : {}\nMaximum KLD : {}\n\
         Same top p  : {} %\nMean     Δp : {} %\nRMS      Δp : {} %\n",
        q.n_scored,
        q.ppl,
        q.ppl_uncertainty,
        opt(q.kld_mean, 6),
        opt(q.kld_uncertainty, 6),
        opt(q.kld_median, 6),
        opt(q.kld_p99, 6),
        opt(q.kld_max, 6),
        opt(q.same_top_pct, 3),
        opt(q.delta_p_mean_pct, 3),
        opt(q.delta_p_rms_pct, 3),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_covers_every_category_and_keeps_bytes() {
        let corpus = builtin_corpus();
        for name in [
            "prose.txt",
            "code.txt",
            "numbers.txt",
            "whitespace.txt",
            "emoji.txt",
            "cjk.txt",
            "vietnamese.txt",
            "special.txt",
        ] {
            assert!(corpus.iter().any(|s| s.label == name), "{name}");
        }
        let whitespace = corpus.iter().find(|s| s.label == "whitespace.txt").unwrap();
        assert!(whitespace.text.contains("\r\n") && whitespace.text.contains('\u{a0}'));
        assert!(corpus.iter().any(|s| s.text.contains("<|eot_id|>")));
        assert!(corpus.iter().any(|s| s.text.contains("Đường")));
        assert!(corpus.len() > 60, "{}", corpus.len());
    }

    #[test]
    fn lines_keep_their_endings() {
        let samples = samples_from_text("t", "a\r\nb\n\nc");
        let texts: Vec<&str> = samples.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["a\r\nb\n\nc", "a\r\n", "b\n", "\n", "c"]);
        assert_eq!(samples[1].label, "t:1");
        assert!(samples_from_text("e", "").is_empty());
    }

    #[test]
    fn report_shows_pass_and_side_by_side_failures() {
        let mut comparison = Comparison {
            samples: 4,
            llama_tokens: 10,
            reference_tokens: 10,
            mismatches: Vec::new(),
            refused: Vec::new(),
        };
        let pass = render_report(&comparison, Path::new("m.gguf"), Path::new("t.json"), 5);
        assert!(pass.contains("PASS") && pass.contains("0 (0.0%)"), "{pass}");

        let token = |id, text: &str| ShownToken {
            id,
            text: text.to_owned(),
        };
        comparison.mismatches.push(Mismatch {
            label: "prose.txt:3".into(),
            position: 1,
            llama: vec![token(9906, "Hello"), token(1917, " world")],
            reference: vec![token(9906, "Hello"), token(1879, " wor"), token(67, "ld")],
            counts: (2, 3),
        });
        let fail = render_report(&comparison, Path::new("m.gguf"), Path::new("t.json"), 5);
        assert!(
            fail.contains("FAIL") && fail.contains("1 (25.0%)"),
            "{fail}"
        );
        assert!(fail.contains("prose.txt:3"), "{fail}");
        let marked: Vec<&str> = fail.lines().filter(|l| l.starts_with('>')).collect();
        assert_eq!(marked.len(), 1, "{fail}");
        assert!(
            marked[0].contains("\" world\"") && marked[0].contains("\" wor\""),
            "{fail}"
        );
        assert_eq!(comparison.mismatch_rate(), 0.25);
    }
}
