//! Turns as Chrome Trace Event JSON (`run --trace FILE.json`, `bench --trace`, the chat's
//! `/trace`; opens in ui.perfetto.dev and chrome://tracing). One process per turn: the engine
//! thread's spans (queue, template and tokenize, each prefill micro-batch, the first sample,
//! each decode call and the host gap before it), one instant event per token at its ready
//! time, the profiled steps' nodes on a track of their own; a remote turn's stream (request
//! sent, headers, each chunk) instead of the engine's spans; the chat's UI thread (each frame
//! drawn and its cost) as a process of its own.
//!
//! The clock is the metrics' own: a turn starts at its `submitted_at` (docs/metrics.md, "The
//! clock and the origin"), placed at its offset from the trace's origin (the first turn's
//! submission, or an earlier frame), and every event of the turn is that offset plus the
//! metrics' offset, in µs. A `request submitted` instant marks each turn's start, so TTFT and
//! every ITL gap read off the trace are the ones `run --json` reports.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::profile::{classify, ProfileRecord};
use super::remote::RemoteTimeline;
use super::TurnTimeline;

/// µs as the trace format wants them (fractional: no rounding of the metrics' offsets).
fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

const ENGINE: u32 = 1;
const NODES: u32 = 2;
const STREAM: u32 = 3;
const UI: u32 = 1;

/// The process of the chat's UI thread: after every turn's (turns are numbered from 1).
pub const UI_PID: u32 = 0;

pub(crate) fn span(
    pid: u32,
    tid: u32,
    name: &str,
    cat: &str,
    from: Duration,
    to: Duration,
) -> Value {
    json!({
        "name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
        "ts": us(from), "dur": us(to.saturating_sub(from)),
    })
}

pub(crate) fn instant(
    pid: u32,
    tid: u32,
    name: &str,
    cat: &str,
    at: Duration,
    args: Value,
) -> Value {
    json!({
        "name": name, "cat": cat, "ph": "i", "s": "t", "pid": pid, "tid": tid,
        "ts": us(at), "args": args,
    })
}

pub(crate) fn thread_name(pid: u32, tid: u32, name: &str) -> Value {
    json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
}

pub(crate) fn process_name(pid: u32, name: &str) -> Value {
    json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
}

/// Where a trace's clock starts: the earliest of the turns' submissions and `others`; `None`
/// when none is known.
pub fn origin<'a>(
    turns: impl IntoIterator<Item = &'a TurnTimeline>,
    others: impl IntoIterator<Item = Instant>,
) -> Option<Instant> {
    turns
        .into_iter()
        .filter_map(|t| t.submitted_at)
        .chain(others)
        .min()
}

/// A turn's offset from the trace's origin (zero for a turn with no known submission).
pub fn base(origin: Option<Instant>, t: &TurnTimeline) -> Duration {
    match (origin, t.submitted_at) {
        (Some(o), Some(s)) => s.saturating_duration_since(o),
        _ => Duration::ZERO,
    }
}

/// The events of one turn as process `pid` (the turn's number), placed `base` after the
/// trace's origin.
pub fn turn_events(
    pid: u32,
    label: &str,
    base: Duration,
    t: &TurnTimeline,
    profile: Option<&ProfileRecord>,
) -> Vec<Value> {
    let submitted = instant(pid, ENGINE, "request submitted", "turn", base, json!({}));
    let mut ev = vec![process_name(pid, label), submitted];
    let token_tid = match &t.remote {
        Some(r) => {
            ev.extend(stream_events(pid, base, r));
            STREAM
        }
        None => {
            ev.extend(engine_events(pid, base, t));
            ENGINE
        }
    };
    for (i, &ready) in t.token_ready_at.iter().enumerate() {
        let (at, index) = (base + ready, json!({ "index": i }));
        ev.push(instant(pid, token_tid, "token", "token", at, index));
    }
    if let Some(p) = profile {
        ev.extend(node_events(pid, base, &t.pass_started_at, p));
    }
    ev
}

/// The engine thread's spans of a local turn.
fn engine_events(pid: u32, base: Duration, t: &TurnTimeline) -> Vec<Value> {
    let engine_span = |name: &str, cat: &str, from: Duration, to: Duration| {
        span(pid, ENGINE, name, cat, base + from, base + to)
    };
    let mut ev = vec![thread_name(pid, ENGINE, "engine thread")];
    let queue = t.queue.unwrap_or_default();
    ev.push(engine_span("queue", "turn", Duration::ZERO, queue));
    let tt_end = queue + t.template_tokenize.unwrap_or_default();
    ev.push(engine_span("template + tokenize", "turn", queue, tt_end));
    let mut from = tt_end;
    for (i, &end) in t.prefill_chunk_done_at.iter().enumerate() {
        let name = format!("prefill micro-batch {i}");
        ev.push(engine_span(&name, "prefill", from, end));
        from = end;
    }
    if let (Some(done), Some(&first)) = (t.prefill_done_at, t.token_ready_at.first()) {
        ev.push(engine_span("first sample", "decode", done, first));
    }
    // The host gap before each decode call runs from the end of the one before (or of
    // prefill): sampling, detokenizing and the token's event.
    let mut last_end = t.prefill_done_at.unwrap_or(tt_end);
    for (k, (&start, &end)) in t.pass_started_at.iter().zip(&t.pass_done_at).enumerate() {
        ev.push(engine_span("host", "host", last_end, start));
        ev.push(engine_span(&format!("decode {k}"), "decode", start, end));
        last_end = end;
    }
    ev
}

/// A remote turn's stream as the client saw it: the wait for the response headers, the
/// stream from the headers to its end, and each content chunk at its arrival.
fn stream_events(pid: u32, base: Duration, r: &RemoteTimeline) -> Vec<Value> {
    let stream_span = |name: &str, from: Duration, to: Duration| {
        span(pid, STREAM, name, "remote", base + from, base + to)
    };
    let mut ev = vec![thread_name(pid, STREAM, "remote stream")];
    let headers = r.headers_at.unwrap_or_default();
    let mut wait = stream_span("request sent → headers", Duration::ZERO, headers);
    wait["args"] = json!({
        "network_rtt_ms": r.network_rtt.map(super::ms),
    });
    ev.push(wait);
    let mut stream = stream_span("stream", headers, r.finished_at.max(headers));
    stream["args"] = json!({
        "usage": r.usage.map(|u| json!({
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "cached_tokens": u.cached_tokens,
        })),
    });
    ev.push(stream);
    for (i, c) in r.chunks.iter().enumerate() {
        let args = json!({"index": i, "cumulative_tokens": c.cumulative_tokens});
        ev.push(instant(pid, STREAM, "chunk", "chunk", base + c.at, args));
    }
    ev
}

/// The profiled steps' nodes, each inside its decode call's span (`call_starts`: the offset of
/// every decode call's start, profiled or not, in order).
pub(crate) fn node_events(
    pid: u32,
    base: Duration,
    call_starts: &[Duration],
    p: &ProfileRecord,
) -> Vec<Value> {
    let mut ev = vec![thread_name(pid, NODES, "profiled steps' nodes")];
    let profiled_calls = p
        .calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.1)
        .map(|(k, _)| k);
    for (step, k) in p.steps.iter().zip(profiled_calls) {
        let Some(&call_start) = call_starts.get(k) else {
            continue;
        };
        let (placed, by_name) = classify(&step.nodes);
        for (n, (part, _)) in step.nodes.iter().zip(&placed) {
            let name = if by_name { part.label() } else { n.op };
            let from = base + call_start + n.start;
            let mut e = span(pid, NODES, name, "node", from, from + n.time);
            e["args"] = json!({"op": n.op, "node": n.name, "weight": n.weight, "decode": k});
            ev.push(e);
        }
    }
    ev
}

/// The chat's UI thread: each frame drawn, `(start, cost)` as offsets from the trace's
/// origin.
pub fn ui_events(frames: &[(Duration, Duration)]) -> Vec<Value> {
    let mut ev = vec![
        process_name(UI_PID, "tokscope chat · UI"),
        thread_name(UI_PID, UI, "UI thread"),
    ];
    ev.extend(
        frames
            .iter()
            .map(|&(start, cost)| span(UI_PID, UI, "frame", "ui", start, start + cost)),
    );
    ev
}

/// A turn as the chat hands it to `/trace`.
#[derive(Debug, Clone, PartialEq)]
pub struct TracedTurn {
    pub label: String,
    pub timeline: TurnTimeline,
    pub profile: Option<Box<ProfileRecord>>,
}

/// The chat's trace: every turn at its submission and the UI's frames (`(start, cost)`), on
/// one clock starting at the earliest of them. Returns the document and the number of frames
/// in it (those from the first turn's submission on; earlier ones are left out).
pub fn chat_document(turns: &[TracedTurn], frames: &[(Instant, Duration)]) -> (Value, usize) {
    let o = origin(turns.iter().map(|t| &t.timeline), []);
    let mut ev = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let pid = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let (at, profile) = (base(o, &t.timeline), t.profile.as_deref());
        ev.extend(turn_events(pid, &t.label, at, &t.timeline, profile));
    }
    let kept: Vec<(Duration, Duration)> = frames
        .iter()
        .filter_map(|&(at, cost)| Some((at.checked_duration_since(o?)?, cost)))
        .collect();
    ev.extend(ui_events(&kept));
    (document(ev), kept.len())
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
        let ev = turn_events(1, "turn 1", Duration::ZERO, &t, None);
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

    #[test]
    fn a_turn_sits_at_its_submission_and_a_remote_turn_shows_its_stream_not_the_engine() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let first = TurnTimeline {
            submitted_at: Some(t0),
            token_ready_at: vec![ms(5)],
            ..TurnTimeline::default()
        };
        let remote = RemoteTimeline {
            headers_at: Some(ms(3)),
            chunks: vec![
                super::super::remote::ChunkMark {
                    at: ms(7),
                    cumulative_tokens: None,
                    reasoning: false,
                },
                super::super::remote::ChunkMark {
                    at: ms(9),
                    cumulative_tokens: None,
                    reasoning: false,
                },
            ],
            finished_at: ms(10),
            sent_at: Some(t0 + ms(100)),
            ..RemoteTimeline::default()
        };
        let second = remote.turn_timeline();
        let o = origin([&first, &second], [t0 + ms(1)]);
        assert_eq!(o, Some(t0));
        assert_eq!(base(o, &second), ms(100));
        let ev = turn_events(2, "turn 2", base(o, &second), &second, None);
        let ts = |name: &str| -> Vec<f64> {
            ev.iter()
                .filter(|e| e["name"] == name)
                .map(|e| e["ts"].as_f64().unwrap())
                .collect()
        };
        assert_eq!(ts("request submitted"), vec![100_000.0]);
        assert_eq!(ts("chunk"), vec![107_000.0, 109_000.0]);
        assert_eq!(ts("token"), vec![107_000.0, 109_000.0]);
        assert_eq!(ts("request sent → headers"), vec![100_000.0]);
        assert_eq!(ts("stream"), vec![103_000.0]);
        assert!(
            ts("queue").is_empty(),
            "no engine spans for a server's turn"
        );
        let ui = ui_events(&[(ms(2), ms(1))]);
        let frame = ui.iter().find(|e| e["name"] == "frame").unwrap();
        assert_eq!(
            (frame["ts"].as_f64(), frame["dur"].as_f64()),
            (Some(2_000.0), Some(1_000.0))
        );
        assert_eq!(frame["pid"], UI_PID);
    }
}
