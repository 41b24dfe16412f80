#!/usr/bin/env bash
# Speculative decoding through `tokscope bench`: a --draft-max sweep against k=0 (no
# speculation) in alternating rounds, inside one bench run. Three cases, each written with its
# header (command, machine, load before and after, date) to benchmarks/spec-bench-CASE.txt:
#
#   demo-ngram   the demo model (gemma-3-270m Q4_K_M), --spec ngram --draft-max 0,2,4,8 on
#                bench's built-in copy-heavy prompt
#   synth-self   synthetic `small` (F32) drafting for itself (acceptance 100%)
#   synth-unrelated  synthetic `small` with an unrelated synthetic `tiny` draft (acceptance ~0)
#   demo-rename (--only demo-rename): the demo model, --spec ngram on
#                benchmarks/prompts/rename-paragraph.txt ("repeat this paragraph with the name
#                changed", the issue's example of a copy-heavy task)
#   roofline-self, roofline-unrelated (--only roofline): a memory-bound synthetic target, F32,
#                612 MB (6 layers, 1536 wide, 4096 FFN, 700-token vocabulary: far larger than
#                the CPU caches), drafting for itself, and with an unrelated 1-layer draft of the
#                same width (109 MB, 18% of the target's bytes): the roofline's two cases
#
# Each file: a table of every row's figures, the verdict, the progress lines, the raw JSON. The
# demo case also draws benchmarks/spec-bench-demo-ngram-spec.png.
# Usage: scripts/spec-bench-sweep.sh [--rounds N] [--threads T] [--tokens N]
#            [--only demo|demo-rename|synth|roofline] [--ks K,…] [--suffix S] [--kernels auto|on|off]
# --ks: the --draft-max list (default 0,2,4,8); --suffix: appended to every output's name;
# --kernels: bench's --batch-invariant.
# --check TOL: fail (exit 1) when a speculating row's mean measured ÷ expected-with-compute
# speed-up (the roofline with its compute term, docs/metrics.md) is outside 1 ± TOL, e.g. 0.15;
# TOKSCOPE_BIN=<a `cargo build --release --features plant` binary> with
# TOKSCOPE_PLANT_SCALE=row_cost:0 plants an error it must catch (the compute term dropped).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=4
threads=1
tokens=128
only=""
ks=0,2,4,8
suffix=""
kernels=auto
check=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --ks) ks=$2; shift 2 ;;
        --suffix) suffix=$2; shift 2 ;;
        --kernels) kernels=$2; shift 2 ;;
        --check) check=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

bin=${TOKSCOPE_BIN:-target/release/tokscope}
[ -n "${TOKSCOPE_BIN:-}" ] || cargo build --release --bins >&2
failed=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p benchmarks

# run_case NAME BENCH-ARGS...: one bench run with -o json; a table of every figure is printed
# from its rows, then the progress lines and the raw JSON.
run_case() {
    local name=$1
    shift
    local out="benchmarks/spec-bench-$name$suffix.txt"
    {
        echo "# $bin bench $*"
        echo "# $(date -u +%FT%TZ) · $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')) · no GPU"
        echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: other engineers' builds and tests run beside it)"
        echo
        "$bin" bench "$@" -o json 2>"$work/$name.err" >"$work/$name.json" || { cat "$work/$name.err"; exit 1; }
        python3 - "$work/$name.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
def f(v, d=2, unit=""):
    return "—" if v is None else f"{v:.{d}f}{unit}"
def pct(v):
    return "—" if v is None else f"{v*100:.0f}%"
print("| k | tok/s (rounds) | speed-up mean (min–max, sd) | expected | measured ÷ expected mean (min–max) | expected with compute (ρ) | measured ÷ expected with compute mean (min–max) | accept | α | tok/pass | draft ms/step | verify ms/pass | plain ms/pass (k=0) | verify cost | draft ms/tok | verify ms/tok | host µs/tok | same text |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
def agree(r, key='expected_speedup'):
    e = r.get(key)
    if not e or r['draft_max'] == 0:
        return "—"
    q = [x / e for x in r['speedup_per_round']]
    return f"{sum(q)/len(q):.2f} ({min(q):.2f}–{max(q):.2f})"
for r in j["rows"]:
    print(f"| {r['draft_max']} | {r['tok_per_s_mean']:.1f} ({', '.join(f'{x:.1f}' for x in r['samples_tok_per_s'])}) "
          f"| {r['speedup_mean']:.2f}× ({r['speedup_min']:.2f}–{r['speedup_max']:.2f}, ±{r['speedup_sd']:.2f}) "
          f"| {f(r['expected_speedup'], 2, '×')} | {agree(r)} "
          f"| {f(r.get('expected_speedup_compute'), 2, '×')} ({f(r.get('row_cost'), 3)}) | {agree(r, 'expected_speedup_compute')} | {pct(r['acceptance_rate'])} | {pct(r['acceptance_per_token'])} "
          f"| {f(r['tokens_per_pass'])} | {f(r['draft_ms_per_step'])} | {f(r['verify_ms_per_pass'])} "
          f"| {f(r['plain_ms_per_pass'])} | {f(r['verify_cost_in_passes'])} | {f(r['draft_ms_per_token'], 3)} "
          f"| {f(r['verify_ms_per_token'], 3)} | {f(r['host_us_per_token'], 1)} | {'yes' if r['text_identical'] else 'NO'} |")
print()
print(j["verdict"])
w = j["rows"][0].get("warning")
if w:
    print(f"warning: {w}")
PY
        if [ -n "$check" ]; then
            echo
            python3 - "$work/$name.json" "$check" "$name" <<'PY' || touch "$work/check-failed"
import json, sys
j = json.load(open(sys.argv[1]))
tol = float(sys.argv[2])
ok = True
for r in j["rows"]:
    if r["draft_max"] == 0:
        continue
    e = r.get("expected_speedup_compute")
    if not e:
        print(f"check {sys.argv[3]} k={r['draft_max']}: FAIL, no expected speed-up with compute")
        ok = False
        continue
    q = [x / e for x in r["speedup_per_round"]]
    m = sum(q) / len(q)
    good = abs(m - 1) <= tol
    ok &= good
    print(f"check {sys.argv[3]} k={r['draft_max']}: measured ÷ expected with compute {m:.2f} "
          f"(rounds {min(q):.2f}–{max(q):.2f}, ρ {r.get('row_cost')}): "
          f"{'within' if good else 'FAIL, outside'} 1 ± {tol}")
sys.exit(0 if ok else 1)
PY
        fi
        echo
        echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "# stderr (progress, per round):"
        sed 's/^/#   /' "$work/$name.err"
        echo "# raw JSON:"
        cat "$work/$name.json"
    } > "$out"
    cat "$out" | sed -n '1,/^# load average after/p'
    if [ -e "$work/check-failed" ]; then
        failed=1
        rm -f "$work/check-failed"
    fi
}

common=(-n "$tokens" -r "$rounds" -t "$threads" --no-probe --draft-max "$ks" --batch-invariant "$kernels")
if [ "$only" = roofline ]; then
    "$bin" synth --preset small --type f32 --layers 6 --embd 1536 --ff 4096 --heads 12 --kv-heads 4 --seed 5 -o "$work/big.gguf" >/dev/null 2>&1
    "$bin" synth --preset small --type f32 --layers 1 --embd 1536 --ff 4096 --heads 12 --kv-heads 4 --seed 77 -o "$work/big-1l.gguf" >/dev/null 2>&1
    run_case roofline-self -m "$work/big.gguf" --draft "$work/big.gguf" "${common[@]}"
    run_case roofline-unrelated -m "$work/big.gguf" --draft "$work/big-1l.gguf" "${common[@]}"
    exit "$failed"
fi
if [ "$only" = demo-rename ]; then
    demo=$("$bin" fetch-demo 2>/dev/null | tail -1 || true)
    [ -f "$demo" ] || demo=$(ls "${TOKSCOPE_DATA_DIR:-$HOME/.local/share/tokscope}"/models/gemma-3-270m-q4_k_m.gguf)
    run_case demo-rename -m "$demo" --spec ngram --spec-prompt benchmarks/prompts/rename-paragraph.txt "${common[@]}" --plot "benchmarks/spec-bench-demo-rename$suffix.png"
    exit "$failed"
fi
if [ "$only" != synth ]; then
    demo=$("$bin" fetch-demo 2>/dev/null | tail -1 || true)
    [ -f "$demo" ] || demo=$(ls "${TOKSCOPE_DATA_DIR:-$HOME/.local/share/tokscope}"/models/gemma-3-270m-q4_k_m.gguf)
    run_case demo-ngram -m "$demo" --spec ngram "${common[@]}" --plot "benchmarks/spec-bench-demo-ngram$suffix.png"
fi
if [ "$only" != demo ]; then
    "$bin" synth --preset small --seed 5 -o "$work/small.gguf" >/dev/null 2>&1
    "$bin" synth --preset tiny --seed 77 -o "$work/tiny.gguf" >/dev/null 2>&1
    run_case synth-self -m "$work/small.gguf" --draft "$work/small.gguf" "${common[@]}"
    run_case synth-unrelated -m "$work/small.gguf" --draft "$work/tiny.gguf" "${common[@]}"
fi
exit "$failed"
