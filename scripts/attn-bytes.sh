#!/usr/bin/env bash
# The bytes attention reads against physics (issue 58, item 1), with `run --profile --json`
# on the demo model (Gemma 3 270M: 3 global layers, 15 window layers of 512 cells) at several
# depths: the CPU flash-attention kernel reads the cells its mask leaves, so attention time
# per byte read should be roughly constant across depths. Printed beside the new figure: the
# old one (the views: the cache padded to 256 cells on every layer, valid below depth 512),
# whose time per byte falls as the depth grows inside one 256-cell step.
# Each depth is run ROUNDS times (default 3), the order reversed every other round; each run
# profiles one decode step in 2 of TOKENS; the figures are the medians of the runs' means.
#
# Usage: scripts/attn-bytes.sh [DEMO_MODEL.gguf]   THREADS (default 1), ROUNDS, TOKENS, TOKSCOPE_BIN,
#        CTX (default 8192), WORDS (prompt lengths in words, default "2 200 1000 4000")
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
tokens=${TOKENS:-24}
threads=${THREADS:-1}
read -r -a words <<<"${WORDS:-2 200 1000 4000}"
# TOKSCOPE_BIN: a binary built before (a copy, so that a build meanwhile cannot replace it).
bin=${TOKSCOPE_BIN:-$PWD/target/release/tokscope}
[ -n "${TOKSCOPE_BIN:-}" ] || cargo build --release --locked --bins >&2
demo=${1:-${TOKSCOPE_DEMO_MODEL:-${XDG_DATA_HOME:-$HOME/.local/share}/tokscope/models/gemma-3-270m-q4_k_m.gguf}}
[ -f "$demo" ] || { echo "no demo model at $demo: run tokscope fetch-demo, or pass its path" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-attn-bytes.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · threads $threads · $tokens tokens, 1 in 2 profiled · $rounds rounds"
grep -m1 'model name' /proc/cpuinfo | sed 's/^/# /'
echo "# load before: $(uptime)"
cat "$demo" >/dev/null
for ((r = 0; r < rounds; r++)); do
  order=("${words[@]}")
  if ((r % 2 == 1)); then
    order=(); for ((i = ${#words[@]} - 1; i >= 0; i--)); do order+=("${words[i]}"); done
  fi
  for w in "${order[@]}"; do
    prompt=$(python3 -c "import sys; print(' '.join(['word'] * int(sys.argv[1])))" "$w")
    "$bin" run -m "$demo" -p "$prompt" -n "$tokens" --ignore-eos --temp 0 -t "$threads" -c "${CTX:-8192}" \
      --json --profile --profile-rate 2 >"$work/r.json" 2>"$work/r.err" \
      || { cat "$work/r.err" >&2; exit 1; }
    python3 - "$work/r.json" "$w" <<'PY' | tee -a "$work/runs"
import json, sys
run = json.load(open(sys.argv[1]))
p = run["profile"]
m = p["mean"]
a = next(x for x in m["parts"] if x["part"] == "attn over cache")
print(json.dumps({"words": int(sys.argv[2]), "depth": m["depth"], "attn_ms": a["ms"],
                  "kv_bytes": a["kv_bytes"], "nodes": a["nodes"], "caveats": a["caveats"],
                  "llama_eval_ms": m["llama_eval_ms"], "sum_ms": m["sum_ms"],
                  "correction": p["correction"], "context_used": run["context_used"],
                  "roofline_bytes_per_token": (run.get("roofline") or {}).get("bytes_per_token")}))
PY
  done
done
echo "# load after: $(uptime)"
python3 - "$work/runs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda v: statistics.median(v)
print()
print(f"{'depth':>6} {'attn ms':>9} {'read MB':>8} {'ms/MB':>7} {'views MB':>9} {'ms/MB':>7}  runs' ms/MB")
per_mb = {}
for w in sorted({r["words"] for r in rows}):
    rs = [r for r in rows if r["words"] == w]
    d = med([r["depth"] for r in rs])
    ms = med([r["attn_ms"] for r in rs])
    mb = med([r["kv_bytes"] for r in rs]) / 1e6
    # The old figure: 18 layers' views, the cache padded to 256 cells (below depth 512).
    views = 18 * (-(-(d + 1) // 256) * 256) * 1024 / 1e6 if d < 512 else float("nan")
    each = [r["attn_ms"] / (r["kv_bytes"] / 1e6) for r in rs]
    per_mb[d] = ms / mb
    print(f"{d:>6.0f} {ms:>9.3f} {mb:>8.2f} {ms / mb:>7.3f} {views:>9.2f} {ms / views:>7.3f}  "
          + " ".join(f"{x:.3f}" for x in each))
deep = [v for d, v in per_mb.items() if d >= 200]
print(f"attention ms per MB read, depths >= 200: {min(deep):.3f} to {max(deep):.3f} "
      f"(max/min {max(deep) / min(deep):.2f}); all depths max/min {max(per_mb.values()) / min(per_mb.values()):.2f}")
PY
