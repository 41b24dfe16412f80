#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit, screen, real-engine (llama.cpp on synthetic
# models), CLI and end-to-end tmux tests. Tests run in the release profile so that the one
# optimized llama.cpp build is shared with the binary (a debug llama.cpp is far too slow).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
tokscope_install_deps
cargo fmt --all -- --check
# Clippy in the release profile shares the one optimized llama.cpp build with the tests.
cargo clippy --release --locked --all-targets -- -D warnings
cargo build --release --locked --bins
cargo test --release --locked "$@"
