//! The chat's scoring against a reference keeps its two contexts between answers (issue 34;
//! docs/metrics.md "Per token and per answer"): a later answer reads only what follows the
//! longest common prefix with what they hold, and its figures are a fresh scoring's, token by
//! token. Each conversation is answered in engines of its own, the same turns in each (greedy,
//! one thread: the same answers), one scoring every turn (its contexts kept) and one scoring
//! only the turn compared (its contexts fresh). The third turn edits the first message, so
//! that the kept contexts hold tokens past the common prefix that must be dropped.
//! `quality_ref` holds the top tokens against the same file through `run --ref`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use crate::common::{self, assistant, user, TestEngine};
use tokscope::engine::{EngineError, EngineEvent, EngineSettings};
use tokscope::metrics::quality::AnswerScore;
use tokscope::synth::TensorType;

const TOKENS: u32 = 64;

/// The user's messages, turn by turn; the fourth turn edits the first one.
const ASKED: [&str; TURNS] = [
    "Tell me a short story about a lighthouse keeper and the sea",
    "Now tell it again from the point of view of the gulls",
    "And once more, shorter",
    "Thank you",
];
const TURNS: usize = 4;
const EDITED_TURN: usize = 3;
const EDITED_FIRST: &str = "Tell me a short story about a lighthouse keeper and the moon";

/// Score the last answer against `reference` and wait for it.
fn score(engine: &mut TestEngine, reference: &Path) -> AnswerScore {
    let id = engine.handle.next_id();
    engine
        .handle
        .score_last(id, reference.to_path_buf())
        .unwrap();
    loop {
        match engine.events.blocking_recv().expect("engine gone") {
            EngineEvent::Scored { request_id, score } if request_id == id => return *score,
            EngineEvent::Failed { request_id, error } if request_id == id => {
                panic!("scoring failed: {error}")
            }
            _ => {}
        }
    }
}

/// A scoring asked for and cancelled `after` that: it may stop anywhere (before its first
/// pass, between two, inside a decode between two graph nodes, between two rows' maths) or
/// finish first.
fn score_cancelled(engine: &mut TestEngine, reference: &Path, after: Duration) {
    let id = engine.handle.next_id();
    engine
        .handle
        .score_last(id, reference.to_path_buf())
        .unwrap();
    std::thread::sleep(after);
    engine.handle.cancel(id);
    loop {
        match engine.events.blocking_recv().expect("engine gone") {
            EngineEvent::Scored { request_id, .. } if request_id == id => return,
            EngineEvent::Failed { request_id, error } if request_id == id => {
                assert!(matches!(error, EngineError::Cancelled), "{error}");
                return;
            }
            _ => {}
        }
    }
}

/// `ASKED.len()` turns of one conversation in a new engine of `model`: each turn's answer,
/// and its score against the reference when `references` names one for that turn.
fn converse(
    model: &Path,
    settings: &EngineSettings,
    references: [Option<&Path>; TURNS],
) -> Vec<(String, Option<AnswerScore>)> {
    converse_cancelling(model, settings, references, None)
}

/// As [`converse`]; with `cancel_first`, each scoring is first asked for and cancelled that
/// long after.
fn converse_cancelling(
    model: &Path,
    settings: &EngineSettings,
    references: [Option<&Path>; TURNS],
    cancel_first: Option<Duration>,
) -> Vec<(String, Option<AnswerScore>)> {
    let mut engine = common::start(model, settings.clone());
    let mut answers: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (turn, reference) in references.into_iter().enumerate() {
        let mut messages = Vec::new();
        for (i, asked) in ASKED[..=turn].iter().enumerate() {
            let asked = if i == 0 && turn >= EDITED_TURN {
                EDITED_FIRST
            } else {
                asked
            };
            messages.push(user(asked));
            if let Some(a) = answers.get(i) {
                messages.push(assistant(a));
            }
        }
        let text = engine.turn(messages, common::greedy(), TOKENS).report.text;
        answers.push(text.clone());
        if let (Some(r), Some(after)) = (reference, cancel_first) {
            score_cancelled(&mut engine, r, after);
        }
        out.push((text, reference.map(|r| score(&mut engine, r))));
    }
    out
}

/// Two scorings of the same answer agree token by token: the same tokens and context, each
/// figure within `tolerance` (relative), and with `exact` the same top tokens too.
fn assert_same_figures(kept: &AnswerScore, fresh: &AnswerScore, tolerance: f64, what: &str) {
    assert_eq!(kept.tokens.len(), fresh.tokens.len(), "{what}");
    assert_eq!(kept.context_tokens, fresh.context_tokens, "{what}");
    let close = |a: f64, b: f64| (a - b).abs() <= tolerance * a.abs().max(b.abs());
    for (i, (k, f)) in kept.tokens.iter().zip(&fresh.tokens).enumerate() {
        let at = format!("{what}, token {i}: kept {k:?}, fresh {f:?}");
        assert_eq!((k.token, &k.text), (f.token, &f.text), "{at}");
        assert!(close(k.score.kld, f.score.kld), "KLD: {at}");
        assert!(close(k.score.p_ref, f.score.p_ref), "p_ref: {at}");
        assert!(close(k.score.p_cand, f.score.p_cand), "p_cand: {at}");
        if tolerance == 0.0 {
            assert_eq!(k, f, "{at}");
        }
    }
}

/// Tokens a scoring read: the conversation before the answer and the answer but its last
/// token, less what the kept contexts held.
fn read(s: &AnswerScore) -> usize {
    s.context_tokens + s.tokens.len() - 1 - s.reused_tokens
}

/// A Q4_0 scored against its F32 file in four turns: kept contexts (every turn scored)
/// against fresh ones for each later turn, within `tolerance`. The kept contexts read fewer
/// tokens: the second and third turns keep what the turn before read (the third outgrows the
/// contexts, which carry their cells into larger ones), the fourth only what precedes its edit.
fn kept_against_fresh(settings: &EngineSettings, tolerance: f64) {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let reference = common::synth(dir.path(), "ref.gguf", "small", TensorType::F32, 7);
    let model = common::synth(dir.path(), "q4.gguf", "small", TensorType::Q4_0, 7);
    let r = Some(reference.as_path());
    let kept = converse(&model, settings, [r; TURNS]);
    let texts = |c: &[(String, Option<AnswerScore>)]| -> Vec<String> {
        c.iter().map(|(t, _)| t.clone()).collect()
    };
    for turn in 1..TURNS {
        let mut only = [None; TURNS];
        only[turn] = r;
        let fresh = converse(&model, settings, only);
        assert_eq!(texts(&kept), texts(&fresh), "the engines answered alike");
        let k = kept[turn].1.as_ref().unwrap();
        let f = fresh[turn].1.as_ref().unwrap();
        assert_eq!(f.reused_tokens, 0, "a fresh scoring reads everything");
        assert!(
            k.reused_tokens > 0 && read(k) < read(f),
            "turn {}: kept contexts reused {} and read {} tokens, fresh ones {}",
            turn + 1,
            k.reused_tokens,
            read(k),
            read(f)
        );
        assert!(k.summary.as_ref().unwrap().kld_mean > 0.0, "a Q4_0 strays");
        assert_same_figures(k, f, tolerance, &format!("turn {}", turn + 1));
    }
    let scores: Vec<&AnswerScore> = kept.iter().map(|(_, s)| s.as_ref().unwrap()).collect();
    assert_eq!(scores[0].reused_tokens, 0);
    // A turn that continues the conversation keeps at least the previous turn's prompt
    // (its answer too, where the template gives it back as it was generated).
    for turn in 1..EDITED_TURN {
        assert!(
            scores[turn].reused_tokens >= scores[turn - 1].context_tokens,
            "turn {} kept {} of the previous turn's {} context tokens",
            turn + 1,
            scores[turn].reused_tokens,
            scores[turn - 1].context_tokens
        );
    }
    // The edit of the first message: only the tokens before it are kept.
    assert!(
        scores[EDITED_TURN].reused_tokens < scores[0].context_tokens,
        "the edited turn kept {}",
        scores[EDITED_TURN].reused_tokens
    );
}

/// With one token per graph evaluation (n_ubatch 1) a position's figures do not depend on
/// the batches the conversation was read in, so kept contexts must give a fresh scoring's
/// figures bit for bit: a stale token kept in either cache would show.
#[test]
fn kept_scoring_contexts_read_only_the_new_part_and_score_exactly_as_fresh_ones() {
    let mut settings = common::settings(1024);
    settings.n_ubatch = 1;
    kept_against_fresh(&settings, 0.0);
}

/// A scoring cancelled wherever it stopped leaves the kept contexts holding only what they
/// read in full: the scoring asked for again gives a fresh scoring's figures bit for bit.
#[test]
fn a_cancelled_scoring_leaves_the_kept_contexts_consistent() {
    // At once (before or between passes), and a few milliseconds in: with one token a
    // micro-batch the conversation's reading is many micro-batches a decode, and a cancel
    // then stops llama.cpp between two graph nodes with earlier micro-batches already in the
    // KV cache.
    for after in [Duration::ZERO, Duration::from_millis(3)] {
        cancelled_then_scored_as_fresh(after);
    }
}

fn cancelled_then_scored_as_fresh(after: Duration) {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let reference = common::synth(dir.path(), "ref.gguf", "small", TensorType::F32, 7);
    let model = common::synth(dir.path(), "q4.gguf", "small", TensorType::Q4_0, 7);
    let mut settings = common::settings(1024);
    settings.n_ubatch = 1;
    let r = Some(reference.as_path());
    let kept = converse_cancelling(&model, &settings, [r; TURNS], Some(after));
    let fresh = converse(&model, &settings, [None, None, r, None]);
    let k = kept[2].1.as_ref().unwrap();
    assert!(k.reused_tokens > 0, "{k:?}");
    assert_same_figures(
        k,
        fresh[2].1.as_ref().unwrap(),
        0.0,
        "turn 3 after a cancel",
    );
}

/// In the default passes the kept contexts read the conversation in other batches than a
/// fresh scoring does, and llama.cpp's CPU kernels sum a row differently in batches of other
/// sizes: the figures agree to float noise (a few 1e-4 relative here; the F16 KV cache rounds
/// the difference up).
#[test]
fn in_the_default_passes_kept_scoring_contexts_agree_with_fresh_ones_to_float_noise() {
    kept_against_fresh(&common::settings(1024), 1e-2);
}

/// The demo model (a real tokenizer and chat template, sliding-window attention) scored
/// against itself in kept contexts: exact agreement, the second turn's prompt read only past
/// the first's, and each position's top tokens the same for both.
#[test]
fn on_the_demo_model_kept_contexts_score_the_next_answer_against_itself_exactly() {
    let _lock = common::model_lock();
    let demo = common::demo_model();
    let r = Some(demo.as_path());
    let kept = converse(&demo, &common::settings(1024), [r, r, None, None]);
    let (first, second) = (kept[0].1.as_ref().unwrap(), kept[1].1.as_ref().unwrap());
    assert_eq!(first.reused_tokens, 0);
    assert!(
        second.reused_tokens >= first.context_tokens,
        "{} of {}",
        second.reused_tokens,
        first.context_tokens
    );
    for s in [first, second] {
        let q = s.summary.as_ref().unwrap();
        assert_eq!((q.kld_mean, q.same_top_pct), (0.0, 100.0), "{q:?}");
        assert_tops(s);
    }
}

/// Each position's top tokens: `TOP_K` of each model, the first the position's top token,
/// probabilities descending and summing to at most 1; with the same file as reference, the
/// same tokens for both.
pub fn assert_tops(s: &AnswerScore) {
    use tokscope::metrics::quality::TOP_K;
    for t in &s.tokens {
        assert_eq!((t.top_ref.len(), t.top_cand.len()), (TOP_K, TOP_K), "{t:?}");
        assert_eq!(t.top_ref[0].token as usize, t.score.top_ref, "{t:?}");
        assert_eq!(t.top_cand[0].token as usize, t.score.top_cand, "{t:?}");
        for top in [&t.top_ref, &t.top_cand] {
            assert!(top.windows(2).all(|w| w[0].p >= w[1].p), "{t:?}");
            let sum: f64 = top.iter().map(|x| f64::from(x.p)).sum();
            assert!(sum <= 1.0 + 1e-6 && top.iter().all(|x| x.p >= 0.0), "{t:?}");
        }
        let ids = |top: &[tokscope::metrics::quality::TopToken]| {
            top.iter().map(|x| x.token).collect::<Vec<_>>()
        };
        assert_eq!(ids(&t.top_ref), ids(&t.top_cand), "{t:?}");
        assert_eq!(t.top_ref, t.top_cand, "the same file: the same texts and p");
        let chosen = t.top_cand.iter().find(|x| x.token == t.token);
        if let Some(c) = chosen {
            assert!((f64::from(c.p) - t.score.p_cand).abs() <= 1e-6, "{t:?}");
        }
    }
}
