#!/usr/bin/env bash
# The load generator's own cost and scale (issue 35, item 6), against an instant local server
# (scripts/instant-server.py, which times its own part of each request on CLOCK_MONOTONIC).
#
# 1. Overhead, ROUNDS rounds: `load --concurrency 1` of REQUESTS requests of OUT tokens, the
#    server writing every chunk back to back. tokscope's TTFT p50 minus the server's own time to
#    its first chunk (p50) is what the client (and loopback) adds per request; tokscope's ITL
#    p50 between chunks written back to back is what it adds per chunk. Median of the rounds
#    and their range.
# 2. Scale: `load --concurrency STREAMS` (default 1000) of 3 × STREAMS requests, 32 tokens each,
#    10 ms between chunks so that the streams overlap; the server counts the connections open
#    at once. tokscope's peak RSS (GNU time), errors and wall time.
#
# Usage: scripts/bench-client.sh   (ROUNDS=5 REQUESTS=200 OUT=16 STREAMS=1000)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
requests=${REQUESTS:-200}
out=${OUT:-16}
streams=${STREAMS:-1000}
bin=$PWD/target/release/tokscope
cargo build --release --locked --bins >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-bench-client.XXXXXX")
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
ulimit -n 8192 2>/dev/null || true
echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · $(nproc) cores · open files $(ulimit -n)"
grep -m1 'model name' /proc/cpuinfo | sed 's/^/# /'

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_server() { # $1 gap ms, $2 stats file; sets $port and $server_pid
  port=$(port)
  python3 scripts/instant-server.py --port "$port" --gap-ms "$1" --stats "$2" >/dev/null &
  server_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
    sleep 0.05
  done
}
stop_server() { kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=; }

echo "## 1. overhead: concurrency 1, $requests requests × $out tokens, chunks back to back, $rounds rounds"
for ((r = 1; r <= rounds; r++)); do
  start_server 0 "$work/s.json"
  "$bin" load --url "http://127.0.0.1:$port/v1" --concurrency 1 --requests "$requests" \
    --output-len "$out" --input-len 8 --warmup 5 --metrics-interval 0 -o json >"$work/l.json" 2>"$work/l.err" \
    || { cat "$work/l.err" >&2; exit 1; }
  stop_server
  python3 - "$work/l.json" "$work/s.json" "$r" <<'PY' | tee -a "$work/rounds.txt"
import json, sys
level = json.load(open(sys.argv[1]))["levels"][0]
server = json.load(open(sys.argv[2]))
ttft50 = level["ttft"]["p50_ms"] * 1000
ttft99 = level["ttft"]["p99_ms"] * 1000
first50 = server["first_chunk_us"]["p50"]
itl50 = level["itl"]["p50_ms"] * 1000
itl99 = level["itl"]["p99_ms"] * 1000
print(f"round {sys.argv[3]}: completed {level['completed']} failed {level['failed']} · "
      f"TTFT p50 {ttft50:.0f} us p99 {ttft99:.0f} us · server to first chunk p50 {first50:.0f} us "
      f"(server-measured requests {server['first_chunk_us']['count']}) · added per request {ttft50 - first50:.0f} us · "
      f"ITL p50 {itl50:.1f} us p99 {itl99:.1f} us")
PY
done
python3 - "$work/rounds.txt" <<'PY'
import re, statistics, sys
rows = open(sys.argv[1]).read().splitlines()
def col(name):
    return [float(re.search(name + r" (-?[0-9.]+)", r).group(1)) for r in rows]
for label, key in [("added per request (us)", "added per request"), ("ITL p50 between back-to-back chunks (us)", "ITL p50"),
                   ("TTFT p50 (us)", "TTFT p50"), ("server to first chunk p50 (us)", "first chunk p50")]:
    v = col(key)
    print(f"{label}: median {statistics.median(v):.1f} · range {min(v):.1f} to {max(v):.1f} over {len(v)} rounds")
PY

echo "## 2. scale: concurrency $streams, $((3 * streams)) requests × 32 tokens, 10 ms between chunks"
start_server 10 "$work/s2.json"
/usr/bin/time -v "$bin" load --url "http://127.0.0.1:$port/v1" --concurrency "$streams" \
  --requests "$((3 * streams))" --output-len 32 --input-len 8 --warmup 0 --timeout 120 \
  --metrics-interval 0 -o json >"$work/l2.json" 2>"$work/l2.err" || { tail -40 "$work/l2.err" >&2; exit 1; }
stop_server
python3 - "$work/l2.json" "$work/s2.json" "$work/l2.err" <<'PY'
import json, re, sys
level = json.load(open(sys.argv[1]))["levels"][0]
server = json.load(open(sys.argv[2]))
err = open(sys.argv[3]).read()
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", err).group(1)
cpu_user = float(re.search(r"User time \(seconds\): ([0-9.]+)", err).group(1))
cpu_sys = float(re.search(r"System time \(seconds\): ([0-9.]+)", err).group(1))
print(f"completed {level['completed']} failed {level['failed']} errors {level['errors_by_kind']}")
print(f"server: at most {server['max_open_connections']} connections open at once")
print(f"tokscope peak RSS {rss_kb / 1024:.1f} MiB · wall {wall} · CPU user {cpu_user:.1f} s sys {cpu_sys:.1f} s")
print(f"TTFT p50 {level['ttft']['p50_ms']:.1f} ms p99 {level['ttft']['p99_ms']:.1f} ms · "
      f"ITL p50 {level['itl']['p50_ms']:.2f} ms p99 {level['itl']['p99_ms']:.2f} ms (server gap 10 ms) · "
      f"output {level['output_tok_per_s']:.0f} tok/s")
PY
