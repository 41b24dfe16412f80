#!/usr/bin/env bash
# tokscope compare's quality figures side by side with llama.cpp's own
# `llama-perplexity --kl-divergence`, on the same model files, text, context and chunks.
#
# llama-perplexity needs two passes and a logits file: the reference writes its log-probs
# (`--kl-divergence-base FILE`), then the candidate is scored against them
# (`--kl-divergence`). tokscope computes the same figures in one lockstep pass without a file.
# Both use chunks of -c tokens with -b equal to -c (one sequence per decode), score the second
# half of each chunk, and start each chunk with BOS.
#
# Usage: scripts/compare-llama-perplexity.sh [options]   (--help lists them)
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/llama-tools.sh
source "${repo_root}/scripts/llama-tools.sh"

usage() {
  cat <<'HELP'
Usage: scripts/compare-llama-perplexity.sh [options]

  -m, --model FILE       reference model (default: the demo model,
                         ~/.local/share/tokscope/models/gemma-3-270m-q4_k_m.gguf)
      --candidate FILE   candidate model (default: the reference quantized to --quantize by
                         tokscope compare, cached)
      --quantize TYPE    type of the default candidate (default: q4_0; a quantized reference
                         is requantized with --allow-requantize)
  -c, --ctx-size N       tokens per chunk (default: 512)
      --chunks N         chunks to evaluate (default: 0 = all the text holds)
  -t, --threads N        threads (default: 2)
  -f, --text FILE        evaluation text (default: assets/eval/alice.txt, tokscope's built-in)
      --source SRC       llama.cpp tools: sys (the llama.cpp tokscope links; default) or
                         pypi[:VER] (the llama-cpp-python sdist's)
      --out DIR          keep the raw outputs here (default: a temporary dir, removed)
      --tokscope FILE    tokscope binary (default: target/release/tokscope, built if missing)
  -h, --help             this text

Target: every figure within 1% of llama-perplexity's plus half the unit of its last printed
digit (its rounding); exits 1 when one is not.
HELP
}

model="${HOME}/.local/share/tokscope/models/gemma-3-270m-q4_k_m.gguf"
candidate=
quant=q4_0
ctx=512
chunks=0
threads=2
text="${repo_root}/assets/eval/alice.txt"
source_arg=sys
out_dir=
tokscope="${repo_root}/target/release/tokscope"

need_value() {
  [ "$#" -ge 2 ] || { echo "error: $1 needs a value" >&2; exit 2; }
}
while [ "$#" -gt 0 ]; do
  case "$1" in
    -m | --model) need_value "$@"; model=$2; shift 2 ;;
    --candidate) need_value "$@"; candidate=$2; shift 2 ;;
    --quantize) need_value "$@"; quant=$2; shift 2 ;;
    -c | --ctx-size) need_value "$@"; ctx=$2; shift 2 ;;
    --chunks) need_value "$@"; chunks=$2; shift 2 ;;
    -t | --threads) need_value "$@"; threads=$2; shift 2 ;;
    -f | --text) need_value "$@"; text=$2; shift 2 ;;
    --source) need_value "$@"; source_arg=$2; shift 2 ;;
    --out) need_value "$@"; out_dir=$2; shift 2 ;;
    --tokscope) need_value "$@"; tokscope=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for pair in "ctx-size:$ctx" "threads:$threads"; do
  case "${pair#*:}" in
    '' | *[!0-9]* | 0) echo "error: --${pair%%:*} must be a positive integer, got '${pair#*:}'" >&2; exit 2 ;;
  esac
done
case "$chunks" in
  '' | *[!0-9]*) echo "error: --chunks must be a number, got '$chunks'" >&2; exit 2 ;;
esac
[ -f "$model" ] || { echo "error: no model at ${model} (tokscope fetch-demo gets the demo model)" >&2; exit 3; }
[ -z "$candidate" ] || [ -f "$candidate" ] || { echo "error: no candidate at ${candidate}" >&2; exit 3; }
[ -f "$text" ] || { echo "error: no text at ${text}" >&2; exit 2; }

tools_dir=$(build_llama_tools "$source_arg")
perplexity="${tools_dir}/bin/llama-perplexity"
if [ ! -x "$tokscope" ]; then
  echo "# building tokscope (cargo build --release)" >&2
  (cd "$repo_root" && cargo build --release) >&2
fi

keep_out=1
if [ -z "$out_dir" ]; then
  out_dir=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-ppl.XXXXXX")
  keep_out=0
fi
mkdir -p "$out_dir"
# Keep these runs out of the user's comparisons log (the quantized cache is shared).
export TOKSCOPE_DATA_DIR="${out_dir}/tokscope-data"

chunk_args=()
[ "$chunks" = 0 ] || chunk_args=(--chunks "$chunks")

echo "# tokscope compare (one lockstep pass)" >&2
ts_args=(compare -m "$model" -c "$ctx" -t "$threads" --text "$text" --no-speed -o json "${chunk_args[@]}")
if [ -n "$candidate" ]; then
  ts_args+=(-m "$candidate")
else
  ts_args+=(--quantize "$quant" --allow-requantize)
fi
"$tokscope" "${ts_args[@]}" >"${out_dir}/tokscope.json" 2>"${out_dir}/tokscope.log" || {
  tail -n 20 "${out_dir}/tokscope.log" >&2
  exit 1
}
if [ -z "$candidate" ]; then
  candidate=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"][1]["model"])' \
    "${out_dir}/tokscope.json")
fi

# The chat's scoring path (`--ref`, Alt+K: engine::score, another code path than compare's
# lockstep) over the same chunks: `doctor scoring`, twice. With `--passes whole` each chunk is
# one decode, as llama-perplexity's: every figure is held to the same tolerance. With the
# chat's own passes (the context, then 32 positions a pass) the kernels differ in the last
# bits: PPL and mean KLD are held to it, the rest is shown (docs/checks.md).
for passes in whole pieces; do
  echo "# tokscope doctor scoring (the chat's scoring path, ${passes} passes)" >&2
  "$tokscope" doctor scoring -m "$candidate" --ref "$model" -c "$ctx" -t "$threads" --text "$text" \
    "${chunk_args[@]}" --passes "$passes" --json >"${out_dir}/chat-scoring-${passes}.json" \
    2>"${out_dir}/chat-scoring-${passes}.log" || {
    tail -n 20 "${out_dir}/chat-scoring-${passes}.log" >&2
    exit 1
  }
done

common=(-f "$text" -c "$ctx" -b "$ctx" -t "$threads" -ngl 0 "${chunk_args[@]}")
# One llama-perplexity pass into LOG; its figures are read from the log's last lines. A CI run
# of this project once got a log with no "Final estimate" from a reference pass that exited 0,
# and once a candidate log with "Same top p" but no "Mean PPL(Q)" (llama.cpp's logger writes
# from a thread of its own). A log that lacks any line a figure is read from (NEEDED: extended
# regexes, one per line, the same lines the reader below uses) is kept as LOG.1 and the pass
# runs once more, saying so; if the second log lacks a figure too, reading it fails the check.
perplexity_pass() {
  local log=$1 needed=$2 missing
  shift 2
  "$perplexity" "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; exit 1; }
  missing=$(while IFS= read -r re; do grep -qE "$re" "$log" || echo "$re"; done <<<"$needed")
  if [ -n "$missing" ]; then
    mv "$log" "${log}.1"
    echo "# llama-perplexity's log lacks $(echo "$missing" | paste -sd ',' -) (kept as ${log}.1; its last lines: $(tail -n 2 "${log}.1" | tr '\n' ' ')): running the pass again" >&2
    "$perplexity" "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; exit 1; }
  fi
}
echo "# llama-perplexity: reference pass (writes the base log-probs)" >&2
perplexity_pass "${out_dir}/reference.log" 'Final estimate: PPL = [0-9.]+' \
  -m "$model" "${common[@]}" --kl-divergence-base "${out_dir}/base.kld"
echo "# llama-perplexity: candidate pass (--kl-divergence)" >&2
candidate_lines='Mean PPL\(Q\) *: *[0-9.]+
Mean +KLD: *[0-9.]+
Median +KLD: *[0-9.]+
99\.0% +KLD: *[0-9.]+
Maximum KLD: *[0-9.]+
Same top p: *[0-9.]+
Mean +Δp: *-?[0-9.]+
RMS Δp *: *[0-9.]+
computing over [0-9]+ chunks'
perplexity_pass "${out_dir}/candidate.log" "$candidate_lines" \
  -m "$candidate" "${common[@]}" --kl-divergence --kl-divergence-base "${out_dir}/base.kld"

status=0
if python3 - "${out_dir}/tokscope.json" "${out_dir}/reference.log" "${out_dir}/candidate.log" \
  "$(head -n 2 "${tools_dir}/VERSION" | paste -sd ";" -)" "${out_dir}/chat-scoring-whole.json" \
  "${out_dir}/chat-scoring-pieces.json" <<'PY'
import json, re, sys

ts = json.load(open(sys.argv[1]))
ref_log = open(sys.argv[2], encoding="utf-8", errors="replace").read()
cand_log = open(sys.argv[3], encoding="utf-8", errors="replace").read()
tools = sys.argv[4]
chat = {p: json.load(open(f)) for p, f in (("whole", sys.argv[5]), ("pieces", sys.argv[6]))}

def grab(text, pattern):
    """The first number the pattern captures, and the unit of its last printed digit."""
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"error: llama-perplexity's output has no match for {pattern!r}")
    s = m.group(1)
    decimals = len(s.split(".")[1]) if "." in s else 0
    return float(s), 10.0 ** -decimals

ref_row, cand_row = ts["rows"][0], ts["rows"][1]
q = cand_row["quality"]
# (figure, tokscope's value, llama-perplexity's pattern, log). Every figure is checked.
specs = [
    ("PPL reference", ref_row["quality"]["ppl"], r"Final estimate: PPL = ([0-9.]+)", ref_log),
    ("PPL candidate", q["ppl"], r"Mean PPL\(Q\)\s*:\s*([0-9.]+)", cand_log),
    ("KLD mean", q["kld_mean"], r"Mean\s+KLD:\s*([0-9.]+)", cand_log),
    ("KLD median", q["kld_median"], r"Median\s+KLD:\s*([0-9.]+)", cand_log),
    ("KLD p99", q["kld_p99"], r"99\.0%\s+KLD:\s*([0-9.]+)", cand_log),
    ("KLD max", q["kld_max"], r"Maximum KLD:\s*([0-9.]+)", cand_log),
    ("same top %", q["same_top_pct"], r"Same top p:\s*([0-9.]+)", cand_log),
    ("Δp mean (pp)", q["delta_p_mean_pct"], r"Mean\s+Δp:\s*(-?[0-9.]+)", cand_log),
    ("Δp RMS (pp)", q["delta_p_rms_pct"], r"RMS Δp\s*:\s*([0-9.]+)", cand_log),
]
# Each spec gets the fraction of llama-perplexity's figure it is held to (None: shown). Then
# the same figures through the chat's scoring path (doctor scoring), both ways of cutting its
# passes. The chat's own passes run other kernels than one decode of the chunk (llama.cpp's
# CPU kernels are not batch-invariant): its PPL and mean KLD are held to 2 %, twice the
# largest such part seen (mean KLD +0.46 % on an AVX2 machine, +1.04 % on an AVX-512 one);
# a scoring error is far larger (a planted 1.1 on the reference's logits: +9.7 %).
specs = [(*s, 0.01) for s in specs]
for passes in ("whole", "pieces"):
    cq = chat[passes]["quality"]
    held = lambda name: 0.01 if passes == "whole" else (
        0.02 if name in ("PPL candidate", "KLD mean") else None)
    for name, key, pattern in [
        ("PPL candidate", "ppl", r"Mean PPL\(Q\)\s*:\s*([0-9.]+)"),
        ("KLD mean", "kld_mean", r"Mean\s+KLD:\s*([0-9.]+)"),
        ("KLD median", "kld_median", r"Median\s+KLD:\s*([0-9.]+)"),
        ("KLD p99", "kld_p99", r"99\.0%\s+KLD:\s*([0-9.]+)"),
        ("KLD max", "kld_max", r"Maximum KLD:\s*([0-9.]+)"),
        ("same top %", "same_top_pct", r"Same top p:\s*([0-9.]+)"),
        ("Δp mean (pp)", "delta_p_mean_pct", r"Mean\s+Δp:\s*(-?[0-9.]+)"),
        ("Δp RMS (pp)", "delta_p_rms_pct", r"RMS Δp\s*:\s*([0-9.]+)"),
    ]:
        specs.append((f"chat path, {passes} passes: {name}", cq[key], pattern, cand_log, held(name)))
chunks = int(grab(cand_log, r"computing over (\d+) chunks")[0])
print(f"reference: {ref_row['model']}")
print(f"candidate: {cand_row['model']}")
print(f"text: {ts['text']} ({ts['text_tokens']} tokens), n_ctx {ts['n_ctx']}, "
      f"chunks tokscope {ts['chunks']} / llama-perplexity {chunks}")
print(f"llama-perplexity: {tools}")
print()
print("Tolerance: 1 % of llama-perplexity's figure plus half the unit of its last printed digit")
print("(it prints KLD to 6 decimals and Δp to 3: its rounding adds up to half a unit to the")
print("difference). Δp mean is signed and near zero: compared the same way.")
print("The chat path with its own passes (the context, then 32 positions a pass) runs other")
print("kernels than one decode of the chunk, which parts in the last bits: its PPL and mean KLD")
print("are held to 2 % (plus the half unit), its other figures shown (near-tie tops can flip).")
print()
print("| figure | tokscope | llama-perplexity | difference | tolerance | |")
print("| --- | ---: | ---: | ---: | ---: | --- |")
outside = []
if ts["chunks"] != chunks:
    outside.append(f"chunks {ts['chunks']} vs {chunks}")
for passes, c in chat.items():
    if c["chunks"] != chunks:
        outside.append(f"chat path, {passes} passes: chunks {c['chunks']} vs {chunks}")
for name, ours, pattern, log, held_to in specs:
    theirs, unit = grab(log, pattern)
    if ours is None:
        outside.append(f"{name}: tokscope gave no figure")
        print(f"| {name} | — | {theirs} | — | — | OUTSIDE |")
        continue
    # Its printed figure is off the true one by up to half a unit: that comes on top of the
    # 1 % (ours is not rounded, so a true 0.0000595 printed as 0.000060 must match 0.0000594).
    diff = ours - theirs
    if held_to is None:
        rel = f" ({diff / theirs * 100:+.2f} %)" if theirs != 0 else ""
        print(f"| {name} | {ours:.6f} | {theirs:.6f} | {diff:+.6f}{rel} | — | shown |")
        continue
    tolerance = held_to * abs(theirs) + unit / 2
    ok = abs(diff) <= tolerance
    if not ok:
        outside.append(f"{name}: {ours:.6f} vs {theirs:.6f}")
    rel = f" ({diff / theirs * 100:+.2f} %)" if theirs != 0 else ""
    print(f"| {name} | {ours:.6f} | {theirs:.6f} | {diff:+.6f}{rel} | ±{tolerance:.6f} | "
          f"{'within' if ok else 'OUTSIDE'} |")
print()
if outside:
    print("OUTSIDE the tolerance: " + "; ".join(outside))
    sys.exit(1)
print("every figure within its tolerance")
PY
then :; else status=$?; fi
if [ "$keep_out" = 0 ] && [ "$status" = 0 ]; then
  rm -rf "$out_dir"
else
  echo "# raw outputs kept in ${out_dir}" >&2
fi
exit "$status"
