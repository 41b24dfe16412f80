//! A new message stops a score in flight, so the next turn's TTFT does not wait for it (issue
//! #34 item 5). One engine, the chat's way: an answer, then its score against REF asked for,
//! and DELAY ms later a new message, which (as the chat does) first cancels the score. The
//! same new message without a score in flight is the baseline. Both conditions alternate
//! (ABBA), from the same conversation (the same two user messages and first answer, greedy), so
//! each new turn reads the same prompt with the same KV cache.
//!
//! TTFT is tokscope's (from the request's submission on the engine handle, the queue behind a
//! score included). Prints each pair, the medians and the median of the paired differences,
//! and the time of one scoring pass (an uncancelled score's `score_ms` over its passes) for
//! scale: a cancel is seen between two passes, so the wait is at most what is left of one.
//!
//! cargo run --release --example score_cancel_ttft -- MODEL REF [ROUNDS] [DELAY_MS] [THREADS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;

use common::Engine;
use tokscope::engine::{ChatMessage, EngineSettings, Role};
use tokscope::metrics::quality::AnswerScore;

/// Tokens of every answer.
const TOKENS: u32 = 64;
/// Positions of one scoring pass (`engine::score`).
const PASS: usize = 32;

/// One scoring pass's time: an uncancelled score's `score_ms` over its passes.
fn per_pass(score: &AnswerScore) -> f64 {
    let read = score.context_tokens + score.tokens.len() - 1 - score.reused_tokens;
    score.score_ms / read.div_ceil(PASS).max(1) as f64
}

/// The next turn's TTFT, `delay` after the last answer: with a score of it asked for at once
/// and cancelled by the new message (`score`), or with none.
fn next_turn(
    engine: &mut Engine,
    messages: &[ChatMessage],
    reference: &Path,
    delay: Duration,
    score: bool,
) -> f64 {
    let scoring = score.then(|| {
        let id = engine.handle.next_id();
        engine
            .handle
            .score_last(id, reference.to_path_buf())
            .unwrap();
        id
    });
    std::thread::sleep(delay);
    if let Some(id) = scoring {
        engine.handle.cancel(id);
    }
    engine
        .answer(messages, TOKENS)
        .timeline
        .summary()
        .ttft_ms
        .expect("a first token")
}

fn message(role: Role, content: &str) -> ChatMessage {
    ChatMessage::new(role, content)
}

fn median(v: &[f64]) -> f64 {
    tokscope::metrics::median(v).unwrap_or(f64::NAN)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: score_cancel_ttft MODEL REF [ROUNDS] [DELAY_MS] [THREADS]";
    let model = PathBuf::from(args.get(1).expect(usage));
    let reference = PathBuf::from(args.get(2).expect(usage));
    let rounds: usize = args.get(3).map_or(10, |s| s.parse().expect(usage));
    let delay_ms: u64 = args.get(4).map_or(50, |s| s.parse().expect(usage));
    let threads: u32 = args.get(5).map_or(2, |s| s.parse().expect(usage));
    let delay = Duration::from_millis(delay_ms);
    // llama.cpp's logs into tokscope's log file, off the printed figures.
    tokscope::logging::init(None);
    println!(
        "model {}\nreference {}\n{rounds} ABBA pairs, new message {delay_ms} ms after the answer, {TOKENS} tokens an answer, {threads} threads, greedy",
        model.display(),
        reference.display()
    );
    let mut engine = Engine::start(
        &model,
        EngineSettings {
            n_ctx: 4096,
            threads,
            ..EngineSettings::default()
        },
    );
    let mut messages = vec![message(
        Role::User,
        "Tell me a short story about a lighthouse keeper and the sea.",
    )];
    let first = engine.answer(&messages, TOKENS).text;
    messages.push(message(Role::Assistant, &first));
    messages.push(message(
        Role::User,
        "Now tell it again from the point of view of the gulls.",
    ));
    // Warm: the reference loaded, the scoring contexts made, the new turn's prompt cached.
    engine.answer(&messages, TOKENS);
    let per_pass = per_pass(&engine.score(&reference));
    println!("one scoring pass of {PASS} positions (both models): {per_pass:.1} ms");
    let (mut with, mut without, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = [0.0; 2];
        for score in order {
            pair[usize::from(score)] = next_turn(&mut engine, &messages, &reference, delay, score);
        }
        let [off, on] = pair;
        println!(
            "pair {}: TTFT without a score {off:.1} ms, with a score cancelled by the message {on:.1} ms ({:+.1})",
            round + 1,
            on - off
        );
        without.push(off);
        with.push(on);
        diff.push(on - off);
    }
    println!(
        "TTFT median: without {:.1} ms, with a cancelled score {:.1} ms; paired difference median {:+.1} ms (range {:+.1} to {:+.1}); one pass {per_pass:.1} ms",
        median(&without),
        median(&with),
        median(&diff),
        diff.iter().copied().fold(f64::INFINITY, f64::min),
        diff.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
}
