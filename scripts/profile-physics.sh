#!/usr/bin/env bash
# The step profile against physics (issue 33, item 5), with `run --profile --json`:
#   depth  on the demo model at depths about 0, 1024 and 4096 (a prompt of that many tokens,
#          -c 8192): attention over the cache reads the KV at that depth, so its time grows;
#          the FFN reads the same weights at any depth, so its time stays within its spread;
#   bytes  the same synthetic Llama 3.2 1B in Q8_0 and Q4_0 (`synth --preset llama3.2-1b`):
#          the FFN's time should fall roughly with its bytes.
# Each point is the median of ROUNDS runs (default 3, alternating order), each run the mean
# of its profiled steps (one in 4 of TOKENS decode steps). Prints every run, then the verdicts.
#   --plant BIN  instead: a planted slowdown must land in one part and no other. BIN is a
#          `cargo build --release --features plant` binary; TOKSCOPE_PLANT_SLOW=ffn_down:300
#          spins 300 µs before each FFN down product of every step. Runs with and without it,
#          alternating, on the demo model: the FFN down part must grow by about 300 µs × layers
#          and every other part by far less.
#
# Usage: scripts/profile-physics.sh [--plant BIN] [DEMO_MODEL.gguf]   THREADS (default 2),
#        ROUNDS, TOKENS
set -euo pipefail
cd "$(dirname "$0")/.."
planted=
if [ "${1:-}" = "--plant" ]; then planted=$2; shift 2; fi
rounds=${ROUNDS:-3}
tokens=${TOKENS:-48}
threads=${THREADS:-2}
bin=$PWD/target/release/tokscope
cargo build --release --locked --bins >&2
demo=${1:-${TOKSCOPE_DEMO_MODEL:-${XDG_DATA_HOME:-$HOME/.local/share}/tokscope/models/gemma-3-270m-q4_k_m.gguf}}
[ -f "$demo" ] || { echo "no demo model at $demo: run tokscope fetch-demo, or pass its path" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-profile-physics.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · threads $threads · $tokens tokens, 1 in 4 profiled · $rounds rounds"
grep -m1 'model name' /proc/cpuinfo | sed 's/^/# /'

profile() { # $1 model, $2 label, $3 prompt words, rest: flags; appends one JSON line to $work/runs
  local m=$1 label=$2 words=$3; shift 3
  local prompt
  prompt=$(python3 -c "import sys; print(' '.join(['word'] * int(sys.argv[1])) or 'Hi')" "$words")
  "$bin" run -m "$m" -p "$prompt" -n "$tokens" --ignore-eos --temp 0 -t "$threads" --json \
    --profile --profile-rate 4 "$@" >"$work/r.json" 2>"$work/r.err" \
    || { cat "$work/r.err" >&2; exit 1; }
  python3 - "$work/r.json" "$label" >>"$work/runs" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["profile"]["mean"]
parts = {x["part"]: x for x in p["parts"]}
ffn = ["ffn gate/up", "ffn down"]
row = {
    "label": sys.argv[2], "depth": p["depth"],
    "attn_ms": parts["attn over cache"]["ms"], "kv_bytes": parts["attn over cache"]["kv_bytes"],
    "ffn_ms": sum(parts[k]["ms"] for k in ffn), "ffn_bytes": sum(parts[k]["weight_bytes"] for k in ffn),
    "wall_ms": p["wall_ms"],
}
print(json.dumps(row))
PY
  tail -n 1 "$work/runs"
}

if [ -n "$planted" ]; then
  echo "## planted slowdown: TOKSCOPE_PLANT_SLOW=ffn_down:300 ($planted)"
  cat "$demo" >/dev/null
  for ((r = 0; r < 2 * rounds; r++)); do
    for with in $( ((r % 2 == 0)) && echo "0 1" || echo "1 0"); do
      env_set=(); [ "$with" = 1 ] && env_set=(TOKSCOPE_PLANT_SLOW=ffn_down:300)
      env "${env_set[@]}" "$planted" run -m "$demo" -p Hi -n "$tokens" --ignore-eos --temp 0 \
        -t "$threads" --json --profile --profile-rate 4 >"$work/r.json" 2>"$work/r.err" \
        || { cat "$work/r.err" >&2; exit 1; }
      python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['profile']['mean']; print(json.dumps({'planted': sys.argv[2]=='1', 'layers': len(p['layers_ms']), 'parts': {x['part']: x['ms'] for x in p['parts']}}))" "$work/r.json" "$with" | tee -a "$work/plant"
    done
  done
  python3 - "$work/plant" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
layers = rows[0]["layers"]
names = sorted({k for r in rows for k in r["parts"]})
def med(planted, k):
    return statistics.median(r["parts"].get(k, 0.0) for r in rows if r["planted"] == planted)
print(f"{'part':<30}{'without ms':>12}{'with ms':>10}{'delta':>9}")
others = 0.0
for k in names:
    a, b = med(False, k), med(True, k)
    print(f"{k:<30}{a:>12.3f}{b:>10.3f}{b - a:>+9.3f}")
    if k != "ffn down":
        others = max(others, abs(b - a))
d = med(True, "ffn down") - med(False, "ffn down")
want = 0.3 * layers
print(f"ffn down grew {d:.2f} ms (planted {want:.2f} ms: 0.3 ms x {layers} layers); the largest change elsewhere {others:.2f} ms")
print("PASS" if abs(d - want) < 0.3 * want and others < 0.25 * want else "FAIL")
PY
  exit 0
fi

echo "## depth (demo model: $(basename "$demo"))"
cat "$demo" >/dev/null
for ((r = 0; r < rounds; r++)); do
  order=(0 1024 4096)
  ((r % 2 == 1)) && order=(4096 1024 0)
  for d in "${order[@]}"; do profile "$demo" "depth-$d" "$d" -c 8192; done
done

echo "## bytes (synthetic Llama 3.2 1B, Q8_0 and Q4_0)"
for ty in q8_0 q4_0; do
  "$bin" synth --preset llama3.2-1b --type "$ty" --fetch-tokenizer -o "$work/1b-$ty.gguf" >&2
done
for ((r = 0; r < rounds; r++)); do
  order=(q8_0 q4_0)
  ((r % 2 == 1)) && order=(q4_0 q8_0)
  for ty in "${order[@]}"; do profile "$work/1b-$ty.gguf" "$ty" 0; done
done

python3 - "$work/runs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(label, key):
    return statistics.median(r[key] for r in rows if r["label"] == label)
def spread(label, key):
    v = [r[key] for r in rows if r["label"] == label]
    return min(v), max(v)
print()
print("depth    attention ms (KV MB)      FFN ms (range)")
for d in (0, 1024, 4096):
    l = f"depth-{d}"
    lo, hi = spread(l, "ffn_ms")
    print(f"{med(l, 'depth'):>5.0f}    {med(l, 'attn_ms'):8.3f} ({med(l, 'kv_bytes') / 1e6:7.1f})      {med(l, 'ffn_ms'):7.3f} ({lo:.3f}-{hi:.3f})")
a = [med(f"depth-{d}", "attn_ms") for d in (0, 1024, 4096)]
f = [med(f"depth-{d}", "ffn_ms") for d in (0, 1024, 4096)]
grows = a[0] < a[1] < a[2]
flat = max(f) / min(f)
# The medians' ratio says nothing finer than the rounds' own spread: print that beside it.
single = [r["ffn_ms"] for r in rows if r["label"].startswith("depth-")]
lo, hi = min(single) / statistics.median(single) - 1, max(single) / statistics.median(single) - 1
print(f"attention grows with depth: {'yes' if grows else 'NO'} ({a[2] / a[0]:.1f}x from 0 to 4096); "
      f"FFN medians' max/min over the depths {flat:.2f}, single rounds {lo:+.0%} to {hi:+.0%} "
      f"of their median (a ratio of medians inside that spread is not resolved)")
t8, t4 = med("q8_0", "ffn_ms"), med("q4_0", "ffn_ms")
b8, b4 = med("q8_0", "ffn_bytes"), med("q4_0", "ffn_bytes")
print(f"FFN Q4_0/Q8_0: time {t4 / t8:.2f} ({t4:.2f} / {t8:.2f} ms), bytes {b4 / b8:.2f} ({b4 / 1e6:.0f} / {b8 / 1e6:.0f} MB)")
PY
