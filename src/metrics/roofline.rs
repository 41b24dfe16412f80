//! The physics behind the speed: decode at batch 1 is memory-bandwidth bound, because every
//! generated token reads all the weights (but the token-embedding table, of which it reads one
//! row) and the KV cache up to the current depth. So the ceiling is
//! `bandwidth / bytes read per token`, and memory bandwidth utilisation (MBU) is the achieved
//! rate over that ceiling. Prefill is compute bound: ≈ 2 × parameters FLOPs per token, plus
//! attention. Cost per 1M tokens turns a rate into money. Pure math, defined in
//! `docs/metrics.md`.

use serde::{Deserialize, Serialize};

use crate::gguf::kv_type::KvType;
use crate::gguf::GgufHeader;

/// What one decode step reads of the weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
}

impl WeightBytes {
    /// From a GGUF's tensor directory. `None` when a tensor type's size is unknown.
    pub fn from_gguf(header: &GgufHeader) -> Option<Self> {
        let total_bytes = header.tensor_data_bytes()?;
        let (token_embd_bytes, embd_row_bytes) = match header.tensor("token_embd.weight") {
            Some(t) => {
                let bytes = t.n_bytes()?;
                let rows = t.dims.get(1).copied().unwrap_or(1).max(1);
                (bytes, bytes / rows)
            }
            None => (0, 0),
        };
        Some(Self {
            total_bytes,
            token_embd_bytes,
            embd_row_bytes,
            tied_output: header.tensor("output.weight").is_none(),
        })
    }

    /// Weight bytes read per generated token.
    pub fn read_per_token(&self) -> u64 {
        if self.tied_output {
            self.total_bytes
        } else {
            self.total_bytes - self.token_embd_bytes + self.embd_row_bytes
        }
    }
}

/// The KV cache's shape: what one cached position costs across all layers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvShape {
    pub n_layer: u64,
    /// Key width per layer: KV heads × key head size.
    pub n_embd_k: u64,
    /// Value width per layer: KV heads × value head size.
    pub n_embd_v: u64,
    pub type_k: KvType,
    pub type_v: KvType,
}

impl KvShape {
    /// From a GGUF's metadata (`{arch}.block_count`, head counts, key/value lengths).
    pub fn from_gguf(header: &GgufHeader, type_k: KvType, type_v: KvType) -> Option<Self> {
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
        })
    }

    /// Bytes of K and V cached per token position, all layers.
    pub fn bytes_per_position(&self) -> f64 {
        self.n_layer as f64
            * (self.n_embd_k as f64 * self.type_k.bytes_per_element()
                + self.n_embd_v as f64 * self.type_v.bytes_per_element())
    }

    /// Bytes a decode step reads from the cache at `depth` cached positions.
    pub fn bytes_read_at(&self, depth: u64) -> f64 {
        self.bytes_per_position() * depth as f64
    }
}

/// Bytes read per decode step: weights per token + KV cache at the depth.
pub fn bytes_per_token(weights: &WeightBytes, kv: Option<&KvShape>, depth: u64) -> f64 {
    weights.read_per_token() as f64 + kv.map_or(0.0, |k| k.bytes_read_at(depth))
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
}

impl BandwidthSource {
    pub fn label(&self) -> String {
        match self {
            BandwidthSource::Config => "configured".into(),
            BandwidthSource::Datasheet { device } => format!("datasheet, {device}"),
            BandwidthSource::Measured { method } => format!("measured, {method}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    pub bytes_per_s: f64,
    pub source: BandwidthSource,
}

/// Datasheet peak memory bandwidths (bytes/s) by device name. Longer, more specific names
/// come first so that "H100 PCIe" is not taken for "H100".
const DATASHEET: &[(&str, f64)] = &[
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100 NVL", 3.9e12),
    ("H100", 3.35e12),
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

/// The datasheet bandwidth of a device, matched by name (case-insensitive substring).
pub fn datasheet_bandwidth(device_name: &str) -> Option<Bandwidth> {
    let name = device_name.to_ascii_lowercase();
    DATASHEET
        .iter()
        .find(|(key, _)| name.contains(&key.to_ascii_lowercase()))
        .map(|(key, bw)| Bandwidth {
            bytes_per_s: *bw,
            source: BandwidthSource::Datasheet {
                device: (*key).to_string(),
            },
        })
}

/// The decode ceiling: bandwidth ÷ bytes per token.
pub fn ceiling_tok_per_s(bandwidth_bytes_per_s: f64, bytes_per_token: f64) -> Option<f64> {
    (bandwidth_bytes_per_s > 0.0 && bytes_per_token > 0.0)
        .then(|| bandwidth_bytes_per_s / bytes_per_token)
}

/// Memory bandwidth utilisation: achieved ÷ ceiling (0..1, more means above the ceiling).
pub fn mbu(achieved_tok_per_s: f64, ceiling_tok_per_s: f64) -> Option<f64> {
    (ceiling_tok_per_s > 0.0 && achieved_tok_per_s.is_finite())
        .then(|| achieved_tok_per_s / ceiling_tok_per_s)
}

/// Cost per 1M tokens = price per GPU-hour ÷ (tok/s × 3600) × 10^6.
pub fn cost_per_million_tokens(price_per_hour: f64, tok_per_s: f64) -> Option<f64> {
    (tok_per_s > 0.0 && price_per_hour.is_finite())
        .then(|| price_per_hour / (tok_per_s * 3600.0) * 1e6)
}

/// FLOPs to process one prompt token at context depth `depth`: 2 per parameter (one
/// multiply-add per weight) plus attention, 2 × 2 × n_layer × depth × n_embd (scores and the
/// weighted sum of values over `depth` positions).
pub fn prefill_flops_per_token(n_params: u64, n_layer: u64, n_embd: u64, depth: u64) -> f64 {
    2.0 * n_params as f64 + 4.0 * n_layer as f64 * depth as f64 * n_embd as f64
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

    #[test]
    fn weights_read_per_token_skip_the_embedding_table() {
        let w = WeightBytes {
            total_bytes: 1000,
            token_embd_bytes: 300,
            embd_row_bytes: 3,
            tied_output: false,
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
        };
        assert_eq!(
            bytes_per_token(&w, Some(&kv), 10),
            703.0 + 2.0 * 32.0 * 10.0
        );
    }

    #[test]
    fn prefill_flops() {
        assert_eq!(prefill_flops_per_token(8_000_000_000, 32, 4096, 0), 16e9);
        assert!(prefill_flops_per_token(8_000_000_000, 32, 4096, 1000) > 16e9);
    }

    #[test]
    fn synthetic_model_weight_bytes_from_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        let spec = crate::synth::SynthSpec::preset("tiny").unwrap();
        crate::synth::write_model(&path, &spec).unwrap();
        let header = crate::gguf::read_metadata(&path).unwrap();
        let w = WeightBytes::from_gguf(&header).unwrap();
        let n_vocab = u64::from(crate::synth::vocab_size());
        let n_embd = u64::from(spec.shape.n_embd);
        assert_eq!(w.token_embd_bytes, n_vocab * n_embd * 4);
        assert_eq!(w.embd_row_bytes, n_embd * 4);
        assert!(!w.tied_output);
        assert_eq!(
            w.read_per_token(),
            w.total_bytes - w.token_embd_bytes + w.embd_row_bytes
        );
        let kv = KvShape::from_gguf(&header, KvType::F16, KvType::F16).unwrap();
        assert_eq!(kv.n_layer, u64::from(spec.shape.n_layer));
        assert_eq!(kv.n_embd_k, u64::from(spec.shape.n_embd_kv()));
    }
}
