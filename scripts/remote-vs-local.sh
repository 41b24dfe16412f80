#!/usr/bin/env bash
# What HTTP and a server add to TTFT and inter-token latency: the same model and thread count
# in-process (`tokscope run -m MODEL`) and through llama.cpp's llama-server
# (`tokscope run --url`), in alternating ABBA rounds (local, remote, remote, local), each run a
# fresh prompt (a number first, so the server's prompt cache cannot reuse the previous one).
# Prints every run, then the medians of TTFT, ITL p50 and decode tok/s on each side and the
# remote/local ratio with its spread over the rounds (min–max of the per-round ratios).
#
#   scripts/remote-vs-local.sh [--rounds N] [--threads T] [--tokens N] [--model FILE] [--out FILE]
#
# The model defaults to a synthetic one (`tokscope synth`, the shape the tests call medium:
# 6 layers, 512 wide, f32; a few ms per token on one core). llama-server is built once by
# scripts/llama-tools.sh (LLAMA_TOOLS_SERVER=only, cached), or taken from
# $TOKSCOPE_LLAMA_SERVER. The server listens on 127.0.0.1 only and is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=4 threads=1 tokens=64 model="" out=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cargo build --release --locked --bins >&2
bin=target/release/tokscope
work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$model" ]; then
  model="${work}/medium.gguf"
  "$bin" synth -o "$model" --preset small --layers 6 --embd 512 --heads 8 --kv-heads 4 \
    --ff 1536 --type f32 >&2
fi
server=${TOKSCOPE_LLAMA_SERVER:-}
if [ -z "$server" ]; then
  server="$(LLAMA_TOOLS_SERVER=only bash scripts/llama-tools.sh --source pypi | tail -n 1)/bin/llama-server"
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$server" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" \
  -c 4096 --parallel 1 >"${work}/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:${port}/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "${work}/server.log" >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:${port}/health" >/dev/null || { echo "error: llama-server did not start" >&2; exit 1; }
url="http://127.0.0.1:${port}/v1"

export TOKSCOPE_DATA_DIR="${work}/data" TOKSCOPE_CACHE_DIR="${work}/cache" TOKSCOPE_CONFIG_DIR="${work}/config"
words="the quick brown fox jumps over the lazy dog "
base_prompt=$(printf "%.0s${words}" $(seq 1 24))
n=0
# one SIDE ROUND: runs tokscope once and appends its line to the raw file.
one() {
  local side=$1 round=$2 json
  n=$((n + 1))
  local prompt="run ${n}: ${base_prompt}"
  if [ "$side" = local ]; then
    json=$("$bin" run -m "$model" -t "$threads" --temp 0 -n "$tokens" --ignore-eos --json -p "$prompt" 2>/dev/null)
  else
    json=$("$bin" run --url "$url" --temp 0 -n "$tokens" --ignore-eos --json -p "$prompt" 2>/dev/null)
  fi
  python3 -c '
import json, sys
v = json.loads(sys.argv[3]); m = v["metrics"]
assert m["tokens_generated"] == int(sys.argv[4]), m
# Remote runs also say, within the same run, what the client saw beyond the server own
# clocks: TPOT minus the server predicted_ms/n, and TTFT minus the round trip and the
# server prompt_ms (queue, first token, HTTP). "-" for local runs.
extra = ["-", "-"]
if sys.argv[1] == "remote":
    extra = ["%.4f" % (m["tpot_ms"] - m["server_tpot_ms"]),
             "%.3f" % (m["ttft_ms"] - m["network_rtt_ms"] - m["server_prompt_ms"])]
print(sys.argv[1], sys.argv[2], "%.3f" % m["ttft_ms"], "%.4f" % m["itl"]["p50_ms"],
      "%.2f" % m["decode_tok_per_s"], m["prompt_tokens"], *extra)
' "$side" "$round" "$json" "$tokens" >>"${work}/raw.txt"
}
for r in $(seq 1 "$rounds"); do
  one local "$r"; one remote "$r"; one remote "$r"; one local "$r"
  echo "# round ${r}/${rounds} done" >&2
done

report() {
  echo "# remote-vs-local: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
  echo "# model: $(basename "$model"), threads ${threads}, ${tokens} tokens (--ignore-eos), greedy; server: $("$server" --version 2>&1 | grep -m1 version || echo llama-server)"
  echo "# rounds: ${rounds} × ABBA (local, remote, remote, local); each run a fresh process and prompt"
  echo "# side round ttft_ms itl_p50_ms decode_tok_s prompt_tokens tpot_minus_server_ms ttft_minus_rtt_and_server_prompt_ms"
  cat "${work}/raw.txt"
  python3 - "${work}/raw.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def col(side, i, rnd=None):
    return [float(r[i]) for r in rows if r[0] == side and (rnd is None or r[1] == rnd)]
rounds = sorted({r[1] for r in rows}, key=int)
print()
print("| figure | local median | remote median | remote/local (median of rounds) | spread over rounds |")
print("|---|---|---|---|---|")
for name, i in [("TTFT ms", 2), ("ITL p50 ms", 3), ("decode tok/s", 4)]:
    lo, re = statistics.median(col("local", i)), statistics.median(col("remote", i))
    ratios = [statistics.mean(col("remote", i, r)) / statistics.mean(col("local", i, r)) for r in rounds]
    print(f"| {name} | {lo:.3f} | {re:.3f} | {statistics.median(ratios):.3f} | {min(ratios):.3f}–{max(ratios):.3f} |")
lt, rt = statistics.median(col("local", 2)), statistics.median(col("remote", 2))
li, ri = statistics.median(col("local", 3)), statistics.median(col("remote", 3))
print()
print(f"Across processes (local vs remote runs): {rt - lt:+.2f} ms on the median TTFT, {ri - li:+.4f} ms on the median ITL p50.")
tpot_add = [float(r[6]) for r in rows if r[0] == "remote"]
ttft_add = [float(r[7]) for r in rows if r[0] == "remote"]
print(f"Within each remote run (the client against the server's own clocks): TPOT +{statistics.median(tpot_add):.4f} ms "
      f"(range {min(tpot_add):.4f}–{max(tpot_add):.4f}), TTFT beyond RTT + server prompt +{statistics.median(ttft_add):.2f} ms "
      f"(range {min(ttft_add):.2f}–{max(ttft_add):.2f}; this includes the server's first token).")
EOF
}
if [ -n "$out" ]; then
  report | tee "$out"
else
  report
fi
