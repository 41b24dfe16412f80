//! Which CUDA flash-attention kernel a K/V cache type pair gets, read from the CUDA backend's
//! compile-time features as every stamp records them (`llama_system_info`, llama.cpp's
//! `llama_print_system_info`: "CUDA : ARCHS = 900 | … | FA_QUANTS = q4_0-q4_0,… | CPU : …").
//!
//! The rule is llama.cpp's (`ggml/src/ggml-cuda/fattn.cu` and `ggml/cmake/common.cmake` of
//! llama-cpp-sys-2 0.1.160). For decode (one query row; up to two with a quantized cache on Ada
//! and newer) llama.cpp takes its vector kernel, which reads a quantized cache in place. That
//! kernel is compiled only for the K-V pairs `GGML_CUDA_FA_QUANTS` names: by default
//! `q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16`, `all` for every pair of f16, bf16, q4_0, q4_1,
//! q5_0, q5_1 and q8_0 (`GGML_CUDA_FA_ALL_QUANTS=ON` is its deprecated alias); f16-f16 is always
//! compiled, and an f32 cache takes the f16 kernel. For a pair not compiled, llama.cpp converts
//! K and V to f16 at every call and warns once ("no FlashAttention vector kernel compiled for
//! K/V types …, converting K and V to f16 instead (slow)"), so decode reads and writes the
//! whole cache again per token. The larger-batch kernels (MMA, tile: prefill) convert a
//! quantized cache to f16 by design, compiled pair or not. A type with no CUDA
//! flash-attention kernel at all (iq4_nl) makes the CUDA backend refuse the op: with `-fa on`
//! the scheduler runs attention on the CPU; with `auto` llama.cpp turns flash attention off.

use crate::llama::settings::FlashAttn;
use crate::llama::settings::KvType;

/// The K-V pairs the CUDA vector kernel was compiled for (`FA_QUANTS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FaQuants {
    All,
    /// `type_K-type_V` pairs as llama.cpp names the types; f16-f16 is always among them.
    Pairs(Vec<String>),
}

/// What the CUDA flash-attention kernel does with a K/V pair at decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaKvKernel {
    /// A vector kernel for the pair is compiled: the cache is read in place.
    Native,
    /// No kernel for the pair: K and V converted to f16 at every call (slow).
    F16Conversion,
    /// No CUDA flash-attention kernel for a type of the pair at all.
    NoCudaKernel,
}

/// The `(backend, feature, value)` triples of llama.cpp's system info, in order.
pub(crate) fn backend_features(system_info: &str) -> Vec<(String, String, String)> {
    let mut backend = String::new();
    let mut out = Vec::new();
    for item in system_info.split('|') {
        let item = item.trim();
        // "CUDA : ARCHS = 900" starts a backend's list; a backend without features leaves
        // "Metal : CPU : SSE3 = 1", whose last name is the one the feature belongs to.
        let feature = match item.rsplit_once(" : ") {
            Some((names, feature)) => {
                backend = names
                    .rsplit(" : ")
                    .next()
                    .unwrap_or(names)
                    .trim()
                    .to_string();
                feature
            }
            None => item,
        };
        if let Some((name, value)) = feature.split_once(" = ") {
            out.push((
                backend.clone(),
                name.trim().to_string(),
                value.trim().to_string(),
            ));
        }
    }
    out
}

/// The CUDA backend's feature `name` in llama.cpp's system info; `None` without a CUDA
/// backend or without that feature.
pub(crate) fn cuda_feature(system_info: &str, name: &str) -> Option<String> {
    backend_features(system_info)
        .into_iter()
        .find(|(backend, feature, _)| backend == "CUDA" && feature == name)
        .map(|(_, _, value)| value)
}

/// The compiled K-V pairs of a CUDA build (`FA_QUANTS`); `None` without a CUDA backend, or a
/// CUDA backend built without flash-attention kernels (`GGML_CUDA_FA=OFF` lists none).
pub(crate) fn fa_quants(system_info: &str) -> Option<FaQuants> {
    let value = cuda_feature(system_info, "FA_QUANTS")?.to_lowercase();
    if value.trim() == "all" {
        return Some(FaQuants::All);
    }
    // CMake's `;` list is written with `,` in the define.
    let mut pairs: Vec<String> = value
        .split([',', ';'])
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    pairs.push("f16-f16".to_string());
    pairs.sort();
    pairs.dedup();
    Some(FaQuants::Pairs(pairs))
}

/// The type's name among the vector kernel's instances: f32 takes f16's; `None` for a type
/// without any CUDA flash-attention kernel (`ggml_cuda_fattn_kv_type_supported`).
fn vec_type(t: KvType) -> Option<&'static str> {
    match t {
        KvType::F32 | KvType::F16 => Some("f16"),
        KvType::Bf16 => Some("bf16"),
        KvType::Q8_0 => Some("q8_0"),
        KvType::Q5_1 => Some("q5_1"),
        KvType::Q5_0 => Some("q5_0"),
        KvType::Q4_1 => Some("q4_1"),
        KvType::Q4_0 => Some("q4_0"),
        KvType::Iq4Nl => None,
    }
}

/// The decode kernel for cache types `k` and `v` on a build with these compiled pairs.
pub(crate) fn fa_kv_kernel(quants: &FaQuants, k: KvType, v: KvType) -> FaKvKernel {
    let (Some(tk), Some(tv)) = (vec_type(k), vec_type(v)) else {
        return FaKvKernel::NoCudaKernel;
    };
    match quants {
        FaQuants::All => FaKvKernel::Native,
        FaQuants::Pairs(pairs) if pairs.iter().any(|p| *p == format!("{tk}-{tv}")) => {
            FaKvKernel::Native
        }
        FaQuants::Pairs(_) => FaKvKernel::F16Conversion,
    }
}

/// The stamp's mark for a run with cache types `k`/`v` and flash attention `fa` on a build
/// whose system info is `system_info`, with its attention on a CUDA GPU (`on_gpu`): why its
/// decode figures are not those of the pair's own kernel, or `None` when they are (or when no
/// CUDA flash attention is involved).
pub(crate) fn fa_kv_note(
    system_info: &str,
    (k, v): (KvType, KvType),
    fa: FlashAttn,
    on_gpu: bool,
) -> Option<String> {
    if !on_gpu || fa == FlashAttn::Off {
        return None;
    }
    let quants = fa_quants(system_info)?;
    let pair = format!("{}-{}", k.name(), v.name());
    match fa_kv_kernel(&quants, k, v) {
        FaKvKernel::Native => None,
        FaKvKernel::F16Conversion => Some(format!(
            "K/V {pair}: this build has no CUDA flash-attention decode kernel for the pair \
             (FA_QUANTS = {}), so llama.cpp converts K and V to f16 at every step (slow): \
             not the pair's own speed; build with scripts/build-cuda.sh --fa-all-quants, or \
             use a compiled pair",
            cuda_feature(system_info, "FA_QUANTS").unwrap_or_default()
        )),
        // With `auto` llama.cpp turns flash attention off for such a type: no mark.
        FaKvKernel::NoCudaKernel => (fa == FlashAttn::On).then(|| {
            format!(
                "K/V {pair}: CUDA has no flash-attention kernel for this type, so with -fa on \
                 attention runs on the CPU: not a GPU speed"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CUDA build's system info as llama.cpp prints it, with llama.cpp's default pairs.
    const DEFAULT_BUILD: &str = "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 \
        | FA_QUANTS = q4_0-q4_0,q8_0-q8_0,f16-f16,bf16-bf16 | CPU : SSE3 = 1 | AVX2 = 1 | \
        OPENMP = 1 | REPACK = 1";
    const ALL_BUILD: &str = "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | FA_QUANTS = all | CPU : \
        SSE3 = 1";
    const CPU_BUILD: &str = "CPU : SSE3 = 1 | AVX2 = 1 | OPENMP = 1 | REPACK = 1";

    #[test]
    fn features_are_read_per_backend() {
        let f = backend_features(DEFAULT_BUILD);
        assert_eq!(
            f[0],
            ("CUDA".to_string(), "ARCHS".to_string(), "900".to_string())
        );
        assert!(f.contains(&("CPU".to_string(), "AVX2".to_string(), "1".to_string())));
        assert_eq!(
            cuda_feature(DEFAULT_BUILD, "USE_GRAPHS").as_deref(),
            Some("1")
        );
        assert_eq!(cuda_feature(DEFAULT_BUILD, "AVX2"), None, "a CPU feature");
        assert_eq!(cuda_feature(CPU_BUILD, "FA_QUANTS"), None);
        // A backend listed without features does not take the next one's.
        let f = backend_features("Metal : CPU : SSE3 = 1");
        assert_eq!(f, vec![("CPU".into(), "SSE3".into(), "1".into())]);
    }

    #[test]
    fn the_compiled_pairs_come_from_fa_quants() {
        assert_eq!(fa_quants(ALL_BUILD), Some(FaQuants::All));
        assert_eq!(fa_quants(CPU_BUILD), None);
        let Some(FaQuants::Pairs(p)) = fa_quants("CUDA : FA_QUANTS = q8_0-q4_0 | CPU : X = 1")
        else {
            panic!("pairs")
        };
        assert_eq!(
            p,
            vec!["f16-f16", "q8_0-q4_0"],
            "f16-f16 is always compiled"
        );
    }

    /// llama.cpp's default build: its four pairs read the cache in place; a mixed pair and
    /// the other quantized types convert to f16; f32 takes f16's kernel; iq4_nl has none.
    #[test]
    fn a_pair_outside_the_default_build_falls_back_to_f16() {
        let q = fa_quants(DEFAULT_BUILD).unwrap();
        use KvType::*;
        for (k, v) in [
            (F16, F16),
            (Q8_0, Q8_0),
            (Q4_0, Q4_0),
            (Bf16, Bf16),
            (F32, F16),
        ] {
            assert_eq!(fa_kv_kernel(&q, k, v), FaKvKernel::Native, "{k:?}-{v:?}");
        }
        for (k, v) in [
            (Q8_0, F16),
            (F16, Q8_0),
            (Q8_0, Q4_0),
            (Q5_1, Q5_1),
            (Q4_1, Q4_1),
        ] {
            assert_eq!(
                fa_kv_kernel(&q, k, v),
                FaKvKernel::F16Conversion,
                "{k:?}-{v:?}"
            );
        }
        assert_eq!(fa_kv_kernel(&q, Iq4Nl, F16), FaKvKernel::NoCudaKernel);
        let all = FaQuants::All;
        assert_eq!(fa_kv_kernel(&all, Q8_0, Q4_0), FaKvKernel::Native);
        assert_eq!(fa_kv_kernel(&all, F16, Iq4Nl), FaKvKernel::NoCudaKernel);
    }

    #[test]
    fn the_stamp_mark_is_said_only_where_the_gpu_converts() {
        use KvType::*;
        let note = fa_kv_note(DEFAULT_BUILD, (Q8_0, F16), FlashAttn::Auto, true).unwrap();
        assert!(
            note.contains("q8_0-f16") && note.contains("converts K and V to f16"),
            "{note}"
        );
        assert!(note.contains("--fa-all-quants"), "{note}");
        assert_eq!(
            fa_kv_note(DEFAULT_BUILD, (Q8_0, Q8_0), FlashAttn::On, true),
            None
        );
        assert_eq!(
            fa_kv_note(ALL_BUILD, (Q8_0, F16), FlashAttn::On, true),
            None
        );
        // No flash attention, no GPU, a CPU build: nothing to say.
        assert_eq!(
            fa_kv_note(DEFAULT_BUILD, (Q8_0, F16), FlashAttn::Off, true),
            None
        );
        assert_eq!(
            fa_kv_note(DEFAULT_BUILD, (Q8_0, F16), FlashAttn::On, false),
            None
        );
        assert_eq!(
            fa_kv_note(CPU_BUILD, (Q8_0, F16), FlashAttn::On, true),
            None
        );
        // iq4_nl: attention leaves the GPU with -fa on; auto turns flash attention off.
        let off_gpu = fa_kv_note(DEFAULT_BUILD, (Iq4Nl, F16), FlashAttn::On, true).unwrap();
        assert!(off_gpu.contains("runs on the CPU"), "{off_gpu}");
        assert_eq!(
            fa_kv_note(DEFAULT_BUILD, (Iq4Nl, F16), FlashAttn::Auto, true),
            None
        );
    }
}
