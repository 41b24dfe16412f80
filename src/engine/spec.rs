//! Speculative decoding's guessers: prompt lookup (the continuation of the last n-gram's most
//! recent earlier occurrence in the context) and a draft model with its own context. Each
//! proposes up to k tokens continuing the target's tokens; the session verifies them in one
//! target pass (`session.rs`). Also the check that a draft model shares the target's
//! vocabulary.

use std::path::Path;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use super::prompt::common_prefix_len;
use crate::llama;
use crate::llama::error::EngineError;
use crate::llama::settings::EngineSettings;

/// Who proposes the drafts.
pub(super) enum Drafter<'m> {
    Ngram { n: usize },
    Model(Box<DraftModel<'m>>),
}

impl Drafter<'_> {
    pub(super) fn mode(&self) -> &'static str {
        match self {
            Drafter::Ngram { .. } => "ngram",
            Drafter::Model(_) => "draft",
        }
    }

    /// Up to `k_max` tokens continuing `history` (the target's tokens, the pending one last).
    /// The draft model stops early where its own top probability falls below `p_min`.
    pub(super) fn propose(
        &mut self,
        history: &[LlamaToken],
        k_max: usize,
        p_min: f32,
    ) -> Result<Vec<LlamaToken>, EngineError> {
        match self {
            Drafter::Ngram { n } => Ok(ngram_draft(history, *n, k_max)),
            Drafter::Model(m) => m.draft(history, k_max, p_min),
        }
    }

    /// Forget the draft context's cache (after a failed turn, as the target does).
    pub(super) fn reset(&mut self) {
        if let Drafter::Model(m) = self {
            m.ctx.clear_kv_cache();
            m.cached.clear();
        }
    }
}

/// Prompt lookup: find the most recent earlier occurrence of the last `n` tokens and propose
/// the up to `k_max` tokens that followed it. Nothing when there is none.
pub(crate) fn ngram_draft<T: PartialEq + Copy>(history: &[T], n: usize, k_max: usize) -> Vec<T> {
    let len = history.len();
    if n == 0 || k_max == 0 || len <= n {
        return Vec::new();
    }
    let pattern = &history[len - n..];
    // Start positions of earlier occurrences, latest first; the pattern itself (at len - n)
    // is not an earlier occurrence.
    for start in (0..len - n).rev() {
        if &history[start..start + n] == pattern {
            let from = start + n;
            let to = (from + k_max).min(len);
            return history[from..to].to_vec();
        }
    }
    Vec::new()
}

/// A draft model's context and the tokens its KV cache holds.
pub(super) struct DraftModel<'m> {
    ctx: LlamaContext<'m>,
    cached: Vec<LlamaToken>,
    n_batch: usize,
}

impl<'m> DraftModel<'m> {
    pub(super) fn new(
        model: &'m LlamaModel,
        settings: &EngineSettings,
    ) -> Result<Self, EngineError> {
        let ctx = llama::new_context(model, settings, 1)?;
        Ok(Self {
            n_batch: ctx.n_ubatch().min(ctx.n_batch()).max(1) as usize,
            ctx,
            cached: Vec::new(),
        })
    }

    /// Greedy draft: bring the draft's cache to `history` (reusing the common prefix, which
    /// after an accepted step is all of it but the newest tokens), then take its argmax k
    /// times, decoding each drafted token but the last.
    fn draft(
        &mut self,
        history: &[LlamaToken],
        k_max: usize,
        p_min: f32,
    ) -> Result<Vec<LlamaToken>, EngineError> {
        let decode_err = |e: &dyn std::fmt::Display| EngineError::Decode(format!("draft: {e}"));
        if k_max == 0 || history.is_empty() {
            return Ok(Vec::new());
        }
        let n_ctx = self.ctx.n_ctx() as usize;
        // The draft holds history + k - 1 tokens at most; it never overflows its context.
        let k_max = k_max.min((n_ctx + 1).saturating_sub(history.len()));
        if k_max == 0 {
            return Ok(Vec::new());
        }
        let reuse = common_prefix_len(&self.cached, history).min(history.len() - 1);
        self.ctx
            .clear_kv_cache_seq(Some(0), Some(reuse as u32), None)
            .map_err(|e| decode_err(&e))?;
        self.cached.truncate(reuse);
        let mut batch = LlamaBatch::new(self.n_batch, 1);
        let mut logits_index = 0i32;
        let new = &history[reuse..];
        let n_chunks = new.len().div_ceil(self.n_batch);
        for (chunk_no, chunk) in new.chunks(self.n_batch).enumerate() {
            batch.clear();
            for (i, token) in chunk.iter().enumerate() {
                let last = chunk_no + 1 == n_chunks && i + 1 == chunk.len();
                batch
                    .add(*token, (self.cached.len() + i) as i32, &[0], last)
                    .map_err(|e| decode_err(&e))?;
            }
            self.ctx.decode(&mut batch).map_err(|e| decode_err(&e))?;
            self.cached.extend_from_slice(chunk);
            logits_index = chunk.len() as i32 - 1;
        }
        let mut out = Vec::with_capacity(k_max);
        loop {
            let logits = self.ctx.get_logits_ith(logits_index);
            let best = crate::llama::sampler::argmax(logits);
            if p_min > 0.0 && top_probability(logits, best) < p_min {
                break;
            }
            let token = LlamaToken(best as i32);
            out.push(token);
            if out.len() >= k_max {
                break;
            }
            batch.clear();
            batch
                .add(token, self.cached.len() as i32, &[0], true)
                .map_err(|e| decode_err(&e))?;
            self.ctx.decode(&mut batch).map_err(|e| decode_err(&e))?;
            self.cached.push(token);
            logits_index = 0;
        }
        Ok(out)
    }
}

/// The softmax probability of `logits[best]` (the largest).
fn top_probability(logits: &[f32], best: usize) -> f32 {
    let max = logits.get(best).copied().unwrap_or(0.0);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    if sum > 0.0 {
        1.0 / sum
    } else {
        0.0
    }
}

/// Speculation needs one vocabulary: every token id must mean the same text in both models
/// (and the special tokens that start and end a turn must be the same ids).
pub(super) fn check_vocab(
    target: &LlamaModel,
    draft: &LlamaModel,
    draft_path: &Path,
) -> Result<(), EngineError> {
    let (tv, dv) = (target.vocab(), draft.vocab());
    let text = |v: &llama_cpp_2::vocab::LlamaVocab<'_>, id: i32| -> String {
        if id < 0 || id >= v.n_tokens() {
            return "absent".to_string();
        }
        match v.text(LlamaToken(id)) {
            Some(t) => format!("{:?}", t.to_string_lossy()),
            None => "(no text)".to_string(),
        }
    };
    let mismatch = |id: i32| EngineError::VocabMismatch {
        draft: draft_path.to_path_buf(),
        id: i64::from(id),
        target_text: crate::text::terminal_safe(&text(&tv, id)).into_owned(),
        draft_text: crate::text::terminal_safe(&text(&dv, id)).into_owned(),
    };
    let common = tv.n_tokens().min(dv.n_tokens());
    for id in 0..common {
        let token = LlamaToken(id);
        if tv.text(token) != dv.text(token) {
            return Err(mismatch(id));
        }
    }
    if tv.n_tokens() != dv.n_tokens() {
        return Err(mismatch(common));
    }
    for (a, b) in [(tv.bos(), dv.bos()), (tv.eos(), dv.eos())] {
        if a != b {
            return Err(mismatch(a.0.min(b.0).max(0)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_proposes_the_latest_earlier_continuation() {
        // "a b c X Y a b c Z W a b c" → the latest earlier "a b c" is followed by "Z W a b c".
        let h = [1, 2, 3, 10, 11, 1, 2, 3, 20, 21, 1, 2, 3];
        assert_eq!(ngram_draft(&h, 3, 2), vec![20, 21]);
        assert_eq!(ngram_draft(&h, 3, 8), vec![20, 21, 1, 2, 3]);
        assert_eq!(ngram_draft(&h, 3, 0), Vec::<i32>::new());
    }

    #[test]
    fn ngram_finds_nothing_without_an_earlier_occurrence() {
        assert!(ngram_draft(&[1, 2, 3, 4, 5], 3, 8).is_empty());
        assert!(ngram_draft(&[1, 2], 3, 8).is_empty());
        assert!(ngram_draft(&[1, 2, 3], 3, 8).is_empty());
        assert!(ngram_draft(&[1, 2, 3], 0, 8).is_empty());
    }

    #[test]
    fn ngram_overlapping_occurrence_is_earlier_and_counts() {
        // A run of one token: the pattern [7 7] occurs at every earlier start.
        assert_eq!(ngram_draft(&[7, 7, 7, 7], 2, 5), vec![7]);
    }

    #[test]
    fn top_probability_is_a_softmax() {
        let p = top_probability(&[0.0, 0.0], 0);
        assert!((p - 0.5).abs() < 1e-6);
        let p = top_probability(&[10.0, 0.0, 0.0], 0);
        assert!(p > 0.99);
    }
}
