//! Copies of GGUF files with edited metadata, for tests that need a subtly broken or
//! different model.

use std::path::Path;

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
    writer.write_file(to).unwrap();
}
