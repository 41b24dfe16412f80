#!/usr/bin/env bash
# Host time per generated token (the work between two decode calls: logits, sampling,
# detokenize + stop check, event) on the real Llama 3 vocabulary (128,256 tokens), two
# binaries side by side in ABBA order, at temperature 0 and with the default sampler chain,
# and `run`'s decode tok/s against `bench`'s tg on the same file in the same rounds.
#
# Usage: scripts/bench-host.sh BEFORE_BIN [AFTER_BIN] [ROUNDS] [TOKENS] [THREADS]
#   BEFORE_BIN  a tokscope binary to compare against (e.g. a build of main); "-" for none
#   AFTER_BIN   default target/release/tokscope
# host µs/tok is computed the same way for both binaries: TPOT minus the mean decode call
# (decode wall time per token minus time inside llama_decode + synchronize); binaries that
# report it themselves also print their own figure (`host.host_us_per_token`).
# Then, with AFTER_BIN only, `--sampling host` against `--sampling backend` (the chain inside
# llama.cpp's graph) in ABBA order at both temperatures: decode tok/s, the mean decode call
# and host µs/tok (with backend sampling the sampling work moves into the decode call, so
# compare decode tok/s, not host time alone).
# BENCH_HOST_MODELS=tiny runs the tiny model only (the 1B model takes minutes on a busy CPU);
# BENCH_HOST_PLACES=0 leaves out the host-vs-backend sampling rounds.
# Needs Llama 3's tokenizer.json: $TOKSCOPE_LLAMA3_TOKENIZER, else target/tmp/llama3-tokenizer
# (the tests fetch it there), else --fetch-tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: scripts/bench-host.sh BEFORE_BIN [AFTER_BIN] [ROUNDS] [TOKENS] [THREADS]}
after=${2:-target/release/tokscope}
rounds=${3:-2}
tokens=${4:-128}
threads=${5:-2}
dir=target/tmp/bench-host
mkdir -p "$dir"
tok=${TOKSCOPE_LLAMA3_TOKENIZER:-target/tmp/llama3-tokenizer/tokenizers/llama3/tokenizer.json}
tokarg=(--tokenizer "$tok")
[ -f "$tok" ] || tokarg=(--fetch-tokenizer)
[ -f "$dir/tiny-l3.gguf" ] || "$after" synth --preset tiny --type q8_0 "${tokarg[@]}" -o "$dir/tiny-l3.gguf" >/dev/null
[ -f "$dir/l3-1b-q4km.gguf" ] || "$after" synth --preset llama3.2-1b --type q4_k_m "${tokarg[@]}" -o "$dir/l3-1b-q4km.gguf" >/dev/null

models=("$dir/tiny-l3.gguf" "$dir/l3-1b-q4km.gguf")
[ "${BENCH_HOST_MODELS:-}" = tiny ] && models=("$dir/tiny-l3.gguf")

bins=()
[ "$before" != "-" ] && bins+=("before=$before")
bins+=("after=$after")

one_run() { # label bin model temp [--sampling WHERE]
  local label=$1 bin=$2 model=$3 temp=$4
  shift 4
  "$bin" run -m "$model" -p "Write a long story about a lighthouse keeper." --temp "$temp" \
    -n "$tokens" --ignore-eos -t "$threads" --json "$@" |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
m = r["metrics"]
calls = max(m["decode_calls"], 1)
derived = (m["tpot_ms"] - m["decode_compute_ms"] / calls) * 1000
h = r.get("host") or {}
own = h.get("host_us_per_token")
parts = " ".join(f"{k}={h[k]:.1f}" for k in ("logits_out_us", "sampling_us", "detokenize_stop_us", "event_metrics_us", "other_us") if h.get(k) is not None)
print(json.dumps({"label": sys.argv[1], "model": sys.argv[2], "temp": float(sys.argv[3]),
  "decode_tok_per_s": m["decode_tok_per_s"], "tpot_ms": m["tpot_ms"],
  "decode_call_ms": m["decode_compute_ms"] / calls, "host_us_derived": derived,
  "host_us_own": own, "parts": parts, "sampler": r.get("sampler"),
  "sampling": (r.get("sampling") or {}).get("place")}))' "$label" "$(basename "$model")" "$temp"
}

one_bench() { # label bin model
  local label=$1 bin=$2 model=$3
  "$bin" bench -m "$model" -p 0 -n "$tokens" -r 3 -t "$threads" -o json |
    python3 -c '
import json, sys
rows = json.load(sys.stdin)
rows = rows if isinstance(rows, list) else rows.get("rows", [rows])
for r in rows:
    print(json.dumps({"label": sys.argv[1], "model": sys.argv[2], "bench": r["test"],
      "tok_per_s": r["tok_per_s_mean"], "sd": r["tok_per_s_sd"], "host_us": r.get("host_us_per_token")}))' "$label" "$(basename "$model")"
}

echo "# bench-host: $(date -u +%FT%TZ) rounds=$rounds tokens=$tokens threads=$threads $(nproc) cpus load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(lscpu | sed -n 's/^Model name: *//p')"
for spec in "${bins[@]}"; do echo "# ${spec%%=*}: ${spec#*=} ($("${spec#*=}" --version 2>/dev/null || true))"; done
for model in "${models[@]}"; do
  for r in $(seq 1 "$rounds"); do
    # ABBA: the order of binaries flips every other round.
    order=("${bins[@]}")
    if [ $((r % 2)) -eq 0 ]; then order=(); for ((i=${#bins[@]}-1; i>=0; i--)); do order+=("${bins[$i]}"); done; fi
    for spec in "${order[@]}"; do
      for temp in 0 0.8; do one_run "${spec%%=*}" "${spec#*=}" "$model" "$temp"; done
    done
  done
done
# Host sampling against backend sampling, same binary, ABBA.
places=(host backend)
[ "${BENCH_HOST_PLACES:-1}" = 0 ] && models_places=() || models_places=("${models[@]}")
for model in "${models_places[@]}"; do
  for r in $(seq 1 "$rounds"); do
    order=("${places[@]}")
    [ $((r % 2)) -eq 0 ] && order=(backend host)
    for place in "${order[@]}"; do
      for temp in 0 0.8; do one_run "sampling-$place" "$after" "$model" "$temp" --sampling "$place"; done
    done
  done
done
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
# run ÷ bench tg on the tiny 128k-vocabulary model, alternating run and bench (ABBA);
# BENCH_HOST_RATIO_ROUNDS rounds (default ROUNDS). scripts/bench-host-summary.py RAW judges
# them (median of the rounds' ratios with 2 robust standard errors) and tabulates the rest.
for r in $(seq 1 "${BENCH_HOST_RATIO_ROUNDS:-$rounds}"); do
  if [ $((r % 2)) -eq 1 ]; then
    one_run after-ratio "$after" "$dir/tiny-l3.gguf" 0; one_bench after-ratio "$after" "$dir/tiny-l3.gguf"
    one_bench after-ratio "$after" "$dir/tiny-l3.gguf"; one_run after-ratio "$after" "$dir/tiny-l3.gguf" 0
  else
    one_bench after-ratio "$after" "$dir/tiny-l3.gguf"; one_run after-ratio "$after" "$dir/tiny-l3.gguf" 0
    one_run after-ratio "$after" "$dir/tiny-l3.gguf" 0; one_bench after-ratio "$after" "$dir/tiny-l3.gguf"
  fi
done
echo "# end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
