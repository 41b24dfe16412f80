#!/usr/bin/env bash
# What HTTP and the server add: the same model, the same threads, the same prompt, answered
# in-process (`tokscope run -m`) and through llama-server (`tokscope run --url`), in ABBA
# order, R rounds. Prints TTFT and ITL p50 of every run and the ratios remote/local with their
# spread; the raw JSON lines go to benchmarks/remote-vs-local-<stamp>.jsonl.
# Usage: scripts/bench-remote.sh [MODEL] [ROUNDS] [TOKENS] [THREADS]
# (MODEL defaults to a synthetic "small" model written on the spot.)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-}
rounds=${2:-4}
tokens=${3:-64}
threads=${4:-1}
bin=target/release/tokscope
[ -x "$bin" ] || cargo build --release --locked
# shellcheck source=scripts/llama-tools.sh
source scripts/llama-tools.sh
server="$(build_llama_tools sys)/bin/llama-server"
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-bench-remote.XXXXXX")
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
if [ -z "$model" ]; then
  model="$work/small.gguf"
  "$bin" synth -o "$model" --preset small --type q8_0 >/dev/null
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$server" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" -c 2048 \
  --parallel 1 >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { cat "$work/server.log" >&2; exit 1; }
prompt="$(printf 'Summarise the following notes in one paragraph. %.0s' $(seq 1 4)) $(sed -n '1,12p' docs/metrics.md | tr '\n' ' ')"
mkdir -p benchmarks
out="benchmarks/remote-vs-local-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
run_local() {
  "$bin" run -m "$model" -t "$threads" -p "$prompt" --temp 0 -n "$tokens" --ignore-eos --json |
    python3 -c 'import json,sys; m=json.load(sys.stdin)["metrics"]; print(json.dumps({"kind":"local","ttft_ms":m["ttft_ms"],"itl_p50_ms":m["itl"]["p50_ms"],"tpot_ms":m["tpot_ms"],"prompt_tokens":m["prompt_tokens"]}))'
}
run_remote() {
  "$bin" run --url "http://127.0.0.1:$port/v1" -p "$prompt" --temp 0 -n "$tokens" --ignore-eos --json |
    python3 -c 'import json,sys; m=json.load(sys.stdin)["metrics"]; print(json.dumps({"kind":"remote","ttft_ms":m["ttft_ms"],"itl_p50_ms":m["itl"]["p50_ms"],"tpot_ms":m["tpot_ms"],"prompt_tokens":m["prompt_tokens"],"rtt_ms":m["network_rtt_ms"],"server_prompt_ms":m["server_prompt_ms"],"queue_transport_ms":m["queue_transport_ms"]}))'
}
{
  echo "{\"model\":\"$(basename "$model")\",\"threads\":$threads,\"tokens\":$tokens,\"rounds\":$rounds,\"llama_server\":\"$(head -n 1 "$(dirname "$(dirname "$server")")/VERSION")\"}"
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then run_local; run_remote; run_remote; run_local
    else run_remote; run_local; run_local; run_remote; fi
  done
} | tee "$out"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
for key in ("ttft_ms", "itl_p50_ms", "tpot_ms"):
    loc = [r[key] for r in rows if r["kind"] == "local"]
    rem = [r[key] for r in rows if r["kind"] == "remote"]
    ratios = [b / a for a, b in zip(loc, rem)]
    print(f"{key:12} local {statistics.mean(loc):8.2f} ± {statistics.stdev(loc):.2f}   "
          f"remote {statistics.mean(rem):8.2f} ± {statistics.stdev(rem):.2f}   "
          f"remote/local {statistics.mean(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
print(f"prompt tokens: local {rows[0]['prompt_tokens']} (tokscope's template), remote "
      f"{[r for r in rows if r['kind']=='remote'][0]['prompt_tokens']} (the server's template)")
PY
echo "raw: $out"
