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

/// Running sums for one model (llama-perplexity's `kl_divergence_result`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Accumulator {
    count: u64,
    sum_nll: f64,
    sum_nll2: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    n_same_top: u64,
    kld_values: Vec<f32>,
}

/// One model's quality over the evaluation text. KL figures are against the reference and
/// absent for the reference itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QualityStats {
    /// Positions scored.
    pub n_scored: u64,
    /// exp(mean negative log-likelihood of the actual next token).
    pub ppl: f64,
    /// Its standard error (ppl × the standard error of the mean NLL).
    pub ppl_uncertainty: f64,
    /// Mean KL(reference ‖ this) over the scored positions, in nats.
    pub kld_mean: Option<f64>,
    /// Standard error of that mean.
    pub kld_uncertainty: Option<f64>,
    /// Median, 99th percentile (linear interpolation, as llama-perplexity) and maximum.
    pub kld_median: Option<f64>,
    pub kld_p99: Option<f64>,
    pub kld_max: Option<f64>,
    /// Share of positions where both models' most likely token is the same, in %.
    pub same_top_pct: Option<f64>,
    /// Mean of (this model's probability of the actual next token − the reference's), in
    /// percentage points.
    pub delta_p_mean_pct: Option<f64>,
    /// Root mean square of that difference, in percentage points.
    pub delta_p_rms_pct: Option<f64>,
}

/// llama-perplexity's `mean_and_uncertainty`.
fn mean_and_uncertainty(sum: f64, sum2: f64, count: u64) -> (f64, f64) {
    if count == 0 {
        return (0.0, 0.0);
    }
    let n = count as f64;
    let mean = sum / n;
    let var = sum2 / n - mean * mean;
    let unc = if var > 0.0 && count > 10 {
        (var / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, unc)
}

/// llama-perplexity's percentile: linear interpolation between the sorted values.
fn percentile(sorted: &[f32], fraction: f64) -> f64 {
    crate::metrics::percentile_linear(sorted, fraction)
}

impl Accumulator {
    fn merge(&mut self, other: Accumulator) {
        self.count += other.count;
        self.sum_nll += other.sum_nll;
        self.sum_nll2 += other.sum_nll2;
        self.sum_kld += other.sum_kld;
        self.sum_kld2 += other.sum_kld2;
        self.sum_p_diff += other.sum_p_diff;
        self.sum_p_diff2 += other.sum_p_diff2;
        self.n_same_top += other.n_same_top;
        self.kld_values.extend(other.kld_values);
    }

    /// The figures; `with_kl` is false for the reference.
    pub(crate) fn stats(&self, with_kl: bool) -> QualityStats {
        let (nll, nll_unc) = mean_and_uncertainty(self.sum_nll, self.sum_nll2, self.count);
        let ppl = nll.exp();
        let mut sorted = self.kld_values.clone();
        sorted.sort_by(f32::total_cmp);
        let kl = with_kl && self.count > 0;
        let (kld, kld_unc) = mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count);
        let (p_diff, _) = mean_and_uncertainty(self.sum_p_diff, self.sum_p_diff2, self.count);
        let p_diff_rms = (self.sum_p_diff2 / self.count.max(1) as f64).sqrt();
        QualityStats {
            n_scored: self.count,
            ppl,
            ppl_uncertainty: ppl * nll_unc,
            kld_mean: kl.then_some(kld),
            kld_uncertainty: kl.then_some(kld_unc),
            kld_median: kl.then(|| percentile(&sorted, 0.5)),
            kld_p99: kl.then(|| percentile(&sorted, 0.99)),
            kld_max: kl.then(|| sorted.last().map_or(0.0, |v| f64::from(*v))),
            same_top_pct: kl.then(|| 100.0 * self.n_same_top as f64 / self.count as f64),
            delta_p_mean_pct: kl.then_some(100.0 * p_diff),
            delta_p_rms_pct: kl.then_some(100.0 * p_diff_rms),
        }
    }
}

/// Index and value of the largest logit, and log Σ exp(logit − max).
fn max_and_log_sum_exp(logits: &[f32]) -> (usize, f32, f64) {
    let (mut imax, mut max) = (0usize, f32::NEG_INFINITY);
    for (i, &v) in logits.iter().enumerate() {
        if v > max {
            max = v;
            imax = i;
        }
    }
    let sum: f64 = logits.iter().map(|&v| f64::from((v - max).exp())).sum();
    (imax, max, sum.ln())
}

/// The reference's log-probabilities at one scored position, its top token and the
/// log-probability of the actual next token.
struct RefRow {
    log_probs: Vec<f32>,
    top: usize,
}

fn reference_row(logits: &[f32]) -> RefRow {
    let (top, max, lse) = max_and_log_sum_exp(logits);
    let shift = f64::from(max) + lse;
    RefRow {
        log_probs: logits
            .iter()
            .map(|&v| (f64::from(v) - shift) as f32)
            .collect(),
        top,
    }
}

/// Adds one scored position of a candidate to `acc`.
fn score_candidate(acc: &mut Accumulator, logits: &[f32], reference: &RefRow, next: usize) {
    let (top, max, lse) = max_and_log_sum_exp(logits);
    let shift = f64::from(max) + lse;
    let mut kld = 0.0f64;
    // Log-probabilities rounded to f32 exactly as the reference's are, so that identical
    // logits give exactly identical values (KL 0, Δp 0).
    let log_prob = |v: f32| f64::from((f64::from(v) - shift) as f32);
    for (&lp, &v) in reference.log_probs.iter().zip(logits) {
        let lp = f64::from(lp);
        let p = lp.exp();
        if p > 0.0 {
            kld += p * (lp - log_prob(v));
        }
    }
    // Rounding can push a KL of nearly identical distributions a hair below zero.
    let kld = kld.max(0.0);
    let lq_next = log_prob(logits[next]);
    let nll = -lq_next;
    acc.count += 1;
    acc.sum_nll += nll;
    acc.sum_nll2 += nll * nll;
    acc.sum_kld += kld;
    acc.sum_kld2 += kld * kld;
    let p_diff = lq_next.exp() - f64::from(reference.log_probs[next]).exp();
    acc.sum_p_diff += p_diff;
    acc.sum_p_diff2 += p_diff * p_diff;
    acc.n_same_top += u64::from(top == reference.top);
    acc.kld_values.push(kld as f32);
}

/// Adds one scored position of the reference itself (perplexity only).
fn score_reference(acc: &mut Accumulator, reference: &RefRow, next: usize) {
    let nll = -f64::from(reference.log_probs[next]);
    acc.count += 1;
    acc.sum_nll += nll;
    acc.sum_nll2 += nll * nll;
}

/// How the evaluation text is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunking {
    pub n_ctx: u32,
    /// At most this many chunks (None = all).
    pub max_chunks: Option<u32>,
}

impl Chunking {
    /// The chunks of `n_tokens` tokens, or why the text is too short: like llama-perplexity,
    /// at least two chunks' worth of tokens.
    pub(crate) fn chunks(&self, n_tokens: usize) -> Result<usize, String> {
        let n_ctx = self.n_ctx as usize;
        if n_tokens < 2 * n_ctx {
            return Err(format!(
                "the evaluation text is too short: it is {n_tokens} tokens and a context of \
                 {n_ctx} needs at least {} (two chunks); give a longer --text or a smaller -c",
                2 * n_ctx
            ));
        }
        let all = n_tokens / n_ctx;
        Ok(match self.max_chunks {
            Some(m) => all.min(m as usize),
            None => all,
        })
    }
}

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
}

impl<'m> Evaluator<'m> {
    pub(crate) fn new(model: &'m LlamaModel, ctx: LlamaContext<'m>, n_ctx: u32) -> Self {
        let vocab = model.vocab();
        Self {
            ctx,
            batch: LlamaBatch::new(n_ctx as usize, 1),
            bos: vocab.should_add_bos().then(|| vocab.bos()),
            accumulator: Accumulator::default(),
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
/// per-position arithmetic.
pub(crate) fn evaluate_chunk(
    reference: &mut Evaluator<'_>,
    candidates: &mut [Evaluator<'_>],
    chunk: &[LlamaToken],
    threads: usize,
) -> Result<(), EngineError> {
    let first = chunk.len() / 2;
    reference.decode(chunk, first)?;
    let positions: Vec<usize> = (first..chunk.len() - 1).collect();
    let next = |pos: usize| usize::try_from(chunk[pos + 1].0).unwrap_or(0);
    let rows: Vec<RefRow> = positions
        .iter()
        .map(|&pos| reference_row(reference.logits(pos)))
        .collect();
    for (row, &pos) in rows.iter().zip(&positions) {
        score_reference(&mut reference.accumulator, row, next(pos));
    }
    let workers = threads.max(1).min(positions.len().max(1));
    let per_worker = positions.len().div_ceil(workers);
    for candidate in candidates.iter_mut() {
        candidate.decode(chunk, first)?;
        // The context is not Sync; the logits it holds are plain slices that are.
        let logits: Vec<&[f32]> = positions.iter().map(|&pos| candidate.logits(pos)).collect();
        let nexts: Vec<usize> = positions.iter().map(|&pos| next(pos)).collect();
        let parts: Vec<Accumulator> = std::thread::scope(|scope| {
            let handles: Vec<_> = logits
                .chunks(per_worker.max(1))
                .zip(rows.chunks(per_worker.max(1)))
                .zip(nexts.chunks(per_worker.max(1)))
                .map(|((logit_part, row_part), next_part)| {
                    scope.spawn(move || {
                        let mut acc = Accumulator::default();
                        for ((l, row), &n) in logit_part.iter().zip(row_part).zip(next_part) {
                            score_candidate(&mut acc, l, row, n);
                        }
                        acc
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        for part in parts {
            candidate.accumulator.merge(part);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(logits: &[f32]) -> RefRow {
        reference_row(logits)
    }

    #[test]
    fn identical_distributions_have_zero_kl_and_full_agreement() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let mut acc = Accumulator::default();
        score_candidate(&mut acc, &logits, &row(&logits), 1);
        let s = acc.stats(true);
        assert_eq!(s.kld_mean, Some(0.0));
        assert_eq!(s.same_top_pct, Some(100.0));
        assert!(s.delta_p_mean_pct.unwrap().abs() < 1e-12);
    }

    #[test]
    fn kl_matches_a_hand_computed_value() {
        // p = (0.5, 0.5), q = (0.9, 0.1): KL(p‖q) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1).
        let p = [0.0f32, 0.0];
        let q = [0.9f32.ln(), 0.1f32.ln()];
        let mut acc = Accumulator::default();
        score_candidate(&mut acc, &q, &row(&p), 0);
        let want = 0.5 * (0.5f64 / 0.9).ln() + 0.5 * (0.5f64 / 0.1).ln();
        let got = acc.stats(true).kld_mean.unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        // The candidate gives the actual token (0) 0.9 where the reference gave 0.5.
        let dp = acc.stats(true).delta_p_mean_pct.unwrap();
        assert!((dp - 40.0).abs() < 1e-4, "{dp}");
        // NLL of the candidate: −ln 0.9.
        assert!((acc.stats(true).ppl - 1.0 / 0.9).abs() < 1e-5);
    }

    #[test]
    fn percentiles_interpolate_like_llama_perplexity() {
        let v = [0.0f32, 1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert!((percentile(&v, 0.99) - 3.96).abs() < 1e-6);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn a_text_shorter_than_two_chunks_is_refused() {
        let c = Chunking {
            n_ctx: 512,
            max_chunks: None,
        };
        let e = c.chunks(1000).unwrap_err();
        assert!(e.contains("too short") && e.contains("1000 tokens") && e.contains("1024"));
        assert_eq!(c.chunks(1024), Ok(2));
        assert_eq!(c.chunks(5000), Ok(9));
        let capped = Chunking {
            n_ctx: 512,
            max_chunks: Some(3),
        };
        assert_eq!(capped.chunks(5000), Ok(3));
    }

    #[test]
    fn uncertainty_follows_llama_perplexity() {
        assert_eq!(mean_and_uncertainty(0.0, 0.0, 0), (0.0, 0.0));
        // Fewer than 11 values: no uncertainty.
        assert_eq!(mean_and_uncertainty(10.0, 20.0, 5).1, 0.0);
        let (m, u) = mean_and_uncertainty(55.0, 385.0, 10 + 1 - 1 + 1);
        assert!(m > 0.0 && u > 0.0);
    }
}
