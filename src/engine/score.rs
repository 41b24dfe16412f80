//! An answer scored against a reference model (`run --ref`; docs/metrics.md, "Per token and
//! per answer"), on the engine thread after the answer is complete: never while it decodes.
//!
//! Both models read the same tokens, teacher-forced: the conversation's prompt as the model
//! saw it, then the answer. At each answer position the model's next-token distribution is
//! compared with the reference's (`metrics::quality::score_token`, the maths `compare` sums).
//! Each model reads them in a context of its own, sized to the conversation, so the chat's
//! context, its KV cache and its sampler (which may sample inside the graph, with no logits
//! to read) are left as they are. The model's context has the user's settings (its KV cache
//! types are part of what is scored); the reference's has an F16 KV cache, as `compare`'s
//! reference does. The model's distributions come from batched passes, as llama-perplexity's
//! do, not from the one-token steps that chose the answer: on kernels that are not
//! batch-invariant the two differ in the last bits (docs/metrics.md).

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::llama::error::EngineError;
use crate::llama::settings::{EngineSettings, KvType};
use crate::metrics::quality::{reference_row, score_token, TokenScore};

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

/// Scores `answer` (what the model generated after `prompt`) against `reference`: one
/// [`TokenScore`] per answer token, in order. `cancelled` is asked between passes.
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
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    // The sequence both read: the prompt and every answer token but the last (the last
    // answer token is predicted, never read). Position `first + i` predicts answer[i].
    let mut sequence = Vec::with_capacity(prompt.len() + answer.len());
    sequence.extend_from_slice(prompt);
    sequence.extend_from_slice(&answer[..answer.len() - 1]);
    let first = prompt.len() - 1;
    let n_ctx = u32::try_from(sequence.len() + 1)
        .unwrap_or(u32::MAX)
        .div_ceil(256)
        .saturating_mul(256);
    let mut own = settings.clone();
    own.n_ctx = n_ctx;
    if passes == Passes::Whole {
        let n = u32::try_from(sequence.len() + 1).unwrap_or(u32::MAX);
        own.n_ctx = n;
        own.n_batch = n;
        own.n_ubatch = n.min(512);
    }
    let mut truth = own.clone();
    truth.type_k = KvType::F16;
    truth.type_v = KvType::F16;
    let mut model_ctx = crate::llama::new_context(model, &own, 1)?;
    let mut ref_ctx = crate::llama::new_context(reference, &truth, 1)
        .map_err(|e| EngineError::Reference(Box::new(e)))?;
    let next_of = |j: usize, vocab: usize| {
        usize::try_from(answer[j].0)
            .ok()
            .filter(|&n| n < vocab)
            .ok_or_else(|| {
                EngineError::Decode(format!(
                    "answer token {} is outside the vocabulary",
                    answer[j].0
                ))
            })
    };
    if passes == Passes::Whole {
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
                    .map_err(|e| EngineError::Decode(e.to_string()))?;
            }
            ctx.decode(&mut batch)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
        }
        let mut scores = Vec::with_capacity(answer.len());
        for (j, i) in positions.enumerate() {
            let row = reference_row(&planted(ref_ctx.get_logits_ith(i as i32)));
            let logits = model_ctx.get_logits_ith(i as i32);
            scores.push(score_token(logits, &row, next_of(j, logits.len())?, true));
        }
        return Ok(scores);
    }
    let n_batch = own.n_batch.max(1) as usize;
    let mut batch = LlamaBatch::new(n_batch.max(ROWS_PER_PASS), 1);
    // The conversation before the first scored position, without outputs.
    for ctx in [&mut model_ctx, &mut ref_ctx] {
        for (c, chunk) in sequence[..first].chunks(n_batch).enumerate() {
            if cancelled() {
                return Err(EngineError::Cancelled);
            }
            fill(&mut batch, chunk, c * n_batch, false)?;
            ctx.decode(&mut batch)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
        }
    }
    let mut scores = Vec::with_capacity(answer.len());
    let mut at = first;
    while at < sequence.len() {
        if cancelled() {
            return Err(EngineError::Cancelled);
        }
        let chunk = &sequence[at..(at + ROWS_PER_PASS).min(sequence.len())];
        let rows = pass(&mut ref_ctx, &mut batch, chunk, at)?
            .into_iter()
            .map(|logits| reference_row(&planted(&logits)))
            .collect::<Vec<_>>();
        let candidate = pass(&mut model_ctx, &mut batch, chunk, at)?;
        for (j, (logits, row)) in candidate.iter().zip(&rows).enumerate() {
            let next = next_of(at - first + j, logits.len())?;
            scores.push(score_token(logits, row, next, true));
        }
        at += chunk.len();
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
            .map_err(|e| EngineError::Decode(e.to_string()))?;
    }
    Ok(())
}

/// One pass with an output at every token: each position's logits, copied out.
fn pass(
    ctx: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    tokens: &[LlamaToken],
    start: usize,
) -> Result<Vec<Vec<f32>>, EngineError> {
    fill(batch, tokens, start, true)?;
    ctx.decode(batch)
        .map_err(|e| EngineError::Decode(e.to_string()))?;
    Ok((0..tokens.len())
        .map(|j| ctx.get_logits_ith(j as i32).to_vec())
        .collect())
}
