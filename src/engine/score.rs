//! An answer scored against a reference model (`run --ref`; docs/metrics.md, "Per token and
//! per answer"), on the engine thread after the answer is complete: never while it decodes.
//!
//! Both models read the same tokens, teacher-forced: the conversation's prompt as the model
//! saw it, then the answer. At each answer position the model's next-token distribution is
//! compared with the reference's (`metrics::quality::score_token`, the maths `compare` sums).
//! Each model reads them in a context of its own, sized to the conversation, so the chat's
//! context, its KV cache and its sampler (which may sample inside the graph, with no logits
//! to read) are left as they are. The chat keeps both contexts between answers
//! ([`ScoreCache`]): a later answer's scoring reads only what follows what they hold. The
//! model's context has the user's settings (its KV cache types are part of what is scored);
//! the reference's has an F16 KV cache, as `compare`'s reference does. The model's
//! distributions come from batched passes, as llama-perplexity's do, not from the one-token
//! steps that chose the answer: on kernels that are not batch-invariant the two differ in the
//! last bits (docs/metrics.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use super::prompt::common_prefix_len;
use crate::llama::error::{decode_error, EngineError};
use crate::llama::settings::{EngineSettings, KvType};
use crate::metrics::quality::{
    reference_row, score_token, score_token_with_top, top_k, TokenScore, TOP_K,
};

/// Positions scored per pass: each pass copies this many vocabulary-sized rows out of each
/// model (32 × 128,256 floats is 16 MB), so memory stays bounded for any answer length.
const ROWS_PER_PASS: usize = 32;

/// How the teacher-forced passes are cut. Both give the same figures up to float noise (the
/// kernels a batch of 32 rows takes are not those a batch of a whole chunk takes: on a
/// random-weight model, whose top tokens are near ties, that flips a few tops; docs/checks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Passes {
    /// The chat's: the context before the answer in n_batch pieces without outputs, then
    /// `ROWS_PER_PASS` answer positions a pass, so memory stays bounded for any answer.
    #[default]
    Pieces,
    /// llama-perplexity's: the whole sequence in one decode with an output from the first
    /// scored position on, in a context of exactly its length (a row of the vocabulary per
    /// answer token held at once: for evaluation chunks, not for the chat's answers).
    Whole,
}

/// A distribution's most likely tokens at one position, with their probabilities, largest
/// first.
pub(super) type Top = Vec<(usize, f32)>;

/// The chat's scores of one answer: each token's figures in answer order, each position's
/// most likely tokens when asked for, and what the kept contexts spared.
#[derive(Debug, Default)]
pub(super) struct Scored {
    pub(super) scores: Vec<TokenScore>,
    /// Per answer position (when asked for): the reference's and the candidate's `TOP_K` most
    /// likely tokens with their probabilities, largest first.
    pub(super) tops: Vec<(Top, Top)>,
    /// Tokens both contexts kept from the previous answer's scoring, not read again.
    pub(super) reused_tokens: usize,
}

/// Whether the scoring was cancelled: asked between passes, and by llama.cpp between graph
/// nodes (so it is shared with its worker thread).
pub(super) type Cancel = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// A request's cancel: the request `id` or a later one was cancelled.
pub(super) fn cancel_of(cancel_through: &Arc<AtomicU64>, id: u64) -> Cancel {
    let flag = Arc::clone(cancel_through);
    Arc::new(move || flag.load(Ordering::SeqCst) >= id)
}

/// A scoring context and the tokens its KV cache holds in sequence 0, in position order.
struct Held<'a> {
    ctx: LlamaContext<'a>,
    tokens: Vec<LlamaToken>,
}

impl Held<'_> {
    /// Keeps the cached tokens that `sequence` starts with, at most `limit` of them (the
    /// positions after it must be read again for their outputs), and drops the KV cells past
    /// them. Returns how many were kept.
    fn keep_prefix(&mut self, sequence: &[LlamaToken], limit: usize) -> usize {
        let keep = common_prefix_len(&self.tokens, &sequence[..limit.min(sequence.len())]);
        if keep < self.tokens.len() {
            self.drop_from(keep)
        } else {
            keep
        }
    }

    /// Drops the KV cells from position `keep` on; a memory that cannot drop part of a
    /// sequence (a recurrent model's) starts over. Returns how many tokens it still holds.
    fn drop_from(&mut self, keep: usize) -> usize {
        let dropped = self
            .ctx
            .clear_kv_cache_seq(Some(0), u32::try_from(keep).ok(), None);
        if dropped.unwrap_or(false) {
            self.tokens.truncate(keep);
            return keep;
        }
        self.ctx.clear_kv_cache();
        self.tokens.clear();
        0
    }

    /// Reads `tokens` at the next positions with outputs or without, and remembers them once
    /// the decode succeeded.
    fn read(
        &mut self,
        batch: &mut LlamaBatch<'_>,
        tokens: &[LlamaToken],
        outputs: bool,
    ) -> Result<(), EngineError> {
        fill(batch, tokens, self.tokens.len(), outputs)?;
        match self.ctx.decode(batch) {
            Ok(()) => {}
            // Stopped between two graph nodes by the abort check (`Held::stop_when`):
            // llama.cpp took the stopped micro-batch's positions out of the memory, not the
            // earlier ones of this call; these go too, so the cache holds `tokens` exactly.
            Err(llama_cpp_2::DecodeError::Unknown(2)) => {
                self.drop_from(self.tokens.len());
                return Err(EngineError::Cancelled);
            }
            Err(e) => return Err(decode_error(e)),
        }
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// Lets llama.cpp stop this context's decodes between two graph nodes once `cancelled`
    /// says so (on the CPU; a GPU backend stops between passes only), or never (`None`).
    fn stop_when(&mut self, cancelled: Option<&Cancel>) {
        self.ctx.set_abort_check(cancelled.map(|c| {
            let c = Arc::clone(c);
            Box::new(move || c()) as llama_cpp_2::context::AbortCheck
        }));
    }

    /// What its KV cache holds, to carry into a larger context: `None` when llama.cpp
    /// cannot give it (then the larger context reads the conversation again).
    fn saved(&self) -> Option<(SeqState, Vec<LlamaToken>)> {
        if self.tokens.is_empty() {
            return None;
        }
        let state = self
            .ctx
            .state_seq_get(0, LlamaStateSeqFlags::empty())
            .ok()?;
        Some((state, self.tokens.clone()))
    }

    /// Puts what [`Held::saved`] took into this (empty) context; on any failure the context
    /// is left empty, never half restored.
    fn restore(&mut self, saved: Option<(SeqState, Vec<LlamaToken>)>) {
        let Some((state, tokens)) = saved else {
            return;
        };
        let last = i32::try_from(tokens.len()).unwrap_or(i32::MAX) - 1;
        if self.ctx.state_seq_set(&state, 0).is_ok() && self.ctx.kv_cache_seq_pos_max(0) == last {
            self.tokens = tokens;
        } else {
            self.ctx.clear_kv_cache();
            self.tokens.clear();
        }
    }

    /// One pass with an output at every token: each position's logits, copied out.
    fn pass(
        &mut self,
        batch: &mut LlamaBatch<'_>,
        tokens: &[LlamaToken],
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        self.read(batch, tokens, true)?;
        Ok((0..tokens.len())
            .map(|j| self.ctx.get_logits_ith(j as i32).to_vec())
            .collect())
    }
}

/// The two contexts the chat's scoring reads a conversation in (the model's, with the user's
/// settings, and the reference's, with an F16 KV cache), kept between answers on the engine
/// thread with the tokens each holds, so that the next answer's scoring reads only what
/// follows the longest common prefix (issue #34). A cache is for one model, one reference and
/// one set of settings; it moves into larger contexts when a conversation outgrows it, and is
/// dropped when a pass fails (its KV cache may hold a half-written batch). A cancelled scoring leaves
/// it consistent: each context remembers only the batches it decoded in full.
pub(super) struct ScoreCache<'m, 'r> {
    model: &'m LlamaModel,
    reference: &'r LlamaModel,
    /// The user's settings the contexts were made from (their n_ctx is the cache's own).
    settings: EngineSettings,
    candidate: Held<'m>,
    truth: Held<'r>,
}

impl<'m, 'r> ScoreCache<'m, 'r> {
    /// Both contexts, of `n_ctx` tokens each, empty.
    fn new(
        model: &'m LlamaModel,
        reference: &'r LlamaModel,
        settings: &EngineSettings,
        n_ctx: u32,
    ) -> Result<Self, EngineError> {
        let mut own = settings.clone();
        own.n_ctx = n_ctx;
        // A pass of rows is one decode call, which llama.cpp refuses (aborts) over n_batch.
        own.n_batch = own.n_batch.max(ROWS_PER_PASS as u32);
        let mut truth = own.clone();
        truth.type_k = KvType::F16;
        truth.type_v = KvType::F16;
        let candidate = Held {
            ctx: crate::llama::new_context(model, &own, 1)?,
            tokens: Vec::new(),
        };
        let truth = Held {
            ctx: crate::llama::new_context(reference, &truth, 1)
                .map_err(|e| EngineError::Reference(Box::new(e)))?,
            tokens: Vec::new(),
        };
        Ok(Self {
            model,
            reference,
            settings: settings.clone(),
            candidate,
            truth,
        })
    }

    /// Made for these models and settings.
    fn serves(
        &self,
        model: &LlamaModel,
        reference: &LlamaModel,
        settings: &EngineSettings,
    ) -> bool {
        std::ptr::eq(self.model, model)
            && std::ptr::eq(self.reference, reference)
            && self.settings == *settings
    }

    fn n_ctx(&self) -> u32 {
        self.candidate.ctx.n_ctx().min(self.truth.ctx.n_ctx())
    }

    /// The same cache in contexts of `n_ctx` tokens, each holding what the old one held (its
    /// KV cells copied through llama.cpp's sequence state, so the conversation is not read
    /// again). The old contexts go before the new ones are made.
    fn grown(self, n_ctx: u32) -> Result<Self, EngineError> {
        let Self {
            model,
            reference,
            settings,
            candidate,
            truth,
        } = self;
        let kept = (candidate.saved(), truth.saved());
        drop((candidate, truth));
        let mut grown = Self::new(model, reference, &settings, n_ctx)?;
        grown.candidate.restore(kept.0);
        grown.truth.restore(kept.1);
        Ok(grown)
    }

    /// The chat's passes over `sequence`, position `first + i` predicting `answer[i]`: the
    /// part of the conversation before `first` that the contexts do not hold yet in n_batch
    /// pieces without outputs, then `ROWS_PER_PASS` answer positions a pass, the reference's
    /// first. `tops`: each position's most likely tokens too.
    fn score(
        &mut self,
        sequence: &[LlamaToken],
        first: usize,
        answer: &[LlamaToken],
        tops: bool,
        cancelled: &Cancel,
    ) -> Result<Scored, EngineError> {
        // A new message stops the scoring within one graph node, not one pass (on a 262k
        // vocabulary one pass of both models took about 450 ms on 2 cores:
        // benchmarks/score-cancel-ttft-20261206.txt).
        self.candidate.stop_when(Some(cancelled));
        self.truth.stop_when(Some(cancelled));
        let result = self.score_passes(sequence, first, answer, tops, &**cancelled);
        self.candidate.stop_when(None);
        self.truth.stop_when(None);
        result
    }

    fn score_passes(
        &mut self,
        sequence: &[LlamaToken],
        first: usize,
        answer: &[LlamaToken],
        tops: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Scored, EngineError> {
        let n_batch = self.settings.n_batch.max(1) as usize;
        let mut batch = LlamaBatch::new(n_batch.max(ROWS_PER_PASS), 1);
        let kept_candidate = self.candidate.keep_prefix(sequence, first);
        let kept_truth = self.truth.keep_prefix(sequence, first);
        // The conversation before the first scored position, without outputs.
        for chunk in sequence[kept_candidate..first].chunks(n_batch) {
            if cancelled() {
                return Err(EngineError::Cancelled);
            }
            self.candidate.read(&mut batch, chunk, false)?;
        }
        for chunk in sequence[kept_truth..first].chunks(n_batch) {
            if cancelled() {
                return Err(EngineError::Cancelled);
            }
            self.truth.read(&mut batch, chunk, false)?;
        }
        let mut scored = Scored {
            scores: Vec::with_capacity(answer.len()),
            tops: Vec::new(),
            reused_tokens: kept_candidate.min(kept_truth),
        };
        let mut at = first;
        while at < sequence.len() {
            if cancelled() {
                return Err(EngineError::Cancelled);
            }
            let chunk = &sequence[at..(at + ROWS_PER_PASS).min(sequence.len())];
            // The rows' maths is asked between rows too (a row of a 262k vocabulary is about a
            // millisecond): what was read stays in the contexts, what was computed is dropped.
            let mut rows = Vec::with_capacity(chunk.len());
            for (j, logits) in self.truth.pass(&mut batch, chunk)?.into_iter().enumerate() {
                if cancelled() {
                    return Err(EngineError::Cancelled);
                }
                let logits = planted(&logits);
                let row = reference_row(&logits)
                    .map_err(|_| EngineError::non_finite_reference(at - first + j))?;
                let top = if tops {
                    top_k(&logits, TOP_K)
                        .into_iter()
                        .map(|i| (i, row.p(i)))
                        .collect()
                } else {
                    Vec::new()
                };
                rows.push((row, top));
            }
            let candidate = self.candidate.pass(&mut batch, chunk)?;
            for (j, (logits, (row, top_ref))) in candidate.iter().zip(rows).enumerate() {
                if cancelled() {
                    return Err(EngineError::Cancelled);
                }
                let position = at - first + j;
                let next = next_of(answer, position, logits.len())?;
                let bad = |_| EngineError::non_finite_candidate(position);
                if tops {
                    let (score, top_cand) =
                        score_token_with_top(logits, &row, next, TOP_K).map_err(bad)?;
                    scored.scores.push(score);
                    scored.tops.push((top_ref, top_cand));
                } else {
                    scored
                        .scores
                        .push(score_token(logits, &row, next, true).map_err(bad)?);
                }
            }
            at += chunk.len();
        }
        Ok(scored)
    }
}

/// The sequence both models read for `answer` after `prompt` (the prompt and every answer
/// token but the last, which is predicted, never read) and the position predicting the
/// answer's first token.
fn teacher_forced(
    prompt: &[LlamaToken],
    answer: &[LlamaToken],
) -> Result<(Vec<LlamaToken>, usize), EngineError> {
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    let mut sequence = Vec::with_capacity(prompt.len() + answer.len());
    sequence.extend_from_slice(prompt);
    sequence.extend_from_slice(&answer[..answer.len().saturating_sub(1)]);
    Ok((sequence, prompt.len() - 1))
}

/// A context size for `n_tokens`: a multiple of 256.
fn sized(n_tokens: usize) -> u32 {
    u32::try_from(n_tokens)
        .unwrap_or(u32::MAX)
        .div_ceil(256)
        .saturating_mul(256)
}

/// The answer token position `j` predicts, as an index into a row of `vocab` logits.
fn next_of(answer: &[LlamaToken], j: usize, vocab: usize) -> Result<usize, EngineError> {
    usize::try_from(answer[j].0)
        .ok()
        .filter(|&n| n < vocab)
        .ok_or_else(|| {
            EngineError::Decode(format!(
                "answer token {} is outside the vocabulary",
                answer[j].0
            ))
        })
}

/// Scores the chat's last answer (what the model generated after `prompt`) against
/// `reference` in `cache`'s contexts (`Passes::Pieces`), reading only what follows the tokens
/// they kept from the previous answer, with each position's most likely tokens of both
/// models. A cache for other models or settings is made anew, half again as large as the
/// conversation needs; one the conversation outgrew is carried into contexts twice its size
/// (`ScoreCache::grown`). On an error other than `Cancelled` the cache is dropped.
pub(super) fn score_chat_answer<'m, 'r>(
    cache: &mut Option<ScoreCache<'m, 'r>>,
    model: &'m LlamaModel,
    reference: &'r LlamaModel,
    settings: &EngineSettings,
    prompt: &[LlamaToken],
    answer: &[LlamaToken],
    cancelled: &Cancel,
) -> Result<Scored, EngineError> {
    if answer.is_empty() {
        return Ok(Scored::default());
    }
    let (sequence, first) = teacher_forced(prompt, answer)?;
    let needed = sequence.len() + 1;
    // Room to grow: half again what is needed, or the old size doubled, within the chat's own
    // context (what a conversation can reach) unless more is needed.
    let size = |old: u32| {
        let wanted = sized(needed + needed / 2).max(old.saturating_mul(2));
        match settings.n_ctx {
            0 => wanted,
            n => wanted.min(n.max(sized(needed))),
        }
    };
    let mut held = match cache.take() {
        Some(c) if c.serves(model, reference, settings) => {
            if c.n_ctx() as usize >= needed {
                c
            } else {
                let n_ctx = size(c.n_ctx());
                c.grown(n_ctx)?
            }
        }
        other => {
            drop(other);
            ScoreCache::new(model, reference, settings, size(0))?
        }
    };
    let result = held.score(&sequence, first, answer, true, cancelled);
    if matches!(result, Ok(_) | Err(EngineError::Cancelled)) {
        *cache = Some(held);
    }
    result
}

/// Scores `answer` (what the model generated after `prompt`) against `reference` in contexts
/// of its own, made for it and dropped after: one [`TokenScore`] per answer token, in order
/// (`doctor scoring`, over an evaluation text). `cancelled` is asked between passes.
pub(super) fn score_answer(
    model: &LlamaModel,
    reference: &LlamaModel,
    settings: &EngineSettings,
    prompt: &[LlamaToken],
    answer: &[LlamaToken],
    passes: Passes,
    cancelled: &dyn Fn() -> bool,
) -> Result<Vec<TokenScore>, EngineError> {
    if answer.is_empty() {
        return Ok(Vec::new());
    }
    let (sequence, first) = teacher_forced(prompt, answer)?;
    if passes == Passes::Pieces {
        let mut fresh = ScoreCache::new(model, reference, settings, sized(sequence.len() + 1))?;
        return Ok(fresh
            .score_passes(&sequence, first, answer, false, cancelled)?
            .scores);
    }
    // llama-perplexity's: the whole sequence in one decode, in a context of its length.
    let mut own = settings.clone();
    let n = u32::try_from(sequence.len() + 1).unwrap_or(u32::MAX);
    own.n_ctx = n;
    own.n_batch = n;
    own.n_ubatch = n.min(512);
    let mut truth = own.clone();
    truth.type_k = KvType::F16;
    truth.type_v = KvType::F16;
    let mut model_ctx = crate::llama::new_context(model, &own, 1)?;
    let mut ref_ctx = crate::llama::new_context(reference, &truth, 1)
        .map_err(|e| EngineError::Reference(Box::new(e)))?;
    if cancelled() {
        return Err(EngineError::Cancelled);
    }
    let mut batch = LlamaBatch::new(sequence.len(), 1);
    let positions = first..sequence.len();
    for ctx in [&mut ref_ctx, &mut model_ctx] {
        batch.clear();
        for (i, &t) in sequence.iter().enumerate() {
            batch
                .add(t, i as i32, &[0], i >= first)
                .map_err(decode_error)?;
        }
        ctx.decode(&mut batch).map_err(decode_error)?;
    }
    let mut scores = Vec::with_capacity(answer.len());
    for (j, i) in positions.enumerate() {
        let row = reference_row(&planted(ref_ctx.get_logits_ith(i as i32)))
            .map_err(|_| EngineError::non_finite_reference(j))?;
        let logits = model_ctx.get_logits_ith(i as i32);
        scores.push(
            score_token(logits, &row, next_of(answer, j, logits.len())?, true)
                .map_err(|_| EngineError::non_finite_candidate(j))?,
        );
    }
    Ok(scores)
}

/// A planted error for the agreement check, in builds with the `plant` feature only: the
/// reference's logits scaled by `TOKSCOPE_PLANT_SCALE=ref_logits:F`, which
/// scripts/compare-llama-perplexity.sh must catch (benchmarks/chat-scoring-planted-*.txt).
fn planted(logits: &[f32]) -> std::borrow::Cow<'_, [f32]> {
    #[cfg(feature = "plant")]
    if let Some(f) = crate::metrics::planted_factor("ref_logits") {
        return logits.iter().map(|l| l * f as f32).collect();
    }
    std::borrow::Cow::Borrowed(logits)
}

/// `tokens` at positions `start…` into `batch`, with outputs or without.
fn fill(
    batch: &mut LlamaBatch<'_>,
    tokens: &[LlamaToken],
    start: usize,
    outputs: bool,
) -> Result<(), EngineError> {
    batch.clear();
    for (i, &t) in tokens.iter().enumerate() {
        batch
            .add(t, (start + i) as i32, &[0], outputs)
            .map_err(decode_error)?;
    }
    Ok(())
}
