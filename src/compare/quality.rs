//! Quality in lockstep: the reference model and every candidate read the same evaluation text
//! in chunks of n_ctx tokens, and at every scored position the candidate's next-token
//! distribution is compared with the reference's while both are still in memory — no logits
//! file. The chunking and scoring follow `llama-perplexity --kl-divergence` so that the
//! figures can be checked against it: the text is tokenized once (BOS first when the
//! vocabulary wants one), cut into ⌊tokens ÷ n_ctx⌋ chunks, each chunk starts with BOS (when
//! the vocabulary adds one), and only the second half of each chunk is scored (positions
//! n_ctx/2 … n_ctx − 2 predict the tokens after them), so every scored token has at least
//! n_ctx/2 tokens of context. Definitions are in docs/metrics.md.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::engine::EngineError;

pub use crate::metrics::quality::QualityStats;
use crate::metrics::quality::{
    reference_row, score_candidate, score_reference, Accumulator, RefRow,
};

/// Tokenize the evaluation text like llama-perplexity (`common_tokenize(ctx, text, true)`),
/// refusing text llama.cpp's tokenizer would crash or hang on (`llama::runs`).
pub(crate) fn tokenize(
    model: &LlamaModel,
    text: &str,
) -> Result<Vec<LlamaToken>, crate::llama::error::EngineError> {
    crate::llama::runs::tokenize_checked(model, text, true, false)
}

/// One model's context over the chunks.
pub(crate) struct Evaluator<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    bos: Option<LlamaToken>,
    pub accumulator: Accumulator,
    /// The file, for messages.
    name: String,
}

impl<'m> Evaluator<'m> {
    pub(crate) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        n_ctx: u32,
        name: String,
    ) -> Self {
        let vocab = model.vocab();
        Self {
            ctx,
            batch: LlamaBatch::new(n_ctx as usize, 1),
            bos: vocab.should_add_bos().then(|| vocab.bos()),
            accumulator: Accumulator::default(),
            name,
        }
    }

    /// Decode one chunk from an empty cache, asking for logits from `first` on. The context's
    /// n_batch is the chunk's length, so this is one decode call, as in llama-perplexity.
    fn decode(&mut self, chunk: &[LlamaToken], first: usize) -> Result<(), EngineError> {
        self.ctx.clear_kv_cache();
        self.batch.clear();
        for (i, &token) in chunk.iter().enumerate() {
            let token = match (i, self.bos) {
                (0, Some(bos)) => bos,
                _ => token,
            };
            self.batch
                .add(token, i as i32, &[0], i >= first)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
        }
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| EngineError::Decode(e.to_string()))
    }

    fn logits(&self, position: usize) -> &[f32] {
        self.ctx.get_logits_ith(position as i32)
    }
}

/// Evaluate one chunk in lockstep: the reference first, its log-probabilities kept for the
/// scored positions, then each candidate scored against them. `threads` workers share the
/// per-position arithmetic; `scored_before` positions were scored in earlier chunks. An error
/// names the file it comes from; a row with no distribution in it (NaN or infinite logits)
/// ends the evaluation, on either side, rather than dropping out of the sums.
pub(crate) fn evaluate_chunk(
    reference: &mut Evaluator<'_>,
    candidates: &mut [Evaluator<'_>],
    chunk: &[LlamaToken],
    threads: usize,
    scored_before: usize,
) -> Result<(), String> {
    let first = chunk.len() / 2;
    let named = |name: &str, e: EngineError| format!("{name}: {e}");
    reference
        .decode(chunk, first)
        .map_err(|e| named(&reference.name, e))?;
    let positions: Vec<usize> = (first..chunk.len() - 1).collect();
    let next = |pos: usize| usize::try_from(chunk[pos + 1].0).unwrap_or(0);
    let rows: Vec<RefRow> = positions
        .iter()
        .map(|&pos| {
            reference_row(reference.logits(pos)).map_err(|_| {
                let e = EngineError::non_finite_reference(scored_before + pos - first);
                named(&reference.name, e)
            })
        })
        .collect::<Result<_, _>>()?;
    for (row, &pos) in rows.iter().zip(&positions) {
        score_reference(&mut reference.accumulator, row, next(pos));
    }
    let workers = threads.max(1).min(positions.len().max(1));
    let per_worker = positions.len().div_ceil(workers);
    for candidate in candidates.iter_mut() {
        candidate
            .decode(chunk, first)
            .map_err(|e| named(&candidate.name, e))?;
        // The context is not Sync; the logits it holds are plain slices that are.
        let logits: Vec<&[f32]> = positions.iter().map(|&pos| candidate.logits(pos)).collect();
        let nexts: Vec<usize> = positions.iter().map(|&pos| next(pos)).collect();
        let parts = std::thread::scope(|scope| {
            let handles: Vec<_> = logits
                .chunks(per_worker.max(1))
                .zip(rows.chunks(per_worker.max(1)))
                .zip(nexts.chunks(per_worker.max(1)))
                .enumerate()
                .map(|(w, ((logit_part, row_part), next_part))| {
                    scope.spawn(move || {
                        let mut acc = Accumulator::default();
                        let parts = logit_part.iter().zip(row_part).zip(next_part);
                        for (k, ((l, row), &n)) in parts.enumerate() {
                            score_candidate(&mut acc, l, row, n).map_err(|_| {
                                let at = scored_before + w * per_worker.max(1) + k;
                                EngineError::non_finite_candidate(at)
                            })?;
                        }
                        Ok(acc)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Ok(Accumulator::default())))
                .collect::<Vec<Result<Accumulator, EngineError>>>()
        });
        for part in parts {
            candidate
                .accumulator
                .merge(part.map_err(|e| named(&candidate.name, e))?);
        }
    }
    Ok(())
}
