//! Host-side token sampling for the decode loop, built to do as little per token as the chain
//! allows: greedy decoding is an argmax straight over the logits row (no candidate array, no
//! sampler chain); a chain that starts with top-k keeps only the k best candidates in one pass
//! and hands llama.cpp's own top-p → min-p → temperature → draw samplers those k (sorted, as
//! llama.cpp's top-k would leave them); anything else (repetition penalties, top-k off) runs
//! llama.cpp's full chain over a candidate array that is reused across tokens.
//!
//! Every path picks the token llama.cpp's chain (`build_sampler`) would pick from the same
//! logits and the same seed; `tests/sampling.rs` compares them over many seeds. The one
//! exception is an exact tie between logits, where llama.cpp's partial sort leaves the order
//! unspecified.

use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

use super::error::EngineError;
use super::settings::{SamplingMode, SamplingParams};

/// Where a turn's sampler chain runs, and why there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SamplingPlace {
    pub backend: bool,
    pub why: &'static str,
}

impl serde::Serialize for SamplingPlace {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("SamplingPlace", 2)?;
        st.serialize_field("place", self.as_str())?;
        st.serialize_field("why", self.why)?;
        st.end()
    }
}

impl SamplingPlace {
    pub fn as_str(self) -> &'static str {
        if self.backend {
            "backend"
        } else {
            "host"
        }
    }
}

/// What decides where a turn samples, besides the chain's own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlaceContext {
    /// Speculative decoding is on: its verification reads the full logits.
    pub speculative: bool,
    /// The caller wants the first token's logits row.
    pub needs_logits: bool,
    /// The model's output layer runs on a GPU (see `output_on_gpu`).
    pub output_on_gpu: bool,
}

/// Where the chain for `p` runs under `mode`. The backend needs every sampler of the chain to
/// have a backend implementation in llama.cpp (greedy, top-k, top-p, min-p, temperature,
/// dist: llama.h's `llama_sampler_i::backend_*`; the penalties sampler has none) and no reader
/// of the full logits (speculative decoding verifies drafts against them; a captured
/// first-token row). `Backend` with such a setting is an error naming it. `Auto` also wants the
/// output layer on a GPU: on the CPU backend the sampling graph costs more than the host
/// sampler it replaces (measured in BENCHMARKS.md, "Host time between two decodes": a
/// whole-vocabulary `pad` in the graph), so there auto stays on the host.
pub fn choose_place(
    mode: SamplingMode,
    p: &SamplingParams,
    cx: PlaceContext,
) -> Result<SamplingPlace, EngineError> {
    let PlaceContext {
        speculative,
        needs_logits,
        output_on_gpu,
    } = cx;
    let blocker = if p.repeat_penalty != 1.0 {
        Some((
            "a repetition penalty (repeat_penalty ≠ 1) has no backend implementation in llama.cpp",
            "repeat_penalty",
        ))
    } else if speculative {
        Some((
            "speculative decoding verifies drafts against the full logits",
            "speculative decoding (--spec/--draft)",
        ))
    } else if needs_logits {
        Some((
            "the first token's logits are captured",
            "the first-token logits capture",
        ))
    } else {
        None
    };
    let (backend, why) = match (mode, blocker) {
        (SamplingMode::Host, _) => (false, "--sampling host"),
        (SamplingMode::Auto, Some((why, _))) => (false, why),
        (SamplingMode::Auto, None) if output_on_gpu => (
            true,
            "auto: the output layer is on the GPU and every sampler of the chain runs there",
        ),
        (SamplingMode::Auto, None) => (
            false,
            "auto: the output layer is on the CPU, where sampling in the graph is slower than on the host",
        ),
        (SamplingMode::Backend, None) => (true, "--sampling backend"),
        (SamplingMode::Backend, Some((why, setting))) => {
            return Err(EngineError::BackendSampling(format!("{setting}: {why}")))
        }
    };
    Ok(SamplingPlace { backend, why })
}

/// The chain llama.cpp runs inside the graph for `p`: the host chain's samplers in the host
/// chain's order (top-k → top-p → min-p → temperature → draw; greedy at temperature 0). A
/// top-p of 1 and a min-p of 0 change nothing and are left out (the backend would otherwise
/// sort the whole vocabulary for nothing).
pub fn backend_chain(p: &SamplingParams) -> LlamaSampler {
    LlamaSampler::chain(chain_after_penalties(p), false)
}

/// The samplers after the penalties, shared by the host chain (`llama::build_sampler`) and the
/// backend chain.
pub(crate) fn chain_after_penalties(p: &SamplingParams) -> Vec<LlamaSampler> {
    let mut chain = Vec::new();
    if p.temperature <= 0.0 {
        chain.push(LlamaSampler::greedy());
    } else {
        if p.top_k > 0 {
            chain.push(LlamaSampler::top_k(
                i32::try_from(p.top_k).unwrap_or(i32::MAX),
            ));
        }
        if p.top_p < 1.0 {
            chain.push(LlamaSampler::top_p(p.top_p, 1));
        }
        if p.min_p > 0.0 {
            chain.push(LlamaSampler::min_p(p.min_p, 1));
        }
        chain.push(LlamaSampler::temp(p.temperature));
        chain.push(LlamaSampler::dist(p.seed));
    }
    chain
}

/// Which host path a sampler takes, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPath {
    /// Argmax over the logits row.
    Greedy,
    /// One-pass top-k, then llama.cpp's chain over the k candidates.
    TopK,
    /// llama.cpp's full chain over the whole vocabulary (penalties, or top-k off).
    FullChain,
}

impl HostPath {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HostPath::Greedy => "host-greedy",
            HostPath::TopK => "host-top-k",
            HostPath::FullChain => "host-chain",
        }
    }
}

/// The logits row gave no distribution to sample from: every candidate was NaN or infinite
/// (a broken file, an overflowing cache type). llama.cpp's chain would abort the process on it
/// (`GGML_ASSERT(cur_p->size > 0)`); the sampler refuses it instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no finite logit to sample from (NaN or infinite logits)")]
pub struct NonFinite;

/// Whether what a backend chain (llama.cpp's sampling inside the graph) left at one output
/// holds a distribution, checked on the values that leave the graph anyway, so that it costs
/// about what the host path's own check does: a draw's probabilities (its softmax is NaN
/// throughout when one kept logit is NaN or infinite), else the sampled token's own logit in a
/// greedy chain's row (ggml's argmax gives element 0 of a row that is NaN throughout, and an
/// infinite maximum is the token itself); a shorter row of candidates is checked whole.
/// `n_vocab` tells a whole row from candidates. Without host sampling's check a broken row
/// went on as token 0 and the answer filled with control bytes (issue #57, item 10).
pub fn backend_output_finite(
    probs: Option<&[f32]>,
    logits: Option<&[f32]>,
    token: LlamaToken,
    n_vocab: usize,
) -> Result<(), NonFinite> {
    let finite = match (probs, logits) {
        (Some(p), _) => p.iter().all(|v| v.is_finite()),
        (None, Some(l)) if l.len() == n_vocab => usize::try_from(token.0)
            .ok()
            .and_then(|t| l.get(t))
            .is_some_and(|v| v.is_finite()),
        (None, Some(l)) => l.iter().all(|v| v.is_finite()),
        (None, None) => true,
    };
    if finite {
        Ok(())
    } else {
        Err(NonFinite)
    }
}

/// A sampler for one generation: its chain state (the seeded RNG) and its reused buffers.
pub struct HostSampler {
    path: HostPath,
    k: usize,
    /// The chain after top-k (top-p, min-p, temperature, draw), or the whole chain.
    chain: Option<LlamaSampler>,
    candidates: LlamaTokenDataArray,
    scratch: TopKScratch,
}

impl HostSampler {
    pub fn new(p: &SamplingParams, n_vocab: i32) -> Self {
        let no_penalty = p.repeat_penalty == 1.0;
        let (path, chain, k) = if p.temperature <= 0.0 && no_penalty {
            (HostPath::Greedy, None, 0)
        } else if p.temperature > 0.0 && no_penalty && p.top_k > 0 {
            let rest = LlamaSampler::chain(
                vec![
                    LlamaSampler::top_p(p.top_p, 1),
                    LlamaSampler::min_p(p.min_p, 1),
                    LlamaSampler::temp(p.temperature),
                    LlamaSampler::dist(p.seed),
                ],
                false,
            );
            (HostPath::TopK, Some(rest), p.top_k as usize)
        } else {
            (
                HostPath::FullChain,
                Some(super::build_sampler(p, n_vocab)),
                0,
            )
        };
        let capacity = match path {
            HostPath::Greedy => 0,
            HostPath::TopK => k.min(usize::try_from(n_vocab).unwrap_or(0)),
            HostPath::FullChain => usize::try_from(n_vocab).unwrap_or(0),
        };
        Self {
            path,
            k,
            chain,
            candidates: LlamaTokenDataArray::new(Vec::with_capacity(capacity), false),
            scratch: TopKScratch::default(),
        }
    }

    pub fn path(&self) -> HostPath {
        self.path
    }

    /// The next token from one row of logits (`n_vocab` values), or [`NonFinite`] when the row
    /// holds no distribution. What is checked is what the chain would see, so the check costs
    /// next to nothing: greedy, that the largest logit is finite; top-k, that the k kept (NaN
    /// is never kept) are there and finite; the full chain, every logit, in the pass that
    /// copies them.
    pub fn sample(&mut self, logits: &[f32]) -> Result<LlamaToken, NonFinite> {
        match self.path {
            HostPath::Greedy => {
                let best = argmax(logits);
                match logits.get(best) {
                    Some(v) if v.is_finite() => Ok(LlamaToken(best as i32)),
                    _ => Err(NonFinite),
                }
            }
            HostPath::TopK => {
                top_k_into(logits, self.k, &mut self.candidates.data, &mut self.scratch);
                let data = &self.candidates.data;
                if data.is_empty() || !data.iter().all(|d| d.logit().is_finite()) {
                    return Err(NonFinite);
                }
                self.candidates.sorted = true;
                Ok(self.apply_chain())
            }
            HostPath::FullChain => {
                let data = &mut self.candidates.data;
                data.clear();
                let mut finite = true;
                data.extend(logits.iter().enumerate().map(|(i, &l)| {
                    finite &= l.is_finite();
                    LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)
                }));
                if !finite || data.is_empty() {
                    return Err(NonFinite);
                }
                self.candidates.sorted = false;
                let token = self.apply_chain();
                if let Some(chain) = self.chain.as_mut() {
                    // Penalties remember the tokens they have seen.
                    chain.accept(token);
                }
                Ok(token)
            }
        }
    }

    fn apply_chain(&mut self) -> LlamaToken {
        self.candidates.selected = None;
        if let Some(chain) = self.chain.as_mut() {
            self.candidates.apply_sampler(chain);
        }
        // A chain always ends in a draw that selects; should it not, the best candidate.
        let best = |c: &LlamaTokenDataArray| c.data.first().map_or(LlamaToken(0), |d| d.id());
        self.candidates
            .selected_token()
            .unwrap_or_else(|| best(&self.candidates))
    }
}

/// Index of the first largest value, as llama.cpp's greedy sampler picks it (NaN never wins).
/// One pass over blocks whose maxima are taken in fixed-width lanes (which the compiler
/// vectorises), remembering the first block holding the largest; then that block is scanned
/// for the first position holding it.
pub(crate) fn argmax(values: &[f32]) -> usize {
    const BLOCK: usize = 512;
    let mut best = f32::NEG_INFINITY;
    let mut best_block = 0;
    for (b, block) in values.chunks(BLOCK).enumerate() {
        let max = block_max(block);
        if max > best {
            best = max;
            best_block = b;
        }
    }
    let from = best_block * BLOCK;
    values
        .get(from..)
        .and_then(|rest| rest.iter().position(|&v| v == best))
        .map_or(0, |i| from + i)
}

/// One candidate while top-k runs, ordered so that the *worse* one is the greater: a lower
/// logit (by `total_cmp`), or the same logit and a higher token id (llama.cpp's top-k keeps
/// the lower id of a tie). The max-heap's top is then the worst of those kept.
#[derive(Clone, Copy, Debug)]
struct Kept {
    logit: f32,
    id: u32,
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .logit
            .total_cmp(&self.logit)
            .then(self.id.cmp(&other.id))
    }
}
impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Kept {}

/// Space `top_k_into` reuses across calls.
#[derive(Default)]
pub struct TopKScratch {
    /// At most k candidates, the worst on top.
    heap: std::collections::BinaryHeap<Kept>,
    /// Each block of 512 logits' maximum, in order.
    maxima: Vec<f32>,
    /// A copy of `maxima` that the selection of the k-th largest reorders.
    select: Vec<f32>,
}

/// The `k` largest logits as candidates, sorted by logit, largest first (llama.cpp's top-k
/// order; ties by token id; NaN never kept).
///
/// First the maximum of every block of 512 logits (vectorised, as argmax takes it). The k-th
/// largest of those maxima is a floor: k blocks each hold a logit at least that large, so a
/// logit strictly below it cannot be among the k best. Then only the blocks whose maximum
/// reaches the floor (at most k of them, but for ties) are read again, keeping the best k
/// seen so far in a heap whose worst member, once k are kept, raises the floor; a block of 32
/// logits none of which reaches it (one vectorised comparison) is skipped, and each logit
/// below it is passed over with one float comparison before the heap is touched. With fewer
/// than k blocks there is no floor and every block is read.
pub fn top_k_into(
    logits: &[f32],
    k: usize,
    out: &mut Vec<LlamaTokenData>,
    scratch: &mut TopKScratch,
) {
    const BLOCK: usize = 32;
    const OUTER: usize = 512;
    out.clear();
    let TopKScratch {
        heap,
        maxima,
        select,
    } = scratch;
    heap.clear();
    let k = k.min(logits.len());
    if k == 0 {
        return;
    }
    maxima.clear();
    maxima.extend(logits.chunks(OUTER).map(block_max));
    let floor = if maxima.len() >= k {
        select.clear();
        select.extend_from_slice(maxima);
        let (_, kth, _) = select.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        *kth
    } else {
        f32::NEG_INFINITY
    };
    // The worst kept logit once k are kept (never below the floor: nothing below it is kept).
    let mut threshold: Option<f32> = None;
    let keep = |heap: &mut std::collections::BinaryHeap<Kept>,
                threshold: &mut Option<f32>,
                base: usize,
                block: &[f32]| {
        for (i, &logit) in block.iter().enumerate() {
            // Only a logit strictly below is passed over: -0.0 against 0.0 and equal logits
            // go on to `Kept`'s order.
            if logit.is_nan() || logit < threshold.unwrap_or(floor) {
                continue;
            }
            let c = Kept {
                logit,
                id: (base + i) as u32,
            };
            if heap.len() < k {
                heap.push(c);
            } else if let Some(mut worst) = heap.peek_mut() {
                if c < *worst {
                    *worst = c;
                }
            }
            if heap.len() == k {
                *threshold = heap.peek().map(|worst| worst.logit);
            }
        }
    };
    for (o, (outer, &max)) in logits.chunks(OUTER).zip(maxima.iter()).enumerate() {
        if max < floor {
            continue;
        }
        let mut blocks = outer.chunks_exact(BLOCK);
        let mut base = o * OUTER;
        for block in &mut blocks {
            if any_at_least(block, threshold.unwrap_or(floor)) {
                keep(heap, &mut threshold, base, block);
            }
            base += BLOCK;
        }
        keep(heap, &mut threshold, base, blocks.remainder());
    }
    out.extend(
        heap.drain()
            .map(|c| LlamaTokenData::new(LlamaToken(c.id as i32), c.logit, 0.0)),
    );
    out.sort_by(|a, b| {
        b.logit()
            .total_cmp(&a.logit())
            .then(a.id().0.cmp(&b.id().0))
    });
}

/// Whether any value of a 32-value block is >= `t` (NaN never is), without branches so
/// that it vectorises.
fn any_at_least(block: &[f32], t: f32) -> bool {
    block.iter().fold(0u32, |any, &v| any | u32::from(v >= t)) != 0
}

/// The largest value of a block (NaN ignored), in 16 lanes so that it vectorises.
fn block_max(block: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = block.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut max = f32::NEG_INFINITY;
    for &v in lanes.iter().chain(chunks.remainder()) {
        if v > max {
            max = v;
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo_logits(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 10.0
            })
            .collect()
    }

    #[test]
    fn argmax_is_the_first_maximum() {
        assert_eq!(argmax(&[1.0, 3.0, 2.0, 3.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -1.0, -0.5]), 2);
        assert_eq!(argmax(&[]), 0);
        for seed in 0..20 {
            let v = pseudo_logits(1000 + seed as usize * 37, seed);
            let naive = (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b });
            assert_eq!(argmax(&v), naive);
        }
    }

    #[test]
    fn top_k_matches_a_full_sort() {
        let mut out = Vec::new();
        let mut scratch = TopKScratch::default();
        for seed in 0..20 {
            let v = pseudo_logits(5000 + seed as usize * 13, seed);
            for k in [1, 5, 40, 100] {
                top_k_into(&v, k, &mut out, &mut scratch);
                let mut ids: Vec<usize> = (0..v.len()).collect();
                ids.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
                let want: Vec<i32> = ids[..k].iter().map(|&i| i as i32).collect();
                let got: Vec<i32> = out.iter().map(|d| d.id().0).collect();
                assert_eq!(got, want, "seed {seed} k {k}");
            }
        }
        top_k_into(&[1.0, 2.0], 5, &mut out, &mut scratch);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].id().0, 1);
    }

    /// Ties (a few distinct levels over thousands of tokens), NaN, infinities and signed zeros:
    /// the same candidates, in the same order, as a full stable sort by `total_cmp` that keeps
    /// the lower token id of a tie and never keeps NaN.
    #[test]
    fn top_k_with_a_floor_matches_a_full_sort_on_a_vocabulary_row() {
        // 128,256 logits: 251 blocks of 512, so the floor (the k-th largest block maximum)
        // is in play for every k below; coarse rounding makes ties within and across blocks
        // (many blocks share their maximum), and the special values sit among them.
        let mut out = Vec::new();
        let mut scratch = TopKScratch::default();
        for seed in 0..6u64 {
            let mut v: Vec<f32> = pseudo_logits(128_256, seed)
                .into_iter()
                .map(|x| (x * [0.5, 2.0, 8.0][seed as usize % 3]).round())
                .collect();
            for (i, x) in v.iter_mut().enumerate() {
                match (i as u64 * 13 + seed) % 997 {
                    0 => *x = f32::NAN,
                    1 => *x = f32::NEG_INFINITY,
                    2 => *x = -0.0,
                    3 => *x = 0.0,
                    4 if seed % 2 == 0 => *x = f32::INFINITY,
                    _ => {}
                }
            }
            let mut ids: Vec<usize> = (0..v.len()).filter(|&i| !v[i].is_nan()).collect();
            ids.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
            for k in [1, 2, 40, 100, 251, 252, 300] {
                top_k_into(&v, k, &mut out, &mut scratch);
                let want: Vec<i32> = ids[..k].iter().map(|&i| i as i32).collect();
                let got: Vec<i32> = out.iter().map(|d| d.id().0).collect();
                assert_eq!(got, want, "seed {seed} k {k}");
            }
        }
        // Every logit -inf but one: the floor is -inf and everything is read.
        let mut v = vec![f32::NEG_INFINITY; 128_256];
        v[77_777] = 1.0;
        top_k_into(&v, 3, &mut out, &mut scratch);
        let got: Vec<i32> = out.iter().map(|d| d.id().0).collect();
        assert_eq!(got, vec![77_777, 0, 1]);
    }

    /// A backend chain's output with a NaN or infinite value is refused; the values a finite
    /// row gives pass, whichever the chain left (a draw's probabilities, a greedy row, a top-k's
    /// candidates).
    #[test]
    fn a_backend_output_without_a_distribution_is_refused() {
        let t = LlamaToken(2);
        let row = [0.5f32, -1.0, 3.0, f32::NAN];
        // Greedy over a whole row: the chosen token's logit decides (NaN never wins in ggml's
        // argmax unless the row is NaN throughout, and then element 0 is chosen).
        assert_eq!(backend_output_finite(None, Some(&row), t, 4), Ok(()));
        let nan_row = [f32::NAN; 4];
        assert_eq!(
            backend_output_finite(None, Some(&nan_row), LlamaToken(0), 4),
            Err(NonFinite)
        );
        let inf_row = [0.0, 1.0, f32::INFINITY, 0.0];
        assert_eq!(
            backend_output_finite(None, Some(&inf_row), t, 4),
            Err(NonFinite)
        );
        // A token outside the row is no distribution either.
        assert_eq!(
            backend_output_finite(None, Some(&row), LlamaToken(9), 4),
            Err(NonFinite)
        );
        // A draw's probabilities: NaN anywhere refuses, finite ones pass.
        let probs = [0.7f32, 0.2, 0.1];
        assert_eq!(
            backend_output_finite(Some(&probs), Some(&row), t, 4),
            Ok(())
        );
        let nan_probs = [f32::NAN; 3];
        assert_eq!(
            backend_output_finite(Some(&nan_probs), None, t, 4),
            Err(NonFinite)
        );
        // A top-k's candidates (shorter than the vocabulary) are checked whole.
        let kept = [1.0f32, f32::NAN];
        assert_eq!(
            backend_output_finite(None, Some(&kept), t, 4),
            Err(NonFinite)
        );
        assert_eq!(backend_output_finite(None, None, t, 4), Ok(()));
    }

    #[test]
    fn top_k_keeps_the_lower_id_of_a_tie_and_never_nan() {
        let mut out = Vec::new();
        let mut scratch = TopKScratch::default();
        for seed in 0..30u64 {
            let n = 70 + seed as usize * 211;
            let mut v: Vec<f32> = pseudo_logits(n, seed)
                .into_iter()
                .map(|x| (x / 4.0).round())
                .collect();
            for (i, x) in v.iter_mut().enumerate() {
                match (i as u64 * 7 + seed) % 23 {
                    0 => *x = f32::NAN,
                    1 => *x = f32::NEG_INFINITY,
                    2 => *x = -0.0,
                    3 => *x = 0.0,
                    4 if seed % 3 == 0 => *x = f32::INFINITY,
                    _ => {}
                }
            }
            for k in [1, 3, 40, 64, n] {
                top_k_into(&v, k, &mut out, &mut scratch);
                let mut ids: Vec<usize> = (0..v.len()).filter(|&i| !v[i].is_nan()).collect();
                ids.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
                ids.truncate(k);
                let want: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
                let got: Vec<i32> = out.iter().map(|d| d.id().0).collect();
                assert_eq!(got, want, "seed {seed} k {k}");
            }
        }
    }
}
