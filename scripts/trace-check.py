#!/usr/bin/env python3
"""An independent reader of tokscope's traces (docs/metrics.md, "Trace").

    scripts/trace-check.py TRACE.json [REPORT.json]

It reads the Chrome Trace Event JSON as a viewer does, without tokscope's code:

1. The schema of the Trace Event Format (the fields every viewer needs: a phase it knows, a
   name, integer pid/tid, µs timestamps, a non-negative duration for complete events, a scope
   for instant events, names for the metadata events), and that the complete events of each
   thread nest or follow one another (Perfetto's trace processor drops a slice that overlaps
   another on its thread without nesting in it).
2. With REPORT.json (what `run --json`, `run --url --json`, `run --turns N --json` or
   `bench -o json` printed for the same run): every figure it can recompute from the trace
   alone, held to 1e-6 ms (the trace's µs are the metrics' own offsets):
   - run: each token's offset from its turn's `request submitted` event is `token_ready_ms`,
     the first is `ttft_ms`, the mean and largest gap are `itl.mean_ms` and `itl.max_ms`, and
     there is one `decode N` span per decode call;
   - run --url: each `chunk` event is `chunk_ms`, the first `ttft_ms`, the token gaps' mean
     `itl.mean_ms`;
   - bench: per test, the gaps between the tokens of each repetition, pooled, have the row's
     `itl_mean_ms`, and each repetition's tokens over its `timed_ms` are `samples_tok_per_s`.

Exits 0 when every check holds, 1 with the first failure named, 2 on a usage error. Perfetto's
own trace processor is not on PyPI as a binary (the `perfetto` wheel downloads it at first use),
so on a machine without the network this script is the independent reader.
"""

import json
import sys

TOL_MS = 1e-6
PHASES = set("BEXiIbneCMsftPOND(),RcvV")


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def close(a, b, what):
    check(a is not None and b is not None and abs(a - b) <= TOL_MS, f"{what}: {a} in the trace, {b} in the report")


def schema(doc):
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    check(isinstance(events, list) and events, "no traceEvents array")
    for e in events:
        check(isinstance(e, dict), f"an event is not an object: {e!r}")
        ph = e.get("ph")
        check(isinstance(ph, str) and ph in PHASES, f"unknown phase: {e}")
        check(isinstance(e.get("name"), str), f"no name: {e}")
        check(isinstance(e.get("pid"), int), f"pid is not an integer: {e}")
        if ph == "M":
            check(e["name"] in ("process_name", "thread_name", "process_sort_index",
                                "thread_sort_index", "process_labels"), f"unknown metadata: {e}")
            check(isinstance(e.get("args", {}).get("name", ""), str), f"metadata without a name: {e}")
            if e["name"] == "thread_name":
                check(isinstance(e.get("tid"), int), f"thread_name without a tid: {e}")
            continue
        check(isinstance(e.get("tid"), int), f"tid is not an integer: {e}")
        ts = e.get("ts")
        check(isinstance(ts, (int, float)) and ts >= 0, f"bad ts: {e}")
        if ph == "X":
            check(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, f"bad dur: {e}")
        if ph in "iI":
            check(e.get("s", "t") in ("g", "p", "t"), f"bad instant scope: {e}")
        if "args" in e:
            check(isinstance(e["args"], dict), f"args is not an object: {e}")
    # Complete events on one thread nest or follow one another.
    tracks = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    eps = 1e-3  # µs
    for key, spans in tracks.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ = []
        for start, end, name in spans:
            while open_ and open_[-1][1] <= start + eps:
                open_.pop()
            if open_:
                check(end <= open_[-1][1] + eps,
                      f"'{name}' [{start}, {end}] overlaps '{open_[-1][2]}' {open_[-1][:2]} on track {key} without nesting")
            open_.append((start, end, name))
    return events


def by_pid(events, name, prefix=False):
    out = {}
    for e in events:
        if e["ph"] != "M" and (e["name"].startswith(name) if prefix else e["name"] == name):
            out.setdefault(e["pid"], []).append(e)
    for v in out.values():
        v.sort(key=lambda e: e["ts"])
    return out


def run_turn(events, pid, report):
    submitted = by_pid(events, "request submitted").get(pid)
    check(submitted and len(submitted) == 1, f"process {pid}: no single 'request submitted'")
    t0 = submitted[0]["ts"]
    tokens = [(e["ts"] - t0) / 1e3 for e in by_pid(events, "token").get(pid, [])]
    m = report["metrics"]
    if "chunk_ms" in report:  # run --url
        chunks = [(e["ts"] - t0) / 1e3 for e in by_pid(events, "chunk").get(pid, [])]
        check(len(chunks) == len(report["chunk_ms"]), f"{len(chunks)} chunks, the report {len(report['chunk_ms'])}")
        for i, (a, b) in enumerate(zip(chunks, report["chunk_ms"])):
            close(a, b, f"chunk {i}")
        close(chunks[0], m["ttft_ms"], "TTFT")
    else:
        ready = report["token_ready_ms"]
        check(len(tokens) == len(ready), f"{len(tokens)} tokens, the report {len(ready)}")
        for i, (a, b) in enumerate(zip(tokens, ready)):
            close(a, b, f"token {i}")
        close(tokens[0], m["ttft_ms"], "TTFT")
        decodes = [e for e in events if e["pid"] == pid and e["ph"] == "X" and e["name"].startswith("decode ")]
        check(len(decodes) == m["decode_calls"], f"{len(decodes)} decode spans, {m['decode_calls']} decode calls")
    gaps = [b - a for a, b in zip(tokens, tokens[1:])]
    if gaps and m.get("itl"):
        close(sum(gaps) / len(gaps), m["itl"]["mean_ms"], "mean ITL")
        if "max_ms" in m["itl"]:
            close(max(gaps), m["itl"]["max_ms"], "largest ITL")
    return len(tokens)


def bench(events, rows):
    runs = by_pid(events, "repetition ", prefix=True)
    tokens = by_pid(events, "token")
    pids = sorted(runs)
    check(len(pids) == len(rows), f"{len(pids)} traced tests, {len(rows)} rows")
    n = 0
    for pid, row in zip(pids, rows):
        reps = runs[pid]
        check(len(reps) == len(row["samples_tok_per_s"]), f"{row['test']}: {len(reps)} repetitions traced")
        for rep, want in zip(reps, row["samples_tok_per_s"]):
            got = row["n_tokens"] / rep["args"]["timed_ms"] * 1e3
            check(abs(got - want) <= 1e-9 * want, f"{row['test']}: {got} tok/s in the trace, {want} in the row")
        by_rep = {}
        for e in tokens.get(pid, []):
            by_rep.setdefault(e["args"]["repetition"], []).append(e["ts"] / 1e3)
        gaps = [b - a for ts in by_rep.values() for a, b in zip(ts, ts[1:])]
        if row.get("itl_mean_ms") is not None:
            check(gaps, f"{row['test']}: no token gaps in the trace")
            close(sum(gaps) / len(gaps), row["itl_mean_ms"], f"{row['test']}: mean ITL")
        n += len(gaps)
    return n


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], encoding="utf-8") as f:
            events = schema(json.load(f))
        said = f"{len(events)} events: the schema holds, every track nests"
        if len(sys.argv) == 3:
            with open(sys.argv[2], encoding="utf-8") as f:
                report = json.load(f)
            if isinstance(report, list) and report and "samples_tok_per_s" in report[0]:
                said += f"; {bench(events, report)} token gaps agree with the bench rows"
            else:
                turns = report if isinstance(report, list) else [report]
                n = sum(run_turn(events, pid, r) for pid, r in enumerate(turns, start=1))
                said += f"; {len(turns)} turn(s), {n} tokens agree with the report"
        print(f"trace-check: {said}")
        return 0
    except (Failed, KeyError, TypeError, ValueError, IndexError) as e:
        print(f"trace-check: FAILED: {type(e).__name__ if not isinstance(e, Failed) else ''}{e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
