#!/usr/bin/env bash
# Which STREAM kernel is the CPU decode ceiling? For each thread count, the probe's read, copy
# and triad figures (`tokscope doctor bandwidth --reprobe`) beside the bandwidth the best decode
# actually reached (tg tok/s × bytes read per token, from `tokscope bench`), on models far
# larger than the last-level cache. A ceiling is honest when no decode goes above it and the
# best decode comes close: the read kernel (decode only reads) against copy and triad (which
# count their writes too).
#
#   scripts/bench-cpu-ceiling.sh [--out DIR] [--threads 1,2] [--rounds 5] MODEL.gguf...
#
# Run it on an idle machine. Raw outputs (the probe report, every bench JSON) go to DIR
# (default benchmarks/notes/cpu-ceiling-<date>); the table goes to stdout and DIR/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

out="benchmarks/notes/cpu-ceiling-$(date -u +%Y%m%d)"
threads="1,2"
rounds=5
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench-cpu-ceiling.sh: unknown flag $1" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
[ "${#models[@]}" -gt 0 ] || { echo "bench-cpu-ceiling.sh: give at least one model" >&2; exit 2; }
tokscope=./target/release/tokscope
[ -x "$tokscope" ] || { echo "bench-cpu-ceiling.sh: build first (cargo build --release)" >&2; exit 2; }
mkdir -p "$out"

{
  echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) · load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$tokscope" doctor bandwidth --reprobe -t "$threads"
} | tee "$out/probe.txt" >&2

IFS=, read -r -a counts <<<"$threads"
for model in "${models[@]}"; do
  name=$(basename "$model" .gguf)
  for t in "${counts[@]}"; do
    "$tokscope" bench -m "$model" -p 0 -n 64 -r "$rounds" -t "$t" -o json >"$out/bench-$name-t$t.json"
  done
done

python3 - "$out" <<'EOF' | tee "$out/summary.txt"
import json, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
probe = (out / "probe.txt").read_text()
# The cache listing: "  CPU · N thread(s) · X GB/s (read R, copy C, triad T) …" per entry.
kernels = {}
for line in probe.splitlines():
    m = re.search(r"(\d+) threads? · [\d.]+ GB/s \(read ([\d.]+), copy ([\d.]+), triad ([\d.]+)\)", line)
    if m and "not used" not in line:
        kernels[int(m.group(1))] = tuple(float(m.group(i)) for i in (2, 3, 4))
print(f"{'model':<28} {'t':>2} {'tg best':>8} {'bytes/tok':>10} {'decode GB/s':>11} {'read':>6} {'copy':>6} {'triad':>6} {'÷read':>6} {'÷copy':>6}")
for path in sorted(out.glob("bench-*.json")):
    rows = json.loads(path.read_text())
    for r in rows if isinstance(rows, list) else [rows]:
        if r.get("kind") != "tg" or not r.get("bytes_per_token"):
            continue
        t = r["params"]["threads"]
        best = max(r["samples_tok_per_s"])
        gbs = best * r["bytes_per_token"] / 1e9
        read, copy, triad = kernels.get(t, (float("nan"),) * 3)
        name = r["params"]["model"].rsplit("/", 1)[-1][:28]
        print(f"{name:<28} {t:>2} {best:>8.2f} {r['bytes_per_token']/1e6:>8.0f}MB {gbs:>11.2f} {read:>6.1f} {copy:>6.1f} {triad:>6.1f} {gbs/read:>6.2f} {gbs/copy:>6.2f}")
EOF
