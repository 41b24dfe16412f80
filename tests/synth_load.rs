//! Synthetic GGUF files loaded and run by real llama.cpp.
//!
//! Proves that what `tokscope::synth` writes is a model llama.cpp accepts: hyperparameters,
//! metadata, the SPM tokenizer with byte fallback, Llama 3 chat markers and end-of-turn, the
//! chat template, and a greedy decode with finite logits, for every tensor type. Every context
//! uses one thread: tests run in parallel on a small machine.
// A failed expectation is a failed test; helpers outside `#[test]` fns panic for the same reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::OnceLock;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token_type::LlamaTokenAttr;
use llama_cpp_2::{send_logs_to_tracing, LogOptions};
use tokscope::gguf::read_metadata;
use tokscope::synth::{vocab_size, write_model, SynthSpec, SynthSummary, TensorType};

/// llama.cpp's backend may be initialised once per process; every test shares it.
fn backend() -> &'static LlamaBackend {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        // llama.cpp logs straight to stderr, past the test harness's capture; keep the output
        // readable unless someone debugging asks for the logs.
        if std::env::var_os("TOKSCOPE_TEST_LLAMA_LOGS").is_none() {
            send_logs_to_tracing(LogOptions::default().with_logs_enabled(false));
        }
        LlamaBackend::init().expect("llama backend initialises")
    })
}

fn spec(tensor_type: TensorType, seed: u64) -> SynthSpec {
    let mut spec = SynthSpec::preset("tiny").expect("tiny preset exists");
    spec.tensor_type = tensor_type;
    spec.seed = seed;
    spec
}

fn write(dir: &Path, file_name: &str, spec: &SynthSpec) -> SynthSummary {
    write_model(&dir.join(file_name), spec).expect("synthetic model is written")
}

fn load(path: &Path) -> LlamaModel {
    LlamaModel::load_from_file(backend(), path, &LlamaModelParams::default())
        .expect("llama.cpp loads the synthetic model")
}

fn one_thread_context_params() -> LlamaContextParams {
    LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(256))
        .with_n_threads(1)
        .with_n_threads_batch(1)
}

fn pieces(model: &LlamaModel, tokens: &[LlamaToken]) -> Vec<u8> {
    tokens
        .iter()
        .flat_map(|&t| model.vocab().token_to_piece(t, false, None))
        .collect()
}

/// Prefills `prompt` and samples `n_tokens` greedily, checking every logit row on the way.
fn greedy_decode(model: &LlamaModel, prompt: &[LlamaToken], n_tokens: usize) -> Vec<LlamaToken> {
    let mut ctx = model
        .new_context(backend(), one_thread_context_params())
        .expect("context is created");
    let mut batch = LlamaBatch::new(256, 1);
    let last_index = prompt.len() - 1;
    for (i, &token) in prompt.iter().enumerate() {
        batch
            .add(token, i as i32, &[0], i == last_index)
            .expect("prompt fits in the batch");
    }
    ctx.decode(&mut batch).expect("prefill decodes");

    let mut sampler = LlamaSampler::greedy();
    let mut generated = Vec::new();
    for step in 0..n_tokens {
        let logits = ctx.get_logits_ith(batch.n_tokens() - 1);
        assert_eq!(logits.len(), vocab_size() as usize);
        assert!(
            logits.iter().all(|l| l.is_finite()),
            "non-finite logit after {} generated tokens",
            generated.len()
        );
        let token = sampler.sample(&ctx, batch.n_tokens() - 1);
        sampler.accept(token);
        generated.push(token);

        batch.clear();
        batch
            .add(token, (prompt.len() + step) as i32, &[0], true)
            .expect("one token fits in the batch");
        ctx.decode(&mut batch).expect("decode step succeeds");
    }
    generated
}

#[test]
fn tiny_preset_loads_with_matching_hparams_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(TensorType::F32, 0);
    let summary = write(dir.path(), "tiny.gguf", &spec);
    let model = load(&summary.path);

    assert_eq!(model.n_layer(), spec.shape.n_layer);
    assert_eq!(model.n_embd(), spec.shape.n_embd as i32);
    assert_eq!(model.n_head(), spec.shape.n_head);
    assert_eq!(model.n_head_kv(), spec.shape.n_head_kv);
    assert_eq!(model.n_vocab(), summary.n_vocab as i32);
    assert_eq!(model.n_params(), summary.n_params);
    assert_eq!(model.meta_val_str("tokscope.synthetic").unwrap(), "true");
    assert_eq!(model.meta_val_str("general.architecture").unwrap(), "llama");
    assert_eq!(model.meta_val_str("general.name").unwrap(), spec.name);
    // Tiny really is tiny: a few MB, as the preset promises.
    assert!(
        summary.file_size_bytes < 4 << 20,
        "{}",
        summary.file_size_bytes
    );
}

#[test]
fn text_round_trips_through_word_pieces_and_byte_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let summary = write(dir.path(), "tiny.gguf", &spec(TensorType::F32, 0));
    let model = load(&summary.path);
    let vocab = model.vocab();

    let text = "Hello world, café ☕";
    let tokens = vocab.tokenize(text.as_bytes(), true, true);
    assert_eq!(tokens[0], vocab.bos(), "BOS is added");
    assert_eq!(
        vocab.token_to_piece(vocab.bos(), true, None),
        b"<|begin_of_text|>"
    );
    let body = &tokens[1..];
    assert_eq!(pieces(&model, body), text.as_bytes());

    // Words merge into pieces ("Hello", "▁world"); "é" and "☕" fall back to byte tokens.
    assert!(body.len() < text.len(), "{body:?}");
    let n_byte_tokens = body
        .iter()
        .filter(|&&t| vocab.attr(t).contains(LlamaTokenAttr::Byte))
        .count();
    assert_eq!(n_byte_tokens, "é".len() + "☕".len(), "{body:?}");
    assert!(body
        .iter()
        .any(|&t| vocab.token_to_piece(t, false, None) == b" world"));
    assert!(body
        .iter()
        .any(|&t| vocab.token_to_piece(t, false, None) == b"Hello"));

    // Newlines and other control bytes survive too.
    let multiline = "line one\nline two\ttab";
    let tokens = vocab.tokenize(multiline.as_bytes(), false, false);
    assert_eq!(pieces(&model, &tokens), multiline.as_bytes());
}

#[test]
fn eot_is_one_special_end_of_generation_token() {
    let dir = tempfile::tempdir().unwrap();
    let summary = write(dir.path(), "tiny.gguf", &spec(TensorType::F32, 0));
    let model = load(&summary.path);
    let vocab = model.vocab();

    let tokens = vocab.tokenize(b"<|eot_id|>", false, true);
    assert_eq!(tokens.len(), 1, "{tokens:?}");
    let eot = tokens[0];
    assert!(vocab.is_eog(eot));
    assert_eq!(vocab.eot(), eot);
    assert_eq!(vocab.eos(), eot);
    assert!(vocab.is_control(eot));
    // Rendered only when special tokens are asked for.
    assert!(vocab.token_to_piece(eot, false, None).is_empty());
    assert_eq!(vocab.token_to_piece(eot, true, None), b"<|eot_id|>");

    // Without special parsing the same text is plain text, not a control token.
    let plain = vocab.tokenize(b"<|eot_id|>", false, false);
    assert!(plain.len() > 1 && !plain.contains(&eot), "{plain:?}");
    // Ordinary tokens do not end generation.
    let hello = vocab.tokenize(b"Hello", false, false);
    assert!(hello.iter().all(|&t| !vocab.is_eog(t)));

    for marker in [
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|begin_of_text|>",
    ] {
        let tokens = vocab.tokenize(marker.as_bytes(), false, true);
        assert_eq!(tokens.len(), 1, "{marker}: {tokens:?}");
        assert!(!vocab.is_eog(tokens[0]), "{marker}");
    }
}

#[test]
fn chat_template_is_recognised_as_llama3() {
    let dir = tempfile::tempdir().unwrap();
    let summary = write(dir.path(), "tiny.gguf", &spec(TensorType::F32, 0));
    let model = load(&summary.path);

    let template = model
        .chat_template(None)
        .expect("the model has a chat template");
    let chat = [
        LlamaChatMessage::new("system".into(), "Be brief.".into()).unwrap(),
        LlamaChatMessage::new("user".into(), "Hi there".into()).unwrap(),
    ];
    let prompt = model.apply_chat_template(&template, &chat, true).unwrap();
    assert!(
        prompt.contains("<|start_header_id|>user<|end_header_id|>"),
        "{prompt}"
    );
    assert_eq!(
        prompt,
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );

    // The rendered prompt tokenizes with its markers as single control tokens.
    let vocab = model.vocab();
    let tokens = vocab.tokenize(prompt.as_bytes(), true, true);
    let eot = vocab.eot();
    assert_eq!(tokens.iter().filter(|&&t| t == eot).count(), 2);
    let rendered: Vec<u8> = tokens[1..]
        .iter()
        .flat_map(|&t| vocab.token_to_piece(t, true, None))
        .collect();
    assert_eq!(rendered, prompt.as_bytes());
}

#[test]
fn greedy_generation_yields_finite_logits_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let summary = write(dir.path(), "tiny.gguf", &spec(TensorType::F32, 0));
    let model = load(&summary.path);
    let prompt = model
        .vocab()
        .tokenize(b"Hello, how are you today?", true, true);

    let first = greedy_decode(&model, &prompt, 16);
    assert_eq!(first.len(), 16);
    let second = greedy_decode(&model, &prompt, 16);
    assert_eq!(first, second, "greedy decoding of the same weights repeats");
}

#[test]
fn same_seed_gives_identical_bytes_and_other_seeds_differ() {
    let dir = tempfile::tempdir().unwrap();
    for tensor_type in TensorType::ALL {
        let a = write(dir.path(), "a.gguf", &spec(tensor_type, 42));
        let b = write(dir.path(), "b.gguf", &spec(tensor_type, 42));
        let c = write(dir.path(), "c.gguf", &spec(tensor_type, 43));
        let bytes = |s: &SynthSummary| std::fs::read(&s.path).unwrap();
        assert_eq!(bytes(&a), bytes(&b), "{tensor_type}");
        assert_eq!(a.file_size_bytes, c.file_size_bytes);
        assert_ne!(bytes(&a), bytes(&c), "{tensor_type}");
    }
}

#[test]
fn f16_and_q8_0_variants_load_decode_and_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let f32_summary = write(dir.path(), "f32.gguf", &spec(TensorType::F32, 0));
    let f32_data_bytes = read_metadata(&f32_summary.path)
        .unwrap()
        .tensor_data_bytes()
        .unwrap() as f64;

    for (tensor_type, expected_ratio) in [(TensorType::F16, 0.5), (TensorType::Q8_0, 34.0 / 128.0)]
    {
        let summary = write(
            dir.path(),
            &format!("{tensor_type}.gguf"),
            &spec(tensor_type, 0),
        );
        assert_eq!(summary.n_params, f32_summary.n_params);
        let header = read_metadata(&summary.path).unwrap();
        let ratio = header.tensor_data_bytes().unwrap() as f64 / f32_data_bytes;
        // Norm vectors stay f32, so the ratio sits slightly above the matrices' ratio.
        assert!(
            ratio >= expected_ratio && ratio < expected_ratio + 0.01,
            "{tensor_type}: ratio {ratio}"
        );

        let model = load(&summary.path);
        assert_eq!(model.n_params(), summary.n_params);
        let prompt = model.vocab().tokenize(b"The model is fast", true, true);
        let generated = greedy_decode(&model, &prompt, 8);
        assert_eq!(generated.len(), 8, "{tensor_type}");
    }
}

#[test]
fn small_preset_loads() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec::preset("small").unwrap();
    let summary = write(dir.path(), "small.gguf", &spec);
    assert!(
        summary.file_size_bytes < 20 << 20,
        "{}",
        summary.file_size_bytes
    );
    let model = load(&summary.path);
    assert_eq!(model.n_layer(), spec.shape.n_layer);
    assert_eq!(model.n_params(), summary.n_params);
    let prompt = model.vocab().tokenize(b"Hi", true, true);
    assert_eq!(greedy_decode(&model, &prompt, 2).len(), 2);
}
