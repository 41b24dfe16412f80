//! A turn as Chrome Trace Event JSON (`run --trace FILE.json`; opens in ui.perfetto.dev and
//! chrome://tracing): the engine thread's spans (queue, template and tokenize, each prefill
//! micro-batch, the first sample, each decode call and the host gap before it), one instant
//! event per token at its ready time, and the profiled steps' nodes on a track of their own.
//! Every timestamp is the metrics' own offset from the request's submission (docs/metrics.md,
//! "The clock and the origin"), in µs: TTFT and every ITL gap read off the trace are the ones
//! `run --json` reports.

use std::time::Duration;

use serde_json::{json, Value};

use super::profile::{classify, ProfileRecord};
use super::TurnTimeline;

/// µs as the trace format wants them (fractional: no rounding of the metrics' offsets).
fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

const ENGINE: u32 = 1;
const NODES: u32 = 2;

fn span(pid: u32, tid: u32, name: &str, cat: &str, from: Duration, to: Duration) -> Value {
    json!({
        "name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
        "ts": us(from), "dur": us(to.saturating_sub(from)),
    })
}

fn thread_name(pid: u32, tid: u32, name: &str) -> Value {
    json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
}

/// The events of one turn as process `pid` (the turn's number), offsets from its submission.
pub fn turn_events(
    pid: u32,
    label: &str,
    t: &TurnTimeline,
    profile: Option<&ProfileRecord>,
) -> Vec<Value> {
    let mut ev = vec![
        json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}}),
        thread_name(pid, ENGINE, "engine thread"),
    ];
    let queue = t.queue.unwrap_or_default();
    ev.push(span(pid, ENGINE, "queue", "turn", Duration::ZERO, queue));
    let tt_end = queue + t.template_tokenize.unwrap_or_default();
    ev.push(span(
        pid,
        ENGINE,
        "template + tokenize",
        "turn",
        queue,
        tt_end,
    ));
    let mut from = tt_end;
    for (i, &end) in t.prefill_chunk_done_at.iter().enumerate() {
        ev.push(span(
            pid,
            ENGINE,
            &format!("prefill micro-batch {i}"),
            "prefill",
            from,
            end,
        ));
        from = end;
    }
    if let (Some(done), Some(first)) = (t.prefill_done_at, t.token_ready_at.first()) {
        ev.push(span(pid, ENGINE, "first sample", "decode", done, *first));
    }
    // The host gap before each decode call runs from the end of the one before (or of
    // prefill): sampling, detokenizing and the token's event.
    let mut last_end = t.prefill_done_at.unwrap_or(tt_end);
    for (k, (&start, &end)) in t.pass_started_at.iter().zip(&t.pass_done_at).enumerate() {
        ev.push(span(pid, ENGINE, "host", "host", last_end, start));
        ev.push(span(
            pid,
            ENGINE,
            &format!("decode {k}"),
            "decode",
            start,
            end,
        ));
        last_end = end;
    }
    for (i, &at) in t.token_ready_at.iter().enumerate() {
        ev.push(json!({
            "name": "token", "cat": "token", "ph": "i", "s": "t", "pid": pid, "tid": ENGINE,
            "ts": us(at), "args": {"index": i},
        }));
    }
    if let Some(p) = profile {
        ev.push(thread_name(pid, NODES, "profiled steps' nodes"));
        let profiled_calls = p
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.1)
            .map(|(k, _)| k);
        for (step, k) in p.steps.iter().zip(profiled_calls) {
            let Some(&call_start) = t.pass_started_at.get(k) else {
                continue;
            };
            let (placed, by_name) = classify(&step.nodes);
            for (n, (part, _)) in step.nodes.iter().zip(&placed) {
                let name = if by_name { part.label() } else { n.op };
                let mut e = span(
                    pid,
                    NODES,
                    name,
                    "node",
                    call_start + n.start,
                    call_start + n.start + n.time,
                );
                e["args"] = json!({"op": n.op, "node": n.name, "weight": n.weight, "decode": k});
                ev.push(e);
            }
        }
    }
    ev
}

/// The whole trace file from the turns' events.
pub fn document(events: Vec<Value>) -> Value {
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_carries_every_token_at_its_ready_time_and_the_spans_in_order() {
        let ms = Duration::from_millis;
        let t = TurnTimeline {
            queue: Some(ms(1)),
            template_tokenize: Some(ms(2)),
            prefill: Some(ms(10)),
            prefill_chunk_done_at: vec![ms(8), ms(13)],
            prefill_done_at: Some(ms(13)),
            token_ready_at: vec![ms(14), ms(20), ms(26)],
            pass_started_at: vec![ms(15), ms(21)],
            pass_done_at: vec![ms(19), ms(25)],
            ..TurnTimeline::default()
        };
        let ev = turn_events(1, "turn 1", &t, None);
        let tokens: Vec<f64> = ev
            .iter()
            .filter(|e| e["name"] == "token")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert_eq!(tokens, vec![14_000.0, 20_000.0, 26_000.0]);
        let names: Vec<&str> = ev
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "queue",
                "template + tokenize",
                "prefill micro-batch 0",
                "prefill micro-batch 1",
                "first sample",
                "host",
                "decode 0",
                "host",
                "decode 1"
            ]
        );
        let decode1 = ev.iter().find(|e| e["name"] == "decode 1").unwrap();
        assert_eq!(decode1["ts"], 21_000.0);
        assert_eq!(decode1["dur"], 4_000.0);
        let doc = document(ev);
        assert!(doc["traceEvents"].is_array());
    }
}
