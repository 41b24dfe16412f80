//! `bench --trace FILE.json`: every timed repetition on one clock (the bench's start), one
//! process per test. A repetition is a span; inside it the prompt, the first sample and each
//! generation step (from the end of the one before: the host's choice of the next token and
//! the decode call), an instant per generated token at the step's end (the instants the
//! row's ITL gaps are taken from), and with `--profile` each profiled step's decode call and
//! its nodes (`metrics::trace`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::llama::measure::{Sample, TestSpec};
use crate::metrics::trace::{instant, node_events, process_name, span, thread_name};

const RUNS: u32 = 1;

/// The events of one test's repetitions (`first_rep`: the number of the first one, from 1).
pub(crate) fn events(
    pid: u32,
    label: &str,
    origin: Instant,
    test: &TestSpec,
    first_rep: usize,
    samples: &[Sample],
) -> Vec<Value> {
    let mut ev = vec![
        process_name(pid, label),
        thread_name(pid, RUNS, "timed repetitions"),
    ];
    let span = |name: &str, cat, from, to| span(pid, RUNS, name, cat, from, to);
    for (i, s) in samples.iter().enumerate() {
        let Some(started) = s.started else {
            continue;
        };
        let base = started.saturating_duration_since(origin);
        let at = |d: Duration| base + d;
        let rep = first_rep + i;
        // The span covers every step; `total` (what the row's t/s divides by: pg leaves out
        // the first sample) is in its arguments.
        let end = s.steps_at.last().copied().unwrap_or_default().max(s.total);
        let mut whole = span(&format!("repetition {rep}"), "run", base, at(end));
        whole["args"] = json!({
            "timed_ms": crate::metrics::ms(s.total),
            "tokens_generated": s.tokens_generated,
        });
        ev.push(whole);
        match (test, s.prefill, s.ttft) {
            (TestSpec::Batch { .. }, _, Some(ttft)) => {
                ev.push(span("prompts + first samples", "prefill", base, at(ttft)))
            }
            (_, Some(prefill), ttft) => {
                ev.push(span("prompt", "prefill", base, at(prefill)));
                if let Some(ttft) = ttft {
                    ev.push(span("first sample", "decode", at(prefill), at(ttft)));
                }
            }
            _ => {}
        }
        for (k, w) in s.steps_at.windows(2).enumerate() {
            ev.push(span(&format!("step {k}"), "step", at(w[0]), at(w[1])));
            ev.push(instant(
                pid,
                RUNS,
                "token",
                "token",
                at(w[1]),
                json!({"index": k, "repetition": rep}),
            ));
        }
        if let Some(p) = &s.profile {
            // Each decode call ends at its step's end; its start is that less the call.
            let starts: Vec<Duration> = p
                .calls
                .iter()
                .zip(s.steps_at.iter().skip(1))
                .map(|(&(call, _), &end)| end.saturating_sub(call))
                .collect();
            for (k, (&(call, profiled), &start)) in p.calls.iter().zip(&starts).enumerate() {
                if profiled {
                    let name = format!("decode {k} (profiled)");
                    let mut d = span(&name, "decode", at(start), at(start + call));
                    d["args"] = json!({"repetition": rep});
                    ev.push(d);
                }
            }
            ev.extend(node_events(pid, base, &starts, p));
        }
    }
    ev
}
