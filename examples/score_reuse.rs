//! What keeping the chat's scoring contexts between answers saves (issue #34): one conversation
//! of TURNS turns answered in two engines alike (greedy, TOKENS tokens a turn, the conversation
//! growing by each answer and a new user message), each answer scored against REF:
//! - **kept**: every turn against REF, so each scoring reads only what follows what its kept
//!   contexts hold (`reused_tokens`);
//! - **fresh**: against REF and a symbolic link to it in turn, so that each scoring changes
//!   reference and makes its contexts anew, as every scoring did before (the reload is counted
//!   in `reference_load_ms`, not in `score_ms`).
//!
//! Both engines run turn by turn in step, so drift of the machine hits both. Prints per turn
//! the tokens read and `score_ms` of each, the fresh scoring's mean KLD, and how far the two
//! scorings' mean KLD and per-token KLD part (float noise: the kept contexts read the
//! conversation in other batches, and llama.cpp's CPU kernels are not batch-invariant).
//!
//! With UBATCH 1 (one token per graph evaluation) a position's figures do not depend on the
//! batches it was read in, and the two scorings must agree bit for bit.
//!
//! cargo run --release --example score_reuse -- MODEL REF [TURNS] [TOKENS] [THREADS] [UBATCH]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

mod common;

use common::Engine;
use tokscope::engine::{ChatMessage, EngineSettings, Role};
use tokscope::metrics::quality::AnswerScore;

const ASKED: [&str; 8] = [
    "Tell me a short story about a lighthouse keeper and the sea.",
    "Now tell it again from the point of view of the gulls.",
    "What would the keeper write in his logbook that night?",
    "Describe the lighthouse itself in a few sentences.",
    "How does the story end in winter?",
    "Give the keeper a name and a reason for being there.",
    "Write the keeper's letter to his sister.",
    "Sum the whole story up in three sentences.",
];

/// Tokens a scoring read: the conversation before the answer and the answer but its last.
fn read(s: &AnswerScore) -> usize {
    s.context_tokens + s.tokens.len() - 1 - s.reused_tokens
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: score_reuse MODEL REF [TURNS] [TOKENS] [THREADS] [UBATCH]";
    let model = PathBuf::from(args.get(1).expect(usage));
    let reference = PathBuf::from(args.get(2).expect(usage));
    let turns: usize = args.get(3).map_or(6, |s| s.parse().expect(usage));
    let tokens: u32 = args.get(4).map_or(64, |s| s.parse().expect(usage));
    let threads: u32 = args.get(5).map_or(2, |s| s.parse().expect(usage));
    let n_ubatch: u32 = args.get(6).map_or(512, |s| s.parse().expect(usage));
    let turns = turns.clamp(1, ASKED.len());
    // llama.cpp's logs into tokscope's log file, off the printed figures.
    tokscope::logging::init(None);
    let dir = tempfile::tempdir().unwrap();
    let alias = dir.path().join("reference-alias.gguf");
    std::os::unix::fs::symlink(std::fs::canonicalize(&reference).unwrap(), &alias).unwrap();

    println!(
        "model {}\nreference {}\n{turns} turns, {tokens} tokens an answer, {threads} threads, n_ctx 4096, n_ubatch {n_ubatch}, greedy",
        model.display(),
        reference.display()
    );
    let settings = EngineSettings {
        n_ctx: 4096,
        threads,
        n_ubatch,
        ..EngineSettings::default()
    };
    let mut kept = Engine::start(&model, settings.clone());
    let mut fresh = Engine::start(&model, settings);
    let mut messages: Vec<ChatMessage> = Vec::new();
    let (mut kept_ms, mut fresh_ms) = (Vec::new(), Vec::new());
    println!(
        "{:>4} {:>7} {:>6} | {:>6} {:>5} {:>9} | {:>5} {:>9} | {:>8} {:>9} {:>10} {:>12}",
        "turn",
        "context",
        "answer",
        "reused",
        "read",
        "score_ms",
        "read",
        "score_ms",
        "speed-up",
        "KLD mean",
        "ΔKLD mean",
        "max |ΔKLD|"
    );
    for (turn, asked) in ASKED[..turns].iter().enumerate() {
        messages.push(ChatMessage::new(Role::User, *asked));
        let a = kept.answer(&messages, tokens).text;
        let b = fresh.answer(&messages, tokens).text;
        assert_eq!(a, b, "the two engines answered alike");
        messages.push(ChatMessage::new(Role::Assistant, &a));
        let k = kept.score(&reference);
        let f = fresh.score(if turn % 2 == 0 { &alias } else { &reference });
        assert_eq!(
            f.reused_tokens, 0,
            "the fresh engine made its contexts anew"
        );
        let kld = |s: &AnswerScore| s.summary.as_ref().map_or(0.0, |q| q.kld_mean);
        let max_delta = k
            .tokens
            .iter()
            .zip(&f.tokens)
            .map(|(x, y)| (x.score.kld - y.score.kld).abs())
            .fold(0.0f64, f64::max);
        println!(
            "{:>4} {:>7} {:>6} | {:>6} {:>5} {:>9.1} | {:>5} {:>9.1} | {:>7.2}× {:>9.4} {:>10.2e} {:>12.2e}",
            turn + 1,
            k.context_tokens,
            k.tokens.len(),
            k.reused_tokens,
            read(&k),
            k.score_ms,
            read(&f),
            f.score_ms,
            f.score_ms / k.score_ms.max(1e-9),
            kld(&f),
            kld(&k) - kld(&f),
            max_delta
        );
        if turn > 0 {
            kept_ms.push(k.score_ms);
            fresh_ms.push(f.score_ms);
        }
    }
    if !kept_ms.is_empty() {
        println!(
            "turns 2-{turns}: score_ms mean kept {:.1}, fresh {:.1} ({:.2}× faster kept)",
            mean(&kept_ms),
            mean(&fresh_ms),
            mean(&fresh_ms) / mean(&kept_ms).max(1e-9)
        );
    }
}
