#!/usr/bin/env bash
# `tokscope run`'s decode tok/s against `tokscope bench`'s tg on the same file, with `run` at
# one or more context sizes, side by side in rounds whose order rotates (each round: bench and
# one run per context, each a fresh process). Prints one JSON line per process, then per
# context the median of the rounds' ratios run ÷ bench with 2 robust standard errors
# (1.2533 × 1.4826 × MAD ÷ √n), and the run's mean decode call against bench's time per token.
#
# Usage: scripts/run-vs-bench.sh MODEL [ROUNDS] [TOKENS] [THREADS] [CONTEXTS]
#   CONTEXTS  run's -c values, comma-separated (default 4096, run's default)
# bench sizes its context to the test (llama-bench's rule: prompt + generated tokens), so a
# small CONTEXT puts `run` in the same conditions.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/run-vs-bench.sh MODEL [ROUNDS] [TOKENS] [THREADS] [CONTEXTS]}
rounds=${2:-12}
tokens=${3:-128}
threads=${4:-2}
IFS=, read -r -a contexts <<<"${5:-4096}"
bin=${TOKSCOPE:-target/release/tokscope}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

one() { # round what
  local round=$1 what=$2
  if [ "$what" = bench ]; then
    "$bin" bench -m "$model" -p 0 -n "$tokens" -r 3 -t "$threads" --no-probe -o json 2>/dev/null |
      python3 -c '
import json, sys
rows = json.load(sys.stdin)
rows = rows if isinstance(rows, list) else rows.get("rows", [rows])
r = rows[0]
print(json.dumps({"round": int(sys.argv[1]), "what": "bench", "tok_per_s": r["tok_per_s_mean"],
  "ms_per_token": 1000 / r["tok_per_s_mean"]}))' "$round"
  else
    "$bin" run -m "$model" -p "Write a long story about a lighthouse keeper." --temp 0 \
      -n "$tokens" --ignore-eos -t "$threads" -c "$what" --json 2>/dev/null |
      python3 -c '
import json, sys
m = json.load(sys.stdin)["metrics"]
print(json.dumps({"round": int(sys.argv[1]), "what": "run", "ctx": int(sys.argv[2]),
  "tok_per_s": m["decode_tok_per_s"], "decode_call_ms": m["decode_compute_ms"] / max(m["decode_calls"], 1)}))' "$round" "$what"
  fi
}

echo "# run-vs-bench: $(date -u +%FT%TZ) model=$(basename "$model") rounds=$rounds tokens=$tokens threads=$threads contexts=${contexts[*]}; $(nproc) cpus, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg); $("$bin" --version)"
items=(bench "${contexts[@]}")
for r in $(seq 1 "$rounds"); do
  # Rotate the order: each item goes first in turn, and every other round runs backwards.
  n=${#items[@]}
  order=()
  for ((i = 0; i < n; i++)); do order+=("${items[$(((i + r) % n))]}"); done
  if [ $((r % 2)) -eq 0 ]; then
    rev=(); for ((i = n - 1; i >= 0; i--)); do rev+=("${order[$i]}"); done; order=("${rev[@]}")
  fi
  for what in "${order[@]}"; do one "$r" "$what" | tee -a "$raw"; done
done
echo "# end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$raw" "$(pwd)/scripts" <<'PY'
import json, statistics, sys
sys.path.insert(0, sys.argv[2])
from paired_ratio import paired
recs = [json.loads(l) for l in open(sys.argv[1])]
bench = {r["round"]: r for r in recs if r["what"] == "bench"}
ctxs = sorted({r["ctx"] for r in recs if r["what"] == "run"})
for c in ctxs:
    runs = [r for r in recs if r["what"] == "run" and r["ctx"] == c]
    ratios = [r["tok_per_s"] / bench[r["round"]]["tok_per_s"] for r in runs]
    calls = [r["decode_call_ms"] / bench[r["round"]]["ms_per_token"] for r in runs]
    g, u = paired(ratios)
    gc, uc = paired(calls)
    print(f"run -c {c} ÷ bench tg: median {g:.3f} ± {u:.3f} over {len(ratios)} rounds "
          f"(rounds {min(ratios):.3f}–{max(ratios):.3f}); run's decode call ÷ bench's time per "
          f"token {gc:.3f} ± {uc:.3f}")
if len(ctxs) == 2:
    a, b = ctxs
    by = {(r["round"], r["ctx"]): r["tok_per_s"] for r in recs if r["what"] == "run"}
    ratios = [by[(k, a)] / by[(k, b)] for k in bench if (k, a) in by and (k, b) in by]
    g, u = paired(ratios)
    print(f"run -c {a} ÷ run -c {b}: median {g:.3f} ± {u:.3f} over {len(ratios)} rounds")
PY
