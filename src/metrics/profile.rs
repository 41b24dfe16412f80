//! Where a decode step's time goes (docs/metrics.md, "Step profile"). The engine times each
//! node of a sampled step's graph as llama.cpp's scheduler computes it (`llama::profile`) and
//! hands the raw record here; this module names the parts, sums them and sets the physics
//! beside them. Names come from the graph: a matrix product is placed by the GGUF name of the
//! weight it reads (`blk.3.ffn_down.weight`), which every llama.cpp architecture shares; a
//! node without a weight by its operation (ROPE, FLASH_ATTN_EXT, SET_ROWS into the cache) or,
//! for norms and element-wise steps, by the named node near it (`attn_norm-3`, `ffn_inp-3`).
//! A graph whose weights carry no recognisable names is shown by operation only: it is never
//! given part names it may not have.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// What the engine read off one computed node of a sampled step.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    /// The node's name in the graph (`attn_norm-3`, `Qcur-0`, "" when unnamed).
    pub name: String,
    /// ggml's operation (`MUL_MAT`, `ROPE`, `SWIGLU`).
    pub op: &'static str,
    /// The GGUF name of the model weight it reads, if any (`blk.3.ffn_down.weight`).
    pub weight: Option<String>,
    /// Bytes of that weight (0 without one).
    pub weight_bytes: u64,
    /// Bytes of the KV cache it reads (the K and V views of attention; 0 elsewhere).
    pub kv_bytes: u64,
    /// Floating-point operations (matrix products and attention: 2 per multiply-add; 0 for
    /// the rest, which is small beside them).
    pub flops: u64,
    /// Its time: from the scheduler's question about the first node of its range to the
    /// synchronisation after it (the views before it, which compute nothing, are in it).
    pub time: Duration,
    /// When that range started, from the decode call's start (for the trace).
    pub start: Duration,
}

/// A sampled step as the engine recorded it. Its pieces add up to `wall` by construction;
/// `StepBreakdown::sum_ms` against `wall_ms` checks that none was lost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepRecord {
    pub nodes: Vec<NodeFacts>,
    /// The decode call's start → the scheduler's first question: graph build or reuse, the
    /// inputs set, the scheduler's split.
    pub graph_inputs: Duration,
    /// Between one node's synchronisation and the next question: the callback's own time.
    pub sync: Duration,
    /// The last node's synchronisation → the decode call's return (and the engine's
    /// synchronize): the logits copied out.
    pub output: Duration,
    /// The host gap before the decode call: sampling the token, detokenizing it, its event.
    pub host: Duration,
    /// The step's wall time, taken apart from the above: host gap + the decode call.
    pub wall: Duration,
    /// Rows the pass computed (1 for plain decoding; 1 + drafts when verifying).
    pub rows: usize,
    /// Tokens in the KV cache before the pass (the depth attention reads).
    pub depth: usize,
}

/// A part of a decode step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Embed,
    AttnNorm,
    Qkv,
    Rope,
    KvWrite,
    Attention,
    AttnOut,
    FfnNorm,
    FfnUp,
    FfnDown,
    Head,
    /// Nodes of a recognised graph that no rule places (shown, never hidden).
    OtherOps,
    GraphInputs,
    Sync,
    Output,
    Host,
    /// What stopping after every node adds to a profiled step (`per_node` × nodes).
    Profiling,
}

impl Part {
    /// Every part in the order a step runs them.
    pub const ALL: [Part; 17] = [
        Part::Host,
        Part::GraphInputs,
        Part::Embed,
        Part::AttnNorm,
        Part::Qkv,
        Part::Rope,
        Part::KvWrite,
        Part::Attention,
        Part::AttnOut,
        Part::FfnNorm,
        Part::FfnUp,
        Part::FfnDown,
        Part::Head,
        Part::OtherOps,
        Part::Sync,
        Part::Output,
        Part::Profiling,
    ];

    /// The name shown and written (`--json`, `bench --profile` columns).
    pub fn label(self) -> &'static str {
        match self {
            Part::Embed => "embed",
            Part::AttnNorm => "attn norm",
            Part::Qkv => "attn QKV",
            Part::Rope => "attn RoPE",
            Part::KvWrite => "attn KV write",
            Part::Attention => "attn over cache",
            Part::AttnOut => "attn out proj",
            Part::FfnNorm => "ffn norm",
            Part::FfnUp => "ffn gate/up",
            Part::FfnDown => "ffn down",
            Part::Head => "output head",
            Part::OtherOps => "other ops",
            Part::GraphInputs => "graph + inputs",
            Part::Sync => "sync / other",
            Part::Output => "logits out",
            Part::Host => "host (sample, detok, event)",
            Part::Profiling => "profiling (per-node stops)",
        }
    }

    /// Whether the part is computed per layer (the layer strip sums these).
    fn in_layer(self) -> bool {
        matches!(
            self,
            Part::AttnNorm
                | Part::Qkv
                | Part::Rope
                | Part::KvWrite
                | Part::Attention
                | Part::AttnOut
                | Part::FfnNorm
                | Part::FfnUp
                | Part::FfnDown
        )
    }
}

/// `blk.12.attn_q.weight` → (12, "attn_q"); `output.weight` → (None, "output").
fn weight_kind(name: &str) -> (Option<u16>, &str) {
    let base = name.strip_suffix(".weight").unwrap_or(name);
    let base = base.strip_suffix(".bias").unwrap_or(base);
    if let Some(rest) = base.strip_prefix("blk.") {
        if let Some((layer, kind)) = rest.split_once('.') {
            return (layer.parse().ok(), kind);
        }
    }
    (None, base)
}

/// The part a weight's kind belongs to; `None` for a kind no rule knows.
fn weight_part(kind: &str, op: &str) -> Option<Part> {
    Some(match kind {
        "attn_norm" => Part::AttnNorm,
        "attn_q" | "attn_k" | "attn_v" | "attn_qkv" | "attn_q_norm" | "attn_k_norm" => Part::Qkv,
        "attn_output" | "attn_post_norm" => Part::AttnOut,
        "ffn_norm" | "ffn_pre_norm" => Part::FfnNorm,
        "ffn_gate" | "ffn_up" | "ffn_gate_exps" | "ffn_up_exps" | "ffn_gate_up_exps"
        | "ffn_gate_inp" | "ffn_gate_shexp" | "ffn_up_shexp" => Part::FfnUp,
        "ffn_down" | "ffn_down_exps" | "ffn_down_shexp" | "ffn_post_norm" => Part::FfnDown,
        "output" | "output_norm" => Part::Head,
        "token_embd" if op == "GET_ROWS" => Part::Embed,
        // A tied output layer reads the embedding table.
        "token_embd" => Part::Head,
        "rope_freqs" => Part::Rope,
        _ => return None,
    })
}

/// The part a named node marks, by llama.cpp's graph names (`cb(cur, "ffn_inp", il)`).
fn name_part(name: &str) -> Option<(Part, Option<u16>)> {
    let base = name.split(" (").next().unwrap_or(name);
    let (stem, layer) = match base.rsplit_once('-') {
        Some((stem, n)) if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => {
            (stem, n.parse().ok())
        }
        _ => (base, None),
    };
    let part = match stem {
        "inp_embd" | "inp_scaled" => Part::Embed,
        "attn_norm" => Part::AttnNorm,
        "Qcur" | "Kcur" | "Vcur" | "Qcur_normed" | "Kcur_normed" => Part::Qkv,
        "kq" | "kq_soft_max" | "kqv" | "kqv_out" | "__fattn__" | "kqv_merged"
        | "kqv_merged_cont" => Part::Attention,
        "attn_out" | "attn_post_norm" | "ffn_inp" => Part::AttnOut,
        "ffn_norm" => Part::FfnNorm,
        "ffn_gate" | "ffn_up" | "ffn_gate_par" | "ffn_swiglu" | "ffn_geglu" | "ffn_silu"
        | "ffn_gelu" => Part::FfnUp,
        "ffn_out" | "ffn_post_norm" | "l_out" => Part::FfnDown,
        "result_norm" | "result_output" => Part::Head,
        _ => return None,
    };
    Some((part, layer))
}

/// The part and layer of the weight a node reads, when a rule knows it.
fn by_weight(n: &NodeFacts) -> Option<(Part, Option<u16>)> {
    let (layer, kind) = weight_kind(n.weight.as_deref()?);
    weight_part(kind, n.op).map(|p| (p, layer))
}

fn is_norm(op: &str) -> bool {
    matches!(op, "RMS_NORM" | "NORM" | "L2_NORM" | "GROUP_NORM")
}

/// Each node's part and layer, and whether the graph's weights were recognised (every layer
/// part found: QKV, the output projection, the FFN down projection). Unrecognised: every
/// node is `OtherOps` and only the operation view is meaningful.
pub fn classify(nodes: &[NodeFacts]) -> (Vec<(Part, Option<u16>)>, bool) {
    let mut out = Vec::with_capacity(nodes.len());
    let mut part = Part::Embed;
    let mut layer: Option<u16> = None;
    for (i, n) in nodes.iter().enumerate() {
        let placed = if let Some((p, l)) = by_weight(n) {
            (p, l.or(layer))
        } else if n.op == "ROPE" {
            (Part::Rope, layer)
        } else if matches!(n.op, "SET_ROWS" | "CPY") && n.name.contains("cache_") {
            (Part::KvWrite, layer)
        } else if matches!(n.op, "FLASH_ATTN_EXT" | "SOFT_MAX")
            || (n.op == "MUL_MAT" && n.weight.is_none() && layer.is_some())
        {
            (Part::Attention, layer)
        } else if is_norm(n.op) {
            // A norm is placed with the weighted multiply that follows it (build_norm: the
            // norm, then × its weight).
            let next = nodes[i + 1..].iter().take(3).find_map(by_weight);
            next.map_or((part, layer), |(p, l)| (p, l.or(layer)))
        } else if let Some((p, l)) = name_part(&n.name) {
            (p, l.or(layer))
        } else {
            (part, layer)
        };
        part = placed.0;
        layer = placed.1;
        out.push(placed);
    }
    let seen = |want: Part| out.iter().any(|(p, l)| *p == want && l.is_some());
    let recognised = seen(Part::Qkv) && seen(Part::AttnOut) && seen(Part::FfnDown);
    if !recognised {
        out.fill((Part::OtherOps, None));
    }
    (out, recognised)
}

/// One part's figures, as a mean over the steps summed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartFigures {
    pub part: &'static str,
    pub ms: f64,
    /// The sample standard deviation of its time over the steps (0 for one step): what
    /// `bench --vs` judges a change of this part against.
    pub sd_ms: f64,
    /// Of the step's wall time.
    pub share: f64,
    /// Weight bytes and KV-cache bytes read per step.
    pub weight_bytes: u64,
    pub kv_bytes: u64,
    /// (weight + KV bytes) ÷ time; `None` for a part that reads neither.
    pub gb_per_s: Option<f64>,
    /// Achieved GB/s ÷ the roofline's bandwidth, in percent; `None` without either.
    pub mbu_pct: Option<f64>,
    pub flops: u64,
    pub gflop_per_s: Option<f64>,
}

/// One operation type's time, summed over its nodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpFigures {
    pub op: &'static str,
    pub nodes: usize,
    pub ms: f64,
    pub share: f64,
}

/// The breakdown of one or more sampled steps (means per step).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepBreakdown {
    pub steps: usize,
    /// Whether the parts come from recognised weight and node names (`false`: only `ops`).
    pub by_name: bool,
    pub wall_ms: f64,
    /// Every part's time added up; agrees with `wall_ms` (docs/checks.md).
    pub sum_ms: f64,
    pub parts: Vec<PartFigures>,
    pub ops: Vec<OpFigures>,
    /// The layer parts' time per layer, layer 0 first.
    pub layers_ms: Vec<f64>,
    pub rows: usize,
    pub depth: usize,
}

/// The sample sd of `values`, a part's time in each of `n` steps (a step without the part
/// counts 0); 0 below two steps.
fn sample_sd(values: &[f64], n: usize) -> f64 {
    if n < 2 {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.resize(n, 0.0);
    let mean = v.iter().sum::<f64>() / n as f64;
    (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
}

/// The mean breakdown of `steps`; `bandwidth` (bytes/s) is the roofline's, for the per-part
/// MBU. `per_node` is what profiling adds to each node (`ProfileRecord::per_node_overhead`):
/// taken off every node's time (down to 0) and shown as its own part, "profiling". `None`
/// without steps.
pub fn breakdown(
    steps: &[StepRecord],
    bandwidth: Option<f64>,
    per_node: Duration,
) -> Option<StepBreakdown> {
    let last = steps.last()?;
    let n = steps.len() as f64;
    let mut time: BTreeMap<Part, (Duration, u64, u64, u64)> = BTreeMap::new();
    let mut ops: BTreeMap<&'static str, (usize, Duration)> = BTreeMap::new();
    let mut layers: Vec<Duration> = Vec::new();
    let mut by_name = true;
    let mut wall = Duration::ZERO;
    // Each part's time in each step, for its spread.
    let mut per_step: BTreeMap<Part, Vec<f64>> = BTreeMap::new();
    for s in steps {
        let before: BTreeMap<Part, Duration> = time.iter().map(|(p, t)| (*p, t.0)).collect();
        let (placed, recognised) = classify(&s.nodes);
        by_name &= recognised;
        wall += s.wall;
        for (node, (part, layer)) in s.nodes.iter().zip(&placed) {
            let added = per_node.min(node.time);
            time.entry(Part::Profiling).or_default().0 += added;
            let node_time = node.time - added;
            let e = time.entry(*part).or_default();
            e.0 += node_time;
            e.1 += node.weight_bytes;
            e.2 += node.kv_bytes;
            e.3 += node.flops;
            let o = ops.entry(node.op).or_default();
            o.0 += 1;
            o.1 += node_time;
            if let Some(l) = layer.filter(|_| part.in_layer()) {
                let l = usize::from(l);
                if layers.len() <= l {
                    layers.resize(l + 1, Duration::ZERO);
                }
                layers[l] += node_time;
            }
        }
        for (part, d) in [
            (Part::GraphInputs, s.graph_inputs),
            (Part::Sync, s.sync),
            (Part::Output, s.output),
            (Part::Host, s.host),
        ] {
            time.entry(part).or_default().0 += d;
        }
        for (p, t) in &time {
            let was = before.get(p).copied().unwrap_or_default();
            per_step.entry(*p).or_default().push(super::ms(t.0 - was));
        }
    }
    let wall_ms = super::ms(wall) / n;
    let share = |ms: f64| if wall_ms > 0.0 { ms / wall_ms } else { 0.0 };
    let parts: Vec<PartFigures> = Part::ALL
        .iter()
        .filter_map(|p| time.get(p).map(|t| (*p, *t)))
        .map(|(p, (d, wb, kb, fl))| {
            let ms = super::ms(d) / n;
            let sd_ms = per_step.get(&p).map_or(0.0, |v| sample_sd(v, steps.len()));
            let per_step = |v: u64| (v as f64 / n) as u64;
            let (wb, kb, fl) = (per_step(wb), per_step(kb), per_step(fl));
            let secs = ms / 1e3;
            let gb_per_s = (wb + kb > 0 && secs > 0.0).then(|| (wb + kb) as f64 / secs / 1e9);
            PartFigures {
                part: p.label(),
                ms,
                sd_ms,
                share: share(ms),
                weight_bytes: wb,
                kv_bytes: kb,
                gb_per_s,
                mbu_pct: gb_per_s
                    .zip(bandwidth.filter(|b| *b > 0.0))
                    .map(|(g, b)| g * 1e9 / b * 100.0),
                flops: fl,
                gflop_per_s: (fl > 0 && secs > 0.0).then(|| fl as f64 / secs / 1e9),
            }
        })
        .collect();
    let sum_ms = parts.iter().map(|p| p.ms).sum();
    let mut ops: Vec<OpFigures> = ops
        .into_iter()
        .map(|(op, (count, d))| {
            let ms = super::ms(d) / n;
            OpFigures {
                op,
                nodes: (count as f64 / n).round() as usize,
                ms,
                share: share(ms),
            }
        })
        .collect();
    ops.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    Some(StepBreakdown {
        steps: steps.len(),
        by_name,
        wall_ms,
        sum_ms,
        parts,
        ops,
        layers_ms: layers.iter().map(|d| super::ms(*d) / n).collect(),
        rows: last.rows,
        depth: last.depth,
    })
}

/// A turn's raw profile, as the engine hands it over.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileRecord {
    /// One decode step in `rate` was profiled.
    pub rate: u32,
    pub steps: Vec<StepRecord>,
    /// Every decode call of the turn, in order: its time and whether it was profiled.
    pub calls: Vec<(Duration, bool)>,
}

impl ProfileRecord {
    /// What profiling adds to each node of a profiled step: the mean profiled decode call
    /// less the mean unprofiled one, over the mean node count of a profiled step (each node
    /// is its own graph computation then, with its own start and synchronisation). Zero
    /// without both kinds of call, or when the profiled ones were not slower.
    pub fn per_node_overhead(&self) -> Duration {
        self.overhead_over(self.steps.iter())
    }

    /// [`Self::per_node_overhead`] with `step` counted too (before it is kept).
    pub fn per_node_overhead_with(&self, step: &StepRecord) -> Duration {
        self.overhead_over(self.steps.iter().chain(std::iter::once(step)))
    }

    fn overhead_over<'a>(&self, steps: impl Iterator<Item = &'a StepRecord>) -> Duration {
        let (count, total) = steps.fold((0usize, 0usize), |(c, t), s| (c + 1, t + s.nodes.len()));
        let nodes = total / count.max(1);
        let mean = |profiled: bool| {
            let v: Vec<Duration> = self
                .calls
                .iter()
                .filter(|c| c.1 == profiled)
                .map(|c| c.0)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<Duration>() / v.len() as u32)
        };
        match (mean(true), mean(false)) {
            (Some(on), Some(off)) if nodes > 0 => on.saturating_sub(off) / nodes as u32,
            _ => Duration::ZERO,
        }
    }

    /// The figures, with the roofline's `bandwidth` (bytes/s) for each part's MBU.
    /// `pass_gaps` are the turn's gaps between decode passes (`TurnTimeline::pass_gaps`), one
    /// per call, and `tokens_per_pass` its tokens per pass: the decode rate both ways.
    /// `None` without a sampled step.
    pub fn figures(
        &self,
        pass_gaps: &[Duration],
        tokens_per_pass: f64,
        bandwidth: Option<f64>,
    ) -> Option<TurnProfile> {
        let mean_call = |profiled: bool| {
            let v: Vec<f64> = self
                .calls
                .iter()
                .filter(|c| c.1 == profiled)
                .map(|c| super::ms(c.0))
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let rate = |keep: &dyn Fn(bool) -> bool| {
            let (n, total) = pass_gaps
                .iter()
                .zip(&self.calls)
                .filter(|(_, c)| keep(c.1))
                .fold((0usize, Duration::ZERO), |(n, t), (g, _)| (n + 1, t + *g));
            super::rate_per_s(n, total).map(|r| r * tokens_per_pass)
        };
        let per_node = self.per_node_overhead();
        let last = self.steps.last()?;
        Some(TurnProfile {
            rate: self.rate,
            per_node_overhead_us: per_node.as_secs_f64() * 1e6,
            mean: breakdown(&self.steps, bandwidth, per_node)?,
            last: breakdown(std::slice::from_ref(last), bandwidth, per_node)?,
            profiled_call_ms: mean_call(true),
            unprofiled_call_ms: mean_call(false),
            decode_tok_per_s_unsampled: rate(&|profiled| !profiled),
            decode_tok_per_s_all: rate(&|_| true),
        })
    }
}

/// A turn's profile: the sampled steps' mean and the last one, and what sampling cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnProfile {
    /// One decode step in `rate` was profiled.
    pub rate: u32,
    /// What profiling added to each node, µs (`ProfileRecord::per_node_overhead`), taken off
    /// the nodes' times and shown as the part "profiling".
    pub per_node_overhead_us: f64,
    pub mean: StepBreakdown,
    pub last: StepBreakdown,
    /// The mean decode call of a profiled step and of the others, ms: what the instrument
    /// adds to the steps it samples (`None` without both kinds).
    pub profiled_call_ms: Option<f64>,
    pub unprofiled_call_ms: Option<f64>,
    /// The decode rate over the passes not profiled, and over all of them: the turn's tok/s
    /// both ways (passes per second × tokens per pass).
    pub decode_tok_per_s_unsampled: Option<f64>,
    pub decode_tok_per_s_all: Option<f64>,
}

impl TurnProfile {
    /// What a profiled decode call costs over an unprofiled one, as a fraction (0.05 = 5%
    /// longer).
    pub fn sampled_cost(&self) -> Option<f64> {
        Some(self.profiled_call_ms? / self.unprofiled_call_ms? - 1.0)
    }
}

/// The profile's level of detail (`--profile parts|ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileLevel {
    #[default]
    Parts,
    Ops,
}

impl std::str::FromStr for ProfileLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "parts" => Ok(Self::Parts),
            "ops" => Ok(Self::Ops),
            other => Err(format!(
                "unknown profile level '{other}': use parts (attention, FFN, head per layer) or \
                 ops (time per operation type)"
            )),
        }
    }
}

/// Which decode steps are profiled: one in `rate` (0 = none), from the `rate`-th on (the
/// first step, which warms the caches, is never the only one sampled).
pub fn sampled(step: usize, rate: u32) -> bool {
    rate > 0 && (step + 1) % rate as usize == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, op: &'static str, weight: Option<&str>, ms: u64) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            op,
            weight: weight.map(Into::into),
            weight_bytes: if weight.is_some() { 1_000_000 } else { 0 },
            kv_bytes: 0,
            flops: 0,
            time: Duration::from_millis(ms),
            start: Duration::ZERO,
        }
    }

    /// One Llama layer as llama.cpp 0.1.160 builds it for one token (flash attention off).
    fn llama_layer(l: u16) -> Vec<NodeFacts> {
        let w = |k: &str| format!("blk.{l}.{k}.weight");
        vec![
            node(&format!("norm-{l}"), "RMS_NORM", None, 1),
            node(&format!("attn_norm-{l}"), "MUL", Some(&w("attn_norm")), 1),
            node(&format!("Qcur-{l}"), "MUL_MAT", Some(&w("attn_q")), 4),
            node(&format!("Kcur-{l}"), "MUL_MAT", Some(&w("attn_k")), 1),
            node(&format!("Vcur-{l}"), "MUL_MAT", Some(&w("attn_v")), 1),
            node(&format!("Qcur-{l}"), "ROPE", None, 1),
            node(&format!("Kcur-{l}"), "ROPE", None, 1),
            node(&format!("cache_k_l{l} (view)"), "SET_ROWS", None, 1),
            node(&format!("cache_v_l{l} (view)"), "SET_ROWS", None, 1),
            node(&format!("kq-{l}"), "MUL_MAT", None, 2),
            node(&format!("kq_soft_max-{l}"), "SOFT_MAX", None, 1),
            node(&format!("kqv-{l}"), "MUL_MAT", None, 2),
            node(&format!("kqv_out-{l}"), "CONT", None, 1),
            node("", "MUL_MAT", Some(&w("attn_output")), 4),
            node(&format!("ffn_inp-{l}"), "ADD", None, 1),
            node(&format!("norm-{l}"), "RMS_NORM", None, 1),
            node(&format!("ffn_norm-{l}"), "MUL", Some(&w("ffn_norm")), 1),
            node(
                &format!("ffn_gate-{l}"),
                "MUL_MAT",
                Some(&w("ffn_gate")),
                10,
            ),
            node(&format!("ffn_up-{l}"), "MUL_MAT", Some(&w("ffn_up")), 10),
            node(&format!("ffn_swiglu-{l}"), "SWIGLU", None, 1),
            node(&format!("ffn_out-{l}"), "MUL_MAT", Some(&w("ffn_down")), 10),
            node(&format!("l_out-{l}"), "ADD", None, 1),
        ]
    }

    #[test]
    fn a_llama_layer_is_named_by_its_weights_and_operations() {
        let mut nodes = vec![node("inp_embd", "GET_ROWS", Some("token_embd.weight"), 1)];
        nodes.extend(llama_layer(0));
        nodes.extend(llama_layer(1));
        nodes.push(node("norm", "RMS_NORM", None, 1));
        nodes.push(node("result_norm", "MUL", Some("output_norm.weight"), 1));
        nodes.push(node("result_output", "MUL_MAT", Some("output.weight"), 20));
        let (placed, recognised) = classify(&nodes);
        assert!(recognised);
        let part_of = |i: usize| placed[i].0;
        assert_eq!(part_of(0), Part::Embed);
        let layer0: Vec<Part> = (1..=22).map(part_of).collect();
        use Part::*;
        assert_eq!(
            layer0,
            vec![
                AttnNorm, AttnNorm, Qkv, Qkv, Qkv, Rope, Rope, KvWrite, KvWrite, Attention,
                Attention, Attention, Attention, AttnOut, AttnOut, FfnNorm, FfnNorm, FfnUp, FfnUp,
                FfnUp, FfnDown, FfnDown
            ]
        );
        assert!(placed[1..=22].iter().all(|p| p.1 == Some(0)));
        assert!(placed[23..=44].iter().all(|p| p.1 == Some(1)));
        // The final norm goes with the head, not with the last layer's FFN.
        assert_eq!(placed[45].0, Head);
        assert_eq!(placed[46].0, Head);
        assert_eq!(placed[47].0, Head);
    }

    #[test]
    fn a_graph_without_known_weight_names_is_shown_by_operation_only() {
        let nodes = vec![
            node("a-0", "MUL_MAT", Some("layers.0.wq"), 3),
            node("b-0", "ROPE", None, 1),
            node("c-0", "MUL_MAT", Some("layers.0.w2"), 3),
        ];
        let (placed, recognised) = classify(&nodes);
        assert!(!recognised);
        assert!(placed.iter().all(|p| *p == (Part::OtherOps, None)));
        let step = StepRecord {
            nodes,
            wall: Duration::from_millis(7),
            ..StepRecord::default()
        };
        let b = breakdown(&[step], None, Duration::ZERO).unwrap();
        assert!(!b.by_name);
        assert_eq!(b.ops[0].op, "MUL_MAT");
        assert_eq!(b.ops[0].nodes, 2);
        assert!((b.ops[0].ms - 6.0).abs() < 1e-9);
        assert!(b.layers_ms.is_empty());
    }

    #[test]
    fn the_breakdown_adds_up_and_sets_the_physics_beside_each_part() {
        let mut nodes = llama_layer(0);
        nodes[20].flops = 2_000_000_000; // ffn_down: 1 MB, 2 GFLOP in 10 ms
        let step = StepRecord {
            nodes,
            graph_inputs: Duration::from_millis(2),
            sync: Duration::from_millis(1),
            output: Duration::from_millis(1),
            host: Duration::from_millis(1),
            wall: Duration::from_millis(62),
            rows: 1,
            depth: 10,
        };
        // Twice the same step: the means equal the one step.
        let b = breakdown(&[step.clone(), step], Some(1e9), Duration::ZERO).unwrap();
        assert_eq!(b.steps, 2);
        assert!((b.sum_ms - 62.0).abs() < 1e-9, "{}", b.sum_ms);
        assert!((b.wall_ms - 62.0).abs() < 1e-9);
        let down = b.parts.iter().find(|p| p.part == "ffn down").unwrap();
        assert!((down.ms - 11.0).abs() < 1e-9);
        assert_eq!(down.weight_bytes, 1_000_000);
        // 1 MB in 11 ms = 0.0909 GB/s = 9.09% of 1 GB/s.
        assert!((down.gb_per_s.unwrap() - 1e6 / 0.011 / 1e9).abs() < 1e-9);
        assert!((down.mbu_pct.unwrap() - 1e6 / 0.011 / 1e9 * 100.0).abs() < 1e-6);
        assert!((down.gflop_per_s.unwrap() - 2.0 / 0.011).abs() < 1e-6);
        assert_eq!(b.layers_ms.len(), 1);
        assert!((b.layers_ms[0] - 57.0).abs() < 1e-9);
        let host = b.parts.iter().find(|p| p.part.starts_with("host")).unwrap();
        assert!(host.gb_per_s.is_none() && host.mbu_pct.is_none());
    }

    #[test]
    fn what_profiling_adds_per_node_is_taken_off_each_node_and_shown() {
        let step = StepRecord {
            nodes: llama_layer(0),
            wall: Duration::from_millis(57),
            ..StepRecord::default()
        };
        // 22 nodes; a profiled call 57 ms, an unprofiled one 46 ms: 0.5 ms a node.
        let record = ProfileRecord {
            rate: 2,
            steps: vec![step],
            calls: vec![
                (Duration::from_millis(46), false),
                (Duration::from_millis(57), true),
            ],
        };
        assert_eq!(record.per_node_overhead(), Duration::from_micros(500));
        let p = record
            .figures(
                &[Duration::from_millis(46), Duration::from_millis(57)],
                1.0,
                None,
            )
            .unwrap();
        assert!((p.per_node_overhead_us - 500.0).abs() < 1e-9);
        let b = &p.mean;
        let get = |name: &str| b.parts.iter().find(|x| x.part == name).unwrap().ms;
        assert!((get("profiling (per-node stops)") - 11.0).abs() < 1e-9);
        // ffn down: 10 + 1 ms less 0.5 ms each.
        assert!((get("ffn down") - 10.0).abs() < 1e-9);
        assert!(
            (b.sum_ms - 57.0).abs() < 1e-9,
            "the whole still adds up: {}",
            b.sum_ms
        );
        // Only unprofiled or only profiled calls: nothing to take off.
        let mut only = record.clone();
        only.calls.retain(|c| c.1);
        assert_eq!(only.per_node_overhead(), Duration::ZERO);
        // The decode rate both ways: 1 token a pass.
        assert!((p.decode_tok_per_s_unsampled.unwrap() - 1000.0 / 46.0).abs() < 1e-9);
        assert!((p.decode_tok_per_s_all.unwrap() - 2000.0 / 103.0).abs() < 1e-9);
    }

    #[test]
    fn sampling_skips_the_first_step_and_zero_is_off() {
        let picked: Vec<usize> = (0..40).filter(|s| sampled(*s, 16)).collect();
        assert_eq!(picked, vec![15, 31]);
        assert!((0..100).all(|s| !sampled(s, 0)));
        assert!((0..5).all(|s| sampled(s, 1)));
        assert!("ops".parse::<ProfileLevel>().is_ok());
        let e = "layers".parse::<ProfileLevel>().unwrap_err();
        assert!(e.contains("'layers'") && e.contains("parts"), "{e}");
    }
}
