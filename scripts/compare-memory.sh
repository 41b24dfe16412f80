#!/usr/bin/env bash
# Quality at depth with memory that does not grow with it (issue #60, item 3).
#
# `compare` on the demo model (a 262,144-token vocabulary) against a Q4_0 requantized from it, one chunk at
# each context, quality only: its peak RSS (GNU time's maximum resident set size) with each
# chunk scored in blocks of the micro-batch (the default: the logits held are O(512 ×
# vocabulary) per model) and, where it fits, with each chunk decoded whole as llama-perplexity
# does (`--scoring-block` equal to -c: O(-c × vocabulary), 4096 rows of 1 MiB per model at 8k).
# Beside each, the figures, which must be the same in both modes.
#
# Usage: scripts/compare-memory.sh [MODEL.gguf]
#   CONTEXTS (default "512 2048 8192 32768"), WHOLE (contexts also decoded whole; default
#   "512 2048"), THREADS (default 1), NO_BUILD=1 (use the binary as built)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/target/release/tokscope
model=${1:-${XDG_DATA_HOME:-$HOME/.local/share}/tokscope/models/gemma-3-270m-q4_k_m.gguf}
contexts=${CONTEXTS:-512 2048 8192 32768}
whole=${WHOLE:-512 2048}
threads=${THREADS:-1}
[ -n "${NO_BUILD:-}" ] || cargo build --release --locked --bins >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-compare-memory.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Two chunks' worth of tokens at 32k: the built-in text twice.
for _ in 1 2; do cat assets/eval/alice.txt; done >"$work/text.txt"
echo "# $(date -u +%FT%TZ) · $(git rev-parse --short HEAD) · $(nproc) cores · threads $threads · load $(cut -d' ' -f1-3 /proc/loadavg)"
grep -m1 'model name' /proc/cpuinfo | sed 's/^/# /'
echo "# model $(basename "$model") against a Q4_0 requantized from it (once, into the cache), one chunk each, quality only"
printf '%-8s %-7s %12s %10s %12s %12s %10s\n' ctx mode peak_rss_MB wall_s ppl_ref kld_mean_q4 same_top
one() { # $1 ctx, $2 blocks|whole
  local extra=()
  [ "$2" = whole ] && extra=(--scoring-block "$1")
  /usr/bin/time -v "$bin" compare -m "$model" --quantize q4_0 --allow-requantize --no-speed --text "$work/text.txt" \
    -c "$1" --chunks 1 -t "$threads" -o json "${extra[@]}" >"$work/c.json" 2>"$work/c.err" \
    || { cat "$work/c.err" >&2; exit 1; }
  python3 - "$work/c.json" "$work/c.err" "$1" "$2" <<'PY'
import json, re, sys
c = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err)
wall = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
ref, q4 = c["rows"][0]["quality"], c["rows"][1]["quality"]
print(f"{sys.argv[3]:<8} {sys.argv[4]:<7} {rss_kb / 1024:12.0f} {wall:10.1f} {ref['ppl']:12.6f} "
      f"{q4['kld_mean']:12.8f} {q4['same_top_pct']:10.4f}")
PY
}
for ctx in $contexts; do
  one "$ctx" blocks
  case " $whole " in *" $ctx "*) one "$ctx" whole ;; esac
done
