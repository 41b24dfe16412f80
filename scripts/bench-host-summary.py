#!/usr/bin/env python3
"""Summarise the raw output of scripts/bench-host.sh (its JSON lines; comment lines ignored).

Prints, per binary label, model, temperature and sampling place: the runs' host µs/tok (each
run's own figure, in run order, and their median) and the median of each part; then `run` ÷
`bench` tg on the tiny model: per round, the mean of the round's two runs over the mean of its
two benches (the round's four processes adjacent in time, in ABBA order), and the median of
those ratios with twice its robust standard error (1.2533 × 1.4826 × MAD ÷ √n, as
scripts/compare-llama-bench.sh judges its rounds).

Usage: scripts/bench-host-summary.py RAW_FILE
"""
import json
import os
import re
import statistics
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_ratio import paired  # noqa: E402


def main(path):
    runs = OrderedDict()
    ratio_runs, ratio_benches = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r["label"] == "after-ratio":
                (ratio_benches if "bench" in r else ratio_runs).append(r)
                continue
            key = (r["label"], r["model"], r["temp"], r.get("sampling") or "")
            runs.setdefault(key, []).append(r)
    print("| binary | model | temp | sampling | host µs/tok per run | median | median parts (µs/tok) | decode tok/s median |")
    print("|---|---|---|---|---|---|---|---|")
    for (label, model, temp, place), rs in runs.items():
        own = [r["host_us_own"] if r.get("host_us_own") is not None else r["host_us_derived"] for r in rs]
        parts = {}
        for r in rs:
            for name, value in re.findall(r"(\w+)_us=([0-9.]+)", r.get("parts") or ""):
                parts.setdefault(name, []).append(float(value))
        part_text = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in parts.items())
        tps = statistics.median(r["decode_tok_per_s"] for r in rs)
        print(f"| {label} | {model} | {temp:g} | {place} | {', '.join(f'{x:.0f}' for x in own)} | "
              f"**{statistics.median(own):.1f}** | {part_text} | {tps:.1f} |")
    if ratio_runs and len(ratio_runs) == len(ratio_benches):
        rounds = len(ratio_runs) // 2
        ratios = []
        for i in range(rounds):
            run = statistics.mean(r["decode_tok_per_s"] for r in ratio_runs[2 * i:2 * i + 2])
            bench = statistics.mean(r["tok_per_s"] for r in ratio_benches[2 * i:2 * i + 2])
            ratios.append(run / bench)
        g, u = paired(ratios)
        print()
        print(f"run ÷ bench tg on {ratio_runs[0]['model']}, {rounds} rounds: median **{g:.3f} ± {u:.3f}** "
              f"(2 robust SE); per round {min(ratios):.3f}–{max(ratios):.3f}; "
              f"run {statistics.median(r['decode_tok_per_s'] for r in ratio_runs):.1f} tok/s, "
              f"bench {statistics.median(r['tok_per_s'] for r in ratio_benches):.1f} tok/s (medians)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
