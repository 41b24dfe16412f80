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
            context_full: tokscope::engine::ContextFull::DropOldest,
        };
        // This thread's own clock, taken before the engine's origin (`send` takes it), and
        // its own count of the streamed tokens: what the report's figures are held against.
        let sent = Instant::now();
        let id = engine.send(engine.next_id(), turn_request, None)?;
        let (mut streamed, mut first_seen_ms) = (0usize, None);
        loop {
            match events.blocking_recv().ok_or("engine gone")? {
                EngineEvent::Token { request_id, .. } if request_id == id => {
                    streamed += 1;
                    first_seen_ms.get_or_insert(sent.elapsed().as_secs_f64() * 1e3);
                }
                EngineEvent::Finished { request_id, report } if request_id == id => {
                    let outside_ms = sent.elapsed().as_secs_f64() * 1e3;
                    let s = report.timeline.summary();
                    // A turn may legitimately end at once (the model's first token ends it).
                    // The engine's clock starts after this thread's and its events are sent
                    // after its instants: its TTFT cannot exceed the first token's arrival
                    // here, nor its end to end the report's; it counted what it streamed.
                    let mut why = Vec::new();
                    if s.tokens_generated != streamed {
                        why.push(format!(
                            "{} tokens reported, {streamed} streamed",
                            s.tokens_generated
                        ));
                    }
                    if let (Some(ttft), Some(seen)) = (s.ttft_ms, first_seen_ms) {
                        if !(ttft > 0.0 && ttft <= seen + 0.05) {
                            why.push(format!("TTFT {ttft} ms, first token seen at {seen} ms"));
                        }
                    }
                    if !(s.e2e_ms > 0.0 && s.e2e_ms <= outside_ms + 0.05) {
                        why.push(format!(
                            "end to end {} ms, seen at {outside_ms} ms",
                            s.e2e_ms
                        ));
                    }
                    if s.decode_tok_per_s
                        .is_some_and(|r| !(r.is_finite() && r > 0.0))
                    {
                        why.push(format!("decode {:?} tok/s", s.decode_tok_per_s));
                    }
                    if !why.is_empty() {
                        eprintln!("turn {turn}: insane metrics: {}", why.join("; "));
                    }
                    insane += usize::from(!why.is_empty());
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
