//! The engine on real llama.cpp, with synthetic models written on the spot: generation,
//! reproducibility, cancellation, KV-cache reuse, and timings against llama.cpp's counters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::common::Submit;

use common::*;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use std::time::{Duration, Instant};
use tokscope::engine::{EngineEvent, SamplingParams, StopReason, SweepPlan, Utf8Stream};
use tokscope::metrics::relative_difference;
use tokscope::synth::TensorType;

#[test]
fn generates_and_reports_model_facts() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let mut e = start(&model, settings(512));
    assert!(e.info.synthetic, "synthetic flag read back from the GGUF");
    assert_eq!(e.info.architecture, "llama");
    assert_eq!(e.info.quantization, "F32");
    assert_eq!(
        e.info.template, "model",
        "the synthetic model's Llama 3 template is used"
    );
    assert_eq!(e.info.n_ctx, 512);
    let t = e.turn(vec![user("Hello there")], greedy(), 16);
    assert_eq!(t.report.timeline.tokens_generated(), t.token_events);
    assert!(t.token_events >= 1);
    assert_eq!(
        t.streamed, t.report.text,
        "streamed text equals the final text"
    );
    let s = t.report.timeline.summary();
    assert!(s.ttft_ms.unwrap() > 0.0);
    assert!(s.prompt_tokens > 5);
    assert_eq!(s.cached_tokens, 0);
    if t.report.stop_reason == StopReason::MaxTokens {
        assert_eq!(t.token_events, 16);
    }
}

#[test]
fn same_seed_same_text_and_other_seed_other_text() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 3);
    let sampling = |seed| SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplingParams::default()
    };
    let mut a = start(&model, settings(512));
    let first = a.turn(vec![user("Tell me a story")], sampling(7), 40);
    drop(a);
    let mut b = start(&model, settings(512));
    let second = b.turn(vec![user("Tell me a story")], sampling(7), 40);
    let other = b.turn(vec![user("Tell me a story")], sampling(8), 40);
    assert!(first.token_events > 5, "enough tokens to compare");
    assert_eq!(first.report.text, second.report.text);
    assert_ne!(first.report.text, other.report.text);
}

#[test]
fn split_characters_from_real_llama_cpp_pieces_come_out_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let backend = tokscope::llama::backend().unwrap();
    let params = LlamaModelParams::default().with_vocab_only(true);
    let model = LlamaModel::load_from_file(backend, &path, &params).unwrap();
    let vocab = model.vocab();
    let text = "naïve café ☕ 🦀 Tiếng Việt 中文";
    let tokens = vocab.tokenize(text.as_bytes(), false, false);
    let pieces: Vec<Vec<u8>> = tokens
        .iter()
        .map(|t| vocab.token_to_piece(*t, false, None))
        .collect();
    assert!(
        pieces.iter().any(|p| std::str::from_utf8(p).is_err()),
        "some character must be split across byte-fallback tokens for this test to mean anything"
    );
    let mut stream = Utf8Stream::new();
    let mut out = String::new();
    for p in &pieces {
        let chunk = stream.push(p);
        assert!(
            !chunk.contains('\u{FFFD}'),
            "replacement character emitted: {chunk:?}"
        );
        out.push_str(&chunk);
    }
    out.push_str(&stream.finish());
    // SentencePiece vocabularies turn spaces into "▁" and llama.cpp turns them back.
    assert_eq!(out.trim_start(), text);
}

#[test]
fn cancel_stops_within_one_token_and_keeps_the_partial_answer() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth_medium(dir.path());
    let mut e = start(&model, settings(2048));
    let before = Instant::now();
    let id = e
        .handle
        .generate(vec![user("Write a long essay")], greedy(), 1500)
        .unwrap();
    let cancel_at = 3;
    // `submitted_at` is stamped inside `generate`, so it is no earlier than `before`: a token
    // ready at offset `at` was ready no earlier than `before + at`. Counting the tokens with
    // `before + at` after the cancel instant over-counts, never under-counts.
    let mut cancelled_at = None;
    let t = e.collect(id, |h, index| {
        if index == cancel_at {
            cancelled_at = Some(Instant::now());
            h.cancel(id);
        }
    });
    assert_eq!(t.report.stop_reason, StopReason::Cancelled);
    let cancelled_at = cancelled_at.unwrap();
    let n = t.report.timeline.tokens_generated();
    assert!(
        n > cancel_at,
        "generated {n} tokens, cancelled at {cancel_at}"
    );
    let after: Vec<_> = t
        .report
        .timeline
        .token_ready_at
        .iter()
        .filter(|at| before + **at > cancelled_at)
        .collect();
    // The token being decoded when the flag was set may still come out; nothing after it.
    assert!(
        after.len() <= 1,
        "{} tokens came after the cancel (at most one may): {after:?}",
        after.len()
    );
    assert_eq!(t.streamed, t.report.text, "the partial answer is kept");
    // The engine goes on serving, and the cancelled turn's tokens stay in the KV cache.
    let next = e.turn(
        vec![
            user("Write a long essay"),
            assistant(&t.report.text),
            user("Shorter"),
        ],
        greedy(),
        4,
    );
    assert!(next.report.timeline.cached_tokens > Some(0));
}

#[test]
fn the_ttft_breakdown_adds_up_to_ttft() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth_medium(dir.path());
    let mut e = start(&model, settings(2048));
    for prompt in [
        "Hello there",
        "A second, somewhat longer message to prefill",
    ] {
        // An outside clock on this thread: from just before the request to the moment its
        // first token event arrives. The engine's TTFT cannot be longer (it ends when the
        // token's text is ready, before the event is sent, and starts at submission, after
        // `sent`), and not much shorter (only the event's delivery lies between them).
        let sent = Instant::now();
        let id = e.handle.generate(vec![user(prompt)], greedy(), 4).unwrap();
        let mut first_seen = None;
        let t = e.collect(id, |_, index| {
            if index == 0 {
                first_seen = Some(Instant::now());
            }
        });
        let outside_ms = first_seen.unwrap().duration_since(sent).as_secs_f64() * 1e3;
        let s = t.report.timeline.summary();
        let ttft = s.ttft_ms.unwrap();
        assert!(
            ttft <= outside_ms + 0.05,
            "TTFT {ttft} ms is longer than the outside clock's {outside_ms} ms"
        );
        assert!(
            outside_ms - ttft <= 100.0,
            "TTFT {ttft} ms is {} ms short of the outside clock's {outside_ms} ms",
            outside_ms - ttft
        );
        let parts = s.queue_ms + s.template_tokenize_ms + s.prefill_ms + s.first_sample_ms.unwrap();
        assert!(
            (parts - ttft).abs() <= 0.01 * ttft,
            "queue {} + template {} + prefill {} + first sample {:?} = {parts} ms vs TTFT {ttft} ms",
            s.queue_ms,
            s.template_tokenize_ms,
            s.prefill_ms,
            s.first_sample_ms
        );
        assert!(s.queue_ms >= 0.0 && s.queue_ms < ttft);
        // What the chat's live view derives from the PrefillDone event (queue = at − template
        // − prefill) is the engine's queue.
        let tl = &t.report.timeline;
        let derived = tl
            .prefill_done_at
            .unwrap()
            .saturating_sub(tl.template_tokenize.unwrap() + tl.prefill.unwrap());
        assert!(
            derived.abs_diff(tl.queue.unwrap()) <= Duration::from_micros(1),
            "{derived:?} vs {:?}",
            tl.queue
        );
    }
}

#[test]
fn cancel_stops_a_long_prefill_within_one_micro_batch() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth_medium(dir.path());
    let ubatch = 32u32;
    let mut s = settings(4096);
    s.n_batch = 512;
    s.n_ubatch = ubatch;
    let mut e = start(&model, s);
    // A prompt of many micro-batches.
    let long = "word ".repeat(1500);
    let before = Instant::now();
    let id = e.handle.generate(vec![user(&long)], greedy(), 8).unwrap();
    let mut progress: Vec<(usize, usize, Duration)> = Vec::new();
    let mut cancelled_at = None;
    let report = loop {
        match e.events.blocking_recv().expect("engine gone") {
            EngineEvent::PrefillProgress {
                request_id,
                done,
                total,
                at,
            } if request_id == id => {
                progress.push((done, total, at));
                if progress.len() == 2 {
                    cancelled_at = Some(Instant::now());
                    e.handle.cancel(id);
                }
            }
            EngineEvent::Token { request_id, .. } if request_id == id => {
                panic!("a token came out of a cancelled prefill")
            }
            EngineEvent::Finished { request_id, report } if request_id == id => break *report,
            EngineEvent::Failed { request_id, error } if request_id == id => {
                panic!("failed: {error}")
            }
            _ => {}
        }
    };
    assert_eq!(report.stop_reason, StopReason::Cancelled);
    assert_eq!(report.timeline.tokens_generated(), 0);
    let cancelled_at = cancelled_at.expect("the prefill reported progress twice");
    let (_, total, _) = progress[0];
    assert!(
        total > 20 * ubatch as usize,
        "the prompt has {total} tokens"
    );
    // Progress counts micro-batches: each step is one n_ubatch (the last one may be shorter).
    for w in progress.windows(2) {
        assert_eq!(w[1].0 - w[0].0, ubatch as usize, "{progress:?}");
    }
    // At most the micro-batch being computed when the flag was set finished after it.
    let after = progress
        .iter()
        .filter(|(_, _, at)| before + *at > cancelled_at)
        .count();
    assert!(
        after <= 1,
        "{after} micro-batches after the cancel: {progress:?}"
    );
    let done = progress.last().unwrap().0;
    assert!(
        done < total,
        "the prefill stopped early ({done} of {total})"
    );
    // llama.cpp counts a decode's tokens when it is queued: the micro-batch it was asked to
    // stop between two graph nodes (its abort callback) is in its count, never in `done`.
    assert!(
        report.llama_counters.prompt_eval_tokens as usize <= done + ubatch as usize,
        "llama.cpp evaluated {} prompt tokens, progress said {done}",
        report.llama_counters.prompt_eval_tokens
    );
    // The KV cache holds what the progress said, no more (the stopped micro-batch was taken
    // out): the same prompt again reads from there.
    let again = e.turn(vec![user(&long)], greedy(), 1);
    assert_eq!(again.prefill_started, Some((total_prompt(&again), done)));
    // The engine goes on serving after a cancelled prefill.
    let t = e.turn(vec![user("Hello")], greedy(), 4);
    assert!(t.token_events >= 1);
}

/// A turn's prompt tokens, as its timeline has them.
fn total_prompt(t: &common::Turn) -> usize {
    t.report.timeline.prompt_tokens.unwrap()
}

#[test]
fn kv_cache_reuse_prefills_only_new_tokens_and_matches_a_fresh_context() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let mut warm = start(&model, settings(1024));
    let first = warm.turn(vec![user("What is the capital of France?")], greedy(), 8);
    let convo = vec![
        user("What is the capital of France?"),
        assistant(&first.report.text),
        user("And of Italy?"),
    ];
    let id = warm
        .handle
        .submit(convo.clone(), greedy(), 4, true)
        .unwrap();
    let second = warm.collect(id, |_, _| {});
    let tl = &second.report.timeline;
    assert_eq!(
        second.prefill_started,
        Some((tl.prompt_tokens.unwrap(), tl.cached_tokens.unwrap()))
    );
    assert!(
        tl.cached_tokens >= first.report.timeline.prompt_tokens,
        "the first turn's prompt ({:?} tokens) is reused, got {:?}",
        first.report.timeline.prompt_tokens,
        tl.cached_tokens
    );
    assert_eq!(
        tl.prefilled_tokens().unwrap(),
        tl.prompt_tokens.unwrap() - tl.cached_tokens.unwrap()
    );
    assert_eq!(
        second.report.llama_counters.prompt_eval_tokens as usize,
        tl.prefilled_tokens().unwrap(),
        "llama.cpp evaluated only the new tokens"
    );
    drop(warm);

    let mut fresh = start(&model, settings(1024));
    let id = fresh.handle.submit(convo, greedy(), 4, true).unwrap();
    let cold = fresh.collect(id, |_, _| {});
    assert_eq!(cold.report.timeline.cached_tokens, Some(0));
    assert_eq!(cold.report.timeline.prompt_tokens, tl.prompt_tokens);
    let a = second.report.first_logits.unwrap();
    let b = cold.report.first_logits.unwrap();
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
    let max_diff = a
        .iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    // Different batch shapes take different (equally valid) float summation orders in ggml,
    // so agreement is to a small tolerance, not bit-exact.
    assert!(
        max_diff <= 1e-2 * scale,
        "logits after KV reuse differ from a fresh context by {max_diff} (scale {scale})"
    );
    assert_eq!(second.report.text, cold.report.text, "greedy answers agree");
}

#[test]
fn timings_agree_with_llama_cpp_counters() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth_medium(dir.path());
    let mut e = start(&model, settings(2048));
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(30);
    let t = e.turn(vec![user(&prompt)], greedy(), 48);
    let s = t.report.timeline.summary();
    let c = t.report.llama_counters;
    assert_eq!(c.prompt_eval_tokens as usize, s.prefilled_tokens);
    assert_eq!(c.eval_tokens as usize, s.decode_calls);
    assert!(
        s.decode_calls >= 20,
        "enough decode steps: {}",
        s.decode_calls
    );
    let prefill = relative_difference(s.prefill_ms, c.prompt_eval_ms).unwrap();
    let decode = relative_difference(s.decode_compute_ms, c.eval_ms).unwrap();
    eprintln!(
        "prefill {:.3} ms vs llama.cpp {:.3} ms ({:.2}%); decode {:.3} ms vs {:.3} ms ({:.2}%)",
        s.prefill_ms,
        c.prompt_eval_ms,
        prefill * 100.0,
        s.decode_compute_ms,
        c.eval_ms,
        decode * 100.0
    );
    assert!(prefill < 0.05, "prefill differs by {:.1}%", prefill * 100.0);
    assert!(decode < 0.05, "decode differs by {:.1}%", decode * 100.0);
}

#[test]
fn prompt_longer_than_context_is_a_clear_error_and_the_engine_goes_on() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let mut e = start(&model, settings(64));
    // llama.cpp may round the context up; size the prompt from what it really holds.
    let n_ctx = e.info.n_ctx as usize;
    let id = e
        .handle
        .generate(vec![user(&"word ".repeat(2 * n_ctx))], greedy(), 4)
        .unwrap();
    loop {
        match e.events.blocking_recv().unwrap() {
            EngineEvent::Failed { request_id, error } if request_id == id => {
                let msg = error.to_string();
                assert!(msg.contains(&format!("context holds {n_ctx}")), "{msg}");
                break;
            }
            EngineEvent::Finished { .. } => panic!("should have failed"),
            _ => {}
        }
    }
    let ok = e.turn(vec![user("hi")], greedy(), 4);
    assert!(ok.token_events >= 1);
}

#[test]
fn context_full_stops_generation() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let mut e = start(&model, settings(64));
    let t = e.turn(vec![user("hi")], greedy(), 1000);
    if t.report.stop_reason != StopReason::EndOfGeneration {
        assert_eq!(t.report.stop_reason, StopReason::ContextFull);
        assert!(t.report.context_used <= e.info.n_ctx as usize);
        assert!(t.report.context_used + 1 >= e.info.n_ctx as usize);
    }
}

#[test]
fn switching_models_keeps_the_engine_alive() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), "a.gguf", "tiny", TensorType::F32, 1);
    let b = synth(dir.path(), "b.gguf", "tiny", TensorType::Q8_0, 2);
    let mut e = start(&a, settings(256));
    let id = e.handle.next_id();
    e.handle
        .switch_model(
            id,
            tokscope::engine::EngineConfig {
                model_path: dir.path().join("missing.gguf"),
                settings: settings(256),
            },
        )
        .unwrap();
    loop {
        match e.events.blocking_recv().unwrap() {
            EngineEvent::SwitchFailed { request_id, error } => {
                assert_eq!(request_id, id);
                assert!(error.is_model_problem(), "{error}");
                break;
            }
            EngineEvent::Ready(_) => panic!("a missing file cannot load"),
            _ => {}
        }
    }
    // The current model stays loaded and answers.
    let t = e.turn(vec![user("hi")], greedy(), 4);
    assert!(t.token_events >= 1);
    let id = e.handle.next_id();
    e.handle
        .switch_model(
            id,
            tokscope::engine::EngineConfig {
                model_path: b.clone(),
                settings: settings(256),
            },
        )
        .unwrap();
    loop {
        if let EngineEvent::Ready(info) = e.events.blocking_recv().unwrap() {
            assert_eq!(info.quantization, "Q8_0");
            assert_eq!(info.path, b);
            break;
        }
    }
    assert!(e.turn(vec![user("hi")], greedy(), 4).token_events >= 1);
}

/// Twelve exchanges of about 40 tokens each and a last question: more than a 256-token
/// context holds.
fn longer_than_256_tokens() -> Vec<tokscope::engine::ChatMessage> {
    let long = "the quick brown fox jumps over the lazy dog ".repeat(4);
    let mut convo = Vec::new();
    for i in 0..12 {
        convo.push(user(&format!("question {i}: {long}")));
        convo.push(assistant(&format!("answer {i}: {long}")));
    }
    convo.push(user("and now?"));
    convo
}

#[test]
fn a_conversation_longer_than_the_context_drops_its_oldest_turns() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let mut e = start(&model, settings(256));
    let n_ctx = e.info.n_ctx as usize;
    let convo = longer_than_256_tokens();
    let id = e.handle.generate(convo, greedy(), 16).unwrap();
    let t = e.collect(id, |_, _| {});
    let dropped = t.report.dropped_messages;
    assert!(
        dropped >= 2 && dropped % 2 == 0,
        "whole exchanges are left out: {dropped}"
    );
    assert!(t.report.timeline.prompt_tokens.unwrap() + 16.min(n_ctx / 4) <= n_ctx);
    assert!(t.token_events >= 1, "the conversation goes on");
}

/// `--context-full stop`: a conversation that no longer fits is not cut. The turn fails with
/// its size, the context's and the user's choices, nothing is generated, and the same
/// conversation under `drop-oldest` then goes on (the engine is fine).
#[test]
fn a_full_context_under_stop_leaves_nothing_out_and_names_the_choices() {
    use tokscope::engine::{ContextFull, EngineError, TurnRequest};
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let mut e = start(&model, settings(256));
    let convo = longer_than_256_tokens();
    let turn = |context_full| TurnRequest {
        messages: convo.clone(),
        sampling: greedy(),
        max_tokens: 16,
        capture_first_logits: false,
        ignore_eos: false,
        context_full,
    };
    let id = e.handle.next_id();
    e.handle.send(id, turn(ContextFull::Stop), None).unwrap();
    let error = loop {
        match e.events.blocking_recv().unwrap() {
            EngineEvent::Failed { request_id, error } if request_id == id => break error,
            EngineEvent::PrefillStarted { request_id, .. } if request_id == id => {
                panic!("nothing is prefilled: the conversation does not fit")
            }
            EngineEvent::Token { request_id, .. } if request_id == id => {
                panic!("nothing is generated")
            }
            EngineEvent::Finished { request_id, .. } if request_id == id => {
                panic!("the turn must fail, not finish")
            }
            _ => {}
        }
    };
    let EngineError::ContextFull {
        prompt_tokens,
        n_ctx,
        reserve,
    } = &error
    else {
        panic!("{error}")
    };
    assert!(*prompt_tokens + reserve > *n_ctx as usize, "{error}");
    assert_eq!((*n_ctx, *reserve), (256, 16));
    let said = error.to_string();
    for part in [
        "no longer fits the 256-token context",
        "nothing was left out",
        "/context-full drop-oldest",
        "Ctrl+N",
        "larger -c",
    ] {
        assert!(said.contains(part), "{part:?} in {said}");
    }
    // The user's other choice: the same conversation with its oldest messages left out.
    let id = e.handle.next_id();
    e.handle
        .send(id, turn(ContextFull::DropOldest), None)
        .unwrap();
    let t = e.collect(id, |_, _| {});
    assert!(t.report.dropped_messages >= 2);
    assert!(t.token_events >= 1);
}

#[test]
fn a_nul_byte_in_the_conversation_does_not_break_later_turns() {
    // Found by the soak: random weights produced <0x00>, and every later turn failed.
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let mut e = start(&model, settings(512));
    let t = e.turn(
        vec![user("hi"), assistant("odd\0answer"), user("again")],
        greedy(),
        4,
    );
    assert!(t.token_events >= 1);
}

/// The chat's own KV cache survived a sweep: the next turn after `first` ("hello there")
/// reuses its prompt.
fn assert_the_chat_cache_survived(e: &mut TestEngine, first: &Turn) {
    let next = e.turn(
        vec![
            user("hello there"),
            assistant(&first.report.text),
            user("more"),
        ],
        greedy(),
        2,
    );
    assert!(next.report.timeline.cached_tokens >= first.report.timeline.prompt_tokens);
}

#[test]
fn the_chat_engine_measures_a_batch_sweep_on_its_loaded_model() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 1);
    let mut e = start(&model, settings(512));
    // The chat's own KV cache survives the sweep.
    let first = e.turn(vec![user("hello there")], greedy(), 4);
    let plan = SweepPlan::Batch {
        batches: vec![1, 2, 4],
        n_prompt: 8,
        n_gen: 6,
    };
    e.handle.sweep(100, plan).unwrap();
    // The test thread's own clock: each point's wait (from the last point, or the command).
    let mut since = Instant::now();
    let mut points = Vec::new();
    loop {
        match e.events.blocking_recv().unwrap() {
            EngineEvent::BatchPoint {
                request_id: 100,
                point,
                prefill_ms,
            } => {
                let waited_ms = since.elapsed().as_secs_f64() * 1e3;
                since = Instant::now();
                let prefill_ms = prefill_ms.expect("a timed prefill");
                assert!(prefill_ms > 0.0, "{prefill_ms}");
                points.push((point, prefill_ms, waited_ms));
            }
            EngineEvent::SweepDone {
                request_id: 100,
                error,
            } => {
                assert!(error.is_none(), "{error:?}");
                break;
            }
            _ => {}
        }
    }
    let batches: Vec<u32> = points.iter().map(|(p, ..)| p.batch).collect();
    assert_eq!(batches, [1, 2, 4]);
    for (p, prefill_ms, waited_ms) in &points {
        let aggregate = p.aggregate_tok_per_s.expect("a timed decode has a rate");
        assert!(aggregate > 0.0 && aggregate.is_finite());
        let expected = aggregate / f64::from(p.batch);
        let per_sequence = p.per_sequence_tok_per_s.expect("per-sequence rate");
        assert!((per_sequence - expected).abs() < 1e-9);
        // 6 steps, so 6 gaps: the ITL is defined. Two clocks the ITL must agree with:
        let (p50, p99) = (p.itl_p50_ms.expect("p50"), p.itl_p99_ms.expect("p99"));
        // - the decode calls' own time, which the rate counts: every gap holds its step's
        //   decode call, so the largest gap (the p99 of 6) is at least their mean;
        let mean_call_ms = 1e3 / per_sequence;
        assert!(
            p99 >= 0.999 * mean_call_ms,
            "B={}: ITL p99 {p99} ms below the mean decode call {mean_call_ms} ms",
            p.batch
        );
        // - the test thread's clock: the point took at least its prefill and its gaps, of
        //   which (nearest rank) the 3rd to 5th smallest are at least the p50 and the 6th is
        //   the p99.
        let floor_ms = prefill_ms + 3.0 * p50 + p99;
        assert!(
            *waited_ms >= floor_ms,
            "B={}: the point came {waited_ms} ms after the last, less than its prefill {prefill_ms} + gaps (3 × p50 {p50} + p99 {p99}) ms",
            p.batch
        );
    }
    assert_the_chat_cache_survived(&mut e, &first);
}

#[test]
fn the_chat_engine_measures_decode_at_depth_on_its_loaded_model() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 1);
    let mut e = start(&model, settings(512));
    let first = e.turn(vec![user("hello there")], greedy(), 4);
    let plan = SweepPlan::Depth {
        depths: vec![0, 64, 384],
        n_gen: 6,
    };
    e.handle.sweep(101, plan).unwrap();
    let mut runs = Vec::new();
    loop {
        match e.events.blocking_recv().unwrap() {
            EngineEvent::DepthPoint {
                request_id: 101,
                run,
            } => runs.push(run),
            EngineEvent::SweepDone {
                request_id: 101,
                error,
            } => {
                assert!(error.is_none(), "{error:?}");
                break;
            }
            _ => {}
        }
    }
    let depths: Vec<u32> = runs.iter().map(|r| r.depth).collect();
    assert_eq!(depths, [0, 64, 384], "each depth once, in order");
    for r in &runs {
        assert_eq!(r.n_gen, 6);
        assert!(r.tok_per_s > 0.0 && r.tok_per_s.is_finite(), "{r:?}");
        // 6 steps: the ITL is defined.
        let (p50, p99) = (r.itl_p50_ms.expect("p50"), r.itl_p99_ms.expect("p99"));
        assert!(p50 > 0.0 && p99 >= p50, "{r:?}");
    }
    // The fill is untimed but happens: 384 random tokens take longer to prefill than none.
    assert!(runs[2].fill_ms > runs[0].fill_ms, "{runs:?}");
    // The chat's own KV cache survives the sweep.
    assert_the_chat_cache_survived(&mut e, &first);
}

/// The next `AbScored` of engine `e` (B's answer scored against the chat's model), skipping
/// other events.
fn ab_score(e: &mut TestEngine) -> Result<Box<tokscope::metrics::quality::AnswerScore>, String> {
    loop {
        if let EngineEvent::AbScored { score, .. } = e.events.blocking_recv().expect("engine gone")
        {
            return score;
        }
    }
}

#[test]
fn ab_generation_answers_with_another_model_and_leaves_the_chat_model_alone() {
    use tokscope::app::conversation::first_divergence;
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), "a.gguf", "tiny", TensorType::F32, 1);
    let b = synth(dir.path(), "b.gguf", "tiny", TensorType::F32, 2);
    let sampling = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 11,
        ..SamplingParams::default()
    };
    let mut e = start(&a, settings(512));
    let prompt = vec![user("Tell me a story")];
    let first = e.turn(prompt.clone(), sampling.clone(), 24);
    assert!(first.token_events > 3, "enough tokens to compare");

    // B: another model file. Its report arrives with its pieces, one per token.
    let (report, streamed) =
        ab_turn(&mut e, &b, prompt.clone(), sampling.clone(), 24, |_, _| {}).expect("B answers");
    assert_eq!(report.model.file_name, "b.gguf");
    assert_eq!(report.turn.text, streamed, "B's events carry B's text");
    assert_eq!(
        report.pieces.len(),
        report.turn.timeline.tokens_generated(),
        "one piece per token"
    );
    assert!(report.turn.timeline.summary().ttft_ms.is_some());
    assert_eq!(
        report.turn.timeline.cached_tokens,
        Some(0),
        "B has a context of its own"
    );
    // Like for like: A answered again in a fresh context of its own just before B, so both
    // sides' figures are cold; with the same seed it is A's answer, token for token.
    let a_fresh = report
        .a_fresh
        .as_ref()
        .expect("A re-run in a fresh context");
    assert_eq!(
        a_fresh.timeline.cached_tokens,
        Some(0),
        "A's re-run reused no cache"
    );
    assert_eq!(
        a_fresh.timeline.prompt_tokens,
        report.turn.timeline.prompt_tokens
    );
    assert_eq!(a_fresh.text, first.report.text);
    assert!(a_fresh.timeline.summary().ttft_ms.is_some());
    assert_ne!(
        report.turn.text, first.report.text,
        "other weights, other text"
    );
    let d = first_divergence(&first.report.text, &report.turn.text, &report.pieces)
        .expect("the answers differ");
    assert!(d.token_index <= report.pieces.len());
    // Then B's answer is scored against A's model (the same vocabulary): one figure per B
    // token, texts as B streamed them, A's file as the reference, other weights so KLD > 0.
    assert_eq!(report.not_scored, None, "B is scored");
    let score = ab_score(&mut e).expect("B scored against A");
    assert_eq!(score.reference, a);
    assert_eq!(score.tokens.len(), report.pieces.len());
    let texts: String = score.tokens.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts, report.turn.text);
    let q = score.summary.as_ref().unwrap();
    assert!(q.kld_mean > 0.0 && q.kld_mean.is_finite(), "{q:?}");

    // The same file as A, with the same seed: the same answer, token for token.
    let (same, _) = ab_turn(&mut e, &a, prompt.clone(), sampling.clone(), 24, |_, _| {})
        .expect("A's own file answers");
    assert_eq!(same.turn.text, first.report.text);
    // Scored against itself: KLD 0, the same top everywhere.
    let q = ab_score(&mut e).expect("scored").summary.unwrap();
    assert_eq!(
        (q.kld_mean, q.same_top_pct, q.first_divergence),
        (0.0, 100.0, None)
    );
    assert_eq!(
        first_divergence(&first.report.text, &same.turn.text, &same.pieces),
        None,
        "identical"
    );

    // With the chat's reference set (--ref), B is scored against it, as A's answers are, not
    // against A's model: B's own file as the reference scores 0 (against A it scored > 0).
    let (with_ref, _) = ab_turn_against(
        &mut e,
        (&b, Some(&b)),
        prompt.clone(),
        sampling.clone(),
        24,
        |_, _| {},
    )
    .expect("B answers");
    assert_eq!(with_ref.not_scored, None, "B is scored");
    let score = ab_score(&mut e).expect("B scored against the reference");
    assert_eq!(score.reference, b, "named: the reference, not A's file");
    let q = score.summary.unwrap();
    assert_eq!((q.kld_mean, q.same_top_pct), (0.0, 100.0), "{q:?}");

    // B of another vocabulary answers but is not scored, and says why.
    let other = common::gguf_edit::other_vocab(dir.path(), &a);
    let (report, _) = ab_turn(
        &mut e,
        &other,
        prompt.clone(),
        sampling.clone(),
        4,
        |_, _| {},
    )
    .expect("another vocabulary still answers");
    let why = report.not_scored.expect("not scored");
    assert!(why.contains("vocabulary is not A's"), "{why}");

    // A missing file is a clear error, and the engine goes on.
    let missing = dir.path().join("missing.gguf");
    let err = ab_turn(
        &mut e,
        &missing,
        prompt.clone(),
        sampling.clone(),
        8,
        |_, _| {},
    )
    .expect_err("no such file");
    assert!(err.to_string().contains("missing.gguf"), "{err}");

    // The chat's model still answers, and still reuses its KV cache from the first turn.
    let next = e.turn(
        vec![
            user("Tell me a story"),
            assistant(&first.report.text),
            user("Another one"),
        ],
        sampling,
        4,
    );
    assert!(next.token_events >= 1);
    let (prompt_tokens, cached) = next.prefill_started.unwrap();
    assert!(
        cached > 0 && cached < prompt_tokens,
        "the chat's KV cache was kept: {cached} of {prompt_tokens} cached"
    );
}

#[test]
fn ab_generation_is_cancelled_while_loading_and_while_generating() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), "a.gguf", "tiny", TensorType::F32, 1);
    let slow = synth_medium(dir.path());
    let mut e = start(&a, settings(2048));
    // Cancelled before model B is loaded: the load is abandoned.
    let id = e.handle.next_id();
    e.handle.cancel(id);
    let err = ab_turn(&mut e, &slow, vec![user("Hi")], greedy(), 8, |_, _| {}).unwrap_err();
    assert_eq!(err, tokscope::engine::EngineError::Cancelled);
    // Cancelled while B generates: at most one more token, and it keeps what it had.
    let id = e.handle.next_id();
    let mut cancelled_at = None;
    let before = Instant::now();
    let (report, _) = ab_turn(
        &mut e,
        &slow,
        vec![user("Write a long essay")],
        greedy(),
        1500,
        |h, index| {
            if index == 2 {
                cancelled_at = Some(Instant::now());
                h.cancel(id);
            }
        },
    )
    .unwrap();
    assert_eq!(report.turn.stop_reason, StopReason::Cancelled);
    assert_eq!(
        report.not_scored.as_deref(),
        Some("not scored: stopped"),
        "a stopped B is not scored"
    );
    let cancelled_at = cancelled_at.unwrap();
    let t = &report.turn.timeline;
    assert!(t.tokens_generated() >= 3);
    // B's request is submitted before its model loads, so `cancelled_at - (ready of token 2)`
    // is measured from token 2 itself: a later token is after the cancel when it is later
    // than token 2 by more than the time from token 2's event to the cancel.
    // `submitted_at` is stamped inside `ab_turn`, no earlier than `before` (see the test above).
    let after = t
        .token_ready_at
        .iter()
        .filter(|at| before + **at > cancelled_at)
        .count();
    assert!(
        after <= 1,
        "{after} tokens after the cancel: {:?}",
        t.token_ready_at
    );
    // The chat's model goes on.
    let t = e.turn(vec![user("Hello")], greedy(), 4);
    assert!(t.token_events >= 1);
}

/// What a turn's events showed of its thinking: the token events' texts (the answer), the
/// thinking events' texts, the last span they carried, and the report.
struct ThinkingTurn {
    answer: String,
    thinking: String,
    last_span: Option<tokscope::metrics::ThinkingSpan>,
    token_events: usize,
    report: tokscope::engine::TurnReport,
}

fn thinking_turn(e: &mut TestEngine, max_tokens: u32) -> ThinkingTurn {
    let turn = tokscope::engine::TurnRequest {
        messages: vec![user("Hello there")],
        sampling: greedy(),
        max_tokens,
        capture_first_logits: false,
        ignore_eos: true,
        context_full: tokscope::engine::ContextFull::DropOldest,
    };
    let id = e.handle.send(e.handle.next_id(), turn, None).unwrap();
    let (mut answer, mut thinking, mut last_span, mut token_events) =
        (String::new(), String::new(), None, 0);
    loop {
        match e.events.blocking_recv().expect("engine gone") {
            EngineEvent::Token {
                request_id, text, ..
            } if request_id == id => {
                token_events += 1;
                answer.push_str(&text);
            }
            EngineEvent::Thinking {
                request_id,
                span,
                text,
            } if request_id == id => {
                assert_eq!(
                    span.tokens, token_events,
                    "sent after the token that changed it"
                );
                thinking.push_str(&text);
                last_span = Some(span);
            }
            EngineEvent::Finished { request_id, report } if request_id == id => {
                return ThinkingTurn {
                    answer,
                    thinking,
                    last_span,
                    token_events,
                    report: *report,
                };
            }
            EngineEvent::Failed { request_id, error } if request_id == id => {
                panic!("generation failed: {error}")
            }
            _ => {}
        }
    }
}

/// llama.cpp's `bailing-think` template (Ring models) ends the prompt with `<think>`, as
/// DeepSeek-R1-Distill's newer template ends it with `<think>\n`: the model continues inside
/// the thinking, so a turn cut at max tokens is thinking from its first token to its last,
/// and ended while thinking.
#[test]
fn a_prompt_that_opens_the_thinking_makes_every_token_thinking() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path());
    let think = tokscope::llama::settings::EngineSettings {
        template: tokscope::engine::TemplateChoice::Named("bailing-think".into()),
        ..settings(512)
    };
    let mut e = start(&model, think);
    let t = thinking_turn(&mut e, 12);
    let r = &t.report;
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.timeline.tokens_generated(), 12);
    let span = r.timeline.thinking.expect("a thinking span");
    assert_eq!(
        span.tokens,
        r.timeline.tokens_generated(),
        "every token is thinking"
    );
    assert_eq!((span.ended_at, span.first_answer_at), (None, None));
    assert_eq!(t.last_span, Some(span), "the live span is the final one");
    let s = r.timeline.summary();
    let th = s.thinking.expect("thinking figures");
    assert!(th.ended_while_thinking);
    assert_eq!((th.thinking_tokens, th.answer_tokens), (12, 0));
    assert_eq!(th.time_to_first_answer_ms, None);
    assert!(s.ttft_ms.is_some(), "TTFT is the first token of any kind");
    // No answer: the token events carry no text, the thinking events all of it.
    assert_eq!((t.answer.as_str(), r.text.as_str()), ("", ""));
    assert_eq!(t.token_events, 12);
    assert!(!t.thinking.is_empty());
    assert_eq!(r.thinking_text.as_deref(), Some(t.thinking.as_str()));
    drop(e);

    // The same model and turn with a template that opens nothing: no span, no thinking.
    let mut e = start(&model, settings(512));
    let t = thinking_turn(&mut e, 12);
    assert_eq!(t.report.timeline.thinking, None);
    assert_eq!(t.report.timeline.summary().thinking, None);
    assert_eq!((t.last_span, t.report.thinking_text), (None, None));
    assert_eq!(t.answer, t.report.text);
}

/// `run` with a prompt that opens the thinking: stdout carries the answer alone (none here:
/// every token is thinking), the thinking goes to stderr with its summary line, and `--json`
/// has the thinking's text and figures beside the answer.
#[test]
fn run_sends_the_thinking_to_stderr_and_the_answer_to_stdout() {
    let _lock = model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let args = [
        "run",
        "-p",
        "Hi",
        "--temp",
        "0",
        "-n",
        "8",
        "--ignore-eos",
        "-t",
        "1",
        "--template",
        "bailing-think",
        "-m",
    ];
    let out = tokscope_cmd(home.path())
        .args(args)
        .arg(&model)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let thinking = v["thinking"]
        .as_str()
        .expect("the thinking's text")
        .to_string();
    assert_eq!(v["text"], "", "no answer: {v}");
    let th = &v["metrics"]["thinking"];
    assert_eq!(th["ended_while_thinking"], true, "{th}");
    assert_eq!(th["thinking_tokens"], v["metrics"]["tokens_generated"]);
    assert_eq!(th["thinking_tokens"], 8);

    let out = tokscope_cmd(home.path())
        .args(args)
        .arg(&model)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout.trim(), "", "the answer alone on stdout");
    assert!(stderr.contains(&thinking), "{thinking:?} in {stderr}");
    assert!(
        stderr.contains("thinking 8 tokens · ended while thinking"),
        "{stderr}"
    );
}
