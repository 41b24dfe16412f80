//! `/model PATH` is atomic: the engine loads the new model beside the old one and switches only
//! when it is ready. Every bad file of the reliability matrix is tried as a switch target on a
//! real engine; after each, the old model answers the next turn from its kept KV cache.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use tokscope::engine::{EngineConfig, EngineError, EngineEvent, ModelInfo};
use tokscope::gguf::GgufValue;
use tokscope::synth::{write_model, SynthSpec, TensorType};

/// A copy of a GGUF's metadata with `edit` applied, and no tensors.
fn metadata_only(from: &Path, to: &Path, edit: impl Fn(&str, GgufValue) -> (String, GgufValue)) {
    let header = tokscope::gguf::read_metadata(from).unwrap();
    let mut w = tokscope::gguf::GgufWriter::new();
    for (k, v) in header.metadata {
        if k == "general.alignment" {
            continue;
        }
        let (k, v) = edit(&k, v);
        w.add_kv(&k, v).unwrap();
    }
    w.write_file(to, &mut |_| {}).unwrap();
}

/// The bad files of the reliability matrix (tests/cli.rs), with a word their error must name.
fn bad_models(dir: &Path, good: &Path) -> Vec<(PathBuf, &'static str)> {
    let bytes = std::fs::read(good).unwrap();
    let write = |name: &str, content: &[u8]| {
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(content)
            .unwrap();
        path
    };
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let arch = dir.join("arch.gguf");
    metadata_only(good, &arch, |k, v| {
        let k = k.replacen("llama.", "qwerty9.", 1);
        if k == "general.architecture" {
            (k, GgufValue::String("qwerty9".into()))
        } else {
            (k, v)
        }
    });
    let vocab_only = dir.join("vocab.gguf");
    metadata_only(good, &vocab_only, |k, v| (k.to_string(), v));
    // Too large a context for any memory: the KV cache cannot be allocated.
    let mut spec = SynthSpec::preset("tiny").unwrap();
    spec.tensor_type = TensorType::F32;
    spec.shape.n_ctx_train = 4_000_000_000;
    let huge_ctx = dir.join("huge-context.gguf");
    write_model(&huge_ctx, &spec).unwrap();
    let mut cases = vec![
        (dir.join("missing.gguf"), "not found"),
        (write("empty.gguf", &[]), "empty"),
        (write("random.gguf", &random), "not a GGUF"),
        (
            write("magic.gguf", b"GGML\x03\x00\x00\x00rest"),
            "not a GGUF",
        ),
        (write("short.gguf", &bytes[..10]), "header is damaged"),
        (write("header.gguf", &bytes[..64]), "GGUF"),
        (
            write("tensors.gguf", &bytes[..bytes.len() / 2]),
            "truncated",
        ),
        (arch, "qwerty9"),
        (vocab_only, "could not load"),
        (dir.to_path_buf(), "directory"),
    ];
    // Under strict overcommit accounting off (mode 1) a huge allocation would succeed and be
    // touched; the memory case is only safe where the kernel refuses it up front.
    let overcommit = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    if overcommit.trim() != "1" {
        cases.push((huge_ctx, "context"));
    } else {
        eprintln!("vm.overcommit_memory = 1: the out-of-memory case is skipped");
    }
    cases
}

/// Wait for the end of switch `id`: `Ok(info)` when it switched, `Err` when it did not.
fn switch_outcome(e: &mut TestEngine, id: u64) -> Result<ModelInfo, EngineError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "the switch did not end in time");
        match e.events.blocking_recv().expect("engine gone") {
            EngineEvent::Ready(info) => return Ok(*info),
            EngineEvent::SwitchFailed { request_id, error } if request_id == id => {
                return Err(error)
            }
            EngineEvent::LoadFailed(err) => panic!("the engine lost its model: {err}"),
            _ => {}
        }
    }
}

#[test]
fn every_bad_model_leaves_the_old_model_and_its_kv_cache_in_place() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), "a.gguf", "tiny", TensorType::F32, 1);
    let b = synth(dir.path(), "b.gguf", "tiny", TensorType::Q8_0, 2);
    // n_ctx 0: the model's own context length, so the huge-context file asks for its KV cache.
    let mut e = start(&a, settings(0));
    let mut convo = vec![user("hi")];
    let first = e.turn(convo.clone(), greedy(), 4);
    convo.push(assistant(&first.report.text));
    let mut next_id = 1000;
    for (path, expect) in bad_models(dir.path(), &a) {
        next_id += 1;
        e.handle
            .switch_model(
                next_id,
                EngineConfig {
                    model_path: path.clone(),
                    settings: settings(0),
                },
            )
            .unwrap();
        let err = switch_outcome(&mut e, next_id).expect_err("a bad file cannot be switched to");
        let text = err.to_string();
        assert!(text.contains(expect), "{}: {text}", path.display());
        // The old model answers, reusing the KV cache of the conversation so far.
        convo.push(user("and then?"));
        let t = e.turn(convo.clone(), greedy(), 4);
        let (prompt, cached) = t.prefill_started.unwrap();
        assert!(
            cached > 0 && cached < prompt,
            "{}: the KV cache was kept ({cached} of {prompt} cached)",
            path.display()
        );
        assert_eq!(t.report.timeline.cached_tokens, Some(cached));
        convo.push(assistant(&t.report.text));
    }
    // A good file switches.
    e.handle
        .switch_model(
            2000,
            EngineConfig {
                model_path: b.clone(),
                settings: settings(0),
            },
        )
        .unwrap();
    let info = switch_outcome(&mut e, 2000).expect("a good file switches");
    assert_eq!(info.path, b);
    assert_eq!(info.quantization, "Q8_0");
    convo.push(user("and now?"));
    let t = e.turn(convo, greedy(), 4);
    assert_eq!(
        t.prefill_started.unwrap().1,
        0,
        "a new model starts from an empty KV cache"
    );
}

#[test]
fn a_cancelled_switch_keeps_the_old_model() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), "a.gguf", "tiny", TensorType::F32, 1);
    let b = synth(dir.path(), "b.gguf", "tiny", TensorType::Q8_0, 2);
    let mut e = start(&a, settings(256));
    // Esc reaches the engine before its first progress step: the load is aborted.
    e.handle.cancel(50);
    e.handle
        .switch_model(
            50,
            EngineConfig {
                model_path: b,
                settings: settings(256),
            },
        )
        .unwrap();
    assert_eq!(
        switch_outcome(&mut e, 50).unwrap_err(),
        EngineError::Cancelled
    );
    let t = e.turn(vec![user("hi")], greedy(), 4);
    assert!(t.token_events >= 1);
    assert_eq!(
        t.report.timeline.prompt_tokens,
        Some(t.prefill_started.unwrap().0)
    );
}

#[test]
fn a_switch_from_no_model_loads_one() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), "a.gguf", "tiny", TensorType::F32, 1);
    let (mut handle, mut events) = tokscope::engine::EngineHandle::spawn(EngineConfig {
        model_path: dir.path().join("missing.gguf"),
        settings: settings(256),
    })
    .unwrap();
    loop {
        match events.blocking_recv().unwrap() {
            EngineEvent::LoadFailed(_) => break,
            EngineEvent::Ready(_) => panic!("a missing file cannot load"),
            _ => {}
        }
    }
    handle
        .switch_model(
            7,
            EngineConfig {
                model_path: a.clone(),
                settings: settings(256),
            },
        )
        .unwrap();
    loop {
        match events.blocking_recv().unwrap() {
            EngineEvent::Ready(info) => {
                assert_eq!(info.path, a);
                break;
            }
            EngineEvent::SwitchFailed { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
}
