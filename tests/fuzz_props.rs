//! Property tests (proptest) over the loaders that read untrusted bytes: the GGUF writer/reader
//! round trip and the reader on garbage and truncations, the config loader, and the history
//! loader. A short run is part of the normal suite; `scripts/fuzz.sh` runs many more cases
//! (`PROPTEST_CASES`). Crashes found become regression cases in `tests/fuzz_props.proptest-regressions`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use proptest::prelude::*;
use tokscope::config::Settings;
use tokscope::gguf::{parse_metadata, GgmlType, GgufArray, GgufValue, GgufWriter};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn value() -> impl Strategy<Value = GgufValue> {
    prop_oneof![
        any::<u8>().prop_map(GgufValue::U8),
        any::<i8>().prop_map(GgufValue::I8),
        any::<u16>().prop_map(GgufValue::U16),
        any::<i16>().prop_map(GgufValue::I16),
        any::<u32>().prop_map(GgufValue::U32),
        any::<i32>().prop_map(GgufValue::I32),
        any::<u64>().prop_map(GgufValue::U64),
        any::<i64>().prop_map(GgufValue::I64),
        // Finite floats: NaN != NaN would make equality meaningless.
        (-1e30f32..1e30f32).prop_map(GgufValue::F32),
        (-1e300f64..1e300f64).prop_map(GgufValue::F64),
        any::<bool>().prop_map(GgufValue::Bool),
        ".{0,40}".prop_map(GgufValue::String),
        prop::collection::vec(".{0,12}", 0..8).prop_map(|v| GgufValue::Array(GgufArray::String(v))),
        prop::collection::vec(any::<i32>(), 0..16)
            .prop_map(|v| GgufValue::Array(GgufArray::I32(v))),
        prop::collection::vec(-1e6f32..1e6f32, 0..16)
            .prop_map(|v| GgufValue::Array(GgufArray::F32(v))),
    ]
}

fn header_bytes(kvs: &[(String, GgufValue)], tensors: &[(String, Vec<u64>)]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in kvs {
        w.add_kv(k, v.clone()).unwrap();
    }
    for (name, dims) in tensors {
        let n: u64 = dims.iter().product();
        w.add_tensor(name, dims, GgmlType::F32, vec![0u8; (n * 4) as usize])
            .unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out, &mut |_| {}).unwrap();
    out
}

fn kvs() -> impl Strategy<Value = Vec<(String, GgufValue)>> {
    prop::collection::btree_map("[a-z][a-z0-9_.]{0,20}", value(), 0..12).prop_map(|m| {
        m.into_iter()
            .filter(|(k, _)| k != "general.alignment")
            .collect()
    })
}

fn tensors() -> impl Strategy<Value = Vec<(String, Vec<u64>)>> {
    prop::collection::btree_map(
        "[a-z][a-z0-9_.]{0,20}",
        prop::collection::vec(1u64..6, 1..4),
        0..5,
    )
    .prop_map(|m| m.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn gguf_round_trip(kvs in kvs(), tensors in tensors()) {
        let bytes = header_bytes(&kvs, &tensors);
        let header = parse_metadata(&bytes).unwrap();
        for (k, v) in &kvs {
            prop_assert_eq!(header.get(k), Some(v));
        }
        prop_assert_eq!(header.tensors.len(), tensors.len());
        for (name, dims) in &tensors {
            let t = header.tensor(name).unwrap();
            prop_assert_eq!(&t.dims, dims);
        }
    }

    #[test]
    fn gguf_reader_survives_truncation_and_corruption(
        kvs in kvs(),
        tensors in tensors(),
        cut in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
    ) {
        let bytes = header_bytes(&kvs, &tensors);
        let truncated = &bytes[..cut.index(bytes.len())];
        let _ = parse_metadata(truncated);
        let mut corrupted = bytes.clone();
        for (at, b) in flips {
            let i = at.index(corrupted.len());
            corrupted[i] = b;
        }
        let _ = parse_metadata(&corrupted);
    }

    #[test]
    fn gguf_reader_survives_random_bytes(mut bytes in prop::collection::vec(any::<u8>(), 0..512), magic in any::<bool>()) {
        if magic && bytes.len() >= 8 {
            bytes[..4].copy_from_slice(b"GGUF");
            bytes[4..8].copy_from_slice(&3u32.to_le_bytes());
        }
        let _ = parse_metadata(&bytes);
    }

    #[test]
    fn config_loader_never_panics(text in "(?s).{0,300}") {
        let mut s = Settings::default();
        let _ = s.apply_toml(&text, Path::new("fuzz.toml"));
    }

    #[test]
    fn config_loader_survives_structured_noise(
        key in prop::sample::select(vec!["n_ctx", "threads", "n_batch", "n_ubatch", "n_gpu_layers", "template", "max_tokens", "cache_type_k", "flash_attn", "model"]),
        value in prop_oneof![any::<i64>().prop_map(|v| v.to_string()), any::<f64>().prop_map(|v| format!("{v:?}")), "\\\"[^\\\"\\\\\\\\]{0,10}\\\"".prop_map(|v| v.to_string()), Just("true".to_string()), Just("[1, 2]".to_string())],
        sampling_key in prop::sample::select(vec!["temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed"]),
        sampling_value in any::<f64>(),
    ) {
        let text = format!("{key} = {value}\n[sampling]\n{sampling_key} = {sampling_value:?}\n");
        let mut s = Settings::default();
        if let Err(e) = s.apply_toml(&text, Path::new("fuzz.toml")) {
            // Every error names the file.
            prop_assert!(e.to_string().contains("fuzz.toml"), "{}", e);
        }
    }

    #[test]
    fn history_loader_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400), json_like in "(?s)\\{.{0,200}\\}") {
        let dir = tempfile::tempdir().unwrap();
        for (i, content) in [bytes, json_like.into_bytes()].into_iter().enumerate() {
            let path = dir.path().join(format!("c{i}.json"));
            std::fs::write(&path, content).unwrap();
            let _ = tokscope::history::load(&path);
        }
        let _ = tokscope::history::list(dir.path());
    }
}

/// The GGUF seeds committed in `tests/fixtures/fuzz/gguf` (see its README): each is refused with
/// an error, never a panic or an allocation past the reader's bounds.
#[test]
fn the_committed_gguf_corpus_is_refused_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz/gguf");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let result = tokscope::gguf::read_metadata(&path);
        assert!(
            result.is_err(),
            "{} was read: {:?}",
            path.display(),
            result.map(|h| h.metadata.len())
        );
        n += 1;
    }
    assert!(n >= 9, "found {n} seeds in {}", dir.display());
}
