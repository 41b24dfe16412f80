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

use super::roofline::KvShape;

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
    /// Bytes of the KV cache it reads: for flash attention the cells its kernel reads (see
    /// [`attention_reads`]); for the matrix products of attention without it, the whole K or
    /// V view (a matrix product skips no masked cell); 0 elsewhere.
    pub kv_bytes: u64,
    /// Flash attention only: the cells of its K and V views (the cache as llama.cpp pads it),
    /// before [`attention_reads`] counts the ones its kernel reads; 0 elsewhere.
    pub kv_cells: u64,
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
    /// llama.cpp's own clock for the same call: the growth of its `t_eval_ms` counter over it
    /// (`llama_perf_context`, from inside `llama_decode` to its synchronisation), read when
    /// the pass carried one row (llama.cpp books bigger passes as prompt time). The check
    /// that the parts add up holds them against it (docs/checks.md).
    pub llama_eval: Option<Duration>,
}

/// Counts what each flash-attention node of a step at `depth` (cached tokens before the pass)
/// with `rows` query rows reads of the cache: the cells its kernel reads, not its views. The
/// CPU kernel (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`, ggml-cpu/ops.cpp) skips a
/// cell whose mask is -inf before reading its K or V row, so it reads the cells the mask
/// leaves: the layer's own cells up to the last query, on a window layer only its window
/// ([`KvShape::cells_read`]), never the padding to 256 nor the window layers' whole depth.
/// Each node's bytes are its views' bytes per cell × those cells, and its FLOPs likewise.
/// Without the model's shape, the global rule (every cell up to the last query).
pub fn attention_reads(step: &mut StepRecord, kv: Option<&KvShape>) {
    let (depth, rows) = (step.depth as u64, step.rows.max(1) as u64);
    // llama.cpp leaves the attention node unnamed (`node_30`): its layer is the one of the
    // weights read before it (`classify`), else a `-N` its name may carry.
    let (placed, _) = classify(&step.nodes);
    for (n, (_, layer)) in step
        .nodes
        .iter_mut()
        .zip(placed)
        .filter(|(n, _)| n.kv_cells > 0)
    {
        let layer = layer.or_else(|| node_layer(&n.name)).map(u64::from);
        let read = match (kv, layer) {
            (Some(kv), Some(il)) => kv.cells_read(il, depth, rows),
            _ => depth + rows,
        }
        .min(n.kv_cells);
        n.kv_bytes = n.kv_bytes / n.kv_cells * read;
        n.flops = n.flops / n.kv_cells * read;
        n.kv_cells = read;
    }
}

/// The layer a node's name carries (`__fattn__-3` → 3), for a graph whose weights were not
/// recognised.
fn node_layer(name: &str) -> Option<u16> {
    let base = name.split(" (").next().unwrap_or(name);
    let (_, n) = base.rsplit_once('-')?;
    n.parse().ok()
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
    /// Graph nodes of the part in a step (0 for the parts outside the graph).
    pub nodes: usize,
    /// Why the data cannot support the part's figures, if they cannot (empty: they can).
    pub caveats: Vec<Caveat>,
}

/// A reason a part's time, GB/s or MBU is not a measurement of what it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Caveat {
    /// Its time is no more than the profiler's cost per node taken off its nodes, or under
    /// twice that cost's standard error over its nodes: the figure is the instrument's and
    /// its noise, not the part's.
    TooShort,
    /// The whole step reads less than the last-level cache holds: the part's bytes may come
    /// from the cache, so its GB/s is not memory's and its MBU is no fraction of the ceiling.
    CacheResident,
    /// Each of its nodes reads so little that reading it at the ceiling takes less time than
    /// a node's own start costs (the profiler's cost per node): its time is latency and
    /// thread start, not bandwidth, so its GB/s says little.
    SmallReads,
    /// Its MBU is above 100%: the part read its bytes faster than the ceiling allows, so its
    /// time or its bytes are not what they seem (the time booked elsewhere, the bytes in a
    /// cache, or the ceiling low).
    AboveCeiling,
}

impl Caveat {
    /// The words shown in the table's "note" column.
    pub fn label(self) -> &'static str {
        match self {
            Caveat::TooShort => "too short to time",
            Caveat::CacheResident => "cache-resident",
            Caveat::SmallReads => "too small a read",
            Caveat::AboveCeiling => "above the ceiling",
        }
    }
}

/// What the profiler's cost per node is, measured: over the profiled decode calls, each
/// call's time less the median unprofiled call, over its nodes; the median of those, and
/// their sample standard deviation (docs/metrics.md, "Step profile").
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Correction {
    /// Taken off every node's time (down to 0) and shown as the part "profiling".
    #[serde(serialize_with = "as_us", rename = "per_node_us")]
    pub per_node: Duration,
    /// The spread of the per-call estimates (0 below two).
    #[serde(serialize_with = "as_us", rename = "spread_us")]
    pub spread: Duration,
    /// How many profiled calls it was measured over (0: not measured, nothing taken off).
    pub samples: usize,
}

fn as_us<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e6)
}

/// What the breakdown sets each part's figures against.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// The roofline's bandwidth, bytes/s, for each part's MBU.
    pub bandwidth: Option<f64>,
    pub correction: Correction,
    /// The machine's last-level cache size, bytes, when known.
    pub llc_bytes: Option<u64>,
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
    /// The mean of llama.cpp's own clock of the profiled calls (`StepRecord::llama_eval`),
    /// when every step has it: the independent clock the parts' sum is held against.
    pub llama_eval_ms: Option<f64>,
}

/// The caveats of a part that took `ms` a step over `nodes` nodes, read `bytes` a step
/// (`step_bytes` the whole step), at `mbu_pct`.
fn caveats(
    ms: f64,
    nodes: usize,
    (bytes, step_bytes): (u64, u64),
    mbu_pct: Option<f64>,
    limits: &Limits,
) -> Vec<Caveat> {
    let mut out = Vec::new();
    let c = &limits.correction;
    let per_node_ms = super::ms(c.per_node);
    // The median's standard error: the spread of the estimates over their count's root.
    let error_ms = super::ms(c.spread) / (c.samples.max(1) as f64).sqrt();
    let n = nodes as f64;
    if nodes > 0 && (ms <= per_node_ms * n || ms < 2.0 * error_ms * n) {
        out.push(Caveat::TooShort);
    }
    if bytes > 0 && nodes > 0 {
        let read_ms = limits
            .bandwidth
            .filter(|b| *b > 0.0)
            .map(|b| bytes as f64 / n / b * 1e3);
        if limits.llc_bytes.is_some_and(|llc| step_bytes < llc) {
            out.push(Caveat::CacheResident);
        } else if read_ms.is_some_and(|r| r < per_node_ms) {
            out.push(Caveat::SmallReads);
        }
    }
    if mbu_pct.is_some_and(|m| m > 100.0) {
        out.push(Caveat::AboveCeiling);
    }
    out
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

/// The mean breakdown of `steps`, each part's figures set against `limits`: the roofline's
/// bandwidth for its MBU, the profiler's measured cost per node
/// (`ProfileRecord::correction`), taken off every node's time (down to 0) and shown as its
/// own part, "profiling", and the caches, for the caveats. `None` without steps.
pub fn breakdown(steps: &[StepRecord], limits: &Limits) -> Option<StepBreakdown> {
    let last = steps.last()?;
    let n = steps.len() as f64;
    let (bandwidth, per_node) = (limits.bandwidth, limits.correction.per_node);
    let mut node_count: BTreeMap<Part, usize> = BTreeMap::new();
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
            *node_count.entry(*part).or_default() += 1;
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
    let step_bytes = (time.values().map(|t| t.1 + t.2).sum::<u64>() as f64 / n) as u64;
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
            let mbu_pct = gb_per_s
                .zip(bandwidth.filter(|b| *b > 0.0))
                .map(|(g, b)| g * 1e9 / b * 100.0);
            let nodes = (node_count.get(&p).copied().unwrap_or(0) as f64 / n).round() as usize;
            PartFigures {
                part: p.label(),
                ms,
                sd_ms,
                share: share(ms),
                weight_bytes: wb,
                kv_bytes: kb,
                gb_per_s,
                mbu_pct,
                flops: fl,
                gflop_per_s: (fl > 0 && secs > 0.0).then(|| fl as f64 / secs / 1e9),
                nodes,
                caveats: if p == Part::Profiling {
                    Vec::new()
                } else {
                    caveats(ms, nodes, (wb + kb, step_bytes), mbu_pct, limits)
                },
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
        llama_eval_ms: steps
            .iter()
            .map(|s| s.llama_eval.map(super::ms))
            .sum::<Option<f64>>()
            .map(|total| total / n),
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
    /// What profiling adds to each node of a profiled step, measured over the turn's calls
    /// ([`Correction`]): each profiled call less the median unprofiled one, over that step's
    /// nodes (each node is its own graph computation then, with its own start and
    /// synchronisation); their median, and their spread. Nothing without both kinds of call.
    pub fn correction(&self) -> Correction {
        self.correction_over(self.steps.iter())
    }

    /// [`Self::correction`] with `step` counted too (before it is kept).
    pub fn correction_with(&self, step: &StepRecord) -> Correction {
        self.correction_over(self.steps.iter().chain(std::iter::once(step)))
    }

    fn correction_over<'a>(&self, steps: impl Iterator<Item = &'a StepRecord>) -> Correction {
        let nodes: Vec<usize> = steps.map(|s| s.nodes.len()).collect();
        let off: Vec<f64> = self
            .calls
            .iter()
            .filter(|c| !c.1)
            .map(|c| c.0.as_secs_f64())
            .collect();
        let Some(base) = super::median(&off) else {
            return Correction::default();
        };
        // The profiled calls in order, each with its step's node count.
        let per_node: Vec<f64> = self
            .calls
            .iter()
            .filter(|c| c.1)
            .zip(&nodes)
            .filter(|(_, n)| **n > 0)
            .map(|(c, n)| (c.0.as_secs_f64() - base) / *n as f64)
            .collect();
        let Some(mid) = super::median(&per_node) else {
            return Correction::default();
        };
        let sd = sample_sd(&per_node, per_node.len());
        let secs = |v: f64| Duration::from_nanos((v.max(0.0) * 1e9) as u64);
        Correction {
            per_node: secs(mid),
            spread: secs(sd),
            samples: per_node.len(),
        }
    }

    /// The figures, with the roofline's `bandwidth` (bytes/s) for each part's MBU.
    /// `pass_gaps` are the turn's gaps between decode passes (`TurnTimeline::pass_gaps`), one
    /// per call, and `tokens_per_pass` its tokens per pass: the decode rate both ways.
    /// `None` without a sampled step.
    /// `limits` are the bandwidth and caches; the correction is measured here.
    pub fn figures(
        &self,
        pass_gaps: &[Duration],
        tokens_per_pass: f64,
        limits: Limits,
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
        let limits = Limits {
            correction: self.correction(),
            ..limits
        };
        let last = self.steps.last()?;
        Some(TurnProfile {
            rate: self.rate,
            per_node_overhead_us: limits.correction.per_node.as_secs_f64() * 1e6,
            correction: limits.correction,
            mean: breakdown(&self.steps, &limits)?,
            last: breakdown(std::slice::from_ref(last), &limits)?,
            not_meaningful: None,
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
    /// What profiling added to each node, µs (`ProfileRecord::correction`), taken off
    /// the nodes' times and shown as the part "profiling".
    pub per_node_overhead_us: f64,
    /// That correction with its spread and the calls it was measured over.
    pub correction: Correction,
    /// Why the parts' shares do not describe the model's step on this run, when they do not
    /// (the machine was busy: threads waiting at barriers are charged to whichever node they
    /// wait in, docs/metrics.md); set by the caller from the busy signals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_meaningful: Option<String>,
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

/// Why a profile's shares do not describe the model's step, from the run's busy-machine
/// warnings (`metrics::busy`): on a machine with more runnable threads than cores, the
/// threads of a node wait at its barrier for a thread that was preempted, and that wait is
/// charged to whichever node it falls in, small ones included (a norm seen at 37% of a
/// step). `None` when there are none.
pub fn shares_not_meaningful(busy_warnings: &[String]) -> Option<String> {
    let first = busy_warnings.first()?;
    Some(format!(
        "the machine was busy ({}): threads waiting at barriers are charged to whichever part \
         they wait in, so the shares and per-part GB/s below do not describe the model",
        first
            .split(" — ")
            .next()
            .unwrap_or(first)
            .trim_start_matches("busy machine: ")
    ))
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

/// At `--profile-rate 1`, one step in this many is left unprofiled, so that the profiler's
/// cost per node is measured (`ProfileRecord::correction`) at every rate.
pub const RATE_ONE_UNPROFILED_EVERY: usize = 4;

/// Which decode steps are profiled: one in `rate` (0 = none), from the `rate`-th on (the
/// first step, which warms the caches, is never the only one sampled); at rate 1 every step
/// but one in [`RATE_ONE_UNPROFILED_EVERY`] (the second, the sixth, ...), which measure what
/// profiling costs.
pub fn sampled(step: usize, rate: u32) -> bool {
    match rate {
        0 => false,
        1 => step % RATE_ONE_UNPROFILED_EVERY != 1,
        r => (step + 1) % r as usize == 0,
    }
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
            kv_cells: 0,
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
        let b = breakdown(&[step], &Limits::default()).unwrap();
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
            llama_eval: None,
        };
        // Twice the same step: the means equal the one step.
        let b = breakdown(
            &[step.clone(), step],
            &Limits {
                bandwidth: Some(1e9),
                ..Limits::default()
            },
        )
        .unwrap();
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
        assert_eq!(record.correction().per_node, Duration::from_micros(500));
        let p = record
            .figures(
                &[Duration::from_millis(46), Duration::from_millis(57)],
                1.0,
                Limits::default(),
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
        assert_eq!(only.correction(), Correction::default());
        // The decode rate both ways: 1 token a pass.
        assert!((p.decode_tok_per_s_unsampled.unwrap() - 1000.0 / 46.0).abs() < 1e-9);
        assert!((p.decode_tok_per_s_all.unwrap() - 2000.0 / 103.0).abs() < 1e-9);
    }

    /// A flash-attention node of layer `l` over a view of `view` cells of 1024 bytes each.
    fn fattn(l: u16, view: u64) -> NodeFacts {
        NodeFacts {
            kv_bytes: 1024 * view,
            kv_cells: view,
            flops: 4 * 256 * view * 4,
            ..node(&format!("__fattn__-{l}"), "FLASH_ATTN_EXT", None, 1)
        }
    }

    #[test]
    fn attention_reads_the_cells_its_mask_leaves_not_its_views() {
        use super::super::roofline::{KvShape, SlidingWindow};
        use crate::gguf::kv_type::KvType;
        // Gemma 3 270M's shape: 18 layers, a window of 512 on all but 5, 11 and 17.
        let kv = KvShape {
            n_layer: 18,
            n_embd_k: 256,
            n_embd_v: 256,
            type_k: KvType::F16,
            type_v: KvType::F16,
            sliding_window: SlidingWindow::new(512, (0..18).map(|il| il % 6 < 5)),
        };
        let step_at = |depth: usize, view: u64| StepRecord {
            nodes: (0..18).map(|l| fattn(l, view)).collect(),
            rows: 1,
            depth,
            ..StepRecord::default()
        };
        let read = |depth: usize, view: u64| {
            let mut s = step_at(depth, view);
            attention_reads(&mut s, Some(&kv));
            s.nodes.iter().map(|n| n.kv_bytes).sum::<u64>()
        };
        // Depth 29 and 227 share one 256-cell view (4.72 MB, the old figure at both): the
        // kernel reads 30 and 228 cells a layer.
        assert_eq!(read(29, 256), 30 * 18 * 1024);
        assert_eq!(read(227, 256), 228 * 18 * 1024);
        assert_ne!(read(29, 256), read(227, 256));
        // Deep: the window layers read 512 cells, the global ones every cell.
        assert_eq!(read(3013, 3072), (3 * 3014 + 15 * 512) * 1024);
        // Never more than the view holds; the FLOPs follow the cells.
        assert_eq!(read(300, 256), 256 * 18 * 1024);
        let mut s = step_at(29, 256);
        attention_reads(&mut s, Some(&kv));
        assert_eq!(s.nodes[0].flops, 4 * 256 * 30 * 4);
        assert_eq!(s.nodes[0].kv_cells, 30);
        // Without the model's shape, every cell up to the query's.
        let mut s = step_at(3013, 3072);
        attention_reads(&mut s, None);
        assert_eq!(s.nodes[0].kv_bytes, 3014 * 1024);
        // Other nodes are left alone.
        let mut s = StepRecord {
            nodes: vec![node("kq-0", "MUL_MAT", None, 1)],
            depth: 5,
            ..StepRecord::default()
        };
        s.nodes[0].kv_bytes = 77;
        attention_reads(&mut s, Some(&kv));
        assert_eq!(s.nodes[0].kv_bytes, 77);
    }

    #[test]
    fn the_correction_is_measured_per_call_with_its_spread() {
        let step = |nodes: usize| StepRecord {
            nodes: (0..nodes).map(|_| node("x-0", "ADD", None, 1)).collect(),
            ..StepRecord::default()
        };
        // Unprofiled 10, 11, 12 ms (median 11); profiled 13, 15, 17 ms over 1000 nodes each:
        // 2, 4, 6 µs a node: median 4, sd 2.
        let ms = Duration::from_millis;
        let record = ProfileRecord {
            rate: 2,
            steps: vec![step(1000), step(1000), step(1000)],
            calls: vec![
                (ms(10), false),
                (ms(13), true),
                (ms(11), false),
                (ms(15), true),
                (ms(12), false),
                (ms(17), true),
            ],
        };
        let c = record.correction();
        assert_eq!(c.per_node, Duration::from_micros(4));
        assert_eq!(c.spread, Duration::from_micros(2));
        assert_eq!(c.samples, 3);
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(json["per_node_us"], 4.0);
        assert_eq!(json["spread_us"], 2.0);
    }

    #[test]
    fn a_part_the_data_cannot_support_says_why() {
        let limits = Limits {
            bandwidth: Some(10e9),
            correction: Correction {
                per_node: Duration::from_micros(5),
                spread: Duration::from_micros(20),
                samples: 16,
            },
            llc_bytes: Some(32 << 20),
        };
        let big = 300_000_000;
        // 18 nodes of 2.5 kB in 0.05 ms: under the 0.09 ms taken off them, and reading 2.5 kB
        // at 10 GB/s (0.25 µs) is far under a node's 5 µs start.
        let norm = caveats(0.05, 18, (45_000, big), None, &limits);
        assert_eq!(norm, vec![Caveat::TooShort, Caveat::SmallReads]);
        // Twice the standard error (20 / √16 = 5 µs) over 18 nodes is 0.18 ms: 0.2 ms stands,
        // 0.17 ms does not.
        assert!(caveats(0.2, 18, (20_000_000, big), None, &limits).is_empty());
        assert_eq!(
            caveats(0.17, 18, (20_000_000, big), None, &limits),
            vec![Caveat::TooShort]
        );
        // Above the ceiling, and a step that fits the last-level cache.
        assert_eq!(
            caveats(5.0, 18, (20_000_000, big), Some(134.0), &limits),
            vec![Caveat::AboveCeiling]
        );
        assert_eq!(
            caveats(5.0, 18, (20_000_000, 30 << 20), None, &limits),
            vec![Caveat::CacheResident]
        );
        // The busy machine's words, on the profile.
        let why = shares_not_meaningful(&[
            "busy machine: load average 11.1 before the run, above its 1 thread(s) — rerun".into(),
        ])
        .unwrap();
        assert!(
            why.starts_with("the machine was busy (load average 11.1 before the run"),
            "{why}"
        );
        assert_eq!(shares_not_meaningful(&[]), None);
    }

    #[test]
    fn sampling_skips_the_first_step_and_zero_is_off() {
        let picked: Vec<usize> = (0..40).filter(|s| sampled(*s, 16)).collect();
        assert_eq!(picked, vec![15, 31]);
        assert!((0..100).all(|s| !sampled(s, 0)));
        // Rate 1: every step but one in 4, which measure the profiler's cost.
        let unprofiled: Vec<usize> = (0..12).filter(|s| !sampled(*s, 1)).collect();
        assert_eq!(unprofiled, vec![1, 5, 9]);
        assert!("ops".parse::<ProfileLevel>().is_ok());
        let e = "layers".parse::<ProfileLevel>().unwrap_err();
        assert!(e.contains("'layers'") && e.contains("parts"), "{e}");
    }
}
