//! How soon Esc stops a long prefill (the chat's `Cancel` during prefill). One engine, the
//! chat's settings (micro-batches of n_ubatch, one decode call each); ROUNDS times a prompt of
//! about WORDS words is sent and cancelled DELAY ms after its prefill started (the delays
//! spread over one micro-batch), and the time from the cancel to the turn's end is measured,
//! beside how long one micro-batch took (the times between its progress events): without
//! llama.cpp's abort callback a cancel is seen between micro-batches only, so it waited for the
//! rest of the one in flight.
//!
//! cargo run --release --example prefill_cancel -- MODEL [ROUNDS] [WORDS] [THREADS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokscope::engine::{
    ChatMessage, EngineConfig, EngineEvent, EngineHandle, EngineSettings, Role, SamplingParams,
    StopReason, TurnRequest,
};

fn median(v: &[f64]) -> f64 {
    tokscope::metrics::median(v).unwrap_or(f64::NAN)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: prefill_cancel MODEL [ROUNDS] [WORDS] [THREADS]";
    let model = PathBuf::from(args.get(1).expect(usage));
    let rounds: usize = args.get(2).map_or(8, |s| s.parse().expect(usage));
    let words: usize = args.get(3).map_or(3000, |s| s.parse().expect(usage));
    let threads: u32 = args.get(4).map_or(2, |s| s.parse().expect(usage));
    tokscope::logging::init(None);
    let settings = EngineSettings {
        n_ctx: 8192,
        threads,
        ..EngineSettings::default()
    };
    let (mut handle, mut events) = EngineHandle::spawn(EngineConfig {
        model_path: model.clone(),
        settings,
    })
    .unwrap();
    loop {
        match events.blocking_recv().expect("engine gone") {
            EngineEvent::Ready(_) => break,
            EngineEvent::LoadFailed(e) => panic!("load failed: {e}"),
            _ => {}
        }
    }
    println!(
        "model {}\n{rounds} rounds, a prompt of {words} words, {threads} threads, default micro-batches",
        model.display()
    );
    let (mut stops, mut batches) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Each round's prompt differs from the first word on, so nothing is cached.
        let prompt = format!("{round} {}", "lighthouse keeper ".repeat(words / 2));
        let turn = TurnRequest {
            messages: vec![ChatMessage::new(Role::User, prompt)],
            sampling: SamplingParams::default(),
            max_tokens: 4,
            capture_first_logits: false,
            ignore_eos: false,
            context_full: tokscope::engine::ContextFull::DropOldest,
        };
        let id = handle.send(handle.next_id(), turn, None).unwrap();
        let (mut started, mut cancelled_at) = (None::<Instant>, None::<Instant>);
        let mut progress: Vec<Instant> = Vec::new();
        // The delay walks through a micro-batch: a fraction of the first one's time.
        let fraction = (round as f64 + 0.5) / rounds as f64;
        loop {
            let timeout = match (started, cancelled_at, progress.len()) {
                (Some(_), None, n) if n >= 1 => {
                    let one = progress[0].duration_since(started.unwrap());
                    let at = progress[0] + one.mul_f64(fraction);
                    Some(at.saturating_duration_since(Instant::now()))
                }
                _ => None,
            };
            let event = match timeout {
                Some(t) => match events.try_recv() {
                    Ok(e) => e,
                    Err(_) if t.is_zero() => {
                        cancelled_at = Some(Instant::now());
                        handle.cancel(id);
                        continue;
                    }
                    Err(_) => {
                        std::thread::sleep(t.min(Duration::from_millis(1)));
                        continue;
                    }
                },
                None => events.blocking_recv().expect("engine gone"),
            };
            match event {
                EngineEvent::PrefillStarted { request_id, .. } if request_id == id => {
                    started = Some(Instant::now());
                }
                EngineEvent::PrefillProgress { request_id, .. } if request_id == id => {
                    progress.push(Instant::now());
                }
                EngineEvent::Finished { request_id, report } if request_id == id => {
                    let end = Instant::now();
                    let at = cancelled_at.expect("cancelled before the prefill ended");
                    assert_eq!(report.stop_reason, StopReason::Cancelled);
                    let batch = progress[0].duration_since(started.unwrap());
                    let stop = end.duration_since(at);
                    println!(
                        "round {}: one micro-batch {:.0} ms; cancelled {:.0}% into the second, stopped {:.1} ms later ({} micro-batches done)",
                        round + 1,
                        batch.as_secs_f64() * 1e3,
                        fraction * 100.0,
                        stop.as_secs_f64() * 1e3,
                        progress.len()
                    );
                    stops.push(stop.as_secs_f64() * 1e3);
                    batches.push(batch.as_secs_f64() * 1e3);
                    break;
                }
                EngineEvent::Failed { request_id, error } if request_id == id => {
                    panic!("failed: {error}")
                }
                _ => {}
            }
        }
    }
    println!(
        "cancel to the turn's end: median {:.1} ms (max {:.1}); one micro-batch: median {:.0} ms (a cancel seen between micro-batches only would wait for the rest of one: {:.0} ms on average)",
        median(&stops),
        stops.iter().copied().fold(0.0, f64::max),
        median(&batches),
        median(&batches) / 2.0
    );
}
