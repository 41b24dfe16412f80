#!/usr/bin/env bash
# bin/tokscope of the folder scripts/build-cuda.sh writes: finds the CUDA 13 runtime and cuBLAS
# (libcudart.so.13, libcublas.so.13 and libcublasLt.so.13) and runs libexec/tokscope on them.
# Looked for, in this order:
#   1. the folder's own lib/              (build-cuda.sh --bundle-cuda)
#   2. a pip-installed nvidia/cu13/lib    (python3's site-packages: PyTorch and the CUDA wheels
#                                          put it there)
#   3. a system CUDA                      (the loader's cache, /usr/local/cuda*/lib64, ...)
# TOKSCOPE_CUDA_LIB_DIR=DIR overrides the search. The choice is passed on as
# TOKSCOPE_CUDA_LIBS="<source>:<dir>", which `tokscope doctor gpu` reports beside the files the
# process really mapped. When nothing is found tokscope is still started: the loader then names
# the missing library, and this script says where it looked.
#
# For tests: TOKSCOPE_CUDA_LOOKUP_ONLY=1 prints "<source>:<dir>" and exits;
# TOKSCOPE_CUDA_SITE_DIRS and TOKSCOPE_CUDA_SYSTEM_DIRS (colon lists) replace the site-packages
# python3 reports and the system folders (and turn the loader's cache off).
set -u

CUDA_LIBS=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13)

# True when DIR holds every library in CUDA_LIBS.
has_cuda_libs() {
  local f
  [ -d "$1" ] || return 1
  for f in "${CUDA_LIBS[@]}"; do
    [ -e "$1/$f" ] || return 1
  done
}

site_dirs() {
  if [ -n "${TOKSCOPE_CUDA_SITE_DIRS+x}" ]; then
    tr ':' '\n' <<<"$TOKSCOPE_CUDA_SITE_DIRS"
  elif command -v python3 >/dev/null 2>&1; then
    python3 -I -c 'import site, sys
dirs = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
print("\n".join(dict.fromkeys(d for d in dirs if d)))' 2>/dev/null
  fi
}

system_dirs() {
  if [ -n "${TOKSCOPE_CUDA_SYSTEM_DIRS+x}" ]; then
    tr ':' '\n' <<<"$TOKSCOPE_CUDA_SYSTEM_DIRS"
    return
  fi
  local d
  for d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} ${CUDA_PATH:+"$CUDA_PATH/lib64"} \
    /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/*/lib \
    /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64; do
    echo "$d"
  done
}

# Prints "<source>:<dir>" (source: bundle, pip, system, env) or "none:" and returns 1.
find_cuda_libs() {
  local here=$1 d
  if [ -n "${TOKSCOPE_CUDA_LIB_DIR:-}" ]; then
    echo "env:${TOKSCOPE_CUDA_LIB_DIR}"
    return 0
  fi
  if has_cuda_libs "$here/../lib"; then
    echo "bundle:$(cd "$here/../lib" && pwd)"
    return 0
  fi
  while IFS= read -r d; do
    [ -n "$d" ] || continue
    if has_cuda_libs "$d/nvidia/cu13/lib"; then
      echo "pip:$(cd "$d/nvidia/cu13/lib" && pwd)"
      return 0
    fi
  done < <(site_dirs)
  while IFS= read -r d; do
    [ -n "$d" ] || continue
    if has_cuda_libs "$d"; then
      echo "system:$(cd "$d" && pwd)"
      return 0
    fi
  done < <(system_dirs)
  if [ -z "${TOKSCOPE_CUDA_SYSTEM_DIRS+x}" ] && command -v ldconfig >/dev/null 2>&1; then
    d=$(ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*libcublas\.so\.13 .*=> \(.*\)$/\1/p' | head -n 1)
    if [ -n "$d" ] && has_cuda_libs "$(dirname "$d")"; then
      echo "system:$(dirname "$d")"
      return 0
    fi
  fi
  echo "none:"
  return 1
}

here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
found=$(find_cuda_libs "$here")
if [ "${TOKSCOPE_CUDA_LOOKUP_ONLY:-0}" = 1 ]; then
  echo "$found"
  exit 0
fi
export TOKSCOPE_CUDA_LIBS="$found"
case "$found" in
  none:)
    echo "tokscope: libcudart.so.13 / libcublas.so.13 not found in ${here%/bin}/lib, in python3's nvidia/cu13/lib or in a system CUDA; install them with 'python3 -m pip install nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.0.2.14' or set TOKSCOPE_CUDA_LIB_DIR" >&2
    ;;
  *)
    dir=${found#*:}
    export LD_LIBRARY_PATH="${dir}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    ;;
esac
exec "$here/../libexec/tokscope" "$@"
