//! The KV cache's element types (llama.cpp's `-ctk`/`-ctv`): a subset of ggml's types, with
//! their names and sizes.

use std::str::FromStr;

/// Element type of the KV cache (llama.cpp's `-ctk`/`-ctv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    F32,
    #[default]
    F16,
    Bf16,
    Q8_0,
    Q5_1,
    Q5_0,
    Q4_1,
    Q4_0,
    Iq4Nl,
}

impl KvType {
    pub(crate) const ALL: [KvType; 9] = [
        KvType::F32,
        KvType::F16,
        KvType::Bf16,
        KvType::Q8_0,
        KvType::Q5_1,
        KvType::Q5_0,
        KvType::Q4_1,
        KvType::Q4_0,
        KvType::Iq4Nl,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q5_1 => "q5_1",
            KvType::Q5_0 => "q5_0",
            KvType::Q4_1 => "q4_1",
            KvType::Q4_0 => "q4_0",
            KvType::Iq4Nl => "iq4_nl",
        }
    }

    /// Bytes per cached element (block size included for the quantized types).
    pub(crate) fn bytes_per_element(self) -> f64 {
        match self {
            KvType::F32 => 4.0,
            KvType::F16 | KvType::Bf16 => 2.0,
            KvType::Q8_0 => 34.0 / 32.0,
            KvType::Q5_1 => 24.0 / 32.0,
            KvType::Q5_0 => 22.0 / 32.0,
            KvType::Q4_1 => 20.0 / 32.0,
            KvType::Q4_0 | KvType::Iq4Nl => 18.0 / 32.0,
        }
    }
}

impl FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        KvType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = KvType::ALL.iter().map(|t| t.name()).collect();
                format!("unknown KV-cache type `{s}` (one of {})", names.join(", "))
            })
    }
}

shown_by_name!(KvType);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_types_parse_and_size() {
        assert_eq!("q8_0".parse(), Ok(KvType::Q8_0));
        assert_eq!("F16".parse(), Ok(KvType::F16));
        let e = "q3_k".parse::<KvType>().unwrap_err();
        assert!(e.contains("q3_k") && e.contains("q4_0"), "{e}");
        assert_eq!(KvType::Q8_0.bytes_per_element(), 1.0625);
        assert_eq!(KvType::Q4_0.bytes_per_element(), 0.5625);
    }
}
