#!/usr/bin/env bash
# Decode speed against depth, with the physics (issue #60, item 2).
#
# `bench -p 0 -n N -d DEPTHS` on synthetic Llama 3.2 1B and Llama 3 8B files (their exact
# shapes, random weights: speed only), each model in one run under `flock` on the bench lock,
# so that no two benchmarks of this machine overlap. The run prints the depth table: per
# depth, decode t/s, the KV bytes a step reads there and the bytes per token, the ceiling and
# MBU, and the speed against depth 0 measured beside what the bytes predict; `--plot` writes
# the chart of tok/s and bytes per token against depth. Load and free memory are recorded
# before and after, in the raw file.
#
# Usage: scripts/bench-depth.sh [OUT_PREFIX]
#   OUT_PREFIX    raw files OUT_PREFIX-1b.txt / -8b.txt and charts OUT_PREFIX-1b-depth.png …
#                 (default benchmarks/bench-depth-$(date +%Y%m%d))
#   MODELS        which shapes, in order (default "1b 8b")
#   DEPTHS_1B     default 0,2048,8192,32768
#   DEPTHS_8B     default 0,2048,8192,32768 (on 2 CPU cores the 8B's prefill of 32k tokens
#                 takes hours: give fewer, and say which were left out)
#   N_GEN (32), REPS (2), THREADS (2), CTK (f16: the KV cache type; q8_0 halves the 8B's
#   cache at 32k from 4 GB), TOKENIZER (a Llama 3 tokenizer.json; default the one the tests
#   fetch into target/tmp, else --fetch-tokenizer), MODEL_DIR (where the synthetic files are
#   kept between runs; default ${TMPDIR:-/tmp}/tokscope-depth), BENCH_LOCK (default
#   /work/bench.lock; none when its folder does not exist), NO_BUILD=1 (the binary as built),
#   BIN (another tokscope binary, e.g. a copy kept while the tree is rebuilt; implies NO_BUILD)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-$PWD/target/release/tokscope}
prefix=${1:-benchmarks/bench-depth-$(date +%Y%m%d)}
models=${MODELS:-1b 8b}
n_gen=${N_GEN:-32}
reps=${REPS:-2}
threads=${THREADS:-2}
ctk=${CTK:-f16}
model_dir=${MODEL_DIR:-${TMPDIR:-/tmp}/tokscope-depth}
lock=${BENCH_LOCK:-/work/bench.lock}
[ -n "${NO_BUILD:-}${BIN:-}" ] || cargo build --release --locked --bins >&2
mkdir -p "$model_dir" "$(dirname "$prefix")"

tokenizer=${TOKENIZER:-target/tmp/llama3-tokenizer/tokenizers/llama3/tokenizer.json}
if [ -f "$tokenizer" ]; then
    tokenizer_args=(--tokenizer "$tokenizer")
else
    tokenizer_args=(--fetch-tokenizer)
fi

locked() {
    if [ -d "$(dirname "$lock")" ]; then
        flock "$lock" "$@"
    else
        "$@"
    fi
}

for m in $models; do
    case $m in
        1b) preset=llama3.2-1b depths=${DEPTHS_1B:-0,2048,8192,32768} ;;
        8b) preset=llama3-8b depths=${DEPTHS_8B:-0,2048,8192,32768} ;;
        *) echo "bench-depth: unknown model '$m' (1b or 8b)" >&2; exit 2 ;;
    esac
    model=$model_dir/$preset-q4_k_m.gguf
    [ -f "$model" ] || "$bin" synth --preset "$preset" --type q4_k_m "${tokenizer_args[@]}" \
        -o "$model" >&2
    raw=$prefix-$m.txt
    echo "bench-depth: $preset at depths $depths → $raw" >&2
    locked bash -c '
        set -euo pipefail
        bin=$1 model=$2 depths=$3 n_gen=$4 reps=$5 threads=$6 ctk=$7 png=$8
        echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · $(nproc) cores · synthetic $(basename "$model") · -d $depths -n $n_gen -r $reps -t $threads -ctk $ctk"
        grep -m1 "model name" /proc/cpuinfo | sed "s/^/# /"
        echo "# load before: $(uptime)"
        echo "# memory before (MB): $(free -m | awk "/^Mem:/ {print \"total \" \$2 \", available \" \$7}")"
        echo "\$ tokscope bench -m $(basename "$model") -p 0 -n $n_gen -d $depths -r $reps -t $threads -ctk $ctk -ctv $ctk --plot $(basename "$png")"
        start=$(date +%s)
        "$bin" bench -m "$model" -p 0 -n "$n_gen" -d "$depths" -r "$reps" -t "$threads" \
            -ctk "$ctk" -ctv "$ctk" --plot "$png" --force 2>&1
        echo "# load after: $(uptime)"
        echo "# wall: $(( $(date +%s) - start )) s"
    ' _ "$bin" "$model" "$depths" "$n_gen" "$reps" "$threads" "$ctk" "$prefix-$m.png" | tee "$raw"
done
