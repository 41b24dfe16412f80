#!/usr/bin/env bash
# Soak: TURNS chat turns (default 1000) through the real engine on a synthetic model with a
# 256-token context; prints memory, turns per second and errors. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release --locked --example soak -- "${1:-1000}"
