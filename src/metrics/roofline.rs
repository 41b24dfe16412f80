//! The physics behind the speed: decode at batch 1 is memory-bandwidth bound, because every
//! generated token reads all the weights (but the token-embedding table, of which it reads one
//! row) and the KV cache up to the current depth. So the ceiling is
//! `bandwidth / bytes read per token`, and memory bandwidth utilisation (MBU) is the achieved
//! rate over that ceiling. Prefill is compute bound: 2 FLOPs per layer parameter per token, the
//! output head per logits row, plus attention at its depth. Cost per 1M tokens turns a rate into money. Pure math, defined in
//! `docs/metrics.md`.

use serde::{Deserialize, Serialize};

use crate::gguf::kv_type::KvType;
use crate::gguf::GgufHeader;

/// What one decode step reads of the weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightBytes {
    /// All tensor bytes in the file.
    pub total_bytes: u64,
    /// The token-embedding table (`token_embd.weight`).
    pub token_embd_bytes: u64,
    /// One row of it (what a token's lookup reads).
    pub embd_row_bytes: u64,
    /// The output projection reuses the embedding table (no `output.weight`): then the whole
    /// table is read every token, for the logits.
    pub tied_output: bool,
    /// The output projection's bytes (`output.weight`, or the embedding table when tied): the
    /// part of a step that sits on the output layer's device (see [`placed_bandwidth`]).
    #[serde(default)]
    pub output_bytes: u64,
}

impl WeightBytes {
    /// From a GGUF's tensor directory. `None` when a tensor type's size is unknown.
    pub(crate) fn from_gguf(header: &GgufHeader) -> Option<Self> {
        let total_bytes = header.tensor_data_bytes()?;
        let (token_embd_bytes, embd_row_bytes) = match header.tensor("token_embd.weight") {
            Some(t) => {
                let bytes = t.n_bytes()?;
                let rows = t.dims.get(1).copied().unwrap_or(1).max(1);
                (bytes, bytes / rows)
            }
            None => (0, 0),
        };
        let output = header.tensor("output.weight");
        let output_bytes = output.map_or(Some(token_embd_bytes), |t| t.n_bytes())?;
        Some(Self {
            total_bytes,
            token_embd_bytes,
            embd_row_bytes,
            tied_output: output.is_none(),
            output_bytes,
        })
    }

    /// Weight bytes read per generated token.
    pub(crate) fn read_per_token(&self) -> u64 {
        if self.tied_output {
            self.total_bytes
        } else {
            self.total_bytes - self.token_embd_bytes + self.embd_row_bytes
        }
    }
}

/// The KV cache's shape: what one cached position costs across all layers, and which layers
/// see only a sliding window of it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvShape {
    pub n_layer: u64,
    /// Key width per layer: KV heads × key head size.
    pub n_embd_k: u64,
    /// Value width per layer: KV heads × value head size.
    pub n_embd_v: u64,
    pub type_k: KvType,
    pub type_v: KvType,
    /// The window layers, when the model has them and llama.cpp's rule for them is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<SlidingWindow>,
}

/// Which layers attend through a sliding window and how wide it is: llama.cpp's `n_swa` and
/// `is_swa(il)` for the standard window (`llama_hparams::is_masked_swa`, `LLAMA_SWA_TYPE_STANDARD`:
/// the query at position p1 sees the cells p0 with `p1 - p0 < n_swa`, so `n_swa` cells with its
/// own). Read from the GGUF (`{arch}.attention.sliding_window`, and the per-layer pattern
/// `{arch}.attention.sliding_window_pattern` or the architecture's default, as each
/// architecture's `load_arch_hparams` sets it: gemma2 and gpt-oss 1 global layer in 2, cohere2
/// and olmo2 1 in 4, gemma3 1 in 6, the last of each group global).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SlidingWindow {
    /// Cells a window layer's query sees, its own included.
    pub cells: u64,
    /// How many of the layers are window layers.
    pub n_window_layers: u64,
    /// Bit `il` of word `il / 64` set: layer `il` is a window layer (at most 256 layers).
    #[serde(skip)]
    layers: [u64; 4],
}

/// The most layers a [`SlidingWindow`] describes; a model with more is read at full depth.
const MAX_WINDOW_LAYERS: u64 = 256;

/// The architectures whose standard sliding window llama.cpp builds with a default pattern:
/// (architecture, n_pattern), the layer `il` being a window layer when
/// `il % n_pattern < n_pattern - 1` (`llama_hparams::set_swa_pattern`, `dense_first` false).
const WINDOW_PATTERNS: &[(&str, u64)] = &[
    ("gemma2", 2),
    ("gpt-oss", 2),
    ("cohere2", 4),
    ("olmo2", 4),
    ("gemma3", 6),
];

impl SlidingWindow {
    /// From a window of `cells` and each layer's flag.
    pub(crate) fn new(cells: u64, is_window: impl Iterator<Item = bool>) -> Option<Self> {
        let mut layers = [0u64; 4];
        let mut n_window_layers = 0;
        for (il, w) in is_window.enumerate() {
            if il as u64 >= MAX_WINDOW_LAYERS {
                return None;
            }
            if w {
                layers[il / 64] |= 1 << (il % 64);
                n_window_layers += 1;
            }
        }
        (cells > 0 && n_window_layers > 0).then_some(Self {
            cells,
            n_window_layers,
            layers,
        })
    }

    /// Whether layer `il` is a window layer.
    pub(crate) fn is_window_layer(&self, il: u64) -> bool {
        il < MAX_WINDOW_LAYERS && self.layers[(il / 64) as usize] & (1 << (il % 64)) != 0
    }

    /// llama.cpp's layers for a GGUF: `None` without a window, for a window type other than
    /// the standard one, or for an architecture whose rule is not in [`WINDOW_PATTERNS`] (its
    /// layers are then read at full depth: an overestimate, never an underestimate).
    fn from_gguf(header: &GgufHeader, arch: &str, n_layer: u64) -> Option<Self> {
        let key = |k: &str| header.get(&format!("{arch}.attention.{k}"));
        let cells = key("sliding_window")?.as_u64().filter(|w| *w > 0)?;
        let default = WINDOW_PATTERNS.iter().find(|(a, _)| *a == arch)?.1;
        match key("sliding_window_pattern") {
            Some(crate::gguf::GgufValue::Array(crate::gguf::GgufArray::Bool(flags))) => {
                Self::new(cells, flags.iter().copied().take(n_layer as usize))
            }
            other => {
                let n_pattern = other.and_then(|v| v.as_u64()).unwrap_or(default);
                Self::new(
                    cells,
                    (0..n_layer).map(|il| n_pattern == 0 || il % n_pattern < n_pattern - 1),
                )
            }
        }
    }
}

impl KvShape {
    /// From a GGUF's metadata (`{arch}.block_count`, head counts, key/value lengths, the
    /// sliding window).
    pub(crate) fn from_gguf(header: &GgufHeader, type_k: KvType, type_v: KvType) -> Option<Self> {
        let arch = header.get("general.architecture")?.as_str()?;
        let get = |k: &str| header.get(&format!("{arch}.{k}")).and_then(|v| v.as_u64());
        let n_layer = get("block_count")?;
        let n_embd = get("embedding_length")?;
        let n_head = get("attention.head_count").filter(|h| *h > 0)?;
        let n_head_kv = get("attention.head_count_kv").unwrap_or(n_head);
        let head_k = get("attention.key_length").unwrap_or(n_embd / n_head);
        let head_v = get("attention.value_length").unwrap_or(n_embd / n_head);
        Some(Self {
            n_layer,
            n_embd_k: n_head_kv * head_k,
            n_embd_v: n_head_kv * head_v,
            type_k,
            type_v,
            sliding_window: SlidingWindow::from_gguf(header, arch, n_layer),
        })
    }

    /// Bytes of K and V one layer caches per position.
    pub(crate) fn layer_bytes_per_position(&self) -> f64 {
        self.n_embd_k as f64 * self.type_k.bytes_per_element()
            + self.n_embd_v as f64 * self.type_v.bytes_per_element()
    }

    /// Bytes of K and V cached per token position, all layers (every layer at full depth).
    #[cfg(test)]
    pub(crate) fn bytes_per_position(&self) -> f64 {
        self.n_layer as f64 * self.layer_bytes_per_position()
    }

    /// The cells layer `il` reads for `rows` queries at positions `depth..depth + rows` (the
    /// cache holding `depth` cells before them and theirs): every cell up to the last query on
    /// a global layer, on a window layer the union of the rows' windows.
    pub(crate) fn cells_read(&self, il: u64, depth: u64, rows: u64) -> u64 {
        let all = depth + rows;
        match self.sliding_window {
            Some(w) if w.is_window_layer(il) => all.min(w.cells + rows.max(1) - 1),
            _ => all,
        }
    }

    /// Bytes a decode step reads from the cache when it attends to `positions` cells (the
    /// cache before it and its own): each layer its own cells, a window layer at most its
    /// window.
    pub(crate) fn bytes_read_at(&self, positions: u64) -> f64 {
        let (global, window) = match self.sliding_window {
            Some(w) => (self.n_layer - w.n_window_layers, w.n_window_layers),
            None => (self.n_layer, 0),
        };
        let window_cells = self.sliding_window.map_or(0, |w| positions.min(w.cells));
        self.layer_bytes_per_position()
            * (global as f64 * positions as f64 + window as f64 * window_cells as f64)
    }

    /// The bytes of the KV cache llama.cpp allocates for one sequence and a context of `n_ctx`
    /// tokens (docs/metrics.md, "KV cache allocated"): the context rounded up to 256 cells
    /// (`llama_context`: `GGML_PAD(n_ctx, 256)`); a window layer the same with `full_window`
    /// (llama.cpp's `swa_full`, on in `llama_context_default_params` and in every context
    /// tokscope makes: "using full-size SWA cache" in the log), else its window and one
    /// micro-batch, rounded up to 256 and at most the context (`llama_kv_cache_iswa`:
    /// `GGML_PAD(min(size_base, n_swa + n_ubatch), 256)`); each layer a row of K and of V per
    /// cell (`ggml_row_size`).
    pub(crate) fn allocated_bytes(&self, n_ctx: u32, n_ubatch: u32, full_window: bool) -> u64 {
        let pad = |n: u64| n.div_ceil(256) * 256;
        let cells = pad(u64::from(n_ctx));
        let row = |n: u64, t: KvType| (n as f64 * t.bytes_per_element()).ceil() as u64;
        let per_cell = row(self.n_embd_k, self.type_k) + row(self.n_embd_v, self.type_v);
        (0..self.n_layer)
            .map(|il| {
                let layer_cells = match self.sliding_window {
                    Some(w) if !full_window && w.is_window_layer(il) => {
                        pad(cells.min(w.cells + u64::from(n_ubatch)))
                    }
                    _ => cells,
                };
                layer_cells * per_cell
            })
            .sum()
    }

    /// The largest context (a multiple of 1024 tokens) whose cache takes at most `budget`
    /// bytes; 0 when not even 1024 tokens do.
    pub(crate) fn largest_context_within(
        &self,
        budget: u64,
        n_ubatch: u32,
        full_window: bool,
    ) -> u32 {
        let (mut lo, mut hi) = (0u32, u32::MAX / 1024);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.allocated_bytes(mid * 1024, n_ubatch, full_window) <= budget {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo * 1024
    }

    /// The mean of [`Self::bytes_read_at`] over the steps attending to `lo..=hi` cells.
    pub(crate) fn mean_bytes_read(&self, lo: u64, hi: u64) -> f64 {
        let (lo, hi) = (lo.min(hi), hi.max(lo));
        let sum: f64 = (lo..=hi).map(|p| self.bytes_read_at(p)).sum();
        sum / (hi - lo + 1) as f64
    }
}

/// Bytes read per decode step: weights per token + KV cache at the depth.
pub(crate) fn bytes_per_token(weights: &WeightBytes, kv: Option<&KvShape>, depth: u64) -> f64 {
    weights.read_per_token() as f64 + kv.map_or(0.0, |k| k.bytes_read_at(depth))
}

/// Decode at one KV depth of a depth sweep (`bench -d`), beside what its bytes say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DepthPoint {
    /// Tokens in the cache before the test (llama-bench's `-d`).
    pub depth: u64,
    /// Measured decode speed.
    pub tok_per_s: f64,
    /// Bytes a step reads there: the weights + [`Self::kv_bytes_per_token`].
    pub bytes_per_token: f64,
    /// The KV cache's part of it, as the attention kernel reads it ([`KvShape::bytes_read_at`]).
    pub kv_bytes_per_token: f64,
    /// Bandwidth ÷ bytes per token, when the bandwidth is known.
    pub ceiling_tok_per_s: Option<f64>,
}

/// Bytes one sequence's token costs over decode steps attending to `lo..=hi` cells, with
/// `sequences` decoded together: the weights read once a step for all of them, plus the
/// sequence's own KV cache (a window layer's only up to its window), its mean over the steps.
/// Returns (bytes per token, of which the KV cache).
pub(crate) fn decode_bytes_per_token(
    weights: &WeightBytes,
    kv: Option<&KvShape>,
    (lo, hi): (u64, u64),
    sequences: u32,
) -> (f64, f64) {
    let kv_bytes = kv.map_or(0.0, |k| k.mean_bytes_read(lo, hi));
    let weights = weights.read_per_token() as f64 / f64::from(sequences.max(1));
    (weights + kv_bytes, kv_bytes)
}

/// A decode of `n_gen` tokens after `depth` tokens in the cache (bench's tg at that depth, or a
/// chat's answer after its prompt) as a depth point: its steps attend to `depth + 1 ..= depth +
/// n_gen` cells (the q + 1 the kernel reads, as `bench -d` counts them), their mean KV bytes
/// beside the weights'; the ceiling when the bandwidth (bytes/s) is known.
pub(crate) fn depth_point(
    (depth, n_gen): (u64, u64),
    tok_per_s: f64,
    weights: &WeightBytes,
    kv: Option<&KvShape>,
    bandwidth_bytes_per_s: Option<f64>,
) -> DepthPoint {
    let span = (depth + 1, depth + n_gen.max(1));
    let (bytes_per_token, kv_bytes_per_token) = decode_bytes_per_token(weights, kv, span, 1);
    DepthPoint {
        depth,
        tok_per_s,
        bytes_per_token,
        kv_bytes_per_token,
        ceiling_tok_per_s: bandwidth_bytes_per_s
            .and_then(|b| ceiling_tok_per_s(b, bytes_per_token)),
    }
}

/// What a depth sweep shows, in one line, from its own points (never before two exist, one
/// of them at depth 0): the deepest point's speed against depth 0's, beside what the bytes
/// each token reads there predict. Each depth is one run, which the line says.
pub(crate) fn depth_verdict(points: &[DepthPoint]) -> Option<String> {
    let slowdown = depth_slowdown(points);
    let (base, ..) = slowdown.first().filter(|(p, ..)| p.depth == 0)?;
    let (deep, measured, predicted) = slowdown.last().filter(|(p, ..)| p.depth > 0)?;
    let (measured, predicted) = ((*measured)?, (*predicted)?);
    let how = if measured < 0.95 * predicted {
        "more than the reads grows with depth"
    } else if measured > 1.05 * predicted {
        "faster than the reads alone allow"
    } else {
        "as the bytes say"
    };
    Some(format!(
        "at depth {} decode runs {measured:.2}× its depth-0 speed, where its bytes per token ({} → {}) predict {predicted:.2}×: {how} (one run per depth)",
        deep.depth,
        crate::fmt::bytes_f64(base.bytes_per_token),
        crate::fmt::bytes_f64(deep.bytes_per_token),
    ))
}

/// The speed at `bytes_per_token` that the bytes predict from a decode measured at
/// `base_bytes_per_token`: at the same MBU, speed goes as 1 ÷ bytes read, so the ratio of
/// speeds is `base ÷ bytes` (1 at the base, below 1 deeper). `None` without positive bytes.
pub(crate) fn speed_ratio_from_bytes(
    base_bytes_per_token: f64,
    bytes_per_token: f64,
) -> Option<f64> {
    crate::metrics::ratio(base_bytes_per_token, bytes_per_token)
        .filter(|_| base_bytes_per_token > 0.0)
}

/// How a depth sweep slows down, point by point in depth order: the measured speed ÷ that at
/// depth 0, and the ratio the bytes predict ([`speed_ratio_from_bytes`] from depth 0's
/// bytes). Both `None` when the sweep has no depth-0 point.
pub(crate) fn depth_slowdown(points: &[DepthPoint]) -> Vec<(DepthPoint, Option<f64>, Option<f64>)> {
    let mut sorted = points.to_vec();
    sorted.sort_by_key(|p| p.depth);
    let base = sorted.iter().find(|p| p.depth == 0).copied();
    sorted
        .into_iter()
        .map(|p| {
            let measured = base.and_then(|b| crate::metrics::ratio(p.tok_per_s, b.tok_per_s));
            let predicted =
                base.and_then(|b| speed_ratio_from_bytes(b.bytes_per_token, p.bytes_per_token));
            (p, measured, predicted)
        })
        .collect()
}

/// Where a bandwidth figure comes from; always shown next to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BandwidthSource {
    /// Set by the user (config `bandwidth_gb_s` or a flag).
    Config,
    /// The device's datasheet value.
    Datasheet { device: String },
    /// Measured by tokscope's copy probe.
    Measured { method: String },
    /// A partial offload: the step's bytes are read one side after the other, the offloaded
    /// layers' at the GPU's bandwidth and the rest at the CPU's; the figure is the blend
    /// (bytes per step ÷ the two sides' times). See [`placed_bandwidth`].
    Split {
        gpu_layers: u32,
        /// llama.cpp's layer count for offload: the repeating layers + the output layer.
        layers: u32,
        gpu_gb_s: f64,
        gpu: Box<BandwidthSource>,
        cpu_gb_s: f64,
        cpu: Box<BandwidthSource>,
    },
}

impl BandwidthSource {
    pub(crate) fn label(&self) -> String {
        match self {
            BandwidthSource::Config => "configured".into(),
            BandwidthSource::Datasheet { device } => format!("datasheet, {device}"),
            BandwidthSource::Measured { method } => format!("measured, {method}"),
            BandwidthSource::Split {
                gpu_layers,
                layers,
                gpu_gb_s,
                gpu,
                cpu_gb_s,
                cpu,
            } => {
                let split = LayerSplit::of(layers.saturating_sub(1), *gpu_layers);
                format!(
                    "{gpu_layers}/{layers} layers on the GPU (the output layer and {}/{} \
                     repeating) at {gpu_gb_s:.0} GB/s ({}), the rest on the CPU at \
                     {cpu_gb_s:.1} GB/s ({}), one after the other",
                    split.repeating_on_gpu,
                    split.n_layer,
                    gpu.label(),
                    cpu.label()
                )
            }
        }
    }
}

/// The largest memory bandwidth taken as a machine's, GB/s: far above any (an H200 reads
/// 4.8 TB/s, a rack of 72 GPUs about 600 TB/s), so that only a broken figure (1e308, a unit
/// slip) is refused.
pub const MAX_BANDWIDTH_GB_S: f64 = 1e6;

/// A memory bandwidth in GB/s that can be a machine's: finite, above 0 and at most
/// [`MAX_BANDWIDTH_GB_S`]. The one check every figure passes: typed (`--bandwidth-gb-s`),
/// configured (`bandwidth_gb_s`) and cached (the probe cache). The error says what it must be.
pub fn check_bandwidth_gb_s(gb_s: f64) -> Result<f64, String> {
    if gb_s.is_finite() && gb_s > 0.0 && gb_s <= MAX_BANDWIDTH_GB_S {
        Ok(gb_s)
    } else {
        Err(format!(
            "a bandwidth must be a number greater than 0 and at most {MAX_BANDWIDTH_GB_S:.0} GB/s"
        ))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    pub bytes_per_s: f64,
    pub source: BandwidthSource,
}

/// Datasheet peak memory bandwidths (bytes/s) by device model name (matched by whole words,
/// the most specific match first: see [`datasheet_bandwidth`]).
const DATASHEET: &[(&str, f64)] = &[
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100 NVL", 3.9e12),
    ("H100", 3.35e12),
    // The 96 GB HBM3 GH200 (named "GH200 480GB" after its CPU memory) and the 144 GB HBM3e one.
    ("GH200 144G", 4.9e12),
    ("GH200 144GB", 4.9e12),
    ("GH200", 4.0e12),
    ("B200", 8.0e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100-PCIE-40GB", 1.555e12),
    ("A100 80GB", 2.039e12),
    ("A100", 1.555e12),
    ("L40S", 0.864e12),
    ("L40", 0.864e12),
    ("L4", 0.3e12),
    ("A10G", 0.6e12),
    ("A10", 0.6e12),
    ("V100", 0.9e12),
    ("T4", 0.32e12),
    ("RTX 5090", 1.792e12),
    ("RTX 4090", 1.008e12),
    ("RTX 4080", 0.717e12),
    ("RTX 3090 Ti", 1.008e12),
    ("RTX 3090", 0.936e12),
    ("RTX 6000 Ada", 0.96e12),
    ("MI300X", 5.3e12),
    ("MI250X", 3.2e12),
];

/// The datasheet bandwidth of a device, matched by whole model name: the name and each table
/// key are split into words at every non-alphanumeric character, and a key matches only as a
/// run of whole words (so "NVIDIA GH200" is not an H200 and "T400" is not a T4). When several
/// keys match, the one with the most words wins ("H100 PCIe" over "H100").
pub(crate) fn datasheet_bandwidth(device_name: &str) -> Option<Bandwidth> {
    let name = model_words(device_name);
    DATASHEET
        .iter()
        .filter_map(|(key, bw)| {
            let key_words = model_words(key);
            (!key_words.is_empty()
                && name
                    .windows(key_words.len())
                    .any(|w| w == key_words.as_slice()))
            .then_some((key_words.len(), key, bw))
        })
        // The first of the longest: `max_by_key` would keep the last.
        .fold(None, |best: Option<(usize, &&str, &f64)>, m| match best {
            Some(b) if b.0 >= m.0 => Some(b),
            _ => Some(m),
        })
        .map(|(_, key, bw)| Bandwidth {
            bytes_per_s: *bw,
            source: BandwidthSource::Datasheet {
                device: (*key).to_string(),
            },
        })
}

/// A device name's words, lower-case: "NVIDIA A100-SXM4-80GB" → nvidia, a100, sxm4, 80gb.
fn model_words(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The decode ceiling: bandwidth ÷ bytes per token.
pub(crate) fn ceiling_tok_per_s(bandwidth_bytes_per_s: f64, bytes_per_token: f64) -> Option<f64> {
    (bandwidth_bytes_per_s > 0.0 && bytes_per_token > 0.0)
        .then(|| bandwidth_bytes_per_s / bytes_per_token)
}

/// Memory bandwidth utilisation: achieved ÷ ceiling (0..1, more means above the ceiling).
pub(crate) fn mbu(achieved_tok_per_s: f64, ceiling_tok_per_s: f64) -> Option<f64> {
    (ceiling_tok_per_s > 0.0 && achieved_tok_per_s.is_finite())
        .then(|| achieved_tok_per_s / ceiling_tok_per_s)
}

/// The roofline of one decode, as the chat pane and `run` report it: the ceiling at the given
/// bytes per token, and MBU against the ceiling for `tokens_per_pass` tokens a pass (while
/// speculating each target pass reads the weights once, so MBU is never above 100% merely
/// because a pass carries several tokens). Serialized into `run --json` as `roofline`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Figures {
    pub bandwidth_bytes_per_s: f64,
    /// Where the bandwidth comes from, in words (`BandwidthSource::label`).
    pub bandwidth_source: String,
    /// Bytes read per decode step at the depth the figures are taken at.
    pub bytes_per_token: f64,
    pub ceiling_tok_per_s: Option<f64>,
    /// Achieved ÷ ceiling, in %; above 100 the ceiling underestimates (see `ABOVE_CEILING`).
    pub mbu_pct: Option<f64>,
}

impl Figures {
    pub(crate) fn at(
        bandwidth: &Bandwidth,
        bytes_per_token: f64,
        decode_tok_per_s: Option<f64>,
        tokens_per_pass: Option<f64>,
    ) -> Self {
        let ceiling = ceiling_tok_per_s(bandwidth.bytes_per_s, bytes_per_token);
        Self {
            bandwidth_bytes_per_s: bandwidth.bytes_per_s,
            bandwidth_source: bandwidth.source.label(),
            bytes_per_token,
            ceiling_tok_per_s: ceiling,
            mbu_pct: mbu_of(decode_tok_per_s, ceiling, tokens_per_pass).map(|m| m * 100.0),
        }
    }
}

/// MBU (a fraction) of a decode rate against a ceiling, for `tokens_per_pass` tokens a pass.
pub(crate) fn mbu_of(
    decode_tok_per_s: Option<f64>,
    ceiling_tok_per_s: Option<f64>,
    tokens_per_pass: Option<f64>,
) -> Option<f64> {
    let (rate, ceiling) = decode_tok_per_s.zip(ceiling_tok_per_s)?;
    mbu(
        rate,
        ceiling * tokens_per_pass.filter(|t| *t >= 1.0).unwrap_or(1.0),
    )
}

/// What an MBU above 100% means: the decode beat the ceiling, so the ceiling (a probe or a
/// datasheet) underestimates the bandwidth the decode really gets. Shown beside such a figure,
/// never a bare "MBU 104%".
pub(crate) const ABOVE_CEILING: &str = "above the measured ceiling: the probe underestimates";

/// Whether an MBU (a fraction) is above the ceiling.
pub(crate) fn above_ceiling(mbu_fraction: f64) -> bool {
    mbu_fraction > 1.0
}

/// An MBU percentage as a table cell: `"62.3%"`, or `"104.0% ↑"` above the ceiling (the
/// table's notes then say what the arrow means).
pub(crate) fn mbu_pct_cell(pct: f64, decimals: usize) -> String {
    if above_ceiling(pct / 100.0) {
        format!("{pct:.decimals$}% ↑")
    } else {
        format!("{pct:.decimals$}%")
    }
}

/// Where one decode step's bytes are read from when only some layers are offloaded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct OffloadSplit {
    pub gpu_bytes: f64,
    pub cpu_bytes: f64,
}

/// Where llama.cpp put a model's layers, from the count it reports offloaded (its load log,
/// "offloaded N/M layers to GPU", M = `n_layer + 1`). llama.cpp numbers the offloadable
/// layers 0..=n_layer, the output layer last (index `n_layer`), and offloads from the end:
/// layer `il` goes to a GPU when `il >= max(n_layer + 1 - ngl, 0)` (`llama-model.cpp`,
/// `i_gpu_start`, lines 1591-1616 of llama-cpp-sys-2 0.1.160's llama.cpp). So the output layer
/// is the **first** to go: `-ngl 1` offloads the output layer alone, `-ngl n_layer` the output
/// layer and every repeating layer but the first, and only `-ngl n_layer + 1` everything (the
/// loader logs "offloading output layer to GPU" whenever any layer is offloaded, lines
/// 1913-1926). The input embedding always stays on the CPU (a row lookup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LayerSplit {
    pub n_layer: u32,
    /// The output layer (output norm and projection) is on a GPU.
    pub output_on_gpu: bool,
    /// Repeating layers on a GPU (the last ones), each with its share of the KV cache.
    pub repeating_on_gpu: u32,
}

impl LayerSplit {
    /// llama.cpp's placement for `offloaded` of `n_layer + 1` layers (clamped to that).
    pub fn of(n_layer: u32, offloaded: u32) -> Self {
        let offloaded = offloaded.min(n_layer.saturating_add(1));
        Self {
            n_layer,
            output_on_gpu: offloaded >= 1,
            repeating_on_gpu: offloaded.saturating_sub(1),
        }
    }

    /// llama.cpp's count: the repeating layers and the output layer on a GPU.
    pub fn offloaded(&self) -> u32 {
        self.repeating_on_gpu + u32::from(self.output_on_gpu)
    }

    /// Nothing on a GPU.
    pub fn none_on_gpu(&self) -> bool {
        self.offloaded() == 0
    }

    /// Every layer and the output layer on a GPU.
    pub fn all_on_gpu(&self) -> bool {
        self.output_on_gpu && self.repeating_on_gpu >= self.n_layer
    }
}

/// Splits the bytes read per token between GPU and CPU as llama.cpp places layers
/// ([`LayerSplit`]): the output layer first, then the repeating layers (with their share of
/// the KV cache, which stays with its layer) one by one from the last. `output_bytes` is the
/// output projection's share of `bytes_per_token`.
pub(crate) fn offload_split(
    bytes_per_token: f64,
    output_bytes: f64,
    layers: LayerSplit,
) -> OffloadSplit {
    let output_bytes = output_bytes.clamp(0.0, bytes_per_token.max(0.0));
    let layers_bytes = (bytes_per_token - output_bytes).max(0.0);
    let per_layer = if layers.n_layer == 0 {
        0.0
    } else {
        layers_bytes / f64::from(layers.n_layer)
    };
    let mut gpu_bytes = per_layer * f64::from(layers.repeating_on_gpu.min(layers.n_layer));
    if layers.output_on_gpu {
        gpu_bytes += output_bytes;
    }
    OffloadSplit {
        gpu_bytes,
        cpu_bytes: (bytes_per_token.max(0.0) - gpu_bytes).max(0.0),
    }
}

/// The decode ceiling of a partial offload: a token's time is the GPU's bytes over the GPU's
/// bandwidth plus the CPU's bytes over the CPU's (the two sides run one after the other).
/// `None` when a side with bytes has no bandwidth, or there is nothing to read.
pub(crate) fn partial_offload_ceiling_tok_per_s(
    split: OffloadSplit,
    gpu_bytes_per_s: f64,
    cpu_bytes_per_s: f64,
) -> Option<f64> {
    let side = |bytes: f64, bw: f64| -> Option<f64> {
        if bytes <= 0.0 {
            Some(0.0)
        } else if bw > 0.0 && bw.is_finite() {
            Some(bytes / bw)
        } else {
            None
        }
    };
    let seconds = side(split.gpu_bytes, gpu_bytes_per_s)? + side(split.cpu_bytes, cpu_bytes_per_s)?;
    (seconds > 0.0).then(|| 1.0 / seconds)
}

/// The bandwidth a decode step reads at, as llama.cpp placed the model: the CPU's when no
/// layer is offloaded (`gpu_layers` 0), the GPU's when every layer and the output layer are
/// (`gpu_layers > n_layer`), and for a partial offload ([`LayerSplit`]: the output layer first) the blend of both sides: the step's
/// bytes over the time the two sides take one after the other
/// ([`partial_offload_ceiling_tok_per_s`] at depth 0). The KV cache stays with its layer, so
/// the split (and the blend) holds at every depth. `gpu_layers` is what llama.cpp reported it
/// offloaded, never the request. `None` when a side that holds bytes has no bandwidth figure.
pub(crate) fn placed_bandwidth(
    weights: Option<&WeightBytes>,
    n_layer: u32,
    gpu_layers: u32,
    gpu: Option<&Bandwidth>,
    cpu: Option<&Bandwidth>,
) -> Option<Bandwidth> {
    let layers = LayerSplit::of(n_layer, gpu_layers);
    if layers.none_on_gpu() {
        return cpu.cloned();
    }
    if layers.all_on_gpu() {
        return gpu.cloned();
    }
    let (gpu, cpu, weights) = (gpu?, cpu?, weights?);
    let per_step = weights.read_per_token() as f64;
    let split = offload_split(per_step, weights.output_bytes as f64, layers);
    let tok_per_s = partial_offload_ceiling_tok_per_s(split, gpu.bytes_per_s, cpu.bytes_per_s)?;
    Some(Bandwidth {
        bytes_per_s: per_step * tok_per_s,
        source: BandwidthSource::Split {
            gpu_layers: layers.offloaded(),
            layers: n_layer + 1,
            gpu_gb_s: gpu.bytes_per_s / 1e9,
            gpu: Box::new(gpu.source.clone()),
            cpu_gb_s: cpu.bytes_per_s / 1e9,
            cpu: Box::new(cpu.source.clone()),
        },
    })
}

/// The bandwidth figures a session knows before it knows where llama.cpp put the layers: one
/// the user configured (which wins), the GPU's and the CPU's. [`Peaks::placed`] picks or blends
/// them once a model's offload is known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Peaks {
    pub configured: Option<Bandwidth>,
    pub gpu: Option<Bandwidth>,
    pub cpu: Option<Bandwidth>,
}

impl Peaks {
    /// Only the CPU's figure (a machine without a GPU).
    pub fn cpu(bandwidth: Bandwidth) -> Self {
        Self {
            cpu: Some(bandwidth),
            ..Self::default()
        }
    }

    /// Only a configured figure.
    pub fn configured(bandwidth: Option<Bandwidth>) -> Self {
        Self {
            configured: bandwidth,
            ..Self::default()
        }
    }

    /// Before a model is loaded, where its layers go is not known: the configured figure, or
    /// the CPU's on a machine without a GPU, else `None`.
    pub(crate) fn before_load(&self) -> Option<Bandwidth> {
        self.configured.clone().or_else(|| match self.gpu {
            None => self.cpu.clone(),
            Some(_) => None,
        })
    }

    /// The bandwidth a model's decode reads at: the configured figure, else
    /// [`placed_bandwidth`] for what llama.cpp offloaded.
    pub(crate) fn placed(
        &self,
        weights: Option<&WeightBytes>,
        n_layer: u32,
        gpu_layers: u32,
    ) -> Option<Bandwidth> {
        let (gpu, cpu) = (self.gpu.as_ref(), self.cpu.as_ref());
        (self.configured.clone())
            .or_else(|| placed_bandwidth(weights, n_layer, gpu_layers, gpu, cpu))
    }
}

/// Cost per 1M tokens = price per GPU-hour ÷ (tok/s × 3600) × 10^6.
pub(crate) fn cost_per_million_tokens(price_per_hour: f64, tok_per_s: f64) -> Option<f64> {
    (tok_per_s > 0.0 && price_per_hour.is_finite())
        .then(|| price_per_hour / (tok_per_s * 3600.0) * 1e6)
}

/// What a prompt's matrix multiplications cost depends on: the parameter count and the shapes
/// that tell the embedding lookup and the output head apart from the layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PrefillShape {
    /// All parameters (llama.cpp's `llama_model_n_params`).
    pub n_params: u64,
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_layer: u64,
    /// The output head is the embedding table itself (no `output.weight`).
    pub tied_output: bool,
    /// Attention widths per layer: query heads × key head size (the scores) and query heads ×
    /// value head size (the weighted sum). `n_embd` on Llama 3 (32 × 128 = 4096), not on
    /// Gemma 3 270M (4 × 256 = 1024 against a width of 640).
    pub attn_k_width: u64,
    pub attn_v_width: u64,
}

impl PrefillShape {
    /// Parameters every prompt token multiplies by: all but the token-embedding table (a
    /// lookup, no arithmetic) and the output head (applied to logits rows only).
    pub(crate) fn layer_params(&self) -> u64 {
        let table = self.n_vocab * self.n_embd;
        let head = if self.tied_output { 0 } else { table };
        self.n_params.saturating_sub(table).saturating_sub(head)
    }
}

/// The matmul FLOPs of prefilling `n_tokens` prompt tokens after `depth` cached positions, of
/// which `logits_rows` ask for logits (llama-bench and the chat ask for the last token of each
/// chunk only):
///
/// `2·layer_params·n_tokens + 2·n_vocab·n_embd·logits_rows
///  + 2·n_layer·(attn_k_width + attn_v_width)·Σ positions`,
///
/// where token `i` (0-based) attends to `depth + i + 1` positions (scores and the weighted sum
/// of values, causal: the work done, not llama.cpp's padded mask). A multiply-add is 2 FLOPs.
pub(crate) fn prefill_flops(
    shape: &PrefillShape,
    depth: u64,
    n_tokens: u64,
    logits_rows: u64,
) -> f64 {
    let n = n_tokens as f64;
    let layers = 2.0 * shape.layer_params() as f64 * n;
    let head = 2.0 * (shape.n_vocab * shape.n_embd) as f64 * logits_rows.min(n_tokens) as f64;
    // Σ_{i=0}^{n-1} (depth + i + 1) = n·depth + n(n+1)/2
    let positions = n * depth as f64 + n * (n + 1.0) / 2.0;
    let attention =
        2.0 * shape.n_layer as f64 * (shape.attn_k_width + shape.attn_v_width) as f64 * positions;
    layers + head + attention
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_8b_f16_on_h100_is_about_208_tok_per_s() {
        // Llama 3 8B F16: 16.06 GB of weights; H100 SXM 3.35 TB/s.
        let h100 = datasheet_bandwidth("NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(h100.bytes_per_s, 3.35e12);
        let ceiling = ceiling_tok_per_s(h100.bytes_per_s, 16.06e9).unwrap();
        assert!((ceiling - 208.6).abs() < 0.5, "{ceiling}");
        // 4.8 ms per token.
        assert!((1e3 / ceiling - 4.79).abs() < 0.01);
    }

    #[test]
    fn partial_offload_adds_both_sides_times() {
        // 32 layers of 0.1 GB each + a 0.4 GB output layer = 3.6 GB per token.
        let split = |ngl| offload_split(3.6e9, 0.4e9, LayerSplit::of(32, ngl));
        let all_cpu = split(0);
        assert_eq!(all_cpu.gpu_bytes, 0.0);
        assert_eq!(all_cpu.cpu_bytes, 3.6e9);
        let all_gpu = split(33);
        assert_eq!(all_gpu.gpu_bytes, 3.6e9);
        assert_eq!(all_gpu.cpu_bytes, 0.0);
        // One layer offloaded is the output layer (llama.cpp offloads from the end, and the
        // output layer is the last): 0.4 GB on the GPU, every repeating layer on the CPU.
        let head_only = split(1);
        assert!((head_only.gpu_bytes - 0.4e9).abs() < 1.0);
        assert!((head_only.cpu_bytes - 3.2e9).abs() < 1.0);
        // -ngl 32 of 32 repeating layers: the output layer and 31 of them; layer 0 stays.
        let all_but_one = split(32);
        assert!((all_but_one.gpu_bytes - 3.5e9).abs() < 1.0);
        assert!((all_but_one.cpu_bytes - 0.1e9).abs() < 1.0);
        // 16 offloaded: the output layer + 15 layers = 1.9 GB at 1 TB/s, 1.7 GB at
        // 100 GB/s: 1.9 ms + 17 ms.
        let half = split(16);
        let ceiling = partial_offload_ceiling_tok_per_s(half, 1e12, 1e11).unwrap();
        assert!((ceiling - 1.0 / 0.0189).abs() < 1e-6, "{ceiling}");
        // Everything on the GPU needs no CPU bandwidth.
        let full = partial_offload_ceiling_tok_per_s(all_gpu, 1e12, 0.0).unwrap();
        assert!((full - 1e12 / 3.6e9).abs() < 1e-6);
        // A side with bytes and no bandwidth: unknown, not infinite.
        assert_eq!(partial_offload_ceiling_tok_per_s(half, 1e12, 0.0), None);
        assert_eq!(
            partial_offload_ceiling_tok_per_s(
                offload_split(0.0, 0.0, LayerSplit::of(32, 8)),
                1e12,
                1e11
            ),
            None
        );
    }

    /// llama.cpp's rule (`llama-model.cpp` lines 1591-1616: `i_gpu_start = max(n_layer + 1 -
    /// ngl, 0)`, layer `il` on the GPU when `il >= i_gpu_start`, the output layer being
    /// `il = n_layer`) at ngl = 0, 1, n_layer, n_layer + 1 and past it.
    #[test]
    fn layer_split_is_llama_cpps_rule() {
        let n: u32 = 32;
        // The source's rule, layer by layer.
        let by_source = |ngl: u32| {
            let start = (n + 1).saturating_sub(ngl);
            let on_gpu = |il: u32| il >= start;
            LayerSplit {
                n_layer: n,
                output_on_gpu: on_gpu(n),
                repeating_on_gpu: (0..n).filter(|&il| on_gpu(il)).count() as u32,
            }
        };
        for ngl in [0, 1, 2, n - 1, n, n + 1, n + 2, 999] {
            assert_eq!(LayerSplit::of(n, ngl), by_source(ngl), "ngl {ngl}");
        }
        assert!(LayerSplit::of(n, 0).none_on_gpu());
        let one = LayerSplit::of(n, 1);
        assert!(one.output_on_gpu && one.repeating_on_gpu == 0);
        let n_layer = LayerSplit::of(n, n);
        assert!(n_layer.output_on_gpu && n_layer.repeating_on_gpu == n - 1);
        assert!(!n_layer.all_on_gpu());
        assert!(LayerSplit::of(n, n + 1).all_on_gpu());
        assert_eq!(LayerSplit::of(n, 999).offloaded(), n + 1);
    }

    #[test]
    fn placed_bandwidth_follows_what_llama_cpp_offloaded() {
        let gpu = Bandwidth {
            bytes_per_s: 1e12,
            source: BandwidthSource::Datasheet {
                device: "H200".into(),
            },
        };
        let cpu = Bandwidth {
            bytes_per_s: 1e11,
            source: BandwidthSource::Measured {
                method: "probe".into(),
            },
        };
        // 32 layers of 0.1 GB + a 0.4 GB output head; the embedding row is negligible.
        let w = WeightBytes {
            total_bytes: 4_100_000_000,
            token_embd_bytes: 500_000_000,
            embd_row_bytes: 0,
            tied_output: false,
            output_bytes: 400_000_000,
        };
        assert_eq!(w.read_per_token(), 3_600_000_000);
        let placed = |ngl| placed_bandwidth(Some(&w), 32, ngl, Some(&gpu), Some(&cpu));
        // Nothing offloaded: the CPU's figure, even on a machine with a GPU.
        assert_eq!(placed(0), Some(cpu.clone()));
        // Everything, the output layer included: the GPU's.
        assert_eq!(placed(33), Some(gpu.clone()));
        // 16 offloaded (the output layer + 15): 1.9 GB at 1 TB/s + 1.7 GB at 100 GB/s =
        // 18.9 ms a step, so the blend is 3.6 GB / 18.9 ms = 190.5 GB/s, and the ceiling is
        // the split's.
        let half = placed(16).unwrap();
        assert!(
            (half.bytes_per_s - 3.6e9 / 0.0189).abs() < 1.0,
            "{}",
            half.bytes_per_s
        );
        let ceiling = ceiling_tok_per_s(half.bytes_per_s, 3.6e9).unwrap();
        let split = offload_split(3.6e9, 0.4e9, LayerSplit::of(32, 16));
        let direct = partial_offload_ceiling_tok_per_s(split, 1e12, 1e11).unwrap();
        assert!((ceiling - direct).abs() < 1e-9, "{ceiling} vs {direct}");
        assert_eq!(
            half.source.label(),
            "16/33 layers on the GPU (the output layer and 15/32 repeating) at 1000 GB/s \
             (datasheet, H200), the rest on the CPU at 100.0 GB/s (measured, probe), one after \
             the other"
        );
        // A partial offload with no CPU figure is unknown, not the GPU's datasheet.
        assert_eq!(placed_bandwidth(Some(&w), 32, 16, Some(&gpu), None), None);
        assert_eq!(placed_bandwidth(None, 32, 16, Some(&gpu), Some(&cpu)), None);
        // Before a load: only a figure that cannot depend on the placement.
        let peaks = Peaks {
            configured: None,
            gpu: Some(gpu.clone()),
            cpu: Some(cpu.clone()),
        };
        assert_eq!(peaks.before_load(), None);
        assert_eq!(Peaks::cpu(cpu.clone()).before_load(), Some(cpu.clone()));
        assert_eq!(peaks.placed(Some(&w), 32, 16), placed(16));
        let configured = Peaks {
            configured: Some(gpu.clone()),
            ..peaks
        };
        assert_eq!(configured.placed(Some(&w), 32, 0), Some(gpu.clone()));
        // Each more layer on the GPU raises the ceiling.
        let rates: Vec<f64> = (0..=33).map(|n| placed(n).unwrap().bytes_per_s).collect();
        assert!(rates.windows(2).all(|p| p[1] > p[0]), "{rates:?}");
    }

    #[test]
    fn cost_per_million() {
        let c = cost_per_million_tokens(3.0, 100.0).unwrap();
        assert!((c - 8.333).abs() < 0.001, "{c}");
        assert_eq!(cost_per_million_tokens(3.0, 0.0), None);
    }

    #[test]
    fn datasheet_prefers_specific_names() {
        assert_eq!(
            datasheet_bandwidth("NVIDIA H100 PCIe").unwrap().bytes_per_s,
            2.0e12
        );
        assert_eq!(
            datasheet_bandwidth("NVIDIA H200").unwrap().bytes_per_s,
            4.8e12
        );
        assert_eq!(
            datasheet_bandwidth("NVIDIA A100-SXM4-80GB")
                .unwrap()
                .bytes_per_s,
            2.039e12
        );
        assert_eq!(
            datasheet_bandwidth("NVIDIA GeForce RTX 4090")
                .unwrap()
                .bytes_per_s,
            1.008e12
        );
        assert!(datasheet_bandwidth("Intel Xeon").is_none());
        assert_eq!(
            datasheet_bandwidth("NVIDIA H200").unwrap().source.label(),
            "datasheet, H200"
        );
    }

    #[test]
    fn every_datasheet_entry_matches_its_own_name_and_only_it() {
        for (key, bw) in DATASHEET {
            for name in [
                format!("NVIDIA {key}"),
                format!("NVIDIA GeForce {key}"),
                format!("AMD Instinct {key}"),
                key.to_string(),
            ] {
                let found = datasheet_bandwidth(&name)
                    .unwrap_or_else(|| panic!("{name} found no datasheet entry"));
                assert_eq!(found.bytes_per_s, *bw, "{name} matched {:?}", found.source);
                assert_eq!(found.source.label(), format!("datasheet, {key}"), "{name}");
            }
            // A longer model number is another device: "T4" is not "T400", "H200" not "GH200".
            for other in [format!("{key}0"), format!("G{key}"), format!("{key}X0")] {
                if let Some(found) = datasheet_bandwidth(&format!("NVIDIA {other}")) {
                    assert_ne!(found.source.label(), format!("datasheet, {key}"), "{other}");
                }
            }
        }
    }

    #[test]
    fn datasheet_matches_whole_model_names_as_drivers_report_them() {
        let label = |name: &str| datasheet_bandwidth(name).map(|b| b.source.label());
        let ds = |key: &str| Some(format!("datasheet, {key}"));
        assert_eq!(label("NVIDIA GH200 480GB"), ds("GH200"));
        assert_eq!(label("NVIDIA GH200 144G HBM3e"), ds("GH200 144G"));
        assert_eq!(
            datasheet_bandwidth("NVIDIA GH200 144G HBM3e").map(|b| b.bytes_per_s),
            Some(4.9e12)
        );
        assert_eq!(label("NVIDIA H200"), ds("H200"));
        assert_eq!(label("NVIDIA H200 NVL"), ds("H200"));
        assert_eq!(label("Tesla T4"), ds("T4"));
        assert_eq!(label("NVIDIA T400 4GB"), None);
        assert_eq!(label("NVIDIA L4"), ds("L4"));
        assert_eq!(label("NVIDIA L40S"), ds("L40S"));
        assert_eq!(label("NVIDIA A10"), ds("A10"));
        assert_eq!(label("NVIDIA A10G"), ds("A10G"));
        assert_eq!(label("NVIDIA A100-PCIE-40GB"), ds("A100-PCIE-40GB"));
        assert_eq!(label("NVIDIA A100 80GB PCIe"), ds("A100 80GB PCIe"));
        assert_eq!(label("NVIDIA H100 80GB HBM3"), ds("H100"));
        assert_eq!(label("NVIDIA H100 PCIe"), ds("H100 PCIe"));
        assert_eq!(label("Tesla V100-SXM2-16GB"), ds("V100"));
        assert_eq!(label("NVIDIA GeForce RTX 3090 Ti"), ds("RTX 3090 Ti"));
        assert_eq!(label("NVIDIA GeForce RTX 3090"), ds("RTX 3090"));
        assert_eq!(label("NVIDIA RTX 6000 Ada Generation"), ds("RTX 6000 Ada"));
        assert_eq!(label("AMD Instinct MI300X"), ds("MI300X"));
        assert_eq!(label("NVIDIA RTX A4000"), None);
        assert_eq!(label("Intel Xeon"), None);
        assert_eq!(label(""), None);
    }

    #[test]
    fn mbu_above_the_ceiling_is_marked() {
        assert!(!above_ceiling(1.0));
        assert!(above_ceiling(1.04));
        assert_eq!(mbu_pct_cell(62.34, 1), "62.3%");
        assert_eq!(mbu_pct_cell(104.0, 1), "104.0% ↑");
        assert_eq!(mbu_pct_cell(100.0, 0), "100%");
    }

    #[test]
    fn mbu_and_guards() {
        assert_eq!(mbu(104.0, 208.0), Some(0.5));
        assert_eq!(mbu(1.0, 0.0), None);
        assert_eq!(ceiling_tok_per_s(0.0, 1.0), None);
        assert_eq!(ceiling_tok_per_s(1.0, 0.0), None);
    }

    #[test]
    fn llama3_8b_kv_cache_per_position() {
        // 32 layers, 8 KV heads × 128 = 1024 wide K and V, f16: 32 × 2 × 1024 × 2 B = 128 KiB.
        let kv = KvShape {
            n_layer: 32,
            n_embd_k: 1024,
            n_embd_v: 1024,
            type_k: KvType::F16,
            type_v: KvType::F16,
            sliding_window: None,
        };
        assert_eq!(kv.bytes_per_position(), 131_072.0);
        assert_eq!(kv.bytes_read_at(4096), 536_870_912.0);
        let q8 = KvShape {
            type_k: KvType::Q8_0,
            type_v: KvType::Q8_0,
            ..kv
        };
        assert_eq!(q8.bytes_per_position(), 131_072.0 * 1.0625 / 2.0);
    }

    /// A Gemma-3-like header (the demo model's shape: 18 layers, one KV head of 256, a window
    /// of 512), written by the project's GGUF writer and read back as llama.cpp would.
    fn gemma3_like(extra: impl FnOnce(&mut crate::gguf::GgufWriter)) -> GgufHeader {
        let mut w = crate::gguf::GgufWriter::new();
        w.add_kv("general.architecture", "gemma3").unwrap();
        for (k, v) in [
            ("block_count", 18),
            ("embedding_length", 640),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 1),
            ("attention.key_length", 256),
            ("attention.value_length", 256),
            ("attention.sliding_window", 512),
        ] {
            w.add_kv(&format!("gemma3.{k}"), v).unwrap();
        }
        extra(&mut w);
        let mut bytes = Vec::new();
        w.write_to(&mut bytes, &mut |_| {}).unwrap();
        crate::gguf::parse_metadata(&bytes).unwrap()
    }

    #[test]
    fn the_allocated_cache_pads_the_context_and_holds_a_window_layer_to_its_window() {
        let kv = KvShape::from_gguf(&gemma3_like(|_| {}), KvType::F16, KvType::F16).unwrap();
        // What llama.cpp logged for the demo model at -c 3000 --ubatch-size 100 (its
        // full-size window cache): "size = 9.00 MiB (3072 cells, 3 layers)" and "size = 45.00
        // MiB (3072 cells, 15 layers)": the context rounded up to 256, 1024 bytes a cell.
        assert_eq!(kv.allocated_bytes(3000, 100, true), (9 + 45) << 20);
        // Without the full window: 15 window layers × 512 + 100 cells, rounded up to 768.
        assert_eq!(
            kv.allocated_bytes(3000, 100, false),
            1024 * (3 * 3072 + 15 * 768)
        );
        assert_eq!(
            kv.allocated_bytes(4096, 512, false),
            1024 * (3 * 4096 + 15 * 1024)
        );
        // A context smaller than the window: every layer holds the context.
        assert_eq!(kv.allocated_bytes(300, 512, false), 1024 * 18 * 512);
        // q8_0 rows: 34 bytes a block of 32.
        let q8 = KvShape::from_gguf(&gemma3_like(|_| {}), KvType::Q8_0, KvType::Q8_0).unwrap();
        assert_eq!(q8.allocated_bytes(4096, 512, true), 2 * 272 * 18 * 4096);
        // The largest context within a budget, in steps of 1024, and back.
        let n = kv.largest_context_within(100 << 20, 512, true);
        assert!(kv.allocated_bytes(n, 512, true) <= 100 << 20);
        assert!(kv.allocated_bytes(n + 1024, 512, true) > 100 << 20);
        assert_eq!(kv.largest_context_within(1000, 512, true), 0);
    }

    #[test]
    fn a_window_layer_reads_its_window_and_a_global_layer_the_whole_depth() {
        let kv = KvShape::from_gguf(&gemma3_like(|_| {}), KvType::F16, KvType::F16).unwrap();
        let w = kv.sliding_window.expect("gemma3 has window layers");
        // llama.cpp's gemma3 rule (set_swa_pattern(6)): layers 5, 11 and 17 are global.
        let global: Vec<u64> = (0..18).filter(|il| !w.is_window_layer(*il)).collect();
        assert_eq!(global, vec![5, 11, 17]);
        assert_eq!((w.cells, w.n_window_layers), (512, 15));
        // K and V of one KV head of 256 in f16: 1024 bytes a layer a cell.
        assert_eq!(kv.layer_bytes_per_position(), 1024.0);
        // Depth 3013: 3 global layers × 3013 cells + 15 window layers × 512 cells, by hand.
        let by_hand = 1024.0 * (3.0 * 3013.0 + 15.0 * 512.0);
        assert_eq!(kv.bytes_read_at(3013), by_hand);
        // The old figure (every layer at full depth) is 3.2 times as much: it fails here.
        assert!(kv.bytes_per_position() * 3013.0 > 3.0 * by_hand);
        // Within the window every layer reads the whole depth.
        assert_eq!(kv.bytes_read_at(300), kv.bytes_per_position() * 300.0);
        // The cells each layer reads for a step after 3013 cached tokens (its own cell too),
        // and for 4 rows verified at once: the union of their windows.
        assert_eq!(kv.cells_read(0, 3013, 1), 512);
        assert_eq!(kv.cells_read(5, 3013, 1), 3014);
        assert_eq!(kv.cells_read(0, 3013, 4), 515);
        assert_eq!(kv.cells_read(0, 28, 1), 29);
        // The mean over a bench's steps crosses the window edge: not the mean of the ends.
        let mean = kv.mean_bytes_read(500, 530);
        let by_steps: f64 = (500..=530).map(|p| kv.bytes_read_at(p)).sum::<f64>() / 31.0;
        assert_eq!(mean, by_steps);
        // The headline at depth 3013 of the demo model's weights (~253 MB read a token).
        let weights = 253_000_000.0;
        let old = weights + kv.bytes_per_position() * 3013.0;
        let new = bytes_per_token(
            &WeightBytes {
                total_bytes: 253_000_000,
                tied_output: true,
                ..WeightBytes::default()
            },
            Some(&kv),
            3013,
        );
        assert_eq!(new, weights + by_hand);
        assert!(old / new > 1.13, "{old} vs {new}");
    }

    #[test]
    fn the_window_pattern_is_the_files_when_it_has_one() {
        use crate::gguf::{GgufArray, GgufValue};
        // A per-layer array: only layers 0 and 1 are window layers.
        let flags: Vec<bool> = (0..18).map(|il| il < 2).collect();
        let header = gemma3_like(|w| {
            w.add_kv(
                "gemma3.attention.sliding_window_pattern",
                GgufValue::Array(GgufArray::Bool(flags)),
            )
            .unwrap();
        });
        let kv = KvShape::from_gguf(&header, KvType::F16, KvType::F16).unwrap();
        assert_eq!(kv.sliding_window.unwrap().n_window_layers, 2);
        // A number: one global layer in 3.
        let header = gemma3_like(|w| {
            w.add_kv("gemma3.attention.sliding_window_pattern", 3)
                .unwrap();
        });
        let w = KvShape::from_gguf(&header, KvType::F16, KvType::F16)
            .unwrap()
            .sliding_window
            .unwrap();
        assert_eq!(w.n_window_layers, 12);
        assert!(!w.is_window_layer(2) && w.is_window_layer(3));
        // An architecture whose rule is not known is read at full depth, and says so by
        // having no window.
        let mut other = crate::gguf::GgufWriter::new();
        other.add_kv("general.architecture", "llama").unwrap();
        for (k, v) in [
            ("block_count", 4),
            ("embedding_length", 64),
            ("attention.head_count", 4),
            ("attention.sliding_window", 16),
        ] {
            other.add_kv(&format!("llama.{k}"), v).unwrap();
        }
        let mut bytes = Vec::new();
        other.write_to(&mut bytes, &mut |_| {}).unwrap();
        let header = crate::gguf::parse_metadata(&bytes).unwrap();
        let kv = KvShape::from_gguf(&header, KvType::F16, KvType::F16).unwrap();
        assert_eq!(kv.sliding_window, None);
        assert_eq!(kv.bytes_read_at(100), kv.bytes_per_position() * 100.0);
    }

    #[test]
    fn weights_read_per_token_skip_the_embedding_table() {
        let w = WeightBytes {
            total_bytes: 1000,
            token_embd_bytes: 300,
            embd_row_bytes: 3,
            tied_output: false,
            output_bytes: 200,
        };
        assert_eq!(w.read_per_token(), 703);
        let tied = WeightBytes {
            tied_output: true,
            ..w
        };
        assert_eq!(tied.read_per_token(), 1000);
        let kv = KvShape {
            n_layer: 2,
            n_embd_k: 4,
            n_embd_v: 4,
            type_k: KvType::F32,
            type_v: KvType::F32,
            sliding_window: None,
        };
        assert_eq!(
            bytes_per_token(&w, Some(&kv), 10),
            703.0 + 2.0 * 32.0 * 10.0
        );
    }

    #[test]
    fn a_depth_point_reads_the_cells_its_steps_attend_to() {
        let w = WeightBytes {
            total_bytes: 1000,
            token_embd_bytes: 0,
            embd_row_bytes: 0,
            tied_output: false,
            output_bytes: 0,
        };
        // One position costs 2 layers × (4 + 4) × 4 bytes = 64.
        let kv = KvShape {
            n_layer: 2,
            n_embd_k: 4,
            n_embd_v: 4,
            type_k: KvType::F32,
            type_v: KvType::F32,
            sliding_window: None,
        };
        // tg4 at depth 100: the steps read 101, 102, 103 and 104 cells, 102.5 on average.
        let p = depth_point((100, 4), 50.0, &w, Some(&kv), Some(1e6));
        assert_eq!(p.kv_bytes_per_token, 64.0 * 102.5);
        assert_eq!(p.bytes_per_token, 1000.0 + 64.0 * 102.5);
        assert_eq!(p.ceiling_tok_per_s, Some(1e6 / p.bytes_per_token));
        assert_eq!(
            depth_point((0, 1), 50.0, &w, None, None).ceiling_tok_per_s,
            None
        );
        // The verdict: not before a depth-0 point and a deeper one exist.
        let at = |depth, tok_per_s| depth_point((depth, 4), tok_per_s, &w, Some(&kv), None);
        assert_eq!(depth_verdict(&[at(0, 50.0)]), None);
        assert_eq!(depth_verdict(&[at(100, 40.0), at(200, 30.0)]), None);
        let deep = at(100, 5.0);
        let predicted = at(0, 50.0).bytes_per_token / deep.bytes_per_token;
        let line = depth_verdict(&[deep, at(0, 50.0)]).unwrap();
        assert!(
            line.starts_with("at depth 100 decode runs 0.10× its depth-0 speed, where"),
            "{line}"
        );
        assert!(line.contains(&format!("predict {predicted:.2}×")), "{line}");
        assert!(
            line.contains("predict 0.") && line.contains(": more than the reads grows with depth"),
            "{line}"
        );
        let line = depth_verdict(&[at(0, 50.0), at(100, 20.0)]).unwrap();
        assert!(
            line.contains(": faster than the reads alone allow"),
            "{line}"
        );
        let as_predicted = at(100, 50.0 * predicted);
        let line = depth_verdict(&[at(0, 50.0), as_predicted]).unwrap();
        assert!(
            line.contains(": as the bytes say (one run per depth)"),
            "{line}"
        );
    }

    #[test]
    fn prefill_flops_count_the_matmuls_done_by_hand() {
        // A hand-made shape: vocab 10, width 4, 2 layers; 10·4 embedding + 10·4 output head +
        // 200 layer parameters = 280.
        let shape = PrefillShape {
            n_params: 280,
            n_vocab: 10,
            n_embd: 4,
            n_layer: 2,
            tied_output: false,
            attn_k_width: 4,
            attn_v_width: 4,
        };
        assert_eq!(shape.layer_params(), 200);
        // 3 tokens after 5 cached positions, one logits row:
        //   layers 2·200·3 = 1200; head 2·10·4·1 = 80;
        //   attention 4·2·4·(6 + 7 + 8) = 672.
        assert_eq!(prefill_flops(&shape, 5, 3, 1), 1200.0 + 80.0 + 672.0);
        // Every row with logits (a perplexity run): the head counts 3 times.
        assert_eq!(prefill_flops(&shape, 5, 3, 3), 1200.0 + 240.0 + 672.0);
        // Tied: the table is the head, so the layers keep 240 parameters.
        let tied = PrefillShape {
            n_params: 240,
            tied_output: true,
            ..shape
        };
        assert_eq!(tied.layer_params(), 200);
        assert_eq!(prefill_flops(&tied, 5, 3, 1), 1200.0 + 80.0 + 672.0);
        assert_eq!(prefill_flops(&shape, 0, 0, 1), 0.0);
        // Attention is as wide as its heads, not the model: 2 heads × 4 for the scores and
        // 2 × 6 for the values: 2·2·(8 + 12)·21 = 1680.
        let wide = PrefillShape {
            attn_k_width: 8,
            attn_v_width: 12,
            ..shape
        };
        assert_eq!(prefill_flops(&wide, 5, 3, 1), 1200.0 + 80.0 + 1680.0);
    }
}
