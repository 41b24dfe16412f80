#!/usr/bin/env bash
# How long the model picker's search takes on a tree like a well-stocked machine's: COPIES hard
# links of one real GGUF (its whole header is parsed each time: a large vocabulary makes it
# slow), 40 synthetic tiny models, 2000 other files in 200 folders, and a symlink loop. Warm
# runs (and one cold run with DROP_CACHES=1). Usage:
#   scripts/bench-discover.sh [GGUF] [COPIES] [RUNS]
# GGUF defaults to the demo model in the data dir (`tokscope fetch-demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
data_dir=${TOKSCOPE_DATA_DIR:-$HOME/.local/share/tokscope}
model=$(realpath "${1:-$data_dir/models/gemma-3-270m-q4_k_m.gguf}")
copies=${2:-50}
runs=${3:-5}
cargo build --release --locked --example discover_models >/dev/null 2>&1 || cargo build --release --example discover_models
bin=target/release/examples/discover_models
[ -x target/release/tokscope ] || cargo build --release --locked
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree="$work/tree"
mkdir -p "$tree/big" "$tree/tiny" "$tree/loop"
for i in $(seq 1 "$copies"); do ln "$model" "$tree/big/m$i.gguf" 2>/dev/null || cp "$model" "$tree/big/m$i.gguf"; done
for i in $(seq 1 40); do target/release/tokscope synth -o "$tree/tiny/t$i.gguf" --preset tiny --type f32 >/dev/null; done
for d in $(seq 1 200); do
  mkdir -p "$tree/other/d$d"
  for f in $(seq 1 10); do echo x > "$tree/other/d$d/f$f.txt"; done
done
ln -s "$tree" "$tree/loop/back"
echo "model: $model ($(stat -c %s "$model") bytes), $copies links + 40 tiny synthetic, 2000 other files"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# Dropping the page cache slows every other process on the machine: only when asked.
if [ "${DROP_CACHES:-0}" = 1 ] && sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
  echo "cold (page cache dropped):"
  "$bin" 1 "$tree"
else
  echo "cold: not measured (DROP_CACHES=1 drops the page cache first; it slows the whole machine)"
fi
echo "warm:"
"$bin" "$runs" "$tree"
