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
    /// An evaluator on `ctx` that decodes at most `n_batch` tokens at a time.
    pub(crate) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        n_batch: u32,
        name: String,
    ) -> Self {
        let vocab = model.vocab();
        Self {
            ctx,
            batch: LlamaBatch::new(n_batch as usize, 1),
            bos: vocab.should_add_bos().then(|| vocab.bos()),
            accumulator: Accumulator::default(),
            name,
        }
    }

    /// Decode `chunk[block]`, the cache holding the chunk's tokens before it (an empty cache
    /// for the first block), asking for logits from position `first` on. A block of the whole
    /// chunk is one decode call, as llama-perplexity makes it with -b equal to -c.
    fn decode(
        &mut self,
        chunk: &[LlamaToken],
        block: std::ops::Range<usize>,
        first: usize,
    ) -> Result<(), EngineError> {
        if block.start == 0 {
            self.ctx.clear_kv_cache();
        }
        self.batch.clear();
        for i in block {
            let token = match (i, self.bos) {
                (0, Some(bos)) => bos,
                _ => chunk[i],
            };
            self.batch
                .add(token, i as i32, &[0], i >= first)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
        }
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| EngineError::Decode(e.to_string()))
    }

    /// The logits of the `i`-th token of the last block decoded (one that asked for them).
    fn logits(&self, i: usize) -> &[f32] {
        self.ctx.get_logits_ith(i as i32)
    }
}

/// Evaluate one chunk in lockstep, one block of `block` tokens at a time: the reference
/// decodes a block, the log-probabilities of its scored positions are kept, each candidate
/// decodes the same block and is scored against them, and the rows are dropped before the next
/// block. So the logits held are O(block × vocabulary), whatever the context: a whole 8k chunk
/// held 4096 rows of a 262k vocabulary per model (4.3 GB each). Blocks of llama.cpp's n_ubatch
/// are the very micro-batches one decode call of the chunk makes (llama-perplexity's), so the
/// figures are the same (`tests/compare.rs` holds them to the whole chunk's). `threads` workers
/// share the per-position arithmetic; `scored_before` positions were scored in earlier chunks.
/// An error names the file it comes from; a row with no distribution in it (NaN or infinite
/// logits) ends the evaluation, on either side, rather than dropping out of the sums.
pub(crate) fn evaluate_chunk(
    reference: &mut Evaluator<'_>,
    candidates: &mut [Evaluator<'_>],
    chunk: &[LlamaToken],
    (threads, block): (usize, usize),
    scored_before: usize,
) -> Result<(), String> {
    let first = chunk.len() / 2;
    let named = |name: &str, e: EngineError| format!("{name}: {e}");
    let next = |pos: usize| usize::try_from(chunk[pos + 1].0).unwrap_or(0);
    let mut start = 0;
    while start < chunk.len() {
        let end = (start + block.max(1)).min(chunk.len());
        reference
            .decode(chunk, start..end, first)
            .map_err(|e| named(&reference.name, e))?;
        // Positions first … len − 2 predict the token after them.
        let positions: Vec<usize> = (start.max(first)..end.min(chunk.len() - 1)).collect();
        // A row's index in the block's batch (llama.cpp's `llama_get_logits_ith`).
        let out = |pos: usize| pos - start;
        let rows: Vec<RefRow> = positions
            .iter()
            .map(|&pos| {
                reference_row(reference.logits(out(pos))).map_err(|_| {
                    let e = EngineError::non_finite_reference(scored_before + pos - first);
                    named(&reference.name, e)
                })
            })
            .collect::<Result<_, _>>()?;
        for (row, &pos) in rows.iter().zip(&positions) {
            score_reference(&mut reference.accumulator, row, next(pos));
        }
        for candidate in candidates.iter_mut() {
            candidate
                .decode(chunk, start..end, first)
                .map_err(|e| named(&candidate.name, e))?;
            score_block(candidate, &rows, &positions, (out, next), threads).map_err(|at| {
                let e = EngineError::non_finite_candidate(scored_before + at - first);
                named(&candidate.name, e)
            })?;
        }
        start = end;
    }
    Ok(())
}

/// Scores `candidate`'s outputs at `positions` (output `out(pos)`, the next token `next(pos)`)
/// against the reference's `rows`, on `threads` workers; the position of a row with no
/// distribution in it is the error.
fn score_block(
    candidate: &mut Evaluator<'_>,
    rows: &[RefRow],
    positions: &[usize],
    (out, next): (impl Fn(usize) -> usize, impl Fn(usize) -> usize),
    threads: usize,
) -> Result<(), usize> {
    let workers = threads.max(1).min(positions.len().max(1));
    let per_worker = positions.len().div_ceil(workers).max(1);
    // The context is not Sync; the logits it holds are plain slices that are.
    let logits: Vec<&[f32]> = positions
        .iter()
        .map(|&p| candidate.logits(out(p)))
        .collect();
    let nexts: Vec<usize> = positions.iter().map(|&p| next(p)).collect();
    let parts = std::thread::scope(|scope| {
        let handles: Vec<_> = logits
            .chunks(per_worker)
            .zip(rows.chunks(per_worker))
            .zip(nexts.chunks(per_worker).zip(positions.chunks(per_worker)))
            .map(|((logit_part, row_part), (next_part, pos_part))| {
                scope.spawn(move || {
                    let mut acc = Accumulator::default();
                    let parts = logit_part.iter().zip(row_part).zip(next_part);
                    for (((l, row), &n), &pos) in parts.zip(pos_part) {
                        score_candidate(&mut acc, l, row, n).map_err(|_| pos)?;
                    }
                    Ok(acc)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Ok(Accumulator::default())))
            .collect::<Vec<Result<Accumulator, usize>>>()
    });
    for part in parts {
        candidate.accumulator.merge(part?);
    }
    Ok(())
}
