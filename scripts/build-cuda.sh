#!/usr/bin/env bash
# Builds tokscope with llama.cpp's CUDA backend for users without root, without an NVIDIA
# package repository and without a CUDA toolkit: the CUDA 13.0 compiler, headers and libraries
# come from NVIDIA's wheels on PyPI, installed once into a cache folder.
#
#   scripts/build-cuda.sh [--arch 90[,89,...]] [--out DIR] [--tools] [--fa-all-quants]
#
#   --arch LIST  CUDA compute capabilities to compile for, without the dot (90 = H100/H200,
#                89 = L4/RTX 40xx, 86 = A10/RTX 30xx, 80 = A100, 120 = RTX 50xx). Default: the
#                GPUs `nvidia-smi --query-gpu=compute_cap` reports, else DEFAULT_ARCHS below.
#                Each architecture adds roughly 35 minutes of compile time on two cores.
#   --out DIR    the relocatable folder to write (default: dist/tokscope-cuda)
#   --tools      also put llama.cpp's llama-bench and llama-batched-bench into DIR/bin, built
#                from the same llama.cpp source and running on DIR/lib's CUDA libraries
#                (what scripts/gpu-bench.sh compares against)
#   --fa-all-quants
#                compile llama.cpp's CUDA flash-attention decode kernel for every K/V cache
#                type pair (GGML_CUDA_FA_QUANTS=all; GGML_CUDA_FA_ALL_QUANTS=ON is its deprecated
#                alias). Without it only q4_0-q4_0, q8_0-q8_0, f16-f16 and bf16-bf16 have one,
#                and any other -ctk/-ctv pair (q8_0 with f16, say) converts K and V to f16 at
#                every decode step: bench and compare mark such rows. Cost: 49 vector-kernel
#                instances instead of 4, 189 CUDA objects instead of 144 per architecture
#                (llama.cpp's ggml/cmake/common.cmake); not timed on this machine (see
#                docs/gpu.md). Its own target dir (target/cuda-fa-all), so the default build's
#                cache is kept.
#
# The folder:
#   bin/tokscope          launcher (scripts/cuda-launcher.sh): finds libcudart.so.13 and
#                         libcublas.so.13 (DIR/lib, then a pip-installed nvidia/cu13/lib, then a
#                         system CUDA), says which one in `tokscope doctor gpu`, runs libexec/
#   libexec/tokscope      the binary, RUNPATH $ORIGIN/../lib
#   lib/*.so*             libllama, libggml*, libggml-cuda (RUNPATH $ORIGIN), libgomp
#
# The CUDA runtime and cuBLAS are not copied into the folder (about 700 MB; every machine with
# a CUDA PyTorch or a CUDA install has them). Put them there with --bundle-cuda if the target
# machine has neither.
#
# Environment:
#   TOKSCOPE_CUDA_CACHE   toolkit folder (default ${XDG_CACHE_HOME:-~/.cache}/tokscope/cuda-13.0)
#   TOKSCOPE_CUDA_TARGET  cargo target dir of the CUDA build (default target/cuda; kept apart
#                         from target/ so the CPU build's cache is never invalidated)
#
# Needs: python3 with pip, cmake, a C++ compiler (GCC <= 14), cargo, patchelf (apt-get install
# patchelf). The static `cuda` cargo feature remains for users with a full CUDA toolkit
# (`cargo build --release --features cuda`); this script uses `cuda-dl` (shared libraries),
# because the PyPI toolkit has no static cuBLAS.
set -euo pipefail

# Everything runs inside main, so that bash has read the whole file before it starts (an edit
# to this file during a 40-minute build does not change the running build).
main() {

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# CUDA 13.0, pinned: the version a 580-series driver runs. Changing the list invalidates the
# cache folder (its .verified file records the list it was installed from).
CUDA_WHEELS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cublas==13.0.2.14
)
# Used when neither --arch nor nvidia-smi says: Turing, Ampere (A100, RTX 30xx/A10), Ada
# (L4, RTX 40xx), Hopper (H100/H200), Blackwell (RTX 50xx). CUDA 13 dropped Maxwell, Pascal
# and Volta.
DEFAULT_ARCHS="75,80,86,89,90,120"

die() { echo "build-cuda.sh: $*" >&2; exit 1; }
log() { echo "[build-cuda $(date +%H:%M:%S)] $*" >&2; }

arch=""
out="${repo_root}/dist/tokscope-cuda"
tools=0
bundle_cuda=0
fa_all_quants=0
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) [ $# -ge 2 ] || die "--arch needs a value such as 90 or 89,90"; arch=$2; shift 2 ;;
    --arch=*) arch=${1#--arch=}; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --tools) tools=1; shift ;;
    --bundle-cuda) bundle_cuda=1; shift ;;
    --fa-all-quants) fa_all_quants=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# llama-bench and llama-batched-bench on the very llama.cpp source the sys crate vendors,
# built as shared-library clients WITHOUT CUDA (minutes, not another 35): they link
# libllama/libggml by soname, and their RUNPATH $ORIGIN/../lib makes them load the folder's
# CUDA build of those libraries, so both sides of a comparison run the same kernels. The crate
# ships llama.cpp without the tools' sources: those come from the llama-cpp-python sdist, as
# scripts/llama-tools.sh's `sys` source takes them (they use only llama.h and common/).
bundle_llama_tools() {
  local dest=$1 outlib=$2 crate_src work src tool_src build t dir
  crate_src=""
  for t in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/llama-cpp-sys-2-0.1.160/llama.cpp; do
    [ -d "$t" ] && { crate_src=$t; break; }
  done
  [ -n "$crate_src" ] || die "the llama-cpp-sys-2 0.1.160 source is not in the cargo registry"
  # shellcheck disable=SC1091  # scripts/llama-tools.sh, read at run time
  source "${repo_root}/scripts/llama-tools.sh"
  work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-cuda-tools.XXXXXX")
  tool_src=$(fetch_sdist "${LLAMA_CPP_PYTHON_VERSION:-0.3.36}" "$work") \
    || die "the llama-cpp-python sdist (the tools' sources) could not be fetched"
  src="${work}/llama.cpp"
  cp -r "$crate_src" "$src"
  chmod -R u+w "$src"
  for dir in llama-bench batched-bench; do
    rm -rf "${src}/tools/${dir}"
    cp -r "${tool_src}/tools/${dir}" "${src}/tools/${dir}"
  done
  printf 'llama_add_compile_flags()\nadd_subdirectory(batched-bench)\nadd_subdirectory(llama-bench)\n' \
    >"${src}/tools/CMakeLists.txt"
  build="${TOKSCOPE_CUDA_TARGET:-${repo_root}/target/cuda}/llama-tools-shared"
  rm -rf "$build"
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DGGML_NATIVE=OFF >&2
  cmake --build "$build" --config Release -j "$(nproc)" --target llama-bench llama-batched-bench >&2
  for t in llama-bench llama-batched-bench; do
    cp "${build}/bin/${t}" "${dest}/bin/${t}"
    # shellcheck disable=SC2016
    patchelf --set-rpath '$ORIGIN/../lib' "${dest}/bin/${t}"
  done
  # Any library the tools need that the sys crate did not install (e.g. a separate common
  # library) comes from the tools' own build.
  for t in "${build}"/bin/*.so*; do
    [ -e "$t" ] || continue
    [ -e "${dest}/lib/$(basename "$t")" ] || compgen -G "${outlib}/$(basename "$t")" >/dev/null || cp -P "$t" "${dest}/lib/"
  done
  rm -rf "$work"
}

# --- architectures --------------------------------------------------------------------------
# "9.0" -> "90"; a comma list -> CMake's semicolon list, deduplicated and checked.
normalise_archs() {
  local a seen=" " list=""
  for a in $(echo "$1" | tr ',;' '  '); do
    a=${a//./}
    [ -n "$a" ] || continue
    [[ "$a" =~ ^[0-9]{2,3}[af]?$ ]] || die "'$a' is not a compute capability (examples: 80, 89, 90, 120)"
    case "$seen" in *" $a "*) continue ;; esac
    seen="$seen$a "
    list="${list:+$list;}$a"
  done
  [ -n "$list" ] || die "no architecture given"
  echo "$list"
}
if [ -n "$arch" ]; then
  arch_source="--arch"
elif command -v nvidia-smi >/dev/null 2>&1 && arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null) && [ -n "$arch" ]; then
  arch_source="nvidia-smi"
else
  arch=$DEFAULT_ARCHS
  arch_source="default list (no --arch, no nvidia-smi)"
fi
cuda_archs=$(normalise_archs "$arch")
log "architectures: ${cuda_archs} (from ${arch_source})"

# --- tools ------------------------------------------------------------------------------------
command -v python3 >/dev/null 2>&1 || die "python3 is needed to install the CUDA wheels"
python3 -I -m pip --version >/dev/null 2>&1 || die "pip is missing: apt-get install python3-pip (or python3 -m ensurepip --user)"
command -v cmake >/dev/null 2>&1 || die "cmake is missing: apt-get install cmake"
command -v cargo >/dev/null 2>&1 || die "cargo is missing: install Rust from https://rustup.rs"
command -v patchelf >/dev/null 2>&1 || die "patchelf is missing: apt-get install patchelf (it sets the folder's RUNPATH)"

# --- toolkit ------------------------------------------------------------------------------------
cache=${TOKSCOPE_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tokscope/cuda-13.0}
cuda_root="${cache}/nvidia/cu13"
wanted=$(printf '%s\n' "${CUDA_WHEELS[@]}")

# The toolkit is usable: every pinned wheel installed (its dist-info is there), nvcc says 13.0,
# the headers and libraries the build links are there.
verify_toolkit() {
  local root=$1/nvidia/cu13 w name ver f
  for w in "${CUDA_WHEELS[@]}"; do
    name=${w%%==*}; ver=${w##*==}
    compgen -G "$1/${name//-/_}-${ver}.dist-info" >/dev/null || { echo "missing ${w}"; return 1; }
  done
  for f in bin/nvcc include/cuda_runtime.h include/cublas_v2.h lib/libcudart.so.13 lib/libcublas.so.13 lib/libcublasLt.so.13; do
    [ -e "${root}/${f}" ] || { echo "missing ${root}/${f}"; return 1; }
  done
  "${root}/bin/nvcc" --version 2>/dev/null | grep -q "release 13\.0" || { echo "nvcc is not release 13.0"; return 1; }
}

# nvcc.profile looks in lib64; CMake and the linker want the unversioned names; there is no
# libcuda.so stub in the wheels (GGML_CUDA_NO_VMM=ON keeps ggml off the driver API).
fix_layout() {
  local root=$1/nvidia/cu13 l
  [ -e "${root}/lib64" ] || ln -s lib "${root}/lib64"
  for l in libcudart libcublas libcublasLt; do
    [ -e "${root}/lib/${l}.so" ] || ln -s "${l}.so.13" "${root}/lib/${l}.so"
  done
}

if [ -f "${cache}/.verified" ] && [ "$(cat "${cache}/.verified")" = "$wanted" ] && verify_toolkit "$cache" >/dev/null; then
  log "CUDA 13.0 toolkit: ${cuda_root} (cached, verified)"
else
  log "installing the CUDA 13.0 wheels from PyPI into ${cache} (about 840 MB, once)"
  tmp="${cache}.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$cache")"
  # -I: the user's site-packages and PYTHON* variables stay out of it; pip checks each wheel
  # against the sha256 the index publishes.
  python3 -I -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --no-deps --only-binary :all: --target "$tmp" "${CUDA_WHEELS[@]}" \
    || { rm -rf "$tmp"; die "pip could not install the CUDA wheels (network? disk space?)"; }
  fix_layout "$tmp"
  why=$(verify_toolkit "$tmp") || { rm -rf "$tmp"; die "the installed toolkit is incomplete: ${why}"; }
  rm -rf "$cache"
  mv "$tmp" "$cache"
  # The paths inside the toolkit are relative, so the move keeps it working; verify again.
  why=$(verify_toolkit "$cache") || die "the toolkit does not work after the move: ${why}"
  printf '%s\n' "$wanted" > "${cache}/.verified"
  log "CUDA 13.0 toolkit: ${cuda_root} (installed, verified)"
fi

# --- build ------------------------------------------------------------------------------------
if [ "$fa_all_quants" = 1 ]; then
  target_dir=${TOKSCOPE_CUDA_TARGET:-${repo_root}/target/cuda-fa-all}
else
  target_dir=${TOKSCOPE_CUDA_TARGET:-${repo_root}/target/cuda}
fi
export CARGO_TARGET_DIR=$target_dir
export CUDA_PATH=$cuda_root CUDAToolkit_ROOT=$cuda_root CUDACXX="${cuda_root}/bin/nvcc"
export PATH="${cuda_root}/bin:${PATH}"
# GNU ld must find libggml-cuda.so's .so.13 dependencies when linking the executable.
export LD_LIBRARY_PATH="${cuda_root}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
export LIBRARY_PATH="${cuda_root}/lib${LIBRARY_PATH:+:${LIBRARY_PATH}}"
# llama-cpp-sys-2's build script forwards CMAKE_* and GGML_* variables to CMake.
export CMAKE_CUDA_ARCHITECTURES=$cuda_archs GGML_CUDA_NO_VMM=ON
# The flash-attention decode kernel's K/V pairs: llama.cpp's default list, or all 49. The stamp
# reads the choice back from the CUDA backend's features (FA_QUANTS).
if [ "$fa_all_quants" = 1 ]; then
  export GGML_CUDA_FA_QUANTS=all
  log "flash attention: every K/V pair (GGML_CUDA_FA_QUANTS=all: 189 CUDA objects per architecture, not 144)"
elif [ -n "${GGML_CUDA_FA_QUANTS:-}${GGML_CUDA_FA_ALL_QUANTS:-}" ]; then
  log "flash attention: K/V pairs from the environment (GGML_CUDA_FA_QUANTS=${GGML_CUDA_FA_QUANTS:-} GGML_CUDA_FA_ALL_QUANTS=${GGML_CUDA_FA_ALL_QUANTS:-})"
fi
# The folder is meant for other machines: no target-cpu=native from .cargo/config.toml (an
# empty RUSTFLAGS overrides it), so the CPU side runs portable kernels (slower prefill of the
# layers left on the CPU); TOKSCOPE_CUDA_RUSTFLAGS="-C target-cpu=native" for a folder that
# runs only where it was built. The folder needs an R580+ driver (CUDA 13.0's minimum).
export RUSTFLAGS="${TOKSCOPE_CUDA_RUSTFLAGS:-}"
if [ -z "${TOKSCOPE_CUDA_RUSTFLAGS:-}" ]; then
  log "CPU side: portable kernels (RUSTFLAGS=\"\"; TOKSCOPE_CUDA_RUSTFLAGS=\"-C target-cpu=native\" builds it natively)"
fi
log "cargo build --release --features cuda-dl (target dir ${target_dir})"
start=$(date +%s)
(cd "$repo_root" && cargo build --release --features cuda-dl --bin tokscope)
log "cargo build took $(( $(date +%s) - start )) s"

# The sys crate links target/release/lib*.so symlinks that point at lib*.so.0 files it does not
# copy; the real files are in its OUT_DIR/lib. Take the newest OUT_DIR that holds ggml-cuda.
outlib=""
for d in "${target_dir}"/release/build/llama-cpp-sys-2-*/out/lib; do
  compgen -G "${d}/libggml-cuda.so*" >/dev/null || continue
  if [ -z "$outlib" ] || [ "$d" -nt "$outlib" ]; then outlib=$d; fi
done
[ -n "$outlib" ] || die "no libggml-cuda.so under ${target_dir}/release/build/llama-cpp-sys-2-*/out/lib: the CUDA backend was not built"

# --- the folder -------------------------------------------------------------------------------
log "writing ${out}"
rm -rf "$out"
mkdir -p "${out}/bin" "${out}/libexec" "${out}/lib"
cp "${target_dir}/release/tokscope" "${out}/libexec/tokscope"
cp -P "${outlib}"/*.so* "${out}/lib/"
# OpenMP (the `openmp` feature): the compiler's libgomp, so the folder runs where GCC is absent.
gomp=$(g++ -print-file-name=libgomp.so.1 2>/dev/null || true)
[ -f "$gomp" ] && cp -L "$gomp" "${out}/lib/"
if [ "$bundle_cuda" = 1 ]; then
  cp -L "${cuda_root}"/lib/libcudart.so.13 "${cuda_root}"/lib/libcublas.so.13 "${cuda_root}"/lib/libcublasLt.so.13 "${out}/lib/"
fi
# shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader, not the shell
patchelf --set-rpath '$ORIGIN/../lib' "${out}/libexec/tokscope"
for f in "${out}"/lib/*.so*; do
  [ -L "$f" ] && continue
  # shellcheck disable=SC2016
  patchelf --set-rpath '$ORIGIN' "$f"
done
cp "${repo_root}/scripts/cuda-launcher.sh" "${out}/bin/tokscope"
chmod +x "${out}/bin/tokscope"
printf 'tokscope CUDA build\narchitectures: %s\ncuda: 13.0 (PyPI wheels)\nflash-attention K/V pairs: %s\nbuilt: %s\n' \
  "$cuda_archs" "${GGML_CUDA_FA_QUANTS:-default}" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "${out}/BUILD-INFO"

if [ "$tools" = 1 ]; then
  log "llama.cpp tools on the folder's libraries"
  bundle_llama_tools "$out" "$outlib"
fi

log "done: ${out} ($(du -sh "$out" | cut -f1); libggml-cuda $(du -shL "${out}"/lib/libggml-cuda.so | cut -f1))"
log "try: ${out}/bin/tokscope doctor gpu"
}

main "$@"
