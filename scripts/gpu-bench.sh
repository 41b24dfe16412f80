#!/usr/bin/env bash
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
# and prints one summary table: tokscope ÷ llama-bench for tg and pg (mean and range over the
# rounds), MBU against the measured device bandwidth, J/token (NVML), run ÷ tg, and the chat's
# decode ÷ llama-bench tg composed from the two (issue 16's GPU target, ≥ 0.98). Budget: about
# 7 minutes on an H200. At most 9 files go to OUT (default ./gpu-bench-out):
#   tokscope-bench.jsonl llama-bench.jsonl tokscope-batch.jsonl llama-batched-bench.txt
#   runs.txt run-vs-tg.jsonl env.txt summary.txt log.txt
#
# --cpu: a tiny synthetic model, -ngl 0, short tests, B up to 4: proves the plumbing on a
# machine without a GPU. Tools not found are skipped with a line saying so.
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
    -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || die "--rounds must be a number from 1 to 99"

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
llama_bench=$(find_tool llama-bench || true)
batched_bench=$(find_tool llama-batched-bench || true)

mkdir -p "$out" || die "cannot create $out"
rm -f "$out"/tokscope-bench.jsonl "$out"/llama-bench.jsonl "$out"/tokscope-batch.jsonl \
  "$out"/llama-batched-bench.txt "$out"/runs.txt "$out"/run-vs-tg.jsonl "$out"/env.txt "$out"/summary.txt \
  "$out"/log.txt
work=$(mktemp -d)
sock="tokscope-gpu-bench-$$"
trap 'tmux -L "$sock" kill-server 2>/dev/null || true; rm -rf "$work"' EXIT
start=$(date +%s)
log() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$out/log.txt" >&2; }
# A step that fails is logged, named in the summary, and makes the script exit 1 at the end
# (the other steps still run, so one failure does not hide the rest).
failed=()
fail() { log "FAILED: $*"; failed+=("$*"); }

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

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "tokscope: $tokscope ($("$tokscope" --version 2>&1 | head -n 1))"
  echo "llama-bench: ${llama_bench:-not found}"
  echo "llama-batched-bench: ${batched_bench:-not found}"
  echo "mode: $([ "$cpu" = 1 ] && echo "cpu (plumbing check)" || echo gpu)"
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  "$tokscope" doctor gpu 2>&1
} > "$out/env.txt"

# Measured device bandwidth (device-to-device copy, read + write bytes), through PyTorch when
# the machine has it; the summary's MBU uses it, beside tokscope's own (datasheet) MBU.
bw_gb_s=""
if [ "$cpu" = 0 ] && command -v python3 >/dev/null 2>&1; then
  bw_gb_s=$(timeout 60 python3 - <<'PY' 2>/dev/null
import time
import torch
a = torch.empty(2**30, dtype=torch.float32, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize(); t = time.perf_counter(); n = 20
for _ in range(n): b.copy_(a)
torch.cuda.synchronize()
print(round(2 * a.numel() * 4 * n / (time.perf_counter() - t) / 1e9, 1))
PY
  ) || bw_gb_s=""
fi
echo "measured device bandwidth GB/s: ${bw_gb_s:-not measured}" >> "$out/env.txt"

models=()
for t in "${types[@]}"; do
  m="$work/llama3-8b-$t.gguf"
  [ "$cpu" = 1 ] && m="$work/tiny-$t.gguf"
  log "synth ${synth_args[*]} --type $t"
  "$tokscope" synth "${synth_args[@]}" --type "$t" -o "$m" >>"$out/log.txt" 2>&1 || die "synth failed (see $out/log.txt)"
  models+=("$m")
done

run_tokscope_bench() {
  timeout 300 "$tokscope" bench -m "$1" -p "$pp" -n "$tg" -r "$reps" --n-gpu-layers "$ngl" "${threads[@]}" -o jsonl \
    2>>"$out/log.txt" >>"$out/tokscope-bench.jsonl" || fail "tokscope bench failed on $(basename "$1")"
}
run_llama_bench() {
  [ -n "$llama_bench" ] || return 0
  timeout 300 "$llama_bench" -m "$1" -p "$pp" -n "$tg" -r "$reps" -ngl "$ngl" "${threads[@]}" -o jsonl \
    2>>"$out/log.txt" >>"$out/llama-bench.jsonl" || fail "llama-bench failed on $(basename "$1")"
}
if [ -z "$llama_bench" ]; then
  if [ "$cpu" = 1 ]; then log "llama-bench not found: tokscope's side only"; else fail "llama-bench not found (build-cuda.sh --tools builds it)"; fi
fi

for round in $(seq 1 "$rounds"); do
  for m in "${models[@]}"; do
    if [ $(( round % 2 )) = 1 ]; then
      log "round $round $(basename "$m"): tokscope, then llama-bench"
      run_tokscope_bench "$m"; run_llama_bench "$m"
    else
      log "round $round $(basename "$m"): llama-bench, then tokscope"
      run_llama_bench "$m"; run_tokscope_bench "$m"
    fi
  done
done

log "batch sweep B=$batches on $(basename "${models[0]}")"
timeout 300 "$tokscope" bench -m "${models[0]}" -p "$bpp" -n "$btg" -r 1 --batch "$batches" --n-gpu-layers "$ngl" "${threads[@]}" -o jsonl \
  2>>"$out/log.txt" | grep '"kind":"batch"' >"$out/tokscope-batch.jsonl" || fail "tokscope bench --batch failed"
if [ -n "$batched_bench" ]; then
  largest=${batches##*,}
  timeout 300 "$batched_bench" -m "${models[0]}" -ngl "$ngl" "${threads[@]}" -c $(( (bpp + btg) * largest + 256 )) -b 2048 -ub 512 \
    -npp "$bpp" -ntg "$btg" -npl "$batches" 2>>"$out/log.txt" | grep -E '^\|' >"$out/llama-batched-bench.txt" \
    || fail "llama-batched-bench failed"
else
  if [ "$cpu" = 1 ]; then log "llama-batched-bench not found: tokscope's side only"; else fail "llama-batched-bench not found (build-cuda.sh --tools builds it)"; fi
fi

prompt="Write a long story about a lighthouse keeper and the sea."
model="${models[0]}"
for i in 1 2 3; do
  headless=$(timeout 120 "$tokscope" run -m "$model" -p "$prompt" --temp 0 -n "$run_tokens" --ignore-eos \
    --n-gpu-layers "$ngl" "${threads[@]}" --json 2>>"$out/log.txt" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics"]["decode_tok_per_s"])' 2>/dev/null) || headless=""
  chat=""
  if command -v tmux >/dev/null 2>&1; then
    data="$work/chat-$i"
    tmux -L "$sock" -f /dev/null new-session -d -x 120 -y 40 -s b \
      "exec env TOKSCOPE_DATA_DIR=$data TOKSCOPE_CONFIG_DIR=$work/cfg $tokscope chat -m $model --temp 0 -n $run_tokens --ignore-eos --n-gpu-layers $ngl ${threads[*]}"
    deadline=$(( $(date +%s) + 60 ))
    until tmux -L "$sock" capture-pane -p -t b 2>/dev/null | head -n 1 | grep -q ready; do
      [ "$(date +%s)" -lt "$deadline" ] || break; sleep 0.2
    done
    tmux -L "$sock" send-keys -t b -l "$prompt"
    tmux -L "$sock" send-keys -t b Enter
    until compgen -G "$data/history/*.json" >/dev/null; do
      [ "$(date +%s)" -lt "$deadline" ] || break; sleep 0.5
    done
    tmux -L "$sock" send-keys -t b C-q
    sleep 0.3
    tmux -L "$sock" kill-server 2>/dev/null || true
    chat=$(python3 -c 'import glob,json,sys; f=glob.glob(sys.argv[1]+"/history/*.json"); print(json.load(open(f[0]))["turns"][-1]["metrics"]["decode_tok_per_s"] if f else "")' "$data" 2>/dev/null) || chat=""
  else
    [ "$i" = 1 ] && log "tmux not found: no chat measurement"
  fi
  echo "headless ${headless:-nan} chat ${chat:-nan}" >> "$out/runs.txt"
  log "run $i: headless ${headless:-?} tok/s, chat ${chat:-?} tok/s"
done

log "run vs tg: $vs_rounds paired rounds on $(basename "$model")"
timeout 300 "$tokscope" bench -m "$model" --run-vs-tg -n "$tg" -r "$vs_rounds" --tg-sampling --n-gpu-layers "$ngl" \
  "${threads[@]}" -o jsonl 2>>"$out/log.txt" >"$out/run-vs-tg.jsonl" || fail "tokscope bench --run-vs-tg failed"

python3 - "$out" "${bw_gb_s:-}" <<'PY' | tee "$out/summary.txt" || fail "the summary (python3) failed"
import json, os, statistics as st, sys
out, bw = sys.argv[1], sys.argv[2]
bw = float(bw) * 1e9 if bw else None

def lines(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows

def spread(xs):
    return f"{st.mean(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "—"

tok = lines("tokscope-bench.jsonl")
lb = lines("llama-bench.jsonl")
# Per model and test: one tokscope mean and one llama-bench mean per round, in file order.
def key_tok(r):
    return (os.path.basename(r["params"]["model"]), "pp" if r["kind"] == "pp" else "tg")
def key_lb(r):
    return (os.path.basename(r["model_filename"]), "pp" if r.get("n_gen", 0) == 0 else "tg")
ts, ls, extra = {}, {}, {}
for r in tok:
    k = key_tok(r)
    ts.setdefault(k, []).append(r["tok_per_s_mean"])
    if r["kind"] == "tg":
        mbu = None
        if bw and r.get("bytes_per_token"):
            mbu = r["tok_per_s_mean"] * r["bytes_per_token"] / bw
        extra.setdefault(k, []).append((mbu, r.get("mbu_pct"), r.get("gpu_joules_per_token")))
for r in lb:
    ls.setdefault(key_lb(r), []).append(r["avg_ts"])
print(f"{'model':<26} {'test':<4} {'tokscope t/s':>13} {'llama-bench t/s':>16} {'ratio mean (range)':>22} {'MBU meas.':>9} {'MBU tok.':>9} {'J/tok':>7}")
for k in sorted(ts):
    t = ts[k]; l = ls.get(k, [])
    ratios = [a / b for a, b in zip(t, l) if b]
    e = extra.get(k, [])
    mbu = [m for m, _, _ in e if m is not None]
    mbu_tok = [m for _, m, _ in e if m is not None]
    jpt = [j for _, _, j in e if j is not None]
    print(f"{k[0]:<26} {k[1]:<4} {st.mean(t):>13.2f} {(st.mean(l) if l else float('nan')):>16.2f} {spread(ratios):>22} "
          f"{(f'{st.mean(mbu)*100:.1f}%' if mbu else '—'):>9} {(f'{st.mean(mbu_tok):.1f}%' if mbu_tok else '—'):>9} "
          f"{(f'{st.mean(jpt):.3f}' if jpt else '—'):>7}")
# Batch sweep: aggregate t/s of the generation, tokscope vs llama-batched-bench's S_TG.
batch = lines("tokscope-batch.jsonl")
bb = {}
path = os.path.join(out, "llama-batched-bench.txt")
if os.path.exists(path):
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[2].isdigit():
            bb[int(cells[2])] = float(cells[7])  # B, S_TG t/s
if batch:
    print()
    print(f"{'B':>4} {'tokscope t/s':>13} {'batched-bench t/s':>18} {'ratio':>7}")
    for r in batch:
        b = r["params"]["batch_size"]
        t = r.get("decode_tok_per_s") or r["tok_per_s_mean"]
        o = bb.get(b)
        print(f"{b:>4} {t:>13.2f} {(o if o else float('nan')):>18.2f} {(f'{t/o:.3f}' if o else '—'):>7}")
runs = []
if os.path.exists(os.path.join(out, "runs.txt")):
    for line in open(os.path.join(out, "runs.txt")):
        p = line.split()
        try:
            h, c = float(p[1]), float(p[3])
            if h == h and c == c:
                runs.append(c / h)
        except (IndexError, ValueError):
            pass
print()
print(f"chat ÷ headless decode tok/s: {spread(runs)} over {len(runs)} alternating runs")
# run ÷ tg (paired, one process) and, composed with tokscope tg ÷ llama-bench tg above, the
# chat's decode ÷ llama-bench tg on the same model (issue 16's GPU target: ≥ 0.98).
vs = lines("run-vs-tg.jsonl")
tg_ratio = None
if vs:
    k = (os.path.basename(vs[0]["model"]), "tg")
    pairs = [a / b for a, b in zip(ts.get(k, []), ls.get(k, [])) if b]
    tg_ratio = st.mean(pairs) if pairs else None
for r in vs:
    if r.get("lane") != "run" or not r.get("ratio"):
        continue
    q = r["ratio"]
    se = q.get("two_se")
    line = (f"run c{r['n_ctx']} {r['sampling']} ÷ tokscope tg: {q['median']:.3f}"
            f"{f' ± {se:.3f}' if se is not None else ''} over {q['rounds']} paired rounds ({r['verdict']} against 0.97)")
    if tg_ratio:
        line += f"; × tokscope tg ÷ llama-bench tg {tg_ratio:.3f} = chat's decode ÷ llama-bench tg {q['median'] * tg_ratio:.3f} (target ≥ 0.98)"
    print(line)
print(f"measured device bandwidth: {bw/1e9:.0f} GB/s" if bw else "measured device bandwidth: none (no PyTorch/GPU); MBU meas. empty")
PY
if [ "${#failed[@]}" -gt 0 ]; then
  {
    echo "FAILED steps (${#failed[@]}):"
    printf '  - %s\n' "${failed[@]}"
  } | tee -a "$out/summary.txt"
  log "done in $(( $(date +%s) - start )) s with ${#failed[@]} failed step(s); files in $out"
  exit 1
fi
log "done in $(( $(date +%s) - start )) s; files in $out"
