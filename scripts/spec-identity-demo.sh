#!/usr/bin/env bash
# Greedy identity of speculative decoding on the demo model, with and without batch-invariant
# kernels (docs/metrics.md "Batch-invariant kernels"): for each case, 4 turns in one engine,
# the same conversation resent each turn (the KV cache is reused from turn 2 on), 128 tokens
# of bench's copy-heavy prompt, greedy, one thread. Prints one JSON line per case: each
# turn's text, and whether it equals the reference's turn 1 (plain decoding on the same
# kernels).
#
#   scripts/spec-identity-demo.sh [MODEL] > benchmarks/spec-identity-demo-DATE.txt
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-$HOME/.local/share/tokscope/models/gemma-3-270m-q4_k_m.gguf}
bin=${TOKSCOPE_BIN:-target/release/tokscope}
[ -x "$bin" ] || cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/prompt.txt" <<'PY'
import re, sys
s = open("src/bench/spec.rs").read()
m = re.search(r'DEFAULT_SPEC_PROMPT: &str = "(.*?)";\n', s, re.S)
open(sys.argv[1], "w").write(m.group(1).replace('\\"', '"'))
PY
echo "# $(date -u +%FT%TZ) $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# per case: $bin run -m $model -f PROMPT --temp 0 -n 128 --ignore-eos -t 1 --turns 4 --resend --report FILE ARGS"
run_case() {
  local name=$1; shift
  "$bin" run -m "$model" -f "$work/prompt.txt" --temp 0 -n 128 --ignore-eos -t 1 \
    --turns 4 --resend --report "$work/$name.jsonl" "$@" >/dev/null 2>"$work/$name.err" \
    || { cat "$work/$name.err" >&2; exit 1; }
  echo "$name $*" >> "$work/cases"
}
run_case plain-default --spec off --batch-invariant off
run_case plain-invariant --spec off --batch-invariant on
for k in 3 7; do
  run_case "ngram-k$k-default" --spec ngram --draft-max "$k" --batch-invariant off
  run_case "ngram-k$k-invariant" --spec ngram --draft-max "$k" --batch-invariant on
done
python3 - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
texts = {}
for line in open(os.path.join(work, "cases")):
    name, *args = line.split()
    texts[name] = ([json.loads(l)["text"] for l in open(os.path.join(work, name + ".jsonl"))], args)
for name, (ts, args) in texts.items():
    ref = texts["plain-invariant" if name.endswith("invariant") else "plain-default"][0][0]
    print(json.dumps({"case": name, "args": " ".join(args),
                      "reference": "plain-invariant" if name.endswith("invariant") else "plain-default",
                      "identical_to_reference_turn1": [t == ref for t in ts],
                      "texts": ts}))
PY
