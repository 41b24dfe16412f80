//! What one token event costs the engine thread: `UnboundedSender::send` of a token event to a
//! receiver parked in `blocking_recv` (as `run` receives) and to a receiver that is awake
//! (a burst), with the pieces around it (the String of the token's text, the timeline push).
//! Busy work between sends stands in for a decode call. Prints medians in µs.
//!
//! cargo run --release --example event_cost -- [EVENTS] [GAP_US]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

enum Event {
    Token {
        request_id: u64,
        index: usize,
        text: String,
        at: Duration,
    },
    Done,
}

fn busy(us: u64) {
    let end = Instant::now() + Duration::from_micros(us);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let gap_us: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let t0 = Instant::now();
    for (label, gap) in [("parked receiver", gap_us), ("awake receiver (burst)", 0)] {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let reader = std::thread::spawn(move || {
            let mut bytes = 0usize;
            while let Some(e) = rx.blocking_recv() {
                match e {
                    Event::Token {
                        text,
                        index,
                        request_id,
                        at,
                    } => {
                        bytes +=
                            text.len() + index + request_id as usize + at.subsec_nanos() as usize
                    }
                    Event::Done => break,
                }
            }
            bytes
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
            tx.send(Event::Token {
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
        tx.send(Event::Done).unwrap();
        reader.join().unwrap();
        println!(
            "{label:<24} events {n} gap {gap} µs: stamp+text p50 {:.2} µs, send p50 {:.2} µs, send p90 {:.2} µs",
            median(piece_us),
            median(send_us.clone()),
            {
                let mut s = send_us;
                s.sort_by(f64::total_cmp);
                s[s.len() * 9 / 10]
            }
        );
    }
}
