#!/usr/bin/env bash
# A longer property-test run over the loaders of untrusted bytes (GGUF reader/writer, config,
# history). The normal test suite runs 64 cases per property; this runs many more.
# Usage: scripts/fuzz.sh [CASES]   (default 20000). Failures are saved by proptest in
# tests/fuzz_props.proptest-regressions and replayed by every later run: commit that file.
set -euo pipefail
cd "$(dirname "$0")/.."
PROPTEST_CASES=${1:-20000} cargo test --release --locked --test fuzz_props
