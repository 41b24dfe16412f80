#!/usr/bin/env bash
# Scoring against a reference leaves the speed figures alone (issue 34, item 5).
#
# ABBA: `run --turns 3 --ignore-eos` with `--ref REF` against without, in alternating order
# (off, on, on, off, ...). Each run's decode tok/s is the mean over its turns, and its TTFT the
# mean of turns 2 and 3 (each of those starts after the previous answer was scored, when
# --ref is on). Each pair's ratios on/off; the median and twice its robust standard error
# (scripts/paired_ratio.py), and the range. The target: decode >= 0.98 of without. The
# scoring's own time (score_ms per answer) is printed beside: it is spent after each answer,
# on the engine thread, outside every figure.
#
# Usage: scripts/bench-ref.sh MODEL.gguf REF.gguf
#   ROUNDS (default 8 pairs), TOKENS (default 64), THREADS (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 MODEL.gguf REF.gguf" >&2; exit 2; }
model=$1 reference=$2
rounds=${ROUNDS:-8}
tokens=${TOKENS:-64}
threads=${THREADS:-2}
bin=$PWD/target/release/tokscope
cargo build --release --locked --bins >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-bench-ref.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · $(nproc) cores · threads $threads · $tokens tokens × 3 turns · $rounds ABBA pairs"
grep -m1 'model name' /proc/cpuinfo | sed 's/^/# /'
echo "# model $(basename "$model") · reference $(basename "$reference")"
cat "$model" "$reference" >/dev/null

one() { # $1 off|on; prints "decode_mean ttft_later_mean score_ms_mean"
  local extra=()
  [ "$1" = on ] && extra=(--ref "$reference")
  "$bin" run -m "$model" -p "Tell me a story about a lighthouse." -n "$tokens" --ignore-eos \
    --temp 0 -t "$threads" --turns 3 --json "${extra[@]}" >"$work/r.json" 2>"$work/r.err" \
    || { cat "$work/r.err" >&2; exit 1; }
  python3 - "$work/r.json" <<'PY'
import json, sys
turns = json.load(open(sys.argv[1]))
dec = [t["metrics"]["decode_tok_per_s"] for t in turns]
ttft = [t["metrics"]["ttft_ms"] for t in turns[1:]]
score = [t["quality"]["score_ms"] for t in turns if t.get("quality")]
print(sum(dec) / len(dec), sum(ttft) / len(ttft), sum(score) / len(score) if score else 0.0)
PY
}

offs=() ons=() toffs=() tons=() scores=()
for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then
    read -r a ta _ < <(one off); read -r b tb s < <(one on)
  else
    read -r b tb s < <(one on); read -r a ta _ < <(one off)
  fi
  offs+=("$a"); ons+=("$b"); toffs+=("$ta"); tons+=("$tb"); scores+=("$s")
  printf 'pair %d: decode off %.2f on %.2f tok/s (on/off %.3f) · TTFT of turns 2-3 off %.1f on %.1f ms · score %.0f ms per answer\n' \
    "$((i + 1))" "$a" "$b" "$(python3 -c "print($b/$a)")" "$ta" "$tb" "$s"
done
python3 - "${offs[*]}" "${ons[*]}" "${toffs[*]}" "${tons[*]}" "${scores[*]}" <<'PY'
import statistics, sys
sys.path.insert(0, "scripts")
from paired_ratio import paired
off, on, toff, ton, score = ([float(x) for x in a.split()] for a in sys.argv[1:6])
r = [b / a for a, b in zip(off, on)]
m, e = paired(r)
print(f"decode tok/s with --ref / without: median {m:.3f} ± {e:.3f} (range {min(r):.3f}-{max(r):.3f}, {len(r)} pairs); target >= 0.98")
t = [b / a for a, b in zip(toff, ton)]
m, e = paired(t)
print(f"TTFT of turns 2-3 with --ref / without: median {m:.3f} ± {e:.3f} (range {min(t):.3f}-{max(t):.3f})")
print(f"scoring, after each answer: median {statistics.median(score):.0f} ms per answer")
PY
