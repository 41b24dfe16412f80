//! What one token event costs the engine thread: `UnboundedSender::send` of a token event (the
//! engine's own `EngineEvent::Token`, with the String of its text and the timeline push around
//! it) to the reader as `run` reads, `tokscope::engine::recv_paced`:
//! - **parked reader**: `pace` None, asleep in `blocking_recv`, woken by each event (as `run
//!   --token-lines` reads, and as `run` read before it was paced);
//! - **paced reader**: `pace` 50 ms, the chat's stream frame (as `run` reads a streaming answer):
//!   never asleep inside the channel, so a send wakes nobody;
//! - **awake reader (burst)**: events back to back, the reader busy draining.
//!
//! Busy work between sends stands in for a decode call. Prints medians in µs.
//!
//! cargo run --release --example event_cost -- [EVENTS] [GAP_US]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tokscope::engine::{recv_paced, EngineEvent};

fn busy(us: u64) {
    let end = Instant::now() + Duration::from_micros(us);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let gap_us: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let t0 = Instant::now();
    let cases = [
        ("parked reader", gap_us, None),
        (
            "paced reader (50 ms)",
            gap_us,
            Some(tokscope::engine::STREAM_FRAME_INTERVAL),
        ),
        ("awake reader (burst)", 0, None),
    ];
    for (label, gap, pace) in cases {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<EngineEvent>();
        let reader = std::thread::spawn(move || {
            let mut seen = 0usize;
            while let Some(e) = recv_paced(&mut rx, pace) {
                if let EngineEvent::Token { index, .. } = e {
                    assert_eq!(index, seen, "events out of order");
                    seen += 1;
                }
            }
            seen
        });
        let mut stamps = Vec::with_capacity(n);
        let (mut piece_us, mut send_us) = (Vec::new(), Vec::new());
        for i in 0..n {
            busy(gap);
            let a = Instant::now();
            let at = t0.elapsed();
            stamps.push(at);
            let text = String::from(" word");
            let b = Instant::now();
            tx.send(EngineEvent::Token {
                request_id: 1,
                index: i,
                text,
                at,
            })
            .unwrap();
            let c = Instant::now();
            piece_us.push((b - a).as_secs_f64() * 1e6);
            send_us.push((c - b).as_secs_f64() * 1e6);
        }
        drop(tx);
        assert_eq!(reader.join().unwrap(), n, "the reader lost events");
        println!(
            "{label:<22} events {n} gap {gap} µs: stamp+text p50 {:.2} µs, send p50 {:.2} µs, p90 {:.2} µs, mean {:.2} µs",
            quantile(&piece_us, 0.5),
            quantile(&send_us, 0.5),
            quantile(&send_us, 0.9),
            send_us.iter().sum::<f64>() / n as f64,
        );
    }
}
