#!/usr/bin/env bash
# Is synthetic speed real speed? Clones MODEL with `tokscope synth --like` (same metadata,
# tokenizer, tensor shapes and types, pseudo-random weights), then benchmarks the real file
# and the clone alternately, RUNS times each (`tokscope bench -p 512 -n 128 -r 1`, one warm-up
# per run), and prints pp512 and tg128 tok/s of both, their means and the clone/real ratios.
#
# The real model is benchmarked as a fresh copy written next to the clone: how a file sits in
# the page cache changes decode speed (on the development machine, a byte-identical copy of the
# demo model written moments before decoded ~10% faster than the original, fetched an hour
# earlier), so both files must be equally fresh for the comparison to be about their weights.
#
# Usage: scripts/synth-like.sh [MODEL] [RUNS] [THREADS]
#   MODEL    default: the demo model (Gemma 3 270M Q4_K_M) in the data dir
#   RUNS     alternations (default 5)
#   THREADS  CPU threads (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

model=${1:-"${TOKSCOPE_DATA_DIR:-$HOME/.local/share/tokscope}/models/gemma-3-270m-q4_k_m.gguf"}
runs=${2:-5}
threads=${3:-2}
bin=target/release/tokscope
cargo build --release --locked --bins >&2
[ -f "$model" ] || {
    echo "synth-like: no model at $model (tokscope fetch-demo gets the demo model)" >&2
    exit 1
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-synth-like.XXXXXX")
trap 'rm -rf "$dir"' EXIT
clone="$dir/clone.gguf"
real="$dir/real.gguf"
cp "$model" "$real"
"$bin" synth --like "$real" -o "$clone" 2>&1 | sed 's/^/# /'
# The bench results log of this comparison stays out of the user's.
export TOKSCOPE_DATA_DIR="$dir/data"

bench() { # MODEL -> "pp_tok_s tg_tok_s"
    "$bin" bench -m "$1" -p 512 -n 128 -r 1 -t "$threads" --no-probe -o json 2>/dev/null |
        python3 -c 'import json, sys
rows = {r["kind"]: r["tok_per_s_mean"] for r in json.load(sys.stdin)}
print("%.2f %.2f" % (rows["pp"], rows["tg"]))'
}

echo "model: $model ($(stat -c %s "$model") bytes), clone: $(stat -c %s "$clone") bytes, $threads threads, $runs alternations"
printf '%-6s %9s %10s %10s %10s\n' run real_pp512 clone_pp512 real_tg128 clone_tg128
for i in $(seq "$runs"); do
    read -r real_pp real_tg < <(bench "$real")
    read -r clone_pp clone_tg < <(bench "$clone")
    printf '%-6s %9s %10s %10s %10s\n' "$i" "$real_pp" "$clone_pp" "$real_tg" "$clone_tg" | tee -a "$dir/rows"
done
python3 - "$dir/rows" <<'PY'
import statistics, sys
rows = [list(map(float, line.split()[1:])) for line in open(sys.argv[1])]
cols = list(zip(*rows))
for name, f in (("mean", statistics.mean), ("median", statistics.median)):
    rp, cp, rt, ct = (f(c) for c in cols)
    print("%-6s %9.2f %10.2f %10.2f %10.2f   clone/real: pp512 %.3f, tg128 %.3f" % (name, rp, cp, rt, ct, cp / rp, ct / rt))
PY
