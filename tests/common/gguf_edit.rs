//! Copies of GGUF files with edited metadata, for tests that need a subtly broken or
//! different model.

use std::path::{Path, PathBuf};

use tokscope::gguf::{read_metadata, GgufValue, GgufWriter};

/// Copies a GGUF, letting `edit` replace metadata values.
pub fn rewrite(from: &Path, to: &Path, edit: impl Fn(&str, &GgufValue) -> Option<GgufValue>) {
    let header = read_metadata(from).unwrap();
    let bytes = std::fs::read(from).unwrap();
    let mut writer = GgufWriter::new();
    for (key, value) in &header.metadata {
        if key == "general.alignment" {
            continue;
        }
        let value = edit(key, value).unwrap_or_else(|| value.clone());
        writer.add_kv(key, value).unwrap();
    }
    for t in &header.tensors {
        let start = (header.data_offset_bytes + t.offset_bytes) as usize;
        let data = bytes[start..start + t.n_bytes().unwrap() as usize].to_vec();
        writer
            .add_tensor(&t.name, &t.dims, t.ggml_type, data)
            .unwrap();
    }
    writer.write_file(to, &mut |_| {}).unwrap();
}

/// Copies a GGUF, adding one metadata key it does not have.
pub fn rewrite_adding(from: &Path, to: &Path, key: &str, value: GgufValue) {
    let header = read_metadata(from).unwrap();
    assert!(header.get(key).is_none(), "{key} is already there");
    let bytes = std::fs::read(from).unwrap();
    let mut writer = GgufWriter::new();
    for (k, v) in &header.metadata {
        if k != "general.alignment" {
            writer.add_kv(k, v.clone()).unwrap();
        }
    }
    writer.add_kv(key, value).unwrap();
    for t in &header.tensors {
        let start = (header.data_offset_bytes + t.offset_bytes) as usize;
        let data = bytes[start..start + t.n_bytes().unwrap() as usize].to_vec();
        writer
            .add_tensor(&t.name, &t.dims, t.ggml_type, data)
            .unwrap();
    }
    writer.write_file(to, &mut |_| {}).unwrap();
}

/// A copy of `from` as `dir/other-vocab.gguf` whose vocabulary differs in one token ("▁the"
/// becomes "▁zzzq"): a model that must not draft for, or be the reference of, `from`.
pub fn other_vocab(dir: &Path, from: &Path) -> PathBuf {
    use tokscope::gguf::GgufArray;
    let other = dir.join("other-vocab.gguf");
    rewrite(from, &other, |key, value| match (key, value) {
        ("tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(tokens))) => {
            Some(GgufValue::Array(GgufArray::String(
                tokens
                    .iter()
                    .map(|t| {
                        if t == "▁the" {
                            "▁zzzq".to_string()
                        } else {
                            t.clone()
                        }
                    })
                    .collect(),
            )))
        }
        _ => None,
    });
    other
}
