#!/usr/bin/env bash
# Speculative decoding, measured side by side: for each case, plain decoding (A) and the
# speculative setting (B) answer the same prompt with greedy decoding and --ignore-eos, in
# alternating ABBA rounds (A B B A, repeated), each a fresh `tokscope run --json` process.
# Prints per case: decode tok/s of each (median), the speed-up B/A per round pair with its
# median and range, acceptance, tokens per target pass, verify ms against plain ms, the
# roofline's expected speed-up, the verdict, and whether the greedy texts were identical in
# every run (they must be).
#
# Cases:
#   demo-ngram-kK   the demo model (gemma-3-270m Q4_K_M) on a copy-heavy prompt (rewrite a
#                   given function), --spec ngram --draft-max K, for K in $KS
#   synth-self      synthetic `small` (F32) drafting for itself (acceptance 100%)
#   synth-unrelated synthetic `small` with an unrelated synthetic `tiny` draft (same vocabulary,
#                   other weights: acceptance near 0)
#
# Usage: scripts/spec-bench.sh [--rounds N] [--threads T] [--tokens N] [--only demo|synth]
# Writes the raw JSON lines and the summary under benchmarks/ (spec-*.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=2
threads=1
tokens=160
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
KS=${KS:-"2 8"}

bin=target/release/tokscope
cargo build --release --bins >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p benchmarks

cat > "$work/copy.txt" <<'EOF'
Here is a Python function:

def compute_total(items, tax_rate):
    total = 0
    for item in items:
        price = item["price"]
        quantity = item["quantity"]
        total = total + price * quantity
    tax = total * tax_rate
    total = total + tax
    return round(total, 2)

Write the same function again, exactly as above, but named sum_prices.
EOF

# run_case NAME MODEL PROMPT_FILE "B flags..."  → appends JSON lines to $work/NAME.jsonl
run_case() {
    local name=$1 model=$2 prompt=$3 spec=$4
    local out="$work/$name.jsonl"
    : > "$out"
    for round in $(seq 1 "$rounds"); do
        for side in A B B A; do
            local flags=()
            [ "$side" = B ] && read -r -a flags <<< "$spec"
            "$bin" run -m "$model" -f "$prompt" -t "$threads" --temp 0 -n "$tokens" \
                --ignore-eos --json "${flags[@]}" 2>/dev/null \
                | python3 -c 'import json,sys; d=json.load(sys.stdin); d["side"]=sys.argv[1]; d["round"]=int(sys.argv[2]); print(json.dumps(d))' "$side" "$round" >> "$out"
        done
    done
    python3 - "$name" "$spec" "$out" <<'PY'
import json, statistics, sys
name, spec, path = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(path)]
A = [r for r in rows if r["side"] == "A"]
B = [r for r in rows if r["side"] == "B"]
rate = lambda r: r["metrics"]["decode_tok_per_s"]
identical = len({r["text"] for r in rows}) == 1
# ABBA: in each round the two A runs and the two B runs; speed-up per round = mean B / mean A.
ratios = []
for rnd in sorted({r["round"] for r in rows}):
    a = [rate(r) for r in A if r["round"] == rnd]
    b = [rate(r) for r in B if r["round"] == rnd]
    ratios.append(statistics.mean(b) / statistics.mean(a))
sp = [r["spec"] for r in B if r.get("spec")]
def med(key):
    vals = [s[key] for s in sp if s.get(key) is not None]
    return statistics.median(vals) if vals else None
fmt = lambda v, d=2: "—" if v is None else f"{v:.{d}f}"
print(f"## {name}: B = {spec}")
print(f"  plain decode tok/s    median {fmt(statistics.median(map(rate, A)),1)}  (runs: {', '.join(fmt(rate(r),1) for r in A)})")
print(f"  spec  decode tok/s    median {fmt(statistics.median(map(rate, B)),1)}  (runs: {', '.join(fmt(rate(r),1) for r in B)})")
print(f"  measured speed-up     median {fmt(statistics.median(ratios))}×  range {fmt(min(ratios))}–{fmt(max(ratios))}× over {len(ratios)} ABBA rounds")
print(f"  acceptance            {fmt(med('acceptance_rate'))} of drafted · α {fmt(med('acceptance_per_token'))} per token · {fmt(med('tokens_per_pass'))} tokens per target pass")
print(f"  verify ms/pass        {fmt(med('verify_ms_per_pass'))}  · plain ms/pass {fmt(med('plain_ms_per_pass'))} · draft ms/step {fmt(med('draft_ms_per_step'))}")
print(f"  roofline expected     {fmt(med('expected_speedup'))}×  (draft cost ratio {fmt(med('draft_cost_ratio'),3)})")
verdicts = [s.get("verdict") for s in sp if s.get("verdict")]
print(f"  verdict (last run)    {verdicts[-1] if verdicts else '—'}")
print(f"  greedy text identical in all {len(rows)} runs: {'yes' if identical else 'NO'}")
load = [r.get("warning") for r in rows if r.get("warning") and "busy" in r.get("warning", "")]
print(f"  busy-machine warnings {len(load)} of {len(rows)} runs")
PY
    cp "$out" "benchmarks/spec-$name.jsonl.txt"
}

{
    echo "# scripts/spec-bench.sh --rounds $rounds --threads $threads --tokens $tokens ($(date -u +%FT%TZ))"
    echo "# $(nproc) CPUs; load average before: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: other jobs run beside)"
    if [ "$only" != synth ]; then
        demo=$("$bin" fetch-demo 2>/dev/null | tail -1 || true)
        [ -f "$demo" ] || demo=$(ls "${TOKSCOPE_DATA_DIR:-$HOME/.local/share/tokscope}"/models/gemma-3-270m-q4_k_m.gguf)
        for k in $KS; do
            run_case "demo-ngram-k$k" "$demo" "$work/copy.txt" "--spec ngram --draft-max $k"
        done
    fi
    if [ "$only" != demo ]; then
        "$bin" synth --preset small --seed 5 -o "$work/small.gguf" >/dev/null 2>&1
        "$bin" synth --preset tiny --seed 77 -o "$work/tiny.gguf" >/dev/null 2>&1
        echo "the cat sat on the mat, the cat sat on the mat" > "$work/short.txt"
        run_case synth-self "$work/small.gguf" "$work/short.txt" "--draft $work/small.gguf --draft-max 4"
        run_case synth-unrelated "$work/small.gguf" "$work/short.txt" "--draft $work/tiny.gguf --draft-max 4"
    fi
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "benchmarks/spec-summary${only:+-$only}.txt"
