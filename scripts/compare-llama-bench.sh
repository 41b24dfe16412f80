#!/usr/bin/env bash
# tokscope bench side by side with llama.cpp's own llama-bench and llama-batched-bench.
#
# Builds the two llama.cpp tools once with scripts/llama-tools.sh (tool sources from the
# llama-cpp-python sdist on PyPI; by default linked against the very llama.cpp tokscope links,
# CMake Release with the CPU options of tokscope's own llama.cpp build),
# then runs each tool and `tokscope bench` on the same model with the same threads and tests,
# alternating them over several rounds so that machine drift hits both, and prints the ratios.
#
# Usage: scripts/compare-llama-bench.sh [options]   (--help lists them)
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
invocation="scripts/compare-llama-bench.sh${*:+ $*}"

usage() {
  cat <<'EOF'
Usage: scripts/compare-llama-bench.sh [options]

  -m, --model FILE      GGUF model (default: the demo model,
                        ~/.local/share/tokscope/models/gemma-3-270m-q4_k_m.gguf)
  -t, --threads N       threads for every run (default: 2)
  -p, --n-prompt N      prompt tokens of the pp test (default: 512)
  -n, --n-gen N         generated tokens of the tg test (default: 128)
  -r, --repetitions N   repetitions inside each run (default: 3)
      --rounds N        alternating rounds of each tool (default: 3)
      --npp N           batched: prompt tokens per sequence (default: 128)
      --ntg N           batched: generated tokens per sequence (default: 128)
      --npl LIST        batched: batch sizes (default: 1,2,4,8)
      --fa MODE         flash attention for every run: auto, on, off (default: auto)
  -b, --batch-size N    logical batch for every run (default: 2048)
      --ubatch-size N   physical batch for every run (default: 512)
      --out DIR         keep every tool's raw output here (default: a temporary dir, removed)
      --wait-quiet S    before each run, wait up to S seconds for a 5-second window in which
                        other processes use under 5% of the CPUs (default: 0, no waiting)
      --batched-per-b   run llama-batched-bench once per batch size, each with a context of
                        exactly B x (npp + ntg) for B sequences, as tokscope sizes its contexts
                        (default: one run with -npl LIST, one context for the largest B)
      --skip-single     skip the llama-bench comparison
      --skip-batched    skip the llama-batched-bench comparison
      --build-only      build (or find) the llama.cpp tools and stop
      --source SRC      where the llama.cpp tools come from (scripts/llama-tools.sh):
                        sys = the llama.cpp of the llama-cpp-sys-2 crate tokscope links, with
                        the tools' sources from the llama-cpp-python sdist (default: the same
                        llama.cpp on both sides); pypi[:VER] = everything from the
                        llama-cpp-python sdist on PyPI (default VER 0.3.36)
      --tokscope FILE   tokscope binary (default: target/release/tokscope, built if missing)
      --agree PCT       agreement mode (scripts/agreement.sh): pp and tg must lie within PCT %
                        of llama-bench and batched S_TG within --agree-batched PCT % (default 5)
                        of llama-batched-bench, each judged on the median of the per-round
                        ratios, with its uncertainty (2 robust standard errors, u) added to
                        the tolerance; u above 3 x the tolerance fails as too noisy; the
                        script exits 1 when one does not
      --agree-batched PCT
      --pool DIR        judge this run's rounds together with those kept in DIR (the --out of
                        an earlier run of the same command): agreement.sh's second measurement
                        of a part the first one could not vouch for is judged on both
  -h, --help            this text

Targets: tokscope tg >= 0.98 x llama-bench, pp >= 0.95 x llama-bench, batched S_TG within 5%
of llama-batched-bench at each batch size (with --agree: the bands above, exit 1 on a miss).
EOF
}

model="${HOME}/.local/share/tokscope/models/gemma-3-270m-q4_k_m.gguf"
threads=2
n_prompt=512
n_gen=128
reps=3
rounds=3
npp=128
ntg=128
npl=1,2,4,8
fa=auto
n_batch=2048
n_ubatch=512
out_dir=
wait_quiet=0
skip_single=0
skip_batched=0
build_only=0
batched_per_b=0
tools_source=sys
tokscope="${repo_root}/target/release/tokscope"
agree=
agree_batched=5
pool_dir=

need_value() {
  [ "$#" -ge 2 ] || { echo "error: $1 needs a value" >&2; exit 2; }
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    -m | --model) need_value "$@"; model=$2; shift 2 ;;
    -t | --threads) need_value "$@"; threads=$2; shift 2 ;;
    -p | --n-prompt) need_value "$@"; n_prompt=$2; shift 2 ;;
    -n | --n-gen) need_value "$@"; n_gen=$2; shift 2 ;;
    -r | --repetitions) need_value "$@"; reps=$2; shift 2 ;;
    --rounds) need_value "$@"; rounds=$2; shift 2 ;;
    --npp) need_value "$@"; npp=$2; shift 2 ;;
    --ntg) need_value "$@"; ntg=$2; shift 2 ;;
    --npl) need_value "$@"; npl=$2; shift 2 ;;
    --fa) need_value "$@"; fa=$2; shift 2 ;;
    -b | --batch-size) need_value "$@"; n_batch=$2; shift 2 ;;
    -ub | --ubatch-size) need_value "$@"; n_ubatch=$2; shift 2 ;;
    --out) need_value "$@"; out_dir=$2; shift 2 ;;
    --wait-quiet) need_value "$@"; wait_quiet=$2; shift 2 ;;
    --skip-single) skip_single=1; shift ;;
    --skip-batched) skip_batched=1; shift ;;
    --build-only) build_only=1; shift ;;
    --batched-per-b) batched_per_b=1; shift ;;
    --source) need_value "$@"; tools_source=$2; shift 2 ;;
    --tokscope) need_value "$@"; tokscope=$2; shift 2 ;;
    --pool) need_value "$@"; pool_dir=$2; shift 2 ;;
    --agree) need_value "$@"; agree=$2; shift 2 ;;
    --agree-batched) need_value "$@"; agree_batched=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

for pair in "threads:$threads" "repetitions:$reps" "rounds:$rounds" "npp:$npp" "ntg:$ntg" \
  "batch-size:$n_batch" "ubatch-size:$n_ubatch"; do
  case "${pair#*:}" in
    '' | *[!0-9]* | 0) echo "error: --${pair%%:*} must be a positive integer, got '${pair#*:}'" >&2; exit 2 ;;
  esac
done
# 0 drops that test, as in llama-bench.
for pair in "n-prompt:$n_prompt" "n-gen:$n_gen"; do
  case "${pair#*:}" in
    '' | *[!0-9]*) echo "error: --${pair%%:*} must be a number, got '${pair#*:}'" >&2; exit 2 ;;
  esac
done
if [ "$n_prompt" = 0 ] && [ "$n_gen" = 0 ] && [ "$skip_single" = 0 ]; then
  echo "error: -p and -n are both 0: nothing to compare with llama-bench (--skip-single?)" >&2
  exit 2
fi
for pair in "agree:$agree" "agree-batched:$agree_batched"; do
  case "${pair#*:}" in
    *[!0-9.]* | .* | *.*.*) echo "error: --${pair%%:*} must be a percentage like 3, got '${pair#*:}'" >&2; exit 2 ;;
  esac
done
case "$wait_quiet" in
  '' | *[!0-9]*) echo "error: --wait-quiet must be a number of seconds, got '$wait_quiet'" >&2; exit 2 ;;
esac
case "$fa" in
  auto | on | off) ;;
  *) echo "error: --fa must be auto, on or off, got '$fa'" >&2; exit 2 ;;
esac
case "$npl" in
  '' | *[!0-9,]* | ,* | *, | *,,*) echo "error: --npl must be a list like 1,2,4,8, got '$npl'" >&2; exit 2 ;;
esac

# shellcheck source=scripts/llama-tools.sh
source "${repo_root}/scripts/llama-tools.sh"
tools_dir=$(build_llama_tools "$tools_source")
llama_bench="${tools_dir}/bin/llama-bench"
llama_batched_bench="${tools_dir}/bin/llama-batched-bench"
if [ "$build_only" = 1 ]; then
  cat "${tools_dir}/VERSION"
  exit 0
fi

[ -f "$model" ] || {
  echo "error: no model at ${model} (target/release/tokscope fetch-demo gets the demo model)" >&2
  exit 3
}
if [ ! -x "$tokscope" ]; then
  echo "# building tokscope (cargo build --release)" >&2
  (cd "$repo_root" && cargo build --release) >&2
fi
"$tokscope" bench --help >/dev/null 2>&1 || {
  echo "error: ${tokscope} has no bench command" >&2
  exit 1
}

keep_out=1
if [ -z "$out_dir" ]; then
  out_dir=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-compare.XXXXXX")
  keep_out=0
fi
mkdir -p "$out_dir"
# tokscope bench appends every run to the results log in its data dir: keep these runs out of
# the user's log.
ts_data="${out_dir}/tokscope-data"
mkdir -p "$ts_data"
cleanup() {
  if [ "$keep_out" = 0 ]; then rm -rf "$out_dir"; fi
}
trap cleanup EXIT

# The llama.cpp that tokscope links: llama-cpp-sys-2's vendored copy (the crate's version, the
# llama-cpp-rs commit it was published from, the ggml version in its sources).
sys_version=$(sed -n '/^name = "llama-cpp-sys-2"$/{n;s/^version = "\(.*\)"$/\1/p;}' "${repo_root}/Cargo.lock")
sys_src=
for d in "${CARGO_HOME:-${HOME}/.cargo}"/registry/src/*/"llama-cpp-sys-2-${sys_version}"; do
  [ -d "$d" ] && sys_src=$d
done
sys_detail="llama-cpp-sys-2 ${sys_version}"
if [ -n "$sys_src" ]; then
  rs_commit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["git"]["sha1"][:9])' \
    "${sys_src}/.cargo_vcs_info.json" 2>/dev/null || echo unknown)
  sys_ggml=$(grep -E 'set\(GGML_VERSION_(MAJOR|MINOR|PATCH)' "${sys_src}/llama.cpp/ggml/CMakeLists.txt" |
    sed -E 's/.*GGML_VERSION_([A-Z]+) +([0-9]+).*/\2/' | paste -sd. -)
  sys_detail="${sys_detail} (llama-cpp-rs@${rs_commit}, ggml ${sys_ggml})"
fi
{
  read -r tools_origin
  read -r _ tools_ggml
} <"${tools_dir}/VERSION"
tools_detail="${tools_origin} (ggml ${tools_ggml})"

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

echo "# machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, load average ${load_before} before"
echo "# tokscope links: ${sys_detail}"
echo "# llama.cpp tools: ${tools_detail}"
echo "# model: ${model}"
echo "# raw outputs: ${out_dir}$([ "$keep_out" = 0 ] && echo ' (removed at exit; --out keeps them)')"

common_single=(-m "$model" -t "$threads" -p "$n_prompt" -n "$n_gen" -r "$reps"
  -b "$n_batch" -ub "$n_ubatch" -fa "$fa")
max_npl=$(tr ',' '\n' <<<"$npl" | sort -n | tail -n 1)
batched_ctx=$((max_npl * (npp + ntg)))

run_llama_bench() {
  "$llama_bench" "${common_single[@]}" -o json >"${out_dir}/llama-bench.$1.json" \
    2>"${out_dir}/llama-bench.$1.log"
}
run_tokscope_single() {
  TOKSCOPE_DATA_DIR="$ts_data" "$tokscope" bench "${common_single[@]}" --no-probe -o json \
    >"${out_dir}/tokscope-single.$1.json" 2>"${out_dir}/tokscope-single.$1.log"
}
# One measurement per batch size and round on both sides: llama-batched-bench has no
# repetitions, so tokscope runs -r 1 (after its warm-up) and the rounds repeat both.
run_llama_batched() {
  local out="${out_dir}/llama-batched-bench.$1.jsonl" log="${out_dir}/llama-batched-bench.$1.log"
  local -a common=(-m "$model" -t "$threads" -b "$n_batch" -ub "$n_ubatch" -fa "$fa"
    -npp "$npp" -ntg "$ntg" --output-format jsonl)
  if [ "$batched_per_b" = 0 ]; then
    # llama-batched-bench's usual form: one context for the largest B (n_seq_max = max B).
    # With --agree every B is measured twice in the one process and the second measurement
    # counts (as tokscope's second repetition does): a process's first measurements run slow
    # while it settles, and a single one per process is at the mercy of that.
    local list=$npl
    [ -n "$agree" ] && list="${npl},${npl}"
    "$llama_batched_bench" "${common[@]}" -c "$batched_ctx" -npl "$list" >"$out" 2>"$log"
  else
    local b ctx
    : >"$out"
    : >"$log"
    for b in ${npl//,/ }; do
      # At least 16: its warm-up decodes 16 tokens.
      ctx=$((b * (npp + ntg)))
      [ "$ctx" -ge 16 ] || ctx=16
      "$llama_batched_bench" "${common[@]}" -c "$ctx" -npl "$b" >>"$out" 2>>"$log" || return 1
    done
  fi
}
run_tokscope_batched() {
  local reps_batched=1
  [ -n "$agree" ] && reps_batched=2
  TOKSCOPE_DATA_DIR="$ts_data" "$tokscope" bench -m "$model" -t "$threads" -p "$npp" \
    -n "$ntg" --batch "$npl" -r "$reps_batched" -b "$n_batch" -ub "$n_ubatch" -fa "$fa" --no-probe -o json \
    >"${out_dir}/tokscope-batched.$1.json" 2>"${out_dir}/tokscope-batched.$1.log"
}

# CPU seconds all processes have used (user, nice, system, irq, softirq, steal), from /proc/stat.
busy_cpu_s() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu /{printf "%.2f\n", ($2+$3+$4+$7+$8+$9)/hz}' /proc/stat
}
# CPU seconds this script's finished children have used: bash's `times` (second line), which
# must run in this shell, not in a command substitution's subshell, which has no such children.
children_cpu_s() {
  times >"${out_dir}/.times"
  tail -n 1 "${out_dir}/.times" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] }
    printf "%.2f\n", t
  }'
}

# Shared machines: wait (up to --wait-quiet seconds) until nothing else is using the CPUs, since
# other work in the middle of a run slows OpenMP's threads far more than its share.
wait_for_quiet() {
  [ "$wait_quiet" -gt 0 ] || return 0
  local waited=0 b0 b1 pct
  while :; do
    b0=$(busy_cpu_s)
    sleep 5
    b1=$(busy_cpu_s)
    pct=$(awk -v a="$b0" -v b="$b1" -v c="$(nproc)" 'BEGIN { printf "%.0f", 100 * (b - a) / (5 * c) }')
    [ "$pct" -lt 5 ] && return 0
    waited=$((waited + 5))
    if [ "$waited" -ge "$wait_quiet" ]; then
      echo "#   still busy (${pct}% of the CPUs) after ${waited} s: running anyway" >&2
      return 0
    fi
  done
}

# Runs one side and says so; a failing tool stops the comparison with the end of its log.
# Each run also records how much CPU everything else on the machine used meanwhile (all busy
# CPU time minus the tool's own), the measure of how quiet the machine was.
step() {
  local name=$1 round=$2 fn=$3 log=$4
  echo "#   round ${round}: ${name}" >&2
  local ok=1 busy0 child0 t0 busy1 child1 t1
  wait_for_quiet
  busy0=$(busy_cpu_s)
  children_cpu_s >"${out_dir}/.child0"
  t0=$(date +%s.%N)
  "$fn" "$round" || ok=0
  t1=$(date +%s.%N)
  children_cpu_s >"${out_dir}/.child1"
  busy1=$(busy_cpu_s)
  child0=$(<"${out_dir}/.child0")
  child1=$(<"${out_dir}/.child1")
  awk -v r="$round" -v n="${name// /_}" -v b="$busy0 $busy1" -v c="$child0 $child1" \
    -v t="$t0 $t1" -v cpus="$(nproc)" 'BEGIN {
      split(b, B, " "); split(c, C, " "); split(t, T, " ")
      other = (B[2] - B[1]) - (C[2] - C[1]); if (other < 0) other = 0
      printf "%s %s %.1f %.2f %.1f\n", r, n, T[2] - T[1], other, 100 * other / ((T[2] - T[1]) * cpus)
    }' >>"${out_dir}/quiet.txt"
  if [ "$ok" = 0 ]; then
    echo "error: ${name} failed (round ${round}); the end of ${log}:" >&2
    tail -n 20 "${out_dir}/${log}.${round}.log" >&2
    exit 1
  fi
}

# Alternate which side goes first, so that slow drift (thermal, other load) hits both alike.
for round in $(seq 1 "$rounds"); do
  if [ "$skip_single" = 0 ]; then
    if [ $((round % 2)) = 1 ]; then
      step llama-bench "$round" run_llama_bench llama-bench
      step "tokscope bench" "$round" run_tokscope_single tokscope-single
    else
      step "tokscope bench" "$round" run_tokscope_single tokscope-single
      step llama-bench "$round" run_llama_bench llama-bench
    fi
  fi
  if [ "$skip_batched" = 0 ]; then
    if [ $((round % 2)) = 1 ]; then
      step llama-batched-bench "$round" run_llama_batched llama-batched-bench
      step "tokscope bench --batch" "$round" run_tokscope_batched tokscope-batched
    else
      step "tokscope bench --batch" "$round" run_tokscope_batched tokscope-batched
      step llama-batched-bench "$round" run_llama_batched llama-batched-bench
    fi
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

other_peak_pct=$(sort -k5 -g "${out_dir}/quiet.txt" | tail -n 1 | cut -d' ' -f5)
other_total_pct=$(awk -v cpus="$(nproc)" '{ w += $3; o += $4 }
  END { if (w > 0) printf "%.1f", 100 * o / (w * cpus); else printf "0" }' "${out_dir}/quiet.txt")

status=0
PAIRED_RATIO_DIR="${repo_root}/scripts" python3 - "$out_dir" "$rounds" "$n_prompt" "$n_gen" "$npl" "$skip_single" "$skip_batched" \
  "$invocation" "$(nproc)" "$cpu_model" "$load_before" "$load_after" "$sys_detail" \
  "$tools_detail" "$threads" "$reps" "$npp" "$ntg" "$fa" "$other_total_pct" "$other_peak_pct" \
  "$batched_per_b" "$agree" "$agree_batched" "$pool_dir" <<'PY' || status=$?
import json, math, statistics, sys
(out, rounds, n_prompt, n_gen, npl, skip_single, skip_batched, invocation, ncpu, cpu,
 load_before, load_after, sys_detail, tools_detail, threads, reps, npp, ntg, fa,
 other_total_pct, other_peak_pct, per_b, agree, agree_batched, pool) = sys.argv[1:]
rounds, n_prompt, n_gen = int(rounds), int(n_prompt), int(n_gen)
import os
# Every round to judge: (its directory, its number); with --pool, the earlier run's rounds too.
sources = [(out, r) for r in range(1, rounds + 1)]
if pool:
    r = 1
    while os.path.exists(f"{pool}/tokscope-single.{r}.json") or os.path.exists(f"{pool}/tokscope-batched.{r}.json"):
        sources.append((pool, r))
        r += 1
    print(f"Judged on {len(sources)} rounds: these {rounds} and {len(sources) - rounds} kept in {pool}.")
    rounds = len(sources)
batch_sizes = [int(b) for b in npl.split(",")]

def load(path):
    with open(path) as f:
        text = f.read()
    if path.endswith(".jsonl"):
        return [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]
    return json.loads(text)

def stats(values):
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, sd

def fmt(values):
    mean, sd = stats(values)
    return f"{mean:.2f} ± {sd:.2f}"

misses = []
print()
print(f"Command: `{invocation}`")
print()
print(f"Machine: {ncpu} CPUs, {cpu}; load average {load_before} before, {load_after} after. "
      f"Other processes used {other_total_pct}% of the machine's CPU time during the runs "
      f"(at most {other_peak_pct}% during one run).")
print(f"tokscope links {sys_detail}; llama-bench and llama-batched-bench are built from "
      f"{tools_detail}. Flash attention {fa}, {threads} threads.")
print()

import os
sys.path.insert(0, os.environ["PAIRED_RATIO_DIR"])
from paired_ratio import paired

def row(name, lb, ts, target, mode, label=None):
    ratios = [t / l for t, l in zip(ts, lb) if l > 0]
    ratio = stats(ts)[0] / stats(lb)[0]
    g, u = paired(ratios) if ratios else (float("nan"), float("inf"))
    if mode == "agree":
        # Agreement: the rounds' median ratio g must be within the tolerance of 1, or
        # so close that the difference beyond it is inside the measurement's own uncertainty
        # u (2 standard errors): |g - 1| <= tolerance + u. A check that cannot see a
        # difference of four tolerances (u > 3 x tolerance) vouches for nothing: it fails
        # too. So a difference above 4 tolerances always fails, and one above 1 tolerance
        # fails whenever the rounds are steady enough to show it. (On the 2-vCPU VMs these
        # checks were developed on, 30 rounds give u of 3.6-7% for pp and tg.)
        noisy = u > 3 * target
        ok = abs(g - 1.0) <= target + u and not noisy
        goal = f"1 ± ({target:.2f} + 2 SE), 2 SE ≤ {3 * target:.2f}"
        if noisy:
            misses.append(f"{name}: too noisy to vouch (2 SE {u:.3f} > {3 * target:.2f}); rerun on a quieter machine or with more rounds")
        elif not ok:
            misses.append(f"{name}: rounds' ratio {g:.3f} ± {u:.3f}, target {goal}")
    elif mode == "min":
        ok = ratio >= target
        goal = f"≥ {target:.2f}"
    else:
        ok = abs(ratio - 1.0) <= target
        goal = f"1 ± {target:.2f}"
    if not ok and mode != "agree":
        misses.append(f"{name}: ratio {ratio:.3f}, target {goal}")
    per_round = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"| {label or name} | {fmt(lb)} | {fmt(ts)} | **{ratio:.3f}** | {g:.3f} ± {u:.3f} | {per_round} | {goal} | "
          f"{'met' if ok else 'MISSED'} |")

if skip_single == "0":
    lb_pp, lb_tg, ts_pp, ts_tg = [], [], [], []
    for d, r in sources:
        # Agreement judges each run by the median of its repetitions (the same rule on both
        # sides' raw samples): on a VM the first repetitions of a process run slower while
        # the CPU comes up to speed (e.g. 2,300 then 3,400 t/s), and with a few repetitions
        # that ramp, not the tools, decides the mean.
        def lb_value(rec):
            return statistics.median(rec["samples_ts"]) if agree else rec["avg_ts"]
        def ts_value(rec):
            return statistics.median(rec["samples_tok_per_s"]) if agree else rec["tok_per_s_mean"]
        for rec in load(f"{d}/llama-bench.{r}.json"):
            if rec["n_prompt"] == n_prompt and rec["n_gen"] == 0:
                lb_pp.append(lb_value(rec))
            elif rec["n_prompt"] == 0 and rec["n_gen"] == n_gen:
                lb_tg.append(lb_value(rec))
        for rec in load(f"{d}/tokscope-single.{r}.json"):
            if rec["kind"] == "pp":
                ts_pp.append(ts_value(rec))
            elif rec["kind"] == "tg":
                ts_tg.append(ts_value(rec))
    print(f"llama-bench vs `tokscope bench` ({rounds} alternating rounds of -r {reps} each; "
          f"t/s is mean ± sd over the rounds' {'medians' if agree else 'means'}; the ratio, which the target applies to, is "
          "tokscope ÷ llama-bench of those means; the rounds' ratio is the median of the "
          "per-round ratios ± 2 (robust) standard errors, each round's two runs adjacent in time; the "
          "agreement target applies to it, the ≥ targets to the ratio):")
    print()
    print("| test | llama-bench t/s | tokscope t/s | ratio | rounds' ratio ± 2 SE | per round | target | |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for name, lb_v, ts_v, want, target in ((f"pp{n_prompt}", lb_pp, ts_pp, n_prompt, 0.95),
                                           (f"tg{n_gen}", lb_tg, ts_tg, n_gen, 0.98)):
        if lb_v and ts_v:
            if agree:
                row(name, lb_v, ts_v, float(agree) / 100, "agree")
            else:
                row(name, lb_v, ts_v, target, "min")
        elif want > 0:
            misses.append(f"{name}: a side gave no figure")
    print()

if skip_batched == "0":
    lb = {b: [] for b in batch_sizes}
    ts = {b: [] for b in batch_sizes}
    for d, r in sources:
        # With --agree each side measured every B twice in one process: the second counts.
        last = {}
        for rec in load(f"{d}/llama-batched-bench.{r}.jsonl"):
            if rec["pp"] == int(npp) and rec["tg"] == int(ntg) and rec["pl"] in lb:
                last[rec["pl"]] = rec["speed_tg"]
        for b, v in last.items():
            lb[b].append(v)
        for rec in load(f"{d}/tokscope-batched.{r}.json"):
            b = rec["params"]["batch_size"]
            if rec["kind"] == "batch" and b in ts:
                ts[b].append(rec["samples_tok_per_s"][-1] if agree else rec["tok_per_s_mean"])
    contexts = ("one llama-batched-bench run per B, each context sized for its B as tokscope "
                "sizes them" if per_b == "1" else
                f"one llama-batched-bench run with -npl {npl}: one context for the largest B, "
                "while tokscope makes a context per B")
    print(f"llama-batched-bench vs `tokscope bench --batch` (S_TG: B × {ntg} generated tokens "
          f"÷ the generation steps' time, after a {npp}-token prompt per sequence; "
          f"{rounds} alternating rounds; {contexts}):")
    print()
    print("| B | llama-batched-bench S_TG t/s | tokscope S_TG t/s | ratio | rounds' ratio ± 2 SE | per round | target | |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for b in batch_sizes:
        if lb[b] and ts[b]:
            if agree:
                row(f"B={b}", lb[b], ts[b], float(agree_batched) / 100, "agree", label=str(b))
            else:
                row(f"B={b}", lb[b], ts[b], 0.05, "band", label=str(b))
        else:
            print(f"| {b} | {fmt(lb[b]) if lb[b] else '—'} | {fmt(ts[b]) if ts[b] else '—'} "
                  "| — | — | | | no figure |")
            misses.append(f"B={b}: a side gave no figure")
    print()

if misses:
    print("Targets missed: " + "; ".join(misses) + ".")
    if agree:
        sys.exit(1)
else:
    print("Every target met.")
PY
if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 5 else 1)' "$other_peak_pct"; then
  echo
  echo "Note: the machine was not quiet (other processes took up to ${other_peak_pct}% of its CPU" \
    "time during a run); OpenMP runs slow down badly when anything else competes for the" \
    "cores, so these figures are noisy."
fi
exit "$status"
