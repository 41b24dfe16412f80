//! The quality maths, one module for `compare` and the chat (docs/metrics.md, "Quality"): a
//! candidate's next-token distribution against a reference's at one position (KL(ref ‖
//! candidate) in nats, the same top token, both probabilities of the token that came next,
//! both entropies), the running sums `compare` keeps (llama-perplexity's
//! `kl_divergence_result`), an answer's figures, and a distribution's own confidence when
//! there is no reference.

/// Running sums for one model (llama-perplexity's `kl_divergence_result`).
#[derive(Debug, Clone, Default)]
pub struct Accumulator {
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

impl Accumulator {
    pub(crate) fn merge(&mut self, other: Accumulator) {
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
            // llama-perplexity's percentile: linear interpolation between the sorted values.
            kld_median: kl.then(|| super::percentile_linear(&sorted, 0.5)),
            kld_p99: kl.then(|| super::percentile_linear(&sorted, 0.99)),
            kld_max: kl.then(|| sorted.last().map_or(0.0, |v| f64::from(*v))),
            same_top_pct: kl.then(|| 100.0 * self.n_same_top as f64 / self.count as f64),
            delta_p_mean_pct: kl.then_some(100.0 * p_diff),
            delta_p_rms_pct: kl.then_some(100.0 * p_diff_rms),
        }
    }
}

/// A logits row that holds no distribution: a NaN anywhere, a +∞, or nothing above −∞. No
/// figure is computed from it (a NaN would otherwise drop out of every sum and read as a
/// perfect match: KLD 0); the caller names the model and the position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("NaN or infinite logits")]
pub struct NonFiniteRow;

/// Index and value of the largest logit, and log Σ exp(logit − max), or [`NonFiniteRow`]: a
/// NaN makes the sum NaN, a +∞ the maximum, and a row of −∞ has no finite maximum.
fn max_and_log_sum_exp(logits: &[f32]) -> Result<(usize, f32, f64), NonFiniteRow> {
    let (mut imax, mut max) = (0usize, f32::NEG_INFINITY);
    for (i, &v) in logits.iter().enumerate() {
        if v > max {
            max = v;
            imax = i;
        }
    }
    let sum: f64 = logits.iter().map(|&v| f64::from((v - max).exp())).sum();
    let lse = sum.ln();
    if max.is_finite() && lse.is_finite() {
        Ok((imax, max, lse))
    } else {
        Err(NonFiniteRow)
    }
}

/// The reference's log-probabilities at one scored position, its top token and the
/// log-probability of the actual next token.
pub struct RefRow {
    log_probs: Vec<f32>,
    top: usize,
}

impl RefRow {
    /// The reference's probability of `token` (its log-probability's exponential, as `p_ref`).
    pub fn p(&self, token: usize) -> f32 {
        f64::from(self.log_probs[token]).exp() as f32
    }
}

/// The reference's row at one position, or [`NonFiniteRow`].
pub fn reference_row(logits: &[f32]) -> Result<RefRow, NonFiniteRow> {
    let (top, max, lse) = max_and_log_sum_exp(logits)?;
    let shift = f64::from(max) + lse;
    Ok(RefRow {
        log_probs: logits
            .iter()
            .map(|&v| (f64::from(v) - shift) as f32)
            .collect(),
        top,
    })
}

/// One position of a candidate against the reference (docs/metrics.md, "Quality"): the
/// figures the chat shows per token and `compare` sums.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenScore {
    /// KL(reference ‖ candidate) over the full distributions, in nats.
    pub kld: f64,
    /// Both distributions have the same most likely token.
    pub same_top: bool,
    pub top_ref: usize,
    pub top_cand: usize,
    /// The reference's and the candidate's probability of the token that came next (the one
    /// the candidate chose, in an answer).
    pub p_ref: f64,
    pub p_cand: f64,
    /// The candidate's log-probability of that token (its NLL's negative, kept apart from
    /// `p_cand` so that a probability under f64's range still counts).
    pub ln_p_cand: f64,
    /// The two distributions' entropies, in nats (`None` unless asked for: another pass over
    /// the vocabulary).
    pub entropy_ref: Option<f64>,
    pub entropy_cand: Option<f64>,
}

/// Scores one position: the candidate's `logits` against the reference's row, `next` the
/// token that came next; `entropies` adds both distributions' entropies. A candidate row with
/// no distribution in it is [`NonFiniteRow`].
pub fn score_token(
    logits: &[f32],
    reference: &RefRow,
    next: usize,
    entropies: bool,
) -> Result<TokenScore, NonFiniteRow> {
    let candidate = max_and_log_sum_exp(logits)?;
    Ok(score_token_shifted(
        logits, reference, next, entropies, candidate,
    ))
}

/// [`score_token`] and the candidate's `k` most likely tokens with their probabilities (the
/// same softmax as its figures, computed once), largest first: the chat's scoring path, for
/// the token cursor. `compare` and `doctor scoring` call [`score_token`] and pay nothing for it.
pub fn score_token_with_top(
    logits: &[f32],
    reference: &RefRow,
    next: usize,
    k: usize,
) -> Result<(TokenScore, Vec<(usize, f32)>), NonFiniteRow> {
    let (top, max, lse) = max_and_log_sum_exp(logits)?;
    let shift = f64::from(max) + lse;
    let score = score_token_shifted(logits, reference, next, true, (top, max, lse));
    let tops = top_k(logits, k)
        .into_iter()
        .map(|i| {
            (
                i,
                f64::from((f64::from(logits[i]) - shift) as f32).exp() as f32,
            )
        })
        .collect();
    Ok((score, tops))
}

/// [`score_token`] with the candidate's maximum and log-sum-exp already found.
fn score_token_shifted(
    logits: &[f32],
    reference: &RefRow,
    next: usize,
    entropies: bool,
    (top, max, lse): (usize, f32, f64),
) -> TokenScore {
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
    let (entropy_ref, entropy_cand) = if entropies {
        (
            Some(entropy(reference.log_probs.iter().map(|&lp| f64::from(lp)))),
            Some(entropy(logits.iter().map(|&v| log_prob(v)))),
        )
    } else {
        (None, None)
    };
    TokenScore {
        // Rounding can push a KL of nearly identical distributions a hair below zero.
        kld: kld.max(0.0),
        same_top: top == reference.top,
        top_ref: reference.top,
        top_cand: top,
        p_ref: f64::from(reference.log_probs[next]).exp(),
        p_cand: log_prob(logits[next]).exp(),
        ln_p_cand: log_prob(logits[next]),
        entropy_ref,
        entropy_cand,
    }
}

/// −Σ p ln p over log-probabilities.
fn entropy(log_probs: impl Iterator<Item = f64>) -> f64 {
    log_probs
        .map(|lp| {
            let p = lp.exp();
            if p > 0.0 {
                -p * lp
            } else {
                0.0
            }
        })
        .sum()
}

/// A distribution's own confidence in the token it chose, without a reference: its
/// probability and the distribution's entropy (nats). The same softmax and entropy as
/// [`score_token`], in one pass over the vocabulary after the maximum: with d = logit − max,
/// S = Σ e^d and T = Σ e^d·d, ln P(t) = d_t − ln S and −Σ P ln P = ln S − T/S. The engine
/// computes it for every token of an answer between two decode calls, so the pass is written
/// to vectorize ([`exp_nonpositive`], f32 lanes summed into f64 per block): 262k logits in
/// tens of µs where libm's `expf` per logit took over a millisecond (docs/metrics.md).
pub fn confidence(logits: &[f32], chosen: usize) -> (f64, f64) {
    let (p, entropy, _, _) = confidence_parts(logits, chosen);
    (p, entropy)
}

/// [`confidence`] with the softmax's normaliser: ln S and the maximum, so that any other
/// token's probability is e^(logit − max − ln S).
fn confidence_parts(logits: &[f32], chosen: usize) -> (f64, f64, f64, f32) {
    const LANES: usize = 16;
    let mut lanes_max = [f32::NEG_INFINITY; LANES];
    let mut chunks = logits.chunks_exact(LANES);
    for c in &mut chunks {
        for (m, &v) in lanes_max.iter_mut().zip(c) {
            *m = m.max(v);
        }
    }
    let max = chunks
        .remainder()
        .iter()
        .chain(&lanes_max)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    // Far below the maximum, e^d is 0 in f32 (and −∞ or NaN logits count as 0).
    let term = |v: f32| {
        let d = (v - max).max(-200.0);
        let e = exp_nonpositive(d);
        (e, e * d)
    };
    let (mut sum, mut weighted) = (0.0f64, 0.0f64);
    for block in logits.chunks(4096) {
        let (mut s, mut w) = ([0.0f32; LANES], [0.0f32; LANES]);
        let mut chunks = block.chunks_exact(LANES);
        for c in &mut chunks {
            for i in 0..LANES {
                let (e, ed) = term(c[i]);
                s[i] += e;
                w[i] += ed;
            }
        }
        for &v in chunks.remainder() {
            let (e, ed) = term(v);
            s[0] += e;
            w[0] += ed;
        }
        sum += s.iter().map(|&x| f64::from(x)).sum::<f64>();
        weighted += w.iter().map(|&x| f64::from(x)).sum::<f64>();
    }
    let ln_sum = sum.ln();
    let p = (f64::from(logits[chosen] - max) - ln_sum).exp();
    (p.min(1.0), (ln_sum - weighted / sum).max(0.0), ln_sum, max)
}

/// e^x for x ≤ 0 in f32 without a branch or a libm call, so that a loop over a vocabulary
/// row vectorizes: e^x = 2^n · 2^f with n = round(x·log₂e) (the 1.5·2²³ rounding trick, which
/// also leaves n in the low mantissa bits) and f in [−½, ½], 2^f by its Taylor series to
/// degree 6 (relative error about 2e-7, f32's own). 0 under e^−87.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    let t = (x * std::f32::consts::LOG2_E).max(-127.0);
    let r = t + ROUND;
    let f = t - (r - ROUND);
    // Only the low 9 bits survive the shift: n + 127, in 0..=127 here.
    let scale = f32::from_bits(r.to_bits().wrapping_add(127) << 23);
    let l = std::f32::consts::LN_2;
    let p = 1.0
        + f * l
            * (1.0
                + f * l
                    * (1.0 / 2.0
                        + f * l
                            * (1.0 / 6.0
                                + f * l
                                    * (1.0 / 24.0
                                        + f * l * (1.0 / 120.0 + f * l * (1.0 / 720.0))))));
    p * scale
}

/// One answer token's own confidence (`run --confidence`, the chat's Alt+K without a
/// reference): the probability the model gave the token it chose and its distribution's
/// entropy, nats, both from the raw logits (before temperature and the sampler's cuts).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenConfidence {
    /// The chosen token's id and text (the text is made after the answer, off the decode
    /// path; empty until then).
    #[serde(default)]
    pub token: i32,
    #[serde(default)]
    pub text: String,
    pub p: f32,
    pub entropy: f32,
    /// The distribution's `TOP_K` most likely tokens, most likely first (texts made after the
    /// answer, as `text`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<TopToken>,
}

impl TokenConfidence {
    /// Token `chosen`'s confidence in `logits`, with the row's `TOP_K` (texts left empty).
    pub fn of(logits: &[f32], chosen: usize) -> Self {
        let (p, entropy, ln_sum, max) = confidence_parts(logits, chosen);
        let top = top_k(logits, TOP_K)
            .into_iter()
            .map(|i| TopToken {
                token: i32::try_from(i).unwrap_or(i32::MAX),
                text: String::new(),
                p: (f64::from(logits[i] - max) - ln_sum).exp().min(1.0) as f32,
            })
            .collect();
        Self {
            token: i32::try_from(chosen).unwrap_or(i32::MAX),
            text: String::new(),
            p: p as f32,
            entropy: entropy as f32,
            top,
        }
    }
}

/// The probability under which a chosen token counts as unsure (`AnswerConfidence::below_low_p`).
pub const CONFIDENCE_LOW_P: f64 = 0.1;

/// The lower bounds of a token's own-confidence bands as the chat colours them (`Alt+K`
/// without a reference), on the probability of the chosen token: band 0 at 0.9 and above
/// (sure), band 1 from 0.5, band 2 from `CONFIDENCE_LOW_P` (0.1), band 3 under 0.1 (or not
/// finite). Band i is coloured as KLD band i: the higher the band, the less trustworthy.
pub const CONFIDENCE_BANDS: [f64; 3] = [0.9, 0.5, CONFIDENCE_LOW_P];

/// The band of a chosen token's probability (0 to 3, see [`CONFIDENCE_BANDS`]).
pub fn confidence_band(p: f64) -> usize {
    band(&CONFIDENCE_BANDS, p, |bound| p >= bound)
}

/// The first band whose bound `holds` of `v`: past them all, or for a `v` that is not finite,
/// the last band.
fn band(bounds: &[f64], v: f64, holds: impl Fn(f64) -> bool) -> usize {
    let first = v.is_finite().then(|| bounds.iter().position(|&b| holds(b)));
    first.flatten().unwrap_or(bounds.len())
}

/// An answer's own confidence over its tokens (docs/metrics.md, "Per token and per answer").
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AnswerConfidence {
    pub tokens: usize,
    pub p_mean: f64,
    pub p_min: f64,
    /// Mean entropy, nats.
    pub entropy_mean: f64,
    /// Tokens chosen with a probability under `CONFIDENCE_LOW_P`.
    pub below_low_p: usize,
}

impl AnswerConfidence {
    /// The figures on one line for a person: "mean p … · min p … · mean entropy … nats · K of
    /// N tokens under p 0.1" (`run`'s stderr, the chat's Markdown export).
    pub fn line(&self) -> String {
        format!(
            "mean p {:.3} · min p {:.3} · mean entropy {:.3} nats · {} of {} tokens under p {}",
            self.p_mean,
            self.p_min,
            self.entropy_mean,
            self.below_low_p,
            self.tokens,
            CONFIDENCE_LOW_P,
        )
    }

    /// `None` for an answer of no tokens.
    pub fn of(tokens: &[TokenConfidence]) -> Option<Self> {
        if tokens.is_empty() {
            return None;
        }
        let n = tokens.len() as f64;
        Some(Self {
            tokens: tokens.len(),
            p_mean: tokens.iter().map(|t| f64::from(t.p)).sum::<f64>() / n,
            p_min: tokens
                .iter()
                .map(|t| f64::from(t.p))
                .fold(f64::INFINITY, f64::min),
            entropy_mean: tokens.iter().map(|t| f64::from(t.entropy)).sum::<f64>() / n,
            below_low_p: tokens
                .iter()
                .filter(|t| f64::from(t.p) < CONFIDENCE_LOW_P)
                .count(),
        })
    }
}

/// How many of a distribution's most likely tokens the chat keeps per answer token, for the
/// token cursor (`Alt+K`, then arrows: both models' top tokens at the token under it).
pub const TOP_K: usize = 5;

/// One of a distribution's most likely tokens: its id, its text and its probability (from the
/// raw logits, as every figure here).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TopToken {
    pub token: i32,
    pub text: String,
    pub p: f32,
}

/// The indices of the `k` largest values of `logits`, largest first (ties: the lower index
/// first; NaN never counts). One pass: a block of 64 is looked into only when one of its
/// values beats the k-th value so far, a test written to vectorize, so the pass costs about
/// what finding the maximum costs (about 18 µs for 262,144 logits on this project's 2-core
/// machine; a per-block maximum with `f32::max`, which does not vectorize, took 90).
pub fn top_k(logits: &[f32], k: usize) -> Vec<usize> {
    const BLOCK: usize = 64;
    if k == 0 {
        return Vec::new();
    }
    let mut best: Vec<(usize, f32)> = Vec::with_capacity(k + 1);
    // The k-th value so far, once there are k.
    let mut floor = f32::NEG_INFINITY;
    let offer = |best: &mut Vec<(usize, f32)>, floor: &mut f32, i: usize, v: f32| {
        if v.is_nan() || (best.len() == k && v <= *floor) {
            return;
        }
        let at = best.partition_point(|&(_, b)| b >= v);
        best.insert(at, (i, v));
        best.truncate(k);
        if best.len() == k {
            *floor = best[k - 1].1;
        }
    };
    let mut blocks = logits.chunks_exact(BLOCK);
    let mut base = 0;
    for block in &mut blocks {
        let f = floor;
        let mut beats = false;
        for &v in block {
            beats |= v > f;
        }
        if beats || best.len() < k {
            for (j, &v) in block.iter().enumerate() {
                offer(&mut best, &mut floor, base + j, v);
            }
        }
        base += BLOCK;
    }
    for (j, &v) in blocks.remainder().iter().enumerate() {
        offer(&mut best, &mut floor, base + j, v);
    }
    best.into_iter().map(|(i, _)| i).collect()
}

/// Adds one scored position of a candidate to `acc`, or [`NonFiniteRow`] (nothing added).
pub fn score_candidate(
    acc: &mut Accumulator,
    logits: &[f32],
    reference: &RefRow,
    next: usize,
) -> Result<(), NonFiniteRow> {
    acc.add(&score_token(logits, reference, next, false)?);
    Ok(())
}

impl Accumulator {
    /// Adds one scored position of a candidate.
    pub fn add(&mut self, t: &TokenScore) {
        let nll = -t.ln_p_cand;
        self.count += 1;
        self.sum_nll += nll;
        self.sum_nll2 += nll * nll;
        self.sum_kld += t.kld;
        self.sum_kld2 += t.kld * t.kld;
        let p_diff = t.p_cand - t.p_ref;
        self.sum_p_diff += p_diff;
        self.sum_p_diff2 += p_diff * p_diff;
        self.n_same_top += u64::from(t.same_top);
        self.kld_values.push(t.kld as f32);
    }
}

/// An answer's figures against the reference (docs/metrics.md, "Quality").
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AnswerQuality {
    pub tokens: usize,
    pub kld_mean: f64,
    /// 99th percentile (linear interpolation, as llama-perplexity).
    pub kld_p99: f64,
    pub same_top_pct: f64,
    /// The first token (0-based) where the two most likely tokens differ; `None`: nowhere.
    /// Every screen and line counts tokens from 1 (`token 7 of 512`), so shows this plus one.
    pub first_divergence: Option<usize>,
    /// Tokens the candidate chose that the reference gave less than `LOW_P`.
    pub below_low_p: usize,
}

/// The reference probability under which a chosen token is counted (`below_low_p`).
pub const LOW_P: f64 = 0.01;

/// The upper bounds (nats, exclusive) of a token's KLD bands as the chat colours them (`Alt+K`):
/// band 0 under 0.01 (the distributions agree to the noise of a good 8-bit quantization),
/// band 1 under 0.1, band 2 under 1, band 3 at 1 and above (or not finite).
pub const KLD_BANDS: [f64; 3] = [0.01, 0.1, 1.0];

/// The band of a token's KLD (0 to 3, see [`KLD_BANDS`]).
pub fn kld_band(kld: f64) -> usize {
    band(&KLD_BANDS, kld, |bound| kld < bound)
}

impl AnswerQuality {
    /// `None` for an answer of no tokens.
    pub fn of(scores: &[TokenScore]) -> Option<Self> {
        if scores.is_empty() {
            return None;
        }
        let n = scores.len();
        let mut sorted: Vec<f64> = scores.iter().map(|t| t.kld).collect();
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            tokens: n,
            kld_mean: sorted.iter().sum::<f64>() / n as f64,
            kld_p99: super::percentile_linear(&sorted, 0.99),
            same_top_pct: 100.0 * scores.iter().filter(|t| t.same_top).count() as f64 / n as f64,
            first_divergence: scores.iter().position(|t| !t.same_top),
            below_low_p: scores.iter().filter(|t| t.p_ref < LOW_P).count(),
        })
    }
}

/// An answer scored against a reference model (`run --ref`): each token's figures, in answer
/// order, and the answer's (docs/metrics.md, "Per token and per answer").
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AnswerScore {
    /// The reference model's file.
    pub reference: std::path::PathBuf,
    /// The answer's figures; `None` for an answer of no tokens.
    pub summary: Option<AnswerQuality>,
    pub tokens: Vec<TokenQuality>,
    /// Tokens of the conversation before the answer that both models read first.
    pub context_tokens: usize,
    /// The scoring's wall time on the engine thread, ms: both models' teacher-forced passes,
    /// after the answer (never while it decodes).
    pub score_ms: f64,
    /// The reference's load, ms (0 when it was already loaded for an earlier answer).
    pub reference_load_ms: f64,
    /// Tokens of the conversation both models' scoring contexts kept from the previous
    /// answer's scoring (the longest common prefix, at most `context_tokens` − 1), so not read
    /// again; 0 for the first answer, after a change of model, reference or settings, and in
    /// `doctor scoring`.
    #[serde(default)]
    pub reused_tokens: usize,
    /// The reference as loaded: its file's size in bytes, its layer count and the layers
    /// llama.cpp placed on a GPU (0 on the CPU), as its load log says (the chat's status bar,
    /// `run`'s line). 0 in `doctor scoring`'s and in files saved before they were kept.
    #[serde(default)]
    pub reference_file_bytes: u64,
    #[serde(default)]
    pub reference_n_layer: u32,
    #[serde(default)]
    pub reference_gpu_layers: u32,
}

/// One answer token against the reference: its id and text with the figures of
/// [`TokenScore`] (whose `p_cand` is the probability the model gave the token it chose).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenQuality {
    pub token: i32,
    pub text: String,
    #[serde(flatten)]
    pub score: TokenScore,
    /// The reference's and the candidate's [`TOP_K`] most likely tokens at this position,
    /// largest first, probabilities from the raw logits (the chat's scoring only; empty in
    /// `doctor scoring` and in files saved before they were kept). Named `top_k_ref` and
    /// `top_k_cand` in JSON: `top_ref` and `top_cand` there are the score's top token ids.
    #[serde(rename = "top_k_ref", default, skip_serializing_if = "Vec::is_empty")]
    pub top_ref: Vec<TopToken>,
    #[serde(rename = "top_k_cand", default, skip_serializing_if = "Vec::is_empty")]
    pub top_cand: Vec<TopToken>,
}

impl AnswerScore {
    /// The answer's scores with their tokens (`tokens` and `texts` in answer order, one per
    /// score).
    pub fn new(
        reference: std::path::PathBuf,
        scores: Vec<TokenScore>,
        tokens: &[i32],
        texts: Vec<String>,
        context_tokens: usize,
    ) -> Self {
        let summary = AnswerQuality::of(&scores);
        Self {
            reference,
            summary,
            tokens: scores
                .into_iter()
                .zip(tokens)
                .zip(texts)
                .map(|((score, &token), text)| TokenQuality {
                    token,
                    text,
                    score,
                    top_ref: Vec::new(),
                    top_cand: Vec::new(),
                })
                .collect(),
            context_tokens,
            ..Self::default()
        }
    }
}

/// How far the chat's scoring path (passes of 32 positions, `engine/score.rs`) agrees with
/// `llama-perplexity --kl-divergence` over the same tokens, by figure: mean KLD within 1%
/// (+0.06% to +1.04% measured), but its p99 +3.4% to +5.8% and its same-top −1.8%
/// (near ties flip), because its kernels are not one decode of the chunk's
/// (benchmarks/chat-scoring-32-chunks-20261207.txt, benchmarks/agreement-quality-instruct-20261207.txt).
/// The chat shows each of an answer's figures to the digits that supports, one formatter for
/// every place that shows them: the mean to 3 significant digits, the p99 to 2, same top as a
/// whole percent.
pub fn kld_mean_cell(kld: f64) -> String {
    crate::fmt::sig(kld, 3)
}

/// An answer's KLD p99 as the chat shows it (2 significant digits; see [`kld_mean_cell`]).
pub fn kld_p99_cell(kld: f64) -> String {
    crate::fmt::sig(kld, 2)
}

/// An answer's same-top share as the chat shows it (a whole percent; see [`kld_mean_cell`]).
pub fn same_top_cell(pct: f64) -> String {
    if pct.is_finite() {
        format!("{pct:.0}%")
    } else {
        "—".into()
    }
}

/// An answer's mean KLD and p99 with the digits one answer supports: the mean at the precision
/// of its standard error over the answer's tokens (two significant digits of the error), with
/// and without the error, and the p99 to two significant digits. Four decimals from a short
/// answer claimed a precision its few tokens do not have.
pub struct KldDigits {
    /// `0.120`: the mean alone, to its error's precision (narrow panes).
    pub mean: String,
    /// `0.120 ± 0.094`.
    pub mean_pm: String,
    pub p99: String,
}

pub fn kld_digits(q: &AnswerScore) -> Option<KldDigits> {
    let a = q.summary.as_ref()?;
    let n = q.tokens.len();
    let se = if n > 1 {
        let var = q
            .tokens
            .iter()
            .map(|t| (t.score.kld - a.kld_mean).powi(2))
            .sum::<f64>()
            / (n - 1) as f64;
        var.sqrt() / (n as f64).sqrt()
    } else {
        0.0
    };
    // Never more than the 3 significant digits the check against llama-perplexity supports
    // (see `kld_mean_cell`), however long the answer.
    let capped = kld_mean_cell(a.kld_mean);
    let (mean, mean_pm) = if se > 0.0 && se.is_finite() {
        let pm = crate::fmt::mean_pm(a.kld_mean, se);
        let alone = pm.split(" ± ").next().unwrap_or_default().to_string();
        // Significant digits shown: the digits after any leading zeros.
        let sig = |t: &str| {
            t.chars()
                .filter(char::is_ascii_digit)
                .skip_while(|&c| c == '0')
                .count()
        };
        if sig(&alone) > 3 {
            let pm = format!("{capped} ± {}", crate::fmt::sig(se, 2));
            (capped, pm)
        } else {
            (alone, pm)
        }
    } else {
        let s = crate::fmt::sig(a.kld_mean, 2);
        (s.clone(), s)
    };
    Some(KldDigits {
        mean,
        mean_pm,
        p99: crate::fmt::sig(a.kld_p99, 2),
    })
}

/// An answer's score on one line, for a person: "vs REF: KLD mean … p99 … nats · same top …% ·
/// first divergence at token N ("text") · K of M tokens under 1% for the reference" (`run`'s
/// stderr line, the chat's Markdown export).
pub fn summary_line(q: &AnswerScore) -> String {
    let reference = q.reference.file_name().map_or_else(
        || q.reference.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let Some(a) = &q.summary else {
        return format!("vs {reference}: no answer tokens to score");
    };
    let divergence = match a.first_divergence {
        Some(i) => format!(
            "first divergence at token {} ({:?})",
            i + 1,
            q.tokens.get(i).map_or("", |t| t.text.as_str())
        ),
        None => "no divergence".to_string(),
    };
    let digits = kld_digits(q);
    let (mean, p99) = digits.map_or_else(Default::default, |d| (d.mean_pm, d.p99));
    format!(
        "vs {reference}: KLD mean {mean} p99 {p99} nats · same top {} · {divergence} · \
         {} of {} tokens under {:.0}% for the reference",
        same_top_cell(a.same_top_pct),
        a.below_low_p,
        a.tokens,
        LOW_P * 100.0,
    )
}

/// Adds one scored position of the reference itself (perplexity only).
pub fn score_reference(acc: &mut Accumulator, reference: &RefRow, next: usize) {
    let nll = -f64::from(reference.log_probs[next]);
    acc.count += 1;
    acc.sum_nll += nll;
    acc.sum_nll2 += nll * nll;
}

/// How an evaluation text is cut, as `llama-perplexity` cuts it: chunks of `n_ctx` tokens,
/// each starting with BOS (when the vocabulary adds one), the second half of each scored.
/// `compare` and the chat's scoring path over a text (`doctor scoring`) both cut by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunking {
    pub n_ctx: u32,
    /// At most this many chunks (None = all).
    pub max_chunks: Option<u32>,
}

impl Chunking {
    /// The chunks of `n_tokens` tokens, or why the text is too short: like llama-perplexity,
    /// at least two chunks' worth of tokens.
    pub fn chunks(&self, n_tokens: usize) -> Result<usize, String> {
        let n_ctx = self.n_ctx as usize;
        if n_tokens < 2 * n_ctx {
            return Err(format!(
                "the evaluation text is too short: it is {n_tokens} tokens and a context of \
                 {n_ctx} needs at least {} (two chunks); give a longer --text or a smaller -c",
                2 * n_ctx
            ));
        }
        let all = n_tokens / n_ctx;
        Ok(self.max_chunks.map_or(all, |m| all.min(m as usize)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn top_k_keeps_the_largest_in_order_with_ties_to_the_lower_index() {
        let mut logits = vec![0.0f32; 1000];
        logits[7] = 3.0;
        logits[500] = 5.0;
        logits[999] = 4.0;
        logits[33] = 3.0;
        logits[2] = f32::NAN;
        logits[3] = f32::INFINITY;
        assert_eq!(top_k(&logits, 5), vec![3, 500, 999, 7, 33]);
        assert_eq!(top_k(&logits, 2), vec![3, 500]);
        assert!(top_k(&logits, 0).is_empty());
        // Fewer values than k: all of them, in order.
        assert_eq!(top_k(&[1.0, 2.0], 5), vec![1, 0]);
        // Every value the same: the first k.
        assert_eq!(top_k(&[0.5; 40], 3), vec![0, 1, 2]);
        // The slow way agrees on a shuffled row.
        let row: Vec<f32> = (0..4099u32)
            .map(|i| ((i * 7919) % 4099) as f32 * 0.01)
            .collect();
        let mut idx: Vec<usize> = (0..row.len()).collect();
        idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        assert_eq!(top_k(&row, TOP_K), idx[..TOP_K].to_vec());
    }

    use super::*;

    /// An answer's score saved before the top tokens and `reused_tokens` were kept still
    /// loads; one with them round-trips, its top tokens apart from the score's top ids.
    #[test]
    fn an_answer_score_without_top_tokens_loads_and_one_with_them_round_trips() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let t = score_token(&logits, &row(&logits), 1, true).unwrap();
        let mut score = AnswerScore::new("ref.gguf".into(), vec![t], &[1], vec!["b".into()], 3);
        let old = serde_json::to_value(&score).unwrap();
        assert!(old["tokens"][0].get("top_k_ref").is_none(), "{old}");
        let mut old = old;
        old.as_object_mut().unwrap().remove("reused_tokens");
        assert_eq!(serde_json::from_value::<AnswerScore>(old).unwrap(), score);
        let top = |token: i32, p: f32| TopToken {
            token,
            text: format!("t{token}"),
            p,
        };
        score.tokens[0].top_ref = vec![top(1, 0.6), top(0, 0.3)];
        score.tokens[0].top_cand = vec![top(1, 0.5)];
        score.reused_tokens = 2;
        let json = serde_json::to_value(&score).unwrap();
        assert_eq!(
            json["tokens"][0]["top_ref"], 1,
            "the score's top id stays: {json}"
        );
        assert_eq!(json["tokens"][0]["top_k_ref"][1]["token"], 0, "{json}");
        assert_eq!(serde_json::from_value::<AnswerScore>(json).unwrap(), score);
    }

    /// The candidate's top tokens come with the figures' own softmax: the chosen token's
    /// probability among them is its `p_cand`, the first is its top token.
    #[test]
    fn a_candidates_top_tokens_share_its_figures_softmax() {
        let logits: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919) % 1013) as f32 / 97.0)
            .collect();
        let reference = row(&logits);
        let (score, top) = score_token_with_top(&logits, &reference, 17, TOP_K).unwrap();
        assert_eq!(score, score_token(&logits, &reference, 17, true).unwrap());
        assert_eq!(top.len(), TOP_K);
        assert_eq!(top[0].0, score.top_cand);
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
        for &(i, p) in &top {
            assert_eq!(p, reference.p(i), "the same logits: the same probabilities");
        }
        let sum: f32 = top.iter().map(|t| t.1).sum();
        assert!(sum <= 1.0 + 1e-6);
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

    fn row(logits: &[f32]) -> RefRow {
        reference_row(logits).unwrap()
    }

    /// A NaN dropped out of every sum and read as a perfect match (KLD 0, the same top token):
    /// a row with a NaN anywhere, a +∞, or only −∞ is refused on either side; a −∞ among
    /// finite logits is a token with probability 0 and stays a distribution.
    #[test]
    fn a_row_without_a_distribution_is_refused_on_either_side() {
        let good = [0.0f32, -1.0, -2.0];
        let r = row(&good);
        let bad: [&[f32]; 4] = [
            &[0.0, f32::NAN, -2.0],
            &[f32::NAN; 3],
            &[0.0, f32::INFINITY, -2.0],
            &[f32::NEG_INFINITY; 3],
        ];
        for b in bad {
            assert_eq!(reference_row(b).err(), Some(NonFiniteRow), "{b:?}");
            assert_eq!(
                score_token(b, &r, 0, false).err(),
                Some(NonFiniteRow),
                "{b:?}"
            );
            assert!(score_token_with_top(b, &r, 0, 2).is_err(), "{b:?}");
            let mut acc = Accumulator::default();
            assert!(score_candidate(&mut acc, b, &r, 0).is_err(), "{b:?}");
            assert_eq!(acc.stats(true).n_scored, 0);
        }
        let zero = [0.0f32, f32::NEG_INFINITY, -2.0];
        let t = score_token(&zero, &row(&zero), 0, false).unwrap();
        assert_eq!(t.kld, 0.0);
        assert!(t.p_cand > 0.8);
    }

    #[test]
    fn kld_bands_split_at_their_bounds() {
        assert_eq!(kld_band(0.0), 0);
        assert_eq!(kld_band(0.009_999), 0);
        assert_eq!(kld_band(0.01), 1);
        assert_eq!(kld_band(0.099), 1);
        assert_eq!(kld_band(0.1), 2);
        assert_eq!(kld_band(0.999), 2);
        assert_eq!(kld_band(1.0), 3);
        assert_eq!(kld_band(f64::NAN), 3);
        assert_eq!(kld_band(f64::INFINITY), 3);
    }

    #[test]
    fn identical_distributions_have_zero_kl_and_full_agreement() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let mut acc = Accumulator::default();
        score_candidate(&mut acc, &logits, &row(&logits), 1).unwrap();
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
        score_candidate(&mut acc, &q, &row(&p), 0).unwrap();
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
        use crate::metrics::percentile_linear as percentile;
        let v = [0.0f32, 1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert!((percentile(&v, 0.99) - 3.96).abs() < 1e-6);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn uncertainty_follows_llama_perplexity() {
        assert_eq!(mean_and_uncertainty(0.0, 0.0, 0), (0.0, 0.0));
        // Fewer than 11 values: no uncertainty.
        assert_eq!(mean_and_uncertainty(10.0, 20.0, 5).1, 0.0);
        let (m, u) = mean_and_uncertainty(55.0, 385.0, 10 + 1 - 1 + 1);
        assert!(m > 0.0 && u > 0.0);
    }

    #[test]
    fn a_token_score_gives_the_same_sums_and_its_own_figures() {
        let p = [0.0f32, 0.0];
        let q = [0.9f32.ln(), 0.1f32.ln()];
        let t = score_token(&q, &row(&p), 1, true).unwrap();
        assert_eq!((t.top_ref, t.top_cand, t.same_top), (0, 0, true));
        assert!((t.p_ref - 0.5).abs() < 1e-6 && (t.p_cand - 0.1).abs() < 1e-6);
        assert!((t.entropy_ref.unwrap() - 2f64.ln()).abs() < 1e-6);
        let h_q = -(0.9f64 * 0.9f64.ln() + 0.1 * 0.1f64.ln());
        assert!((t.entropy_cand.unwrap() - h_q).abs() < 1e-6);
        let (p_chosen, h) = confidence(&q, 1);
        assert!((p_chosen - 0.1).abs() < 1e-6 && (h - h_q).abs() < 1e-6);
        // The sums compare keeps are the ones the token's figures give.
        let mut a = Accumulator::default();
        score_candidate(&mut a, &q, &row(&p), 1).unwrap();
        let mut b = Accumulator::default();
        b.add(&t);
        assert_eq!(a.stats(true), b.stats(true));
    }

    #[test]
    fn confidence_of_uniform_and_one_hot_logits() {
        for v in [2usize, 7, 1000, 262_144] {
            let uniform = vec![0.37f32; v];
            let (p, h) = confidence(&uniform, v / 2);
            assert!((p - 1.0 / v as f64).abs() < 1e-9 * v as f64, "V {v}: p {p}");
            assert!((h - (v as f64).ln()).abs() < 1e-6, "V {v}: entropy {h}");
        }
        let mut one_hot = vec![-30.0f32; 1000];
        one_hot[3] = 30.0;
        let (p, h) = confidence(&one_hot, 3);
        assert!(
            (1.0 - p) < 1e-9 && (0.0..1e-9).contains(&h),
            "p {p} entropy {h}"
        );
        let (p_other, _) = confidence(&one_hot, 4);
        assert!(p_other < 1e-20);
        // The one pass agrees with score_token's entropy on a vocabulary-sized row.
        let row_logits: Vec<f32> = (0..50_000)
            .map(|i| ((i * 7919) % 1013) as f32 / 97.0)
            .collect();
        let t = score_token(&row_logits, &row(&row_logits), 17, true).unwrap();
        let (p, h) = confidence(&row_logits, 17);
        assert!((p / t.p_cand - 1.0).abs() < 1e-5 && (h - t.entropy_cand.unwrap()).abs() < 1e-4);
        // The row's top tokens: the most likely first, its probability the chosen one's when it
        // was chosen, descending, together at most 1.
        let c = TokenConfidence::of(&row_logits, t.top_cand);
        assert_eq!(c.top.len(), TOP_K);
        assert_eq!(c.top[0].token as usize, t.top_cand);
        assert!((c.top[0].p - c.p).abs() < 1e-7, "{} vs {}", c.top[0].p, c.p);
        assert!(c.top.windows(2).all(|w| w[0].p >= w[1].p));
        assert!(c.top.iter().map(|t| t.p).sum::<f32>() <= 1.0 + 1e-6);
        for x in [0.0f32, -1e-3, -0.5, -1.0, -3.7, -10.0, -50.0, -86.0] {
            let rel = f64::from(exp_nonpositive(x)) / f64::from(x).exp() - 1.0;
            // x·log₂e is rounded to f32: about 1e-6 relative at x = −50, where e^x is 2e-22.
            assert!(rel.abs() < 1e-5, "e^{x}: relative error {rel}");
        }
        assert_eq!([-90.0f32, -200.0].map(exp_nonpositive), [0.0, 0.0]);
    }

    #[test]
    fn confidence_bands_and_an_answers_summary() {
        assert_eq!(
            [1.0, 0.9, 0.89, 0.5, 0.2, 0.1, 0.0999, 0.0, f64::NAN].map(confidence_band),
            [0, 0, 1, 1, 2, 2, 3, 3, 3]
        );
        let t = |p: f32, entropy: f32| TokenConfidence {
            token: 0,
            text: String::new(),
            p,
            entropy,
            top: Vec::new(),
        };
        let a = AnswerConfidence::of(&[t(1.0, 0.0), t(0.5, 1.0), t(0.05, 3.0)]).unwrap();
        assert_eq!((a.tokens, a.below_low_p), (3, 1));
        assert!((a.p_mean - 1.55 / 3.0).abs() < 1e-6 && (a.p_min - 0.05).abs() < 1e-6);
        assert!((a.entropy_mean - 4.0 / 3.0).abs() < 1e-6);
        assert_eq!(AnswerConfidence::of(&[]), None);
    }

    #[test]
    fn an_answers_figures_name_the_first_divergence_and_the_unlikely_tokens() {
        let same = [0.0f32, -1.0, -2.0];
        let other = [-2.0f32, 0.0, -1.0];
        let r = row(&same);
        let scores = [
            score_token(&same, &r, 0, false).unwrap(),
            score_token(&same, &r, 0, false).unwrap(),
            score_token(&other, &r, 1, false).unwrap(),
            score_token(&[0.0, -1.0, -9.0], &row(&[0.0, -1.0, -9.0]), 2, false).unwrap(),
        ];
        let q = AnswerQuality::of(&scores).unwrap();
        assert_eq!(q.tokens, 4);
        assert_eq!(q.first_divergence, Some(2));
        assert_eq!(q.same_top_pct, 75.0);
        assert_eq!(q.below_low_p, 1, "exp(-9)/Σ is under 1%");
        assert_eq!(scores[0].kld, 0.0);
        assert!(q.kld_mean > 0.0 && q.kld_p99 >= q.kld_mean);
        assert_eq!(AnswerQuality::of(&[]), None);
    }
}
