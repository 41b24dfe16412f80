//! Speculative decoding on real llama.cpp with synthetic models (one thread each): greedy output
//! token for token identical to plain decoding for n-gram lookup and for draft models, the
//! acceptance a self-draft and an unrelated draft get, the KV cache after a speculative turn
//! (the next turn's reuse and logits match a fresh context), Esc during speculation, tokens of
//! one pass sharing their ready time, and a draft with another vocabulary refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::common::Submit;

use std::path::Path;

use common::{assistant, greedy, model_lock, settings, start, synth, user, TestEngine};
use tokscope::engine::{EngineConfig, EngineEvent, EngineHandle, StopReason};
use tokscope::llama::settings::{EngineSettings, SpecMode};
use tokscope::synth::TensorType;

const PROMPTS: [&str; 10] = [
    "What is the capital of France?",
    "Repeat after me: the cat sat on the mat, the cat sat on the mat.",
    "one two three four one two three four one two three",
    "Write a haiku about the sea.",
    "List the numbers 1 2 3 4 5 6 7 8 9 10",
    "abc abc abc abc abc",
    "Hello",
    "Explain why the sky is blue in one sentence.",
    "def f(x): return x + 1\ndef g(x): return x + 1\ndef h(x): return",
    "the quick brown fox jumps over the lazy dog the quick brown fox",
];

fn spec_settings(mode: SpecMode, draft: Option<&Path>, draft_max: u32) -> EngineSettings {
    let mut s = settings(1024);
    s.spec.mode = mode;
    s.spec.draft_model = draft.map(Path::to_path_buf);
    s.spec.draft_max = draft_max;
    s
}

struct Answer {
    text: String,
    tokens: usize,
    context_used: usize,
    ready_ms: Vec<f64>,
    accepted: usize,
    drafted: usize,
}

fn answer(e: &mut TestEngine, prompt: &str, max: u32) -> Answer {
    let t = e.turn(vec![user(prompt)], greedy(), max);
    assert_eq!(
        t.report.text, t.streamed,
        "the report's text is what streamed"
    );
    let spec = t.report.spec.clone().unwrap_or_default();
    Answer {
        text: t.report.text,
        tokens: t.token_events,
        context_used: t.report.context_used,
        ready_ms: t
            .report
            .timeline
            .token_ready_at
            .iter()
            .map(|d| d.as_secs_f64() * 1e3)
            .collect(),
        accepted: spec.accepted,
        drafted: spec.drafted,
    }
}

/// Answers every prompt with plain decoding and with `spec`, asserts them identical, and
/// returns (accepted, drafted) over all prompts.
fn identical_over_prompts(model: &Path, spec: EngineSettings, max: u32) -> (usize, usize) {
    let mut plain = start(model, settings(1024));
    let mut fast = start(model, spec);
    let (mut accepted, mut drafted) = (0, 0);
    for prompt in PROMPTS {
        let a = answer(&mut plain, prompt, max);
        let b = answer(&mut fast, prompt, max);
        assert_eq!(a.text, b.text, "prompt {prompt:?}: the same greedy text");
        assert_eq!(a.tokens, b.tokens, "prompt {prompt:?}: the same tokens");
        assert_eq!(
            a.context_used, b.context_used,
            "prompt {prompt:?}: the KV cache holds the same tokens"
        );
        accepted += b.accepted;
        drafted += b.drafted;
    }
    (accepted, drafted)
}

#[test]
fn ngram_speculation_is_token_for_token_identical_to_plain_decoding() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    for k in [1, 3, 8] {
        let (accepted, drafted) =
            identical_over_prompts(&model, spec_settings(SpecMode::Ngram, None, k), 48);
        assert!(drafted > 0, "k={k}: the n-gram lookup proposed nothing");
        assert!(accepted > 0, "k={k}: no drafted token was accepted");
    }
}

#[test]
fn draft_model_speculation_is_identical_and_a_self_draft_is_always_accepted() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let (accepted, drafted) =
        identical_over_prompts(&model, spec_settings(SpecMode::Draft, Some(&model), 4), 40);
    assert!(drafted > 0);
    assert_eq!(
        accepted, drafted,
        "the target drafting for itself is always right"
    );
}

#[test]
fn an_unrelated_draft_is_mostly_rejected_and_changes_nothing() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    // Another shape and other weights, the same built-in vocabulary.
    let draft = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 77);
    let (accepted, drafted) =
        identical_over_prompts(&model, spec_settings(SpecMode::Draft, Some(&draft), 4), 40);
    assert!(drafted > 0);
    let rate = accepted as f64 / drafted as f64;
    assert!(
        rate < 0.3,
        "an unrelated draft was accepted {rate:.2} of the time"
    );
}

#[test]
fn kv_cache_after_a_speculative_turn_matches_a_fresh_context() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let first_prompt = PROMPTS[1];
    let follow_up = "And again, once more: the cat sat on the mat.";
    let second_turn = |e: &mut TestEngine| {
        let first = e.turn(vec![user(first_prompt)], greedy(), 40);
        let convo = vec![
            user(first_prompt),
            assistant(&first.report.text),
            user(follow_up),
        ];
        let id = e.handle.submit(convo.clone(), greedy(), 8, true).unwrap();
        (first, convo, e.collect(id, |_, _| {}))
    };
    let mut warm_plain = start(&model, settings(1024));
    let (_, _, plain2) = second_turn(&mut warm_plain);
    drop(warm_plain);
    for spec in [
        spec_settings(SpecMode::Ngram, None, 8),
        spec_settings(SpecMode::Draft, Some(&model), 6),
    ] {
        let mut warm = start(&model, spec);
        let (first, convo, second) = second_turn(&mut warm);
        let sp = first.report.spec.clone().unwrap();
        assert!(sp.accepted > 0, "the first turn accepted drafts");
        let tl = &second.report.timeline;
        assert_eq!(
            tl.cached_tokens, plain2.report.timeline.cached_tokens,
            "the second turn reuses as many tokens as after plain decoding"
        );
        // (llama.cpp's prompt-eval counter also counts the verify passes, which are
        // multi-token batches: prefill is checked through the reuse instead.)
        drop(warm);
        let mut fresh = start(&model, settings(1024));
        let id = fresh.handle.submit(convo, greedy(), 8, true).unwrap();
        let cold = fresh.collect(id, |_, _| {});
        assert_eq!(cold.report.timeline.cached_tokens, Some(0));
        let a = second.report.first_logits.unwrap();
        let b = cold.report.first_logits.unwrap();
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
        let max_diff = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            max_diff <= 1e-2 * scale,
            "logits after a speculative turn differ from a fresh context by {max_diff} (scale {scale})"
        );
        assert_eq!(second.report.text, cold.report.text);
        assert_eq!(second.report.text, plain2.report.text);
    }
}

#[test]
fn tokens_of_one_verify_pass_share_their_ready_time() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let mut e = start(&model, spec_settings(SpecMode::Draft, Some(&model), 4));
    let t = e.turn(vec![user(PROMPTS[0])], greedy(), 30);
    // The per-pass figures beside the per-token ones: one gap per target pass, each pass
    // yielding its own token and the drafts it accepted, and no stall read from the ~0 ITL
    // median of tokens that share a pass's time.
    let s = t.report.timeline.summary();
    let spec = t.report.spec.clone().unwrap();
    let passes = spec.verify_passes + spec.plain_passes;
    assert_eq!(t.report.timeline.pass_done_at.len(), passes);
    assert_eq!(s.pass_gap.unwrap().count, passes);
    let per_pass = s.tokens_per_pass.unwrap();
    assert!(
        (per_pass - (1.0 + spec.accepted as f64 / passes as f64)).abs() < 1e-9,
        "{per_pass} tokens a pass for {} accepted over {passes} passes",
        spec.accepted
    );
    assert!(
        per_pass > 2.0,
        "a self-draft of k=4 carries several tokens a pass: {per_pass}"
    );
    let (p50, _) = s.stall_gaps_ms().unwrap();
    let itl_p50 = s.itl.unwrap().p50_ms;
    assert!(
        p50 > 0.0 && p50 > 10.0 * itl_p50,
        "the stall check reads the pass gaps (p50 {p50} ms), not the ITL (p50 {itl_p50} ms)"
    );
    let a = answer(&mut e, PROMPTS[0], 30);
    let equal = a.ready_ms.windows(2).filter(|w| w[0] == w[1]).count();
    // Every verify pass accepts its whole draft (4 tokens stamped alike: 3 equal gaps each).
    assert!(
        equal >= 3 * (a.accepted / 4).saturating_sub(1),
        "{equal} zero gaps for {} accepted tokens: {:?}",
        a.accepted,
        a.ready_ms
    );
    assert!(a.ready_ms.windows(2).all(|w| w[0] <= w[1]));
    let mut plain = start(&model, settings(1024));
    let p = answer(&mut plain, PROMPTS[0], 30);
    assert!(
        p.ready_ms.windows(2).all(|w| w[0] < w[1]),
        "plain decoding: one token per pass, each later than the last"
    );
}

#[test]
fn esc_during_speculation_keeps_the_delivered_text_and_the_engine_serves_on() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let mut plain = start(&model, settings(1024));
    let full = answer(&mut plain, PROMPTS[1], 60);
    drop(plain);
    let mut e = start(&model, spec_settings(SpecMode::Draft, Some(&model), 8));
    for cancel_at in [0usize, 3] {
        let id = e
            .handle
            .generate(vec![user(PROMPTS[1])], greedy(), 60)
            .unwrap();
        let t = e.collect(id, |h, index| {
            if index == cancel_at {
                h.cancel(id);
            }
        });
        assert_eq!(t.report.stop_reason, StopReason::Cancelled);
        assert_eq!(t.report.text, t.streamed, "every delivered token is kept");
        assert!(
            full.text.starts_with(&t.report.text),
            "the kept text is the start of the answer: {:?} vs {:?}",
            t.report.text,
            full.text
        );
        // Within one pass of the flag: the events of the pass that was already delivered
        // while this thread read token `cancel_at` (k + 1 = 9 tokens at most), then the pass
        // in flight when the flag was set, and nothing after it.
        assert!(
            t.token_events <= cancel_at + 1 + 2 * 9,
            "{} tokens after Esc at token {cancel_at}",
            t.token_events
        );
        assert_eq!(
            t.report.context_used,
            t.report.timeline.prompt_tokens.unwrap() + t.token_events - 1,
            "the KV cache holds the prompt and the delivered tokens but the pending one"
        );
    }
    // The engine serves on, from a consistent cache, with the same answer.
    let again = answer(&mut e, PROMPTS[1], 60);
    assert_eq!(again.tokens, full.tokens);
    assert_eq!(again.text, full.text);
}

#[test]
fn draft_max_zero_is_plain_decoding() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let mut e = start(&model, spec_settings(SpecMode::Ngram, None, 0));
    let t = e.turn(vec![user(PROMPTS[2])], greedy(), 24);
    assert!(t.report.spec.is_none(), "no speculation, no figures");
    // Nor is a draft model loaded: a missing one is not even looked for.
    let mut s = spec_settings(SpecMode::Draft, Some(&dir.path().join("absent.gguf")), 0);
    s.threads = 1;
    let mut e = start(&model, s);
    let t = e.turn(vec![user(PROMPTS[2])], greedy(), 8);
    assert!(t.report.spec.is_none());
}

#[test]
fn context_overflow_while_drafting_drafts_fewer_tokens_and_stops_like_plain() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    // A context just larger than the prompt: every draft must shrink to fit.
    // (llama.cpp rounds a context up to 256 tokens.)
    let prompt = PROMPTS[6];
    let mut plain = start(&model, settings(256));
    let a = plain.turn(vec![user(prompt)], greedy(), 1000);
    assert_eq!(a.report.stop_reason, StopReason::ContextFull);
    drop(plain);
    for spec in [
        spec_settings(SpecMode::Ngram, None, 8),
        spec_settings(SpecMode::Draft, Some(&model), 8),
    ] {
        let mut s = spec;
        s.n_ctx = 256;
        let mut e = start(&model, s);
        let b = e.turn(vec![user(prompt)], greedy(), 1000);
        assert_eq!(b.report.stop_reason, StopReason::ContextFull);
        assert_eq!(b.report.text, a.report.text);
        assert_eq!(b.report.context_used, a.report.context_used);
        assert!(b.report.context_used < 256);
    }
}

fn load_error(model: &Path, spec: EngineSettings) -> tokscope::engine::EngineError {
    let (_handle, mut events) = EngineHandle::spawn(EngineConfig {
        model_path: model.to_path_buf(),
        settings: spec,
    })
    .unwrap();
    loop {
        match events.blocking_recv().expect("engine gone") {
            EngineEvent::LoadFailed(e) => return e,
            EngineEvent::Ready(_) => panic!("loaded a bad draft"),
            _ => {}
        }
    }
}

#[test]
fn switching_to_a_model_the_draft_does_not_fit_keeps_the_current_one() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let draft = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let target_b = common::gguf_edit::other_vocab(dir.path(), &model);
    let spec = spec_settings(SpecMode::Draft, Some(&draft), 4);
    let mut e = start(&model, spec.clone());
    let before = answer(&mut e, PROMPTS[0], 12);
    e.handle
        .switch_model(
            5000,
            EngineConfig {
                model_path: target_b,
                settings: spec,
            },
        )
        .unwrap();
    loop {
        match e.events.blocking_recv().expect("engine gone") {
            EngineEvent::SwitchFailed {
                request_id: 5000,
                error,
            } => {
                assert!(error.to_string().contains("vocabulary"), "{error}");
                break;
            }
            EngineEvent::Ready(_) => panic!("switched to a model the draft does not fit"),
            _ => {}
        }
    }
    let after = answer(&mut e, PROMPTS[0], 12);
    assert_eq!(
        after.text, before.text,
        "the old model (and its draft) still answer"
    );
    assert!(after.drafted > 0);
}

#[test]
fn a_draft_with_another_vocabulary_is_refused_naming_the_first_mismatch() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let tiny = synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let other = common::gguf_edit::other_vocab(dir.path(), &tiny);
    let e = load_error(&model, spec_settings(SpecMode::Draft, Some(&other), 4));
    let msg = e.to_string();
    assert!(msg.contains("vocabulary"), "{msg}");
    assert!(msg.contains("▁the") && msg.contains("▁zzzq"), "{msg}");
    assert!(msg.contains("token "), "{msg}");

    let missing = dir.path().join("nope.gguf");
    let e = load_error(&model, spec_settings(SpecMode::Draft, Some(&missing), 4));
    assert!(e.is_model_problem());
    let msg = e.to_string();
    assert!(
        msg.contains("draft model") && msg.contains("nope.gguf"),
        "{msg}"
    );
}

/// The second token's text of a 3-token answer sampled with `seed` (temperature 1, top-k 40),
/// and the turn's (drafted, accepted). Over the seeds, its distribution is the target's
/// marginal one for that position whether or not the engine speculates.
fn sampled_pair(e: &mut TestEngine, seed: u32) -> (String, usize, usize) {
    use tokscope::engine::{SamplingParams, TurnRequest};
    let turn = TurnRequest {
        messages: vec![user("Hello there")],
        sampling: SamplingParams {
            temperature: 1.0,
            top_k: 40,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplingParams::default()
        },
        max_tokens: 3,
        capture_first_logits: false,
        ignore_eos: true,
        context_full: tokscope::engine::ContextFull::DropOldest,
    };
    let id = e.handle.next_id();
    e.handle.send(id, turn, None).unwrap();
    let mut texts = Vec::new();
    loop {
        match e.events.blocking_recv().expect("engine gone") {
            EngineEvent::Token {
                request_id, text, ..
            } if request_id == id => texts.push(text),
            EngineEvent::Finished { request_id, report } if request_id == id => {
                let sp = report.spec.unwrap_or_default();
                return (texts[1].clone(), sp.drafted, sp.accepted);
            }
            EngineEvent::Failed { request_id, error } if request_id == id => panic!("{error}"),
            _ => {}
        }
    }
}

/// Two-sample chi-square statistic and degrees of freedom for equal sample sizes, categories
/// with fewer than 10 observations in both samples together pooled into one.
fn chi_square(a: &[String], b: &[String]) -> (f64, usize) {
    use std::collections::BTreeMap;
    let mut counts: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for x in a {
        counts.entry(x).or_default().0 += 1.0;
    }
    for x in b {
        counts.entry(x).or_default().1 += 1.0;
    }
    let (mut cells, mut other) = (Vec::new(), (0.0, 0.0));
    for (_, (x, y)) in counts {
        if x + y < 10.0 {
            other.0 += x;
            other.1 += y;
        } else {
            cells.push((x, y));
        }
    }
    if other.0 + other.1 > 0.0 {
        cells.push(other);
    }
    let stat = cells.iter().map(|(x, y)| (x - y) * (x - y) / (x + y)).sum();
    (stat, cells.len().saturating_sub(1))
}

#[test]
fn speculative_sampling_keeps_the_next_token_distribution() {
    let _lock = model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "small.gguf", "small", TensorType::F32, 5);
    let mut plain = start(&model, settings(256));
    let mut s = spec_settings(SpecMode::Draft, Some(&model), 1);
    s.n_ctx = 256;
    // The target drafting for itself proposes its own argmax: plain greedy acceptance would
    // accept it every time; the rule accepts it with the target's probability of it.
    let mut fast = start(&model, s);
    let n = 600;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut drafted, mut accepted) = (0, 0);
    for seed in 0..n {
        a.push(sampled_pair(&mut plain, seed).0);
        let (pair, d, acc) = sampled_pair(&mut fast, seed);
        b.push(pair);
        drafted += d;
        accepted += acc;
    }
    let (stat, df) = chi_square(&a, &b);
    assert!(df >= 3, "too few categories ({df} degrees of freedom)");
    // The 99.9% quantile of chi-square with df degrees of freedom (Wilson–Hilferty).
    let k = df as f64;
    let z = 3.09;
    let critical = k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3);
    eprintln!("chi-square {stat:.1}, critical {critical:.1}, {df} df, {accepted} of {drafted} drafts accepted");
    assert!(
        stat < critical,
        "the second token's distribution with speculation differs from plain sampling: \
         chi-square {stat:.1} ≥ {critical:.1} ({df} df)"
    );
    assert!(
        drafted >= n as usize / 2,
        "the rule ran ({drafted} drafted)"
    );
    assert!(
        accepted > 0 && accepted < drafted,
        "some drafts accepted, some resampled ({accepted} of {drafted})"
    );
}
