//! One batch size measured on an already loaded model, for the chat's bench screen: the same
//! `Bencher` and batch test as `tokscope bench --batch`, in a context of its own, so the
//! chat's context and KV cache stay as they are.

use llama_cpp_2::model::LlamaModel;

use super::sweep::TestSpec;
use crate::config::EngineSettings;
use crate::engine::{EngineError, SamplingParams};
use crate::llama;
use crate::llama::measure::Bencher;
use crate::metrics::{ms, rate_per_s, LatencyStats};
use crate::plot::BatchPoint;

/// Measure `sequences` prompts of `n_prompt` tokens then `n_gen` batched steps (one warm-up
/// and one timed run). Returns the point and the prefill time in ms.
pub fn measure_batch(
    model: &LlamaModel,
    settings: &EngineSettings,
    sequences: u32,
    n_prompt: u32,
    n_gen: u32,
) -> Result<(BatchPoint, f64), EngineError> {
    let sequences = sequences.max(1);
    let per_sequence = n_prompt.saturating_add(n_gen).max(1);
    let mut s = settings.clone();
    s.n_ctx = per_sequence.saturating_mul(sequences).max(64);
    s.n_batch = s.n_batch.max(sequences);
    let ctx = llama::new_context(model, &s, sequences)?;
    let mut bencher = Bencher::new(model, ctx);
    let test = TestSpec::Batch {
        sequences,
        n_prompt,
        n_gen,
    };
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    bencher.warm_up(&test)?;
    let sample = bencher.run(&test, 0, &greedy)?;
    let aggregate = rate_per_s(sample.tokens_generated as usize, sample.decode).unwrap_or(0.0);
    let itl = LatencyStats::from_durations(&sample.gaps);
    Ok((
        BatchPoint {
            batch: sequences,
            aggregate_tok_per_s: aggregate,
            per_sequence_tok_per_s: aggregate / f64::from(sequences),
            itl_p50_ms: itl.map_or(0.0, |i| i.p50_ms),
            itl_p99_ms: itl.map_or(0.0, |i| i.p99_ms),
        },
        sample.prefill.map_or(0.0, ms),
    ))
}
