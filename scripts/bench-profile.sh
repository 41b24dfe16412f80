#!/usr/bin/env bash
# The step profiler's cost and its cross-check (issue 33, items 4 and 5).
#
# 1. Cost (ABBA): `run --ignore-eos` decode tok/s with --profile at the default rate (one step
#    in 16) against without it, in alternating order (off, on, on, off, ...), per model. Each
#    pair's ratio on/off; the median and twice its robust standard error
#    (scripts/paired_ratio.py), and the range. The target: >= 0.98.
# 2. perf: the same run with every second step profiled (--profile ops --profile-rate 2) under
#    `perf record`; perf's samples in ggml's op functions (by symbol: the matrix-product
#    kernels, flash attention, norms, RoPE, ...) against tokscope's per-op-type shares, both as
#    shares of the time the two attribute to ops (libgomp's barrier spin and the kernel are
#    in neither). Skipped, with the reason, where perf cannot record.
#
# Usage: scripts/bench-profile.sh MODEL.gguf [MODEL2.gguf ...]
#   ROUNDS (default 4 pairs), TOKENS (default 128), THREADS (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 MODEL.gguf [MODEL2.gguf ...]" >&2; exit 2; }
rounds=${ROUNDS:-4}
tokens=${TOKENS:-128}
threads=${THREADS:-2}
bin=$PWD/target/release/tokscope
cargo build --release --locked --bins >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-bench-profile.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · $(nproc) cores · threads $threads · $tokens tokens · $rounds ABBA pairs"
grep -m1 'model name' /proc/cpuinfo | sed 's/^/# /'

run_tps() { # $1 model, $2.. extra flags; prints decode tok/s
  local m=$1; shift
  "$bin" run -m "$m" -p "Tell me a story about a lighthouse." -n "$tokens" --ignore-eos \
    --temp 0 -t "$threads" --json "$@" >"$work/r.json" 2>"$work/r.err" \
    || { cat "$work/r.err" >&2; exit 1; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metrics']['decode_tok_per_s'])" "$work/r.json"
}

for model in "$@"; do
  echo
  echo "## $(basename "$model")"
  cat "$model" >/dev/null
  offs=() ons=()
  for ((i = 0; i < rounds; i++)); do
    if ((i % 2 == 0)); then
      a=$(run_tps "$model"); b=$(run_tps "$model" --profile)
    else
      b=$(run_tps "$model" --profile); a=$(run_tps "$model")
    fi
    offs+=("$a"); ons+=("$b")
    echo "pair $((i + 1)): off $a tok/s · on $b tok/s · on/off $(python3 -c "print(f'{$b/$a:.3f}')")"
  done
  python3 - "${offs[*]}" "${ons[*]}" <<'PY'
import sys
sys.path.insert(0, "scripts")
from paired_ratio import paired
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
r = [b / a for a, b in zip(off, on)]
m, e = paired(r)
print(f"profiling at 1 in 16 / off: median {m:.3f} ± {e:.3f} (range {min(r):.3f}-{max(r):.3f}, {len(r)} pairs); target >= 0.98")
PY
  # The profile itself at the default rate: what a profiled call costs, the rate both ways.
  run_tps "$model" --profile >/dev/null
  python3 - "$work/r.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["profile"]
print(f"a profiled call {p['profiled_call_ms']:.2f} ms, an unprofiled one {p['unprofiled_call_ms']:.2f} ms; "
      f"decode {p['decode_tok_per_s_unsampled']:.2f} tok/s without the profiled steps, {p['decode_tok_per_s_all']:.2f} with them")
PY

  echo "### perf cross-check (every second step profiled, by operation; the whole run under perf)"
  if ! perf record -q -o "$work/probe.data" -- true >/dev/null 2>"$work/perf.err"; then
    echo "perf cannot record here: $(head -n 2 "$work/perf.err" | tr '\n' ' ')"
    continue
  fi
  perf record -q -F 4999 -o "$work/perf.data" -- "$bin" run -m "$model" \
    -p "Tell me a story about a lighthouse." -n "$tokens" --ignore-eos --temp 0 \
    -t "$threads" --json --profile ops --profile-rate 2 >"$work/p.json" 2>"$work/p.err"
  perf report -q -i "$work/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    >"$work/perf.txt"
  python3 - "$work/p.json" "$work/perf.txt" <<'PY'
import json, re, sys
prof = json.load(open(sys.argv[1]))["profile"]["mean"]
tok = {o["op"]: o["ms"] for o in prof["ops"]}
# ggml's CPU functions by the op that calls them (ggml-cpu/ops.cpp, vec.h, quants.c, repack.cpp).
rules = [
    (r"flash_attn|ggml_vec_dot_f16|ggml_vec_mad_f16|ggml_vec_scale_f16|fp16_to_fp32", "FLASH_ATTN_EXT"),
    (r"vec_dot_q|vec_dot_iq|vec_dot_tq|gemv|gemm|mul_mat|quantize_row_q8|quantize_mat|sgemm|tinyBLAS|ggml_vec_dot_f32|ggml_vec_dot_bf16", "MUL_MAT"),
    (r"rms_norm|forward_norm", "RMS_NORM"),
    (r"rope", "ROPE"),
    (r"soft_max", "SOFT_MAX"),
    (r"get_rows", "GET_ROWS"),
    (r"set_rows|forward_cpy|forward_dup|fp32_to_fp16", "SET_ROWS/CPY"),
    (r"glu|gelu|silu", "GLU"),
    (r"forward_add|vec_add", "ADD"),
    (r"forward_mul\b|forward_mul_|vec_mul", "MUL"),
    (r"forward_scale|vec_scale", "SCALE"),
]
perf = {}
for line in open(sys.argv[2]):
    m = re.match(r"\s*([\d.]+)%\s+\[[.kK]\]\s+(.*\S)", line)
    if not m:
        continue
    pct, sym = float(m.group(1)), m.group(2)
    for pat, op in rules:
        if re.search(pat, sym):
            perf[op] = perf.get(op, 0.0) + pct
            break
def group(op):
    if op in ("SET_ROWS", "CPY", "DUP", "CONT"):
        return "SET_ROWS/CPY"
    if op in ("SWIGLU", "GEGLU", "GLU", "SILU", "GELU"):
        return "GLU"
    return op
tg = {}
for op, ms in tok.items():
    tg[group(op)] = tg.get(group(op), 0.0) + ms
keys = sorted(set(tg) | set(perf), key=lambda k: -tg.get(k, 0.0))
ts, ps = sum(tg.values()), sum(perf.values())
print(f"{'op':<16}{'tokscope %':>12}{'perf %':>10}{'diff':>8}")
worst = 0.0
for k in keys:
    a = 100 * tg.get(k, 0.0) / ts if ts else 0.0
    b = 100 * perf.get(k, 0.0) / ps if ps else 0.0
    worst = max(worst, abs(a - b))
    print(f"{k:<16}{a:>12.1f}{b:>10.1f}{a - b:>+8.1f}")
print(f"largest difference {worst:.1f} points (target <= 5); perf's samples in these ops: {ps:.1f}% of all")
PY
done
