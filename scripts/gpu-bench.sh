#!/usr/bin/env bash
# shellcheck disable=SC2317  # the steps' functions run through step "$@"
# The GPU benchmark in one command, for a machine that has a folder built by
# scripts/build-cuda.sh --tools (no Rust and no network needed there):
#
#   scripts/gpu-bench.sh --folder DIR [--tokenizer tokenizer.json] [--out OUT] [--rounds 3]
#   scripts/gpu-bench.sh --cpu [--folder DIR] [--out OUT]    # the plumbing, on a tiny model
#
# It writes synthetic Llama 3 8B in Q4_K_M, Q8_0 and F16 (`tokscope synth --preset llama3-8b`:
# real shapes and type mix, pseudo-random weights, so real speed), then
#   1. tokscope bench and llama-bench (on the same CUDA libraries) alternately, --rounds rounds
#      (ABBA order), pp512 and tg128 each;
#   2. the batch sweep, tokscope bench --batch against llama-batched-bench, B = 1..64;
#   3. headless `tokscope run` against the chat in tmux (decode tok/s), 3 times alternately;
#   4. `tokscope bench --run-vs-tg --tg-sampling` on the Q4_K_M model: run's engine (greedy and
#      the default chain) against tg in paired rounds in one process;
#   5. one `run --profile --profile-rate 4` of the Q4_K_M model: where a decode step's time
#      goes on the GPU, per part and layer, and what a profiled step costs (profile.json,
#      profile.txt);
# and prints one summary: tokscope ÷ llama-bench for pp and tg (mean and range over the
# rounds), MBU, J/token (NVML), run ÷ tg, the chat's decode ÷ llama-bench tg composed from the
# two (issue 16's GPU target, ≥ 0.98), and every step that failed or was skipped. Budget: about
# 7 minutes on an H200. At most 12 files go to OUT (default ./gpu-bench-out):
#   tokscope-bench.jsonl llama-bench.jsonl tokscope-batch.jsonl llama-batched-bench.txt
#   runs.txt run-vs-tg.jsonl profile.json profile.txt profile-decode.txt env.txt summary.txt
#   log.txt
#
# Bandwidth and MBU are tokscope's own: each bench row's bandwidth_gb_s (on a GPU, the device
# copy tokscope times through ggml, the datasheet beside it; on the CPU, its STREAM-style probe)
# and its mbu_pct. This script measures no bandwidth of its own (no second, PyTorch figure).
# MBU is shown only where the bytes a token reads are at least twice the last-level cache of
# the device holding the weights (the CPU's from sysfs; for a GPU 256 MiB, about twice the
# largest L2 today, B200's ~126 MB): below that the weights stay in cache, decode reads them
# from there and not from DRAM/HBM, and decode speed ÷ the memory ceiling means nothing (the
# 1 MB plumbing model read "146%"). The summary then says "in cache" and why.
#
# Failures are loud: every step's exit status and every parsed figure is checked; the summary
# ends with the steps that FAILED and those SKIPPED, and the script exits 1 when any failed
# (2 for a usage error). Required on a GPU run: everything (tokscope, python3, llama-bench,
# llama-batched-bench, tmux, and `tokscope doctor gpu` finding a usable GPU; without one it
# stops at once rather than run 8B models on the CPU). --cpu: a tiny synthetic model, -ngl 0,
# short tests, B up to 4, proves the plumbing on a machine without a GPU; there llama-bench,
# llama-batched-bench and tmux may be absent: their steps are SKIPPED, named in the summary,
# and do not fail the run. The tools are taken from DIR/bin, else PATH (tokscope also from
# this checkout's target/release).
set -uo pipefail

die() { echo "gpu-bench.sh: $*" >&2; exit 2; }

folder=""
out="${PWD}/gpu-bench-out"
tokenizer=""
rounds=3
cpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --folder) [ $# -ge 2 ] || die "--folder needs a folder"; folder=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
    --tokenizer) [ $# -ge 2 ] || die "--tokenizer needs a file"; tokenizer=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a number"; rounds=$2; shift 2 ;;
    --cpu|--quick) cpu=1; shift ;;
    -h|--help) sed -n '3,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || die "--rounds must be a number from 1 to 99"
[ -z "$folder" ] || [ -d "$folder" ] || die "--folder $folder is not a folder"
command -v python3 >/dev/null 2>&1 || die "python3 is needed (the summary and the parsing)"

# The binaries: the folder's bin/, else PATH (tokscope also from this checkout's target/).
find_tool() {
  local name=$1 repo
  if [ -n "$folder" ] && [ -x "${folder}/bin/${name}" ]; then echo "${folder}/bin/${name}"; return 0; fi
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ "$name" = tokscope ] && [ -x "${repo}/target/release/tokscope" ]; then echo "${repo}/target/release/tokscope"; return 0; fi
  return 1
}
tokscope=$(find_tool tokscope) || die "no tokscope: give --folder DIR (built by scripts/build-cuda.sh)"
llama_bench=$(find_tool llama-bench) || llama_bench=""
batched_bench=$(find_tool llama-batched-bench) || batched_bench=""
# The folder's llama tools load its libggml-cuda.so, whose libcudart.so.13 and libcublas.so.13
# are not in the folder: they find them where the folder's launcher does (its lookup, the same
# for both sides of the comparison), on LD_LIBRARY_PATH.
if [ -n "$folder" ] && [ -x "${folder}/bin/tokscope" ]; then
  cuda_lookup=$(TOKSCOPE_CUDA_LOOKUP_ONLY=1 "${folder}/bin/tokscope" 2>/dev/null) || cuda_lookup=""
  case "$cuda_lookup" in
    *:/*) export LD_LIBRARY_PATH="${cuda_lookup#*:}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" ;;
  esac
fi
tmux_bin=$(command -v tmux 2>/dev/null) || tmux_bin=""

mkdir -p "$out" || die "cannot create $out"
rm -f "$out"/tokscope-bench.jsonl "$out"/llama-bench.jsonl "$out"/tokscope-batch.jsonl \
  "$out"/llama-batched-bench.txt "$out"/runs.txt "$out"/run-vs-tg.jsonl "$out"/env.txt "$out"/summary.txt \
  "$out"/log.txt
work=$(mktemp -d)
sock="tokscope-gpu-bench-$$"
trap '[ -z "$tmux_bin" ] || "$tmux_bin" -L "$sock" kill-server 2>/dev/null; rm -rf "$work"' EXIT
start=$(date +%s)
log() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$out/log.txt" >&2; }

# --- the steps' record ----------------------------------------------------------------------
# A failed step is logged at once, named in the summary, and makes the script exit 1 at the
# end (the other steps still run, so one failure does not hide the rest). A skipped step (a
# tool absent in --cpu mode) is named in the summary too. `step NAME CMD…` runs CMD and records
# its failure with the exit status (124: its time limit ran out).
failed=()
skipped=()
n_steps=0
fail() { log "FAILED: $*"; failed+=("$*"); }
skip() { log "SKIPPED: $*"; skipped+=("$*"); }
step() {
  local name=$1 rc=0
  shift
  n_steps=$(( n_steps + 1 ))
  "$@" || rc=$?
  case "$rc" in
    0) return 0 ;;
    124) fail "${name}: timed out" ;;
    *) fail "${name}: exit status ${rc} (see log.txt)" ;;
  esac
  return "$rc"
}
# A tool that is not there: a failed step on a GPU run, a skipped one with --cpu.
absent() { if [ "$cpu" = 1 ]; then skip "$*"; else fail "$*"; fi; }

# The closing lines of the summary (to summary.txt too) and the exit status.
finish() {
  {
    echo
    echo "steps run: ${n_steps}; failed: ${#failed[@]}; skipped: ${#skipped[@]}"
    if [ "${#skipped[@]}" -gt 0 ]; then
      echo "SKIPPED steps (${#skipped[@]}; allowed with --cpu only, their figures are missing above):"
      printf '  - %s\n' "${skipped[@]}"
    fi
    if [ "${#failed[@]}" -gt 0 ]; then
      echo "FAILED steps (${#failed[@]}):"
      printf '  - %s\n' "${failed[@]}"
      echo "gpu-bench: FAILED (exit 1); files in $out"
    elif [ "${#skipped[@]}" -gt 0 ]; then
      echo "gpu-bench: passed with ${#skipped[@]} step(s) SKIPPED; files in $out"
    else
      echo "gpu-bench: passed, every step ran and parsed; files in $out"
    fi
  } | tee -a "$out/summary.txt"
  log "done in $(( $(date +%s) - start )) s"
  [ "${#failed[@]}" = 0 ] || exit 1
  exit 0
}

if [ "$cpu" = 1 ]; then
  types=(q8_0 f16)
  synth_args=(--preset tiny)
  ngl=0
  pp=64; tg=16; reps=2
  batches=1,2,4; bpp=32; btg=16
  run_tokens=64
  vs_rounds=4
  threads=(-t 1)
else
  types=(q4_k_m q8_0 f16)
  if [ -n "$tokenizer" ]; then
    synth_args=(--preset llama3-8b --tokenizer "$tokenizer")
  else
    synth_args=(--preset llama3-8b)
  fi
  ngl=99
  pp=512; tg=128; reps=3
  batches=1,2,4,8,16,32,64; bpp=128; btg=128
  run_tokens=256
  vs_rounds=20
  threads=()
fi

# --- the environment ------------------------------------------------------------------------
doctor_rc=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "tokscope: $tokscope ($("$tokscope" --version 2>&1 | head -n 1))"
  echo "llama-bench: ${llama_bench:-not found}${llama_bench:+ ($(readlink -f "$llama_bench"))}"
  echo "llama-batched-bench: ${batched_bench:-not found}${batched_bench:+ ($(readlink -f "$batched_bench"))}"
  echo "tmux: ${tmux_bin:-not found}"
  echo "mode: $([ "$cpu" = 1 ] && echo "cpu (plumbing check)" || echo gpu)"
  echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1); load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  # Its bandwidth line is the device figure tokscope's MBU uses (ggml device copy).
  echo "--- tokscope doctor gpu"
} > "$out/env.txt"
"$tokscope" doctor gpu >>"$out/env.txt" 2>&1 || doctor_rc=$?
n_steps=$(( n_steps + 1 ))
if [ "$cpu" = 0 ] && [ "$doctor_rc" != 0 ]; then
  fail "tokscope doctor gpu: no usable GPU (exit status ${doctor_rc}; its reason is in env.txt); stopped before running 8B models on the CPU"
  finish
fi
[ -n "$llama_bench" ] || absent "llama-bench: not found in ${folder:-PATH}/bin or PATH (build-cuda.sh --tools builds it): no llama-bench column, no ratio"
[ -n "$batched_bench" ] || absent "llama-batched-bench: not found in ${folder:-PATH}/bin or PATH (build-cuda.sh --tools builds it): no batched-bench column"
[ -n "$tmux_bin" ] || absent "chat in tmux: tmux not found: no chat measurement"

# --- the models -----------------------------------------------------------------------------
synth_one() { "$tokscope" synth "${synth_args[@]}" --type "$1" -o "$2" >>"$out/log.txt" 2>&1; }
models=()
for t in "${types[@]}"; do
  m="$work/llama3-8b-$t.gguf"
  [ "$cpu" = 1 ] && m="$work/tiny-$t.gguf"
  log "synth ${synth_args[*]} --type $t"
  if step "synth --type $t" synth_one "$t" "$m"; then
    models+=("$m")
  fi
done
if [ "${#models[@]}" != "${#types[@]}" ]; then
  fail "synth: ${#models[@]} of ${#types[@]} models written; stopped (nothing to measure without them)"
  finish
fi

# --- 1. tokscope bench and llama-bench, alternately ------------------------------------------
tokscope_bench() {
  timeout 300 "$tokscope" bench -m "$1" -p "$pp" -n "$tg" -r "$reps" --n-gpu-layers "$ngl" "${threads[@]}" -o jsonl \
    2>>"$out/log.txt" >>"$out/tokscope-bench.jsonl"
}
llama_bench_run() {
  timeout 300 "$llama_bench" -m "$1" -p "$pp" -n "$tg" -r "$reps" -ngl "$ngl" "${threads[@]}" -o jsonl \
    2>>"$out/log.txt" >>"$out/llama-bench.jsonl"
}
run_tokscope_bench() { step "tokscope bench $(basename "$1") round $2" tokscope_bench "$1"; }
run_llama_bench() { [ -z "$llama_bench" ] || step "llama-bench $(basename "$1") round $2" llama_bench_run "$1"; }
for round in $(seq 1 "$rounds"); do
  for m in "${models[@]}"; do
    if [ $(( round % 2 )) = 1 ]; then
      log "round $round $(basename "$m"): tokscope, then llama-bench"
      run_tokscope_bench "$m" "$round"; run_llama_bench "$m" "$round"
    else
      log "round $round $(basename "$m"): llama-bench, then tokscope"
      run_llama_bench "$m" "$round"; run_tokscope_bench "$m" "$round"
    fi
  done
done

# --- 2. the batch sweep ---------------------------------------------------------------------
log "batch sweep B=$batches on $(basename "${models[0]}")"
tokscope_batch() {
  timeout 300 "$tokscope" bench -m "${models[0]}" -p "$bpp" -n "$btg" -r 1 --batch "$batches" --n-gpu-layers "$ngl" \
    "${threads[@]}" -o jsonl 2>>"$out/log.txt" >"$work/batch.jsonl"
}
step "tokscope bench --batch $batches" tokscope_batch
grep '"kind":"batch"' "$work/batch.jsonl" >"$out/tokscope-batch.jsonl" 2>/dev/null
batched_bench_run() {
  local largest=${batches##*,}
  timeout 300 "$batched_bench" -m "${models[0]}" -ngl "$ngl" "${threads[@]}" -c $(( (bpp + btg) * largest + 256 )) \
    -b 2048 -ub 512 -npp "$bpp" -ntg "$btg" -npl "$batches" 2>>"$out/log.txt" >"$work/batched.txt"
}
if [ -n "$batched_bench" ]; then
  step "llama-batched-bench -npl $batches" batched_bench_run
  grep -E '^\|' "$work/batched.txt" >"$out/llama-batched-bench.txt" 2>/dev/null
fi

# --- 3. headless run against the chat in tmux ------------------------------------------------
prompt="Write a long story about a lighthouse keeper and the sea."
model="${models[0]}"
headless_run() {
  timeout 120 "$tokscope" run -m "$model" -p "$prompt" --temp 0 -n "$run_tokens" --ignore-eos \
    --n-gpu-layers "$ngl" "${threads[@]}" --json 2>>"$out/log.txt" >"$work/run-$1.json"
}
# The chat in tmux on a socket of its own (another tmux server's environment may lack this
# one's LD_LIBRARY_PATH): type the prompt, wait for the saved conversation, read its metrics.
chat_run() {
  local data="$work/chat-$1" deadline cmd
  cmd=$(printf '%q ' env "TOKSCOPE_DATA_DIR=$data" "TOKSCOPE_CONFIG_DIR=$work/cfg" "$tokscope" chat -m "$model" \
    --temp 0 -n "$run_tokens" --ignore-eos --n-gpu-layers "$ngl" "${threads[@]}")
  "$tmux_bin" -L "$sock" -f /dev/null new-session -d -x 120 -y 40 -s b "exec $cmd 2>>$(printf '%q' "$out/log.txt")" || return 1
  deadline=$(( $(date +%s) + 60 ))
  until "$tmux_bin" -L "$sock" capture-pane -p -t b 2>/dev/null | head -n 1 | grep -q ready; do
    [ "$(date +%s)" -lt "$deadline" ] || break; sleep 0.2
  done
  "$tmux_bin" -L "$sock" send-keys -t b -l "$prompt" 2>>"$out/log.txt"
  "$tmux_bin" -L "$sock" send-keys -t b Enter 2>>"$out/log.txt"
  until compgen -G "$data/history/*.json" >/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || break; sleep 0.5
  done
  "$tmux_bin" -L "$sock" send-keys -t b C-q 2>>"$out/log.txt"
  sleep 0.3
  "$tmux_bin" -L "$sock" kill-server 2>/dev/null
  compgen -G "$data/history/*.json" >/dev/null || { echo "chat $1: no saved conversation within 60 s" >>"$out/log.txt"; return 1; }
  cp "$(compgen -G "$data/history/*.json" | head -n 1)" "$work/chat-$1.json"
}
decode_of() {  # FILE KEYS…: the decode tok/s in a run --json or a saved conversation
  python3 - "$@" <<'PY' 2>>"$out/log.txt"
import json, sys
d = json.load(open(sys.argv[1]))
if sys.argv[2] == "chat":
    d = d["turns"][-1]
v = float(d["metrics"]["decode_tok_per_s"])
assert v > 0, v
print(v)
PY
}
for i in 1 2 3; do
  headless="" chat=""
  if step "run (headless) $i" headless_run "$i"; then
    headless=$(decode_of "$work/run-$i.json" run) || fail "run (headless) $i: no decode tok/s in its --json (see log.txt)"
  fi
  if [ -n "$tmux_bin" ]; then
    if step "chat in tmux $i" chat_run "$i"; then
      chat=$(decode_of "$work/chat-$i.json" chat) || fail "chat in tmux $i: no decode tok/s in the saved turn (see log.txt)"
    fi
  fi
  echo "headless ${headless:-nan} chat ${chat:-nan}" >> "$out/runs.txt"
  log "run $i: headless ${headless:-?} tok/s, chat ${chat:-?} tok/s"
done

# --- 4. run vs tg ---------------------------------------------------------------------------
log "run vs tg: $vs_rounds paired rounds on $(basename "$model")"
run_vs_tg() {
  timeout 300 "$tokscope" bench -m "$model" --run-vs-tg -n "$tg" -r "$vs_rounds" --tg-sampling --n-gpu-layers "$ngl" \
    "${threads[@]}" -o jsonl 2>>"$out/log.txt" >"$out/run-vs-tg.jsonl"
}
step "tokscope bench --run-vs-tg" run_vs_tg

# --- 5. where a step's time goes: one profiled run ----------------------------------------------
# The step profiler on the GPU (issue 33 item 7): every 4th decode step timed node by node;
# the profile (parts with GB/s and MBU, layers, ops, the profiled call's cost) to
# profile.json and the stderr tables to profile.txt.
profiled_run() {
  timeout 180 "$tokscope" run -m "$model" -p "$prompt" --temp 0 -n "$run_tokens" --ignore-eos \
    --n-gpu-layers "$ngl" "${threads[@]}" --profile --profile-rate 4 --json \
    2>>"$out/log.txt" >"$work/profile-run.json" || return $?
  python3 - "$work/profile-run.json" >"$out/profile.json" <<'PY' || return 1
import json, sys
r = json.load(open(sys.argv[1]))
assert r.get("profile"), "run --profile printed no profile"
print(json.dumps(r["profile"], indent=1))
PY
  # Its decode tok/s, for the summary's profiled ÷ headless (the profiler's cost on this device).
  decode_of "$work/profile-run.json" run >"$out/profile-decode.txt" || return 1
  timeout 180 "$tokscope" run -m "$model" -p "$prompt" --temp 0 -n "$run_tokens" --ignore-eos \
    --n-gpu-layers "$ngl" "${threads[@]}" --profile --profile-rate 4 \
    2>"$out/profile.txt" >/dev/null
}
step "run --profile (where a step's time goes)" profiled_run

# --- the summary, and every figure it needs checked as parsed ---------------------------------
# Each figure a step should have produced and the summary could not find is a failed step
# (written to $work/problems, one per line).
: >"$work/problems"
GB_MODELS=$(printf '%s\n' "${models[@]##*/}") GB_ROUNDS=$rounds GB_BATCHES=$batches GB_CPU=$cpu \
GB_LLAMA_BENCH=${llama_bench:+1} GB_BATCHED=${batched_bench:+1} GB_TMUX=${tmux_bin:+1} \
python3 - "$out" "$work/problems" <<'PY' 2>>"$out/log.txt" | tee "$out/summary.txt"
import glob, json, os, statistics as st, sys
out, problems_path = sys.argv[1], sys.argv[2]
env = os.environ
models = [m for m in env["GB_MODELS"].splitlines() if m]
rounds = int(env["GB_ROUNDS"])
batches = [int(b) for b in env["GB_BATCHES"].split(",")]
cpu = env["GB_CPU"] == "1"
problems = []

def lines(name, *need):
    """The JSON rows of OUT/NAME that have every field in NEED ("a.b" for nested ones); a line
    that is not JSON or a row that lacks one (a tool whose output changed) is a problem."""
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    rows = []
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            problems.append(f"{name} line {n}: not JSON: {line[:60]}")
            continue
        for field in need:
            v = row
            for part in field.split("."):
                v = v.get(part) if isinstance(v, dict) else None
            if v is None:
                problems.append(f"{name} line {n}: no {field} (has {', '.join(list(row)[:8])}, …)")
                break
        else:
            rows.append(row)
    return rows

def spread(xs):
    return f"{st.mean(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "—"

# The last-level cache the weights sit behind, in bytes: on the CPU, the highest cache level
# in sysfs summed over its instances (a model that fits in their sum stays in cache when the
# threads spread over them); on a GPU, a bound of 256 MiB, about twice the largest L2 today.
GPU_CACHE_BOUND = 256 << 20
def cpu_llc():
    by_level = {}
    for d in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*"):
        try:
            level = int(open(d + "/level").read())
            kind = open(d + "/type").read().strip()
            size = open(d + "/size").read().strip()
            shared = open(d + "/shared_cpu_list").read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
        n = int(size.rstrip("KkMmGg")) * mult
        by_level.setdefault(level, {})[shared] = n
    if not by_level:
        return None
    return sum(by_level[max(by_level)].values())
llc = cpu_llc()
def cache_of(row):
    return GPU_CACHE_BOUND if row["stamp"].get("n_gpu_layers", 0) > 0 else llc
def in_cache(row):
    c, b = cache_of(row), row.get("bytes_per_token")
    return c is not None and b is not None and b < 2 * c

tok = lines("tokscope-bench.jsonl", "kind", "params.model", "tok_per_s_mean", "stamp")
lb = lines("llama-bench.jsonl", "model_filename", "n_gen", "avg_ts")
# Per model and test: one tokscope mean and one llama-bench mean per round, in file order.
def key_tok(r):
    return (os.path.basename(r["params"]["model"]), "pp" if r["kind"] == "pp" else "tg")
def key_lb(r):
    return (os.path.basename(r["model_filename"]), "pp" if r.get("n_gen", 0) == 0 else "tg")
ts, ls, extra, cached = {}, {}, {}, {}
bandwidths = {}  # GB/s → its source, as the first row with it says
for r in tok:
    k = key_tok(r)
    ts.setdefault(k, []).append(r["tok_per_s_mean"])
    if not cpu and (r["stamp"].get("n_gpu_layers", 0) == 0 or r["stamp"].get("backend", "").startswith("CPU")):
        problems.append(f"tokscope bench {k[0]} {k[1]}: ran on the CPU (backend {r['stamp'].get('backend')!r}, "
                        f"{r['stamp'].get('n_gpu_layers')} layers offloaded)")
    if r["kind"] == "tg":
        if r.get("bandwidth_gb_s"):
            bandwidths.setdefault(round(r["bandwidth_gb_s"], 1), r.get("bandwidth_source") or "?")
        mbu = r.get("mbu_pct")
        if mbu is not None and in_cache(r):
            cached.setdefault(k, (r["bytes_per_token"], cache_of(r), []))[2].append(mbu)
            mbu = None
        extra.setdefault(k, []).append((mbu, r.get("gpu_joules_per_output_token")))
for r in lb:
    ls.setdefault(key_lb(r), []).append(r["avg_ts"])
# Every model and test, every round, on both sides.
for m in models:
    for test in ("pp", "tg"):
        got = len(ts.get((m, test), []))
        if got != rounds:
            problems.append(f"tokscope bench {m} {test}: {got} of {rounds} rounds parsed")
        if env.get("GB_LLAMA_BENCH"):
            got = len(ls.get((m, test), []))
            if got != rounds:
                problems.append(f"llama-bench {m} {test}: {got} of {rounds} rounds parsed from llama-bench.jsonl")
print(f"{'model':<26} {'test':<4} {'tokscope t/s':>13} {'llama-bench t/s':>16} {'ratio mean (range)':>22} {'MBU':>9} {'J/tok':>7}")
for k in sorted(ts):
    t = ts[k]; l = ls.get(k, [])
    ratios = [a / b for a, b in zip(t, l) if b]
    e = extra.get(k, [])
    mbu = [m for m, _ in e if m is not None]
    jpt = [j for _, j in e if j is not None]
    mbu_cell = f"{st.mean(mbu):.1f}%" if mbu else ("in cache" if k in cached else "—")
    print(f"{k[0]:<26} {k[1]:<4} {st.mean(t):>13.2f} {(st.mean(l) if l else float('nan')):>16.2f} {spread(ratios):>22} "
          f"{mbu_cell:>9} {(f'{st.mean(jpt):.3f}' if jpt else '—'):>7}")
for (m, _), (b, c, vals) in sorted(cached.items()):
    print(f"MBU not shown for {m}: it reads {b / 1e6:.2f} MB a token, under twice the {c / 2**20:.0f} MiB "
          f"last-level cache of the device holding it, so decode reads it from cache, not memory, and "
          f"is not bounded by the memory ceiling (tokscope's row says {st.mean(vals):.0f}%, meaningless here)")
for gb, source in sorted(bandwidths.items()):
    print(f"bandwidth (tokscope's, what its MBU divides by): {gb:.1f} GB/s, {source}")
if not bandwidths:
    print("bandwidth: none in tokscope's rows (MBU empty)")

# Batch sweep: aggregate t/s of the generation, tokscope vs llama-batched-bench's S_TG.
batch = lines("tokscope-batch.jsonl", "params.batch_size", "tok_per_s_mean")
got_b = sorted(r["params"]["batch_size"] for r in batch)
if got_b != batches:
    problems.append(f"tokscope bench --batch: B = {got_b} parsed, {batches} expected")
bb = {}
path = os.path.join(out, "llama-batched-bench.txt")
if os.path.exists(path):
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[2].isdigit():
            try:
                bb[int(cells[2])] = float(cells[7])  # B, S_TG t/s
            except ValueError:
                problems.append(f"llama-batched-bench.txt: no S_TG t/s in {line.strip()[:60]}")
if env.get("GB_BATCHED") and sorted(bb) != batches:
    problems.append(f"llama-batched-bench: B = {sorted(bb)} parsed from its table, {batches} expected")
tb = {r["params"]["batch_size"]: r.get("decode_tok_per_s") or r["tok_per_s_mean"] for r in batch}
if tb or bb:
    print()
    print(f"{'B':>4} {'tokscope t/s':>13} {'batched-bench t/s':>18} {'ratio':>7}")
    for b in sorted(set(tb) | set(bb)):
        t, o = tb.get(b), bb.get(b)
        print(f"{b:>4} {(t if t else float('nan')):>13.2f} {(o if o else float('nan')):>18.2f} {(f'{t/o:.3f}' if t and o else '—'):>7}")
runs = []
n_headless = n_chat = 0
if os.path.exists(os.path.join(out, "runs.txt")):
    for line in open(os.path.join(out, "runs.txt")):
        p = line.split()
        try:
            h, c = float(p[1]), float(p[3])
        except (IndexError, ValueError):
            continue
        n_headless += h == h
        n_chat += c == c
        if h == h and c == c:
            runs.append(c / h)
if n_headless != 3:
    problems.append(f"run (headless): {n_headless} of 3 decode figures")
if env.get("GB_TMUX") and n_chat != 3:
    problems.append(f"chat in tmux: {n_chat} of 3 decode figures")
print()
print(f"chat ÷ headless decode tok/s: {spread(runs)} over {len(runs)} alternating runs")
# The profiler's cost here: the profiled run's decode (every 4th step timed node by node, the
# eval callback installed for the whole run) against the three headless runs, same model,
# prompt and length. Unpaired: a rough figure, not a resolved ratio.
headless = []
for line in open(os.path.join(out, "runs.txt")) if os.path.exists(os.path.join(out, "runs.txt")) else []:
    try:
        h = float(line.split()[1])
    except (IndexError, ValueError):
        continue
    if h == h:
        headless.append(h)
pd = os.path.join(out, "profile-decode.txt")
if os.path.exists(pd) and headless:
    try:
        prof = float(open(pd).read().split()[0])
        print(f"profiled run (rate 4) ÷ headless decode tok/s: {prof:.2f} ÷ {st.mean(headless):.2f} = "
              f"{prof / st.mean(headless):.3f} (headless range {min(headless):.2f}-{max(headless):.2f})")
    except (IndexError, ValueError):
        problems.append("profile-decode.txt: no decode tok/s")
# run ÷ tg (paired, one process) and, composed with tokscope tg ÷ llama-bench tg above, the
# chat's decode ÷ llama-bench tg on the same model (issue 16's GPU target: ≥ 0.98).
vs = lines("run-vs-tg.jsonl", "model", "lane", "n_ctx", "sampling")
tg_ratio = None
if vs:
    k = (os.path.basename(vs[0]["model"]), "tg")
    pairs = [a / b for a, b in zip(ts.get(k, []), ls.get(k, [])) if b]
    tg_ratio = st.mean(pairs) if pairs else None
n_vs = 0
for r in vs:
    if r["lane"] != "run" or not (r.get("ratio") or {}).get("median"):
        continue
    n_vs += 1
    q = r["ratio"]
    se = q.get("two_se")
    line = (f"run c{r['n_ctx']} {r['sampling']} ÷ tokscope tg: {q['median']:.3f}"
            f"{f' ± {se:.3f}' if se is not None else ''} over {q.get('rounds')} paired rounds ({r.get('verdict')} against 0.97)")
    if tg_ratio:
        line += f"; × tokscope tg ÷ llama-bench tg {tg_ratio:.3f} = chat's decode ÷ llama-bench tg {q['median'] * tg_ratio:.3f} (target ≥ 0.98)"
    print(line)
if n_vs == 0:
    problems.append("tokscope bench --run-vs-tg: no run row with a ratio in run-vs-tg.jsonl")
with open(problems_path, "w") as f:
    for p in problems:
        f.write(p + "\n")
PY
summary_rc=${PIPESTATUS[0]}
n_steps=$(( n_steps + 1 ))
[ "$summary_rc" = 0 ] || fail "summary: python3 exited ${summary_rc} (its traceback is in log.txt)"
while IFS= read -r problem; do
  [ -z "$problem" ] || fail "parse: $problem"
done <"$work/problems"
finish
