//! Soak test (not part of CI): many chat turns through the real engine on a synthetic model
//! with a small context, so the conversation keeps outgrowing it and the oldest turns keep
//! being dropped. Reports memory at the start and end, turns per second, errors, and whether
//! the metrics stayed sane. Run with `scripts/soak.sh [TURNS]`.

use std::time::{Duration, Instant};

use tokscope::engine::{
    ChatMessage, EngineConfig, EngineEvent, EngineHandle, Role, SamplingParams, TurnRequest,
};
use tokscope::llama::settings::EngineSettings;
use tokscope::synth::{write_model, SynthSpec};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let turns: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("soak.gguf");
    write_model(&path, &SynthSpec::preset("tiny")?)?;
    let settings = EngineSettings {
        n_ctx: 256,
        threads: 1,
        ..EngineSettings::default()
    };
    let (mut engine, mut events) = EngineHandle::spawn(EngineConfig {
        model_path: path,
        settings,
    })?;
    loop {
        match events.blocking_recv().ok_or("engine gone")? {
            EngineEvent::Ready(_) => break,
            EngineEvent::LoadFailed(e) => return Err(e.into()),
            _ => {}
        }
    }
    let start_rss = rss_kib();
    let started = Instant::now();
    let mut conversation: Vec<ChatMessage> = Vec::new();
    let (mut errors, mut insane, mut dropped_turns, mut tokens) = (0usize, 0usize, 0usize, 0usize);
    let mut peak_rss = start_rss;
    for turn in 0..turns {
        conversation.push(ChatMessage::new(
            Role::User,
            format!("turn {turn}: tell me something about the number {turn}"),
        ));
        let sampling = SamplingParams {
            seed: turn as u32,
            ..SamplingParams::default()
        };
        let turn_request = TurnRequest {
            messages: conversation.clone(),
            sampling,
            max_tokens: 24,
            capture_first_logits: false,
            ignore_eos: false,
        };
        let id = engine.send(engine.next_id(), turn_request, None)?;
        loop {
            match events.blocking_recv().ok_or("engine gone")? {
                EngineEvent::Finished { request_id, report } if request_id == id => {
                    let s = report.timeline.summary();
                    // A turn may legitimately end at once (the model's first token ends it).
                    let sane = (s.tokens_generated == 0
                        || s.ttft_ms.is_some_and(|t| t > 0.0 && t < 60_000.0))
                        && s.decode_tok_per_s.is_none_or(|r| r.is_finite() && r > 0.0)
                        && s.itl.is_none_or(|i| i.p99_ms >= i.p50_ms);
                    insane += usize::from(!sane);
                    dropped_turns += usize::from(report.dropped_messages > 0);
                    tokens += s.tokens_generated;
                    conversation.push(ChatMessage::new(Role::Assistant, report.text));
                    break;
                }
                EngineEvent::Failed { request_id, error } if request_id == id => {
                    errors += 1;
                    eprintln!("turn {turn}: {error}");
                    conversation.pop();
                    break;
                }
                _ => {}
            }
        }
        // Keep the client-side history bounded too; the engine drops what does not fit.
        if conversation.len() > 400 {
            conversation.drain(..200);
        }
        peak_rss = peak_rss.max(rss_kib());
        if (turn + 1) % 100 == 0 {
            println!(
                "{:>5} turns  {:>6.1} turns/s  rss {:>7} KiB  errors {errors}  insane metrics {insane}",
                turn + 1,
                (turn + 1) as f64 / started.elapsed().as_secs_f64(),
                rss_kib()
            );
        }
    }
    let elapsed = started.elapsed();
    engine.shutdown();
    println!(
        "soak: {turns} turns in {:.1} s ({:.1} turns/s, {tokens} tokens), errors {errors}, insane metrics {insane}, turns with dropped history {dropped_turns}",
        elapsed.as_secs_f64(),
        turns as f64 / elapsed.as_secs_f64().max(f64::EPSILON),
    );
    println!(
        "memory: start {start_rss} KiB, end {} KiB, peak {peak_rss} KiB",
        rss_kib()
    );
    std::thread::sleep(Duration::from_millis(10));
    if errors > 0 || insane > 0 {
        return Err(format!("{errors} errors, {insane} turns with insane metrics").into());
    }
    Ok(())
}
