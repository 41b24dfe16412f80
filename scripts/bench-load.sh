#!/usr/bin/env bash
# Time to ready on a real-size file, first and second start, beside llama.cpp's own tool
# (issue 30 item 1). The file is a synthetic Llama 3 8B Q4_K_M (4.92 GB, `synth --preset
# llama3-8b`) unless one is given; the page cache is warmed first, so every start reads from
# memory. Per round, in alternating order:
#   first   `tokscope run -n 1 -c 256` with an empty cache dir: the model probe runs (a child
#           loads the file in its layout and decodes three tokens) before the real load;
#   second  the same with the cache dir of an earlier start: the probe's pass is remembered;
#   chat    the chat in tmux until its status line says "ready" (second start, `-c 256` as
#           the others);
#   llama   llama-bench -p 0 -n 1 -r 1 from llama.cpp built natively (scripts/llama-tools.sh
#           --source native): its load, one warm-up token and one timed token.
# Like with like: `run` and llama-bench both compute after loading, so each figure is the
# command's wall-clock time (date +%s.%N) less the compute the tool itself timed: run's E2E
# (`--json` metrics.e2e_ms: template, prefill, the token), llama-bench's two tokens (its timed
# token's samples_ns, twice: the warm-up decodes the same one token). Both load a 256-token
# context (llama-bench's n_ctx of 1 is padded to 256), and so does the chat here. The default
# 4096-token context costs more (its KV cache is allocated and cleared): `run`'s
# `load.context_ms` says how much, and the last round's stages are printed. Prints every round, then the medians and the ratio
# second/llama with its range over rounds.
#
# Usage: scripts/bench-load.sh [MODEL.gguf] [ROUNDS]   (default: a synthetic 8B, 5 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-}
rounds=${2:-5}
threads=${THREADS:-2}
bin=$PWD/target/release/tokscope
cargo build --release --locked --bins >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-bench-load.XXXXXX")
trap 'tmux -L bench-load kill-server 2>/dev/null || true; rm -rf "$work"' EXIT
export TOKSCOPE_DATA_DIR=$work/data TOKSCOPE_CONFIG_DIR=$work/config
if [ -z "$model" ]; then
  model=$work/l3-8b-q4_k_m.gguf
  echo "# writing a synthetic Llama 3 8B Q4_K_M to $model" >&2
  "$bin" synth --preset llama3-8b --type q4_k_m --fetch-tokenizer -o "$model" >&2
fi
tools=$(bash scripts/llama-tools.sh --source native | tail -n 1)
echo "# llama.cpp tools: $tools" >&2
echo "# warming the page cache" >&2
cat "$model" >/dev/null
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }

run_once() { # $1: cache dir; prints the wall seconds less run's own E2E
  local s e
  s=$(now)
  TOKSCOPE_CACHE_DIR=$1 "$bin" run -m "$model" -p hi -n 1 -c 256 -t "$threads" --temp 0 --json \
    >"$work/run.json" 2>"$work/run.err" || { cat "$work/run.err" >&2; exit 1; }
  e=$(now)
  python3 - "$s" "$e" "$work/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[3]))
print(f"{float(sys.argv[2]) - float(sys.argv[1]) - r['metrics']['e2e_ms'] / 1e3:.2f}")
PY
}
chat_once() { # $1: cache dir; prints seconds until the status line says ready
  tmux -L bench-load kill-server 2>/dev/null || true
  local t0 t1
  t0=$(now)
  tmux -L bench-load -f /dev/null new-session -d -x 160 -y 40 \
    env TOKSCOPE_CACHE_DIR="$1" TOKSCOPE_DATA_DIR="$TOKSCOPE_DATA_DIR" TOKSCOPE_CONFIG_DIR="$TOKSCOPE_CONFIG_DIR" \
    "$bin" chat -m "$model" -c 256 -t "$threads"
  for _ in $(seq 1 6000); do
    if tmux -L bench-load capture-pane -p 2>/dev/null | head -n 1 | grep -q "ready"; then
      t1=$(now)
      tmux -L bench-load kill-server 2>/dev/null || true
      elapsed "$t0" "$t1"
      return 0
    fi
    sleep 0.05
  done
  echo "the chat did not become ready" >&2
  exit 1
}
llama_once() { # prints the wall seconds less its two tokens
  local s e
  s=$(now)
  "$tools/bin/llama-bench" -m "$model" -p 0 -n 1 -r 1 -t "$threads" -o json >"$work/llama.json" 2>/dev/null
  e=$(now)
  python3 - "$s" "$e" "$work/llama.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[3]))
token_s = rows[0]["samples_ns"][0] / 1e9
print(f"{float(sys.argv[2]) - float(sys.argv[1]) - 2 * token_s:.2f}")
PY
}
stages() { # the last run's load stages, and the chat's context beside run's
  python3 - "$work/run.json" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))["load"]
print("# run's last load (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in l.items()))
PY
  TOKSCOPE_CACHE_DIR=$second_cache "$bin" run -m "$model" -p hi -n 1 -t "$threads" --temp 0 --json \
    >"$work/run4096.json" 2>/dev/null
  python3 - "$work/run4096.json" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))["load"]
print(f"# the same at the default 4096-token context: context {l['context_ms']:.0f} ms, ready {l['ready_ms']:.0f} ms")
PY
}

second_cache=$work/cache-warm
run_once "$second_cache" >/dev/null # the warm cache's first pass
printf 'round\tfirst_s\tsecond_s\tchat_s\tllama_bench_s\n'
for r in $(seq 1 "$rounds"); do
  declare -A t=()
  if [ $((r % 2)) = 1 ]; then order="first second chat llama"; else order="llama chat second first"; fi
  for what in $order; do
    case $what in
      first) t[first]=$(run_once "$work/cache-cold-$r") ;;
      second) t[second]=$(run_once "$second_cache") ;;
      chat) t[chat]=$(chat_once "$second_cache") ;;
      llama) t[llama]=$(llama_once) ;;
    esac
  done
  printf '%s\t%s\t%s\t%s\t%s\n' "$r" "${t[first]}" "${t[second]}" "${t[chat]}" "${t[llama]}" | tee -a "$work/rows.tsv"
  unset t
done
stages
python3 - "$work/rows.tsv" <<'PY'
import statistics, sys
rows = [list(map(float, l.split("\t")[1:])) for l in open(sys.argv[1]) if l.strip()]
cols = list(zip(*rows))
names = ["first", "second", "chat", "llama-bench"]
for n, c in zip(names, cols):
    print(f"median {n}: {statistics.median(c):.2f} s (range {min(c):.2f}-{max(c):.2f})")
ratios = [r[1] / r[3] for r in rows]
chat = [r[2] / r[3] for r in rows]
print(f"second start / llama-bench: median {statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})")
print(f"chat ready / llama-bench:   median {statistics.median(chat):.2f} (range {min(chat):.2f}-{max(chat):.2f})")
print(f"first / second start:       median {statistics.median([r[0] / r[1] for r in rows]):.2f}")
PY
