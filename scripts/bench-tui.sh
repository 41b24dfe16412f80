#!/usr/bin/env bash
# Decode speed while streaming into the chat TUI versus headless `tokscope run`, on the same
# model, prompt and settings (greedy, exactly N tokens with --ignore-eos), R pairs in alternating
# order (ABBA),
# plus the UI thread's CPU time per second of streaming. Needs tmux.
# Usage: scripts/bench-tui.sh MODEL [TOKENS] [RUNS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(realpath "${1:?usage: scripts/bench-tui.sh MODEL [TOKENS] [RUNS] [THREADS]}")
tokens=${2:-256}
runs=${3:-3}
threads=${4:-$(nproc)}
# TOKSCOPE_BIN measures another build (e.g. one with a different frame rate).
bin=$(realpath "${TOKSCOPE_BIN:-target/release/tokscope}")
[ -x "$bin" ] || cargo build --release --locked
prompt="Write a long story about a lighthouse keeper and the sea."
work=$(mktemp -d)
summary="$work/summary.txt"
sock="tokscope-bench-$$"
trap 'tmux -L "$sock" kill-server 2>/dev/null || true; rm -rf "$work"' EXIT
clk=$(getconf CLK_TCK)

ticks() { awk '{print $14 + $15}' "/proc/$1/task/$1/stat"; }

# Headless: its decode tok/s on stdout.
headless_run() {
  "$bin" run -m "$model" -p "$prompt" --temp 0 -n "$tokens" --ignore-eos -t "$threads" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics"]["decode_tok_per_s"])'
}

# The chat in tmux: leaves its history in $data and the UI thread's CPU ticks in $data/ticks.
tui_run() {
  local data=$1 pid before after
  tmux -L "$sock" -f /dev/null new-session -d -x 120 -y 40 -s b \
    "exec env TOKSCOPE_DATA_DIR=$data TOKSCOPE_CONFIG_DIR=$work/cfg $bin chat -m $model --temp 0 -n $tokens --ignore-eos -t $threads"
  pid=$(tmux -L "$sock" display -p -t b '#{pane_pid}')
  until tmux -L "$sock" capture-pane -p -t b | head -1 | grep -q ready; do sleep 0.05; done
  before=$(ticks "$pid")
  tmux -L "$sock" send-keys -t b -l "$prompt"
  tmux -L "$sock" send-keys -t b Enter
  # Poll with a shell builtin, twice a second: a polling loop that forks (`ls` 20 times a
  # second) takes enough CPU to slow a decode that fills every core by several percent.
  until compgen -G "$data/history/*.json" >/dev/null; do sleep 0.5; done
  after=$(ticks "$pid")
  tmux -L "$sock" send-keys -t b C-q
  sleep 0.3
  tmux -L "$sock" kill-server 2>/dev/null || true
  echo "$before $after" >"$data/ticks"
}

# Pairs alternate their order (ABBA): odd pairs run headless first, even pairs the TUI first,
# so an order effect (page cache, CPU frequency) falls on both sides equally.
for i in $(seq 1 "$runs"); do
  data="$work/data-$i"
  mkdir -p "$data"
  if [ $((i % 2)) = 1 ]; then
    order="headless, TUI"
    headless=$(headless_run)
    tui_run "$data"
  else
    order="TUI, headless"
    tui_run "$data"
    headless=$(headless_run)
  fi
  read -r before after <"$data/ticks"
  python3 - "$data" "$headless" "$before" "$after" "$clk" "$i" "$order" <<'PY'
import glob, json, sys
data, headless, before, after, clk, i, order = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
conv = json.load(open(glob.glob(data + "/history/*.json")[0]))
m = conv["turns"][-1]["metrics"]
tui = m["decode_tok_per_s"]
ui_cpu_ms = (after - before) * 1000 / clk
open(data + "/../summary.txt", "a").write(f"{tui/headless} {ui_cpu_ms/m['e2e_ms']*1000}\n")
print(f"run {i} ({order}): tokens {m['tokens_generated']}  headless {headless:.2f} tok/s  TUI {tui:.2f} tok/s  ratio {tui/headless:.3f}  "
      f"UI thread CPU {ui_cpu_ms:.0f} ms over {m['e2e_ms']:.0f} ms streaming = {ui_cpu_ms/m['e2e_ms']*1000:.0f} ms/s")
PY
done
python3 - "$summary" "$(basename "$model")" "$threads" "$tokens" <<'PY'
import math, statistics as st, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
ratios = [r for r, _ in rows]
cpu = [c for _, c in rows]
spread = ""
if len(ratios) > 1:
    se = st.stdev(ratios) / math.sqrt(len(ratios))
    spread = f", mean ± 2 SE {st.mean(ratios) - 2 * se:.3f}–{st.mean(ratios) + 2 * se:.3f}"
print(f"{sys.argv[2]}, {sys.argv[3]} threads, {sys.argv[4]} tokens, {len(rows)} pairs in alternating order: "
      f"TUI/headless decode tok/s mean {st.mean(ratios):.3f}, median {st.median(ratios):.3f} "
      f"(min {min(ratios):.3f}, max {max(ratios):.3f}{spread}); UI thread CPU {st.mean(cpu):.0f} ms per s of streaming")
PY
