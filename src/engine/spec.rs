//! Speculative decoding's guessers: prompt lookup (the continuation of the last n-gram's most
//! recent earlier occurrence in the context) and a draft model with its own context. Each
//! proposes up to k tokens continuing the target's tokens; the session verifies them in one
//! target pass (`session.rs`). Also the check that a draft model shares the target's
//! vocabulary.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use super::prompt::common_prefix_len;
use crate::llama;
use crate::llama::error::EngineError;
use crate::llama::settings::{EngineSettings, SamplingParams};

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
    (0..len - n)
        .rev()
        .find(|&start| &history[start..start + n] == pattern)
        .map_or_else(Vec::new, |start| {
            history[start + n..(start + n + k_max).min(len)].to_vec()
        })
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
            .map_err(draft_error)?;
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
                    .map_err(draft_error)?;
            }
            self.ctx.decode(&mut batch).map_err(draft_error)?;
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
                .map_err(draft_error)?;
            self.ctx.decode(&mut batch).map_err(draft_error)?;
            self.cached.push(token);
            logits_index = 0;
        }
        Ok(out)
    }
}

fn draft_error(e: impl std::fmt::Display) -> EngineError {
    EngineError::Decode(format!("draft: {e}"))
}

/// The target's next-token distribution under the sampler chain the host top-k path runs
/// (llama.cpp's order: top-k → top-p → min-p → temperature → softmax), as (token, probability)
/// pairs, largest first. The speculative sampling rule needs the probabilities themselves,
/// which llama.cpp's chain only draws from.
pub(crate) fn chain_probs(logits: &[f32], p: &SamplingParams) -> Vec<(i32, f64)> {
    let mut cand = Vec::new();
    let mut scratch = crate::llama::sampler::TopKScratch::default();
    crate::llama::sampler::top_k_into(logits, p.top_k as usize, &mut cand, &mut scratch);
    let mut kept: Vec<(i32, f64)> = cand
        .iter()
        .map(|d| (d.id().0, f64::from(d.logit())))
        .collect();
    if kept.is_empty() {
        return kept;
    }
    let softmax = |v: &[(i32, f64)], scale: f64| -> Vec<f64> {
        let max = v[0].1 * scale;
        let e: Vec<f64> = v.iter().map(|(_, l)| (l * scale - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.into_iter().map(|x| x / sum).collect()
    };
    if p.top_p < 1.0 {
        let probs = softmax(&kept, 1.0);
        let mut cum = 0.0;
        let keep = probs.iter().position(|q| {
            cum += q;
            cum >= f64::from(p.top_p)
        });
        kept.truncate(keep.map_or(probs.len(), |i| i + 1).max(1));
    }
    if p.min_p > 0.0 {
        let min_logit = kept[0].1 + f64::from(p.min_p).ln();
        let keep = kept.iter().take_while(|(_, l)| *l >= min_logit).count();
        kept.truncate(keep.max(1));
    }
    let scale = 1.0 / f64::from(p.temperature.max(f32::MIN_POSITIVE));
    let probs = softmax(&kept, scale);
    kept.iter().zip(probs).map(|((t, _), q)| (*t, q)).collect()
}

/// The speculative sampling rule for a deterministic proposal (q is one-hot on `drafted`, as
/// for n-gram lookup and the greedy draft model): accept with probability min(1, p/q) = p(d);
/// on rejection draw from the residual max(0, p − q), normalised: p without `drafted`.
/// Returns `Ok(())` for an accepted token, `Err(token)` for the replacement.
pub(crate) fn accept_or_resample(
    probs: &[(i32, f64)],
    drafted: i32,
    rng: &mut crate::ids::SplitMix64,
) -> Result<(), i32> {
    let p_d = probs
        .iter()
        .find(|(t, _)| *t == drafted)
        .map_or(0.0, |(_, q)| *q);
    if rng.unit_open() < p_d {
        return Ok(());
    }
    let rest = 1.0 - p_d;
    let mut u = rng.unit_open() * rest;
    let mut last = drafted;
    for &(t, q) in probs {
        if t == drafted {
            continue;
        }
        last = t;
        if u < q {
            return Err(t);
        }
        u -= q;
    }
    Err(last)
}

/// A draw from `probs`.
pub(crate) fn draw(probs: &[(i32, f64)], rng: &mut crate::ids::SplitMix64) -> i32 {
    let mut u = rng.unit_open();
    for &(t, q) in probs {
        if u < q {
            return t;
        }
        u -= q;
    }
    probs.last().map_or(0, |(t, _)| *t)
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

/// The first token id whose text differs between two models' vocabularies (a missing id
/// reads "absent"; the start and end tokens must be the same ids), with both texts made
/// safe for a terminal; `None` when the vocabularies are one. Speculation and scoring need
/// one vocabulary: every token id must mean the same text in both models.
pub(super) fn vocab_difference(a: &LlamaModel, b: &LlamaModel) -> Option<(i64, String, String)> {
    let (av, bv) = (a.vocab(), b.vocab());
    let text = |v: &llama_cpp_2::vocab::LlamaVocab<'_>, id: i32| -> String {
        if id < 0 || id >= v.n_tokens() {
            return "absent".to_string();
        }
        v.text(LlamaToken(id)).map_or_else(
            || "(no text)".to_string(),
            |t| format!("{:?}", t.to_string_lossy()),
        )
    };
    let difference = |id: i32| {
        Some((
            i64::from(id),
            crate::text::terminal_safe(&text(&av, id)).into_owned(),
            crate::text::terminal_safe(&text(&bv, id)).into_owned(),
        ))
    };
    let common = av.n_tokens().min(bv.n_tokens());
    let differs = |id: &i32| av.text(LlamaToken(*id)) != bv.text(LlamaToken(*id));
    if let Some(id) = (0..common).find(differs) {
        return difference(id);
    }
    if av.n_tokens() != bv.n_tokens() {
        return difference(common);
    }
    for (x, y) in [(av.bos(), bv.bos()), (av.eos(), bv.eos())] {
        if x != y {
            return difference(x.0.min(y.0).max(0));
        }
    }
    None
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
    fn chain_probs_follow_llama_cpps_chain() {
        let logits = [0.0f32, 3.0, 2.0, 1.0, -5.0];
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 3,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplingParams::default()
        };
        let probs = chain_probs(&logits, &p);
        assert_eq!(probs.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        let z: f64 = [3.0f64, 2.0, 1.0].iter().map(|l| l.exp()).sum();
        assert!((probs[0].1 - 3.0f64.exp() / z).abs() < 1e-12);
        // min-p 0.5 keeps logits within ln 2 of the best: only token 1.
        let probs = chain_probs(
            &logits,
            &SamplingParams {
                min_p: 0.5,
                ..p.clone()
            },
        );
        assert_eq!(probs, vec![(1, 1.0)]);
        // top-p 0.5: the best token alone already holds 0.67.
        let probs = chain_probs(&logits, &SamplingParams { top_p: 0.5, ..p });
        assert_eq!(probs.len(), 1);
    }

    #[test]
    fn the_sampling_rule_keeps_the_target_distribution() {
        // P(token) = P(drafted) · 1[token = drafted] + (1 − p_d) · p(token) / (1 − p_d).
        let probs = vec![(7, 0.5), (8, 0.3), (9, 0.2)];
        let mut rng = crate::ids::SplitMix64(1);
        let mut counts = std::collections::HashMap::new();
        let n = 200_000;
        for _ in 0..n {
            let t = match accept_or_resample(&probs, 8, &mut rng) {
                Ok(()) => 8,
                Err(t) => t,
            };
            *counts.entry(t).or_insert(0usize) += 1;
        }
        for (t, q) in probs {
            let f = counts[&t] as f64 / n as f64;
            assert!((f - q).abs() < 0.005, "token {t}: {f} vs {q}");
        }
    }

    #[test]
    fn top_probability_is_a_softmax() {
        let p = top_probability(&[0.0, 0.0], 0);
        assert!((p - 0.5).abs() < 1e-6);
        let p = top_probability(&[10.0, 0.0, 0.0], 0);
        assert!(p > 0.99);
    }
}
