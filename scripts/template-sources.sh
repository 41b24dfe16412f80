#!/usr/bin/env bash
# The chat templates of the main model families, as their makers wrote them, for the template
# matrix (tests/template_matrix.rs): llama.cpp keeps them, verbatim from each model's
# tokenizer_config.json, in models/templates/*.jinja and tests/test-chat-template.cpp; both
# ship in the llama-cpp-python sdist on PyPI (the one scripts/llama-tools.sh builds
# llama-server from, and keeps in its cache). Extracts those two parts once into
#   ${XDG_CACHE_HOME:-~/.cache}/tokscope/template-sources/<version>
# and prints that folder (TOKSCOPE_TEMPLATE_SOURCES for the tests). Nothing is committed.
#
#   scripts/template-sources.sh          # llama-cpp-python 0.3.36 (LLAMA_CPP_PYTHON_VERSION)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/llama-tools.sh
source "${here}/llama-tools.sh"

version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
out="${XDG_CACHE_HOME:-${HOME}/.cache}/tokscope/template-sources/${version}"
if [ ! -f "${out}/tests/test-chat-template.cpp" ] || [ ! -d "${out}/models/templates" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-templates.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  src=$(fetch_sdist "$version" "$work")
  rm -rf "$out"
  mkdir -p "${out}/models" "${out}/tests"
  cp -r "${src}/models/templates" "${out}/models/"
  cp "${src}/tests/test-chat-template.cpp" "${out}/tests/"
fi
echo "$out"
