#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit, screen, real-engine (llama.cpp on synthetic
# models), CLI and end-to-end tmux tests. Tests run in the release profile so that the one
# optimized llama.cpp build is shared with the binary (a debug llama.cpp is far too slow).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
tokscope_install_deps
cargo build --release --locked --bins
# llama-server for tests/remote_server.rs, built once from the very llama.cpp tokscope links
# (scripts/llama-tools.sh; the tests fail without it).
if [ -z "${TOKSCOPE_LLAMA_SERVER:-}" ]; then
  tools_dir=$(scripts/llama-tools.sh --source sys | tail -n 1)
  export TOKSCOPE_LLAMA_SERVER="${tools_dir}/bin/llama-server"
fi
cargo test --release --locked "$@"
