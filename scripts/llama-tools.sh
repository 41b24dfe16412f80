#!/usr/bin/env bash
# Builds llama.cpp's own command-line tools (llama-bench, llama-batched-bench,
# llama-perplexity, llama-server) once, for side-by-side checks of tokscope's figures and for
# the remote tests (tests/remote.rs starts llama-server), and prints the folder that holds them. Sourced by the compare-* scripts; also runs on its own:
#
#   scripts/llama-tools.sh [--source pypi[:VER] | sys]
#
# Sources:
#   pypi[:VER]  the llama.cpp vendored in the llama-cpp-python sdist on PyPI
#               (`pip download --no-binary llama-cpp-python --no-deps llama-cpp-python==VER`;
#               default VER 0.3.36, env LLAMA_CPP_PYTHON_VERSION)
#   sys         the llama.cpp vendored in the llama-cpp-sys-2 crate tokscope links (found in
#               the cargo registry after a tokscope build): the very same llama.cpp source, so a
#               ratio against these tools measures tokscope and not a llama.cpp version change
#   native      the same source as sys, built the way a user builds llama.cpp: CMake's
#               defaults (Release, GGML_NATIVE=ON: every instruction set of this CPU, OpenMP),
#               not tokscope's flags, so a ratio against these tools shows what a user of
#               tokscope gains or loses against the llama.cpp they would build themselves
#
# The tools go to ${XDG_CACHE_HOME:-~/.cache}/tokscope/llama-tools/<source>/bin, built with CMake
# Release and the CPU options of tokscope's own llama.cpp build (read from its CMake cache when
# there is one), so that both sides run the same kernels.
set -euo pipefail

llama_tools_repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA_TOOLS=(llama-bench llama-batched-bench llama-perplexity)
# llama-server only on request (LLAMA_TOOLS_SERVER=1, as tests/remote_server.rs sets it): its
# sources from the llama-cpp-python sdist must match the llama.cpp they build against, which
# holds for --source pypi and not for sys/native (llama-cpp-sys-2 0.1.160 vendors another
# llama.cpp revision: server-context.cpp does not compile against it).
# LLAMA_TOOLS_SERVER=only builds llama-server alone (scripts/test.sh: the remote tests need
# nothing else, and a cold build of one tool is the shorter wait).
case "${LLAMA_TOOLS_SERVER:-0}" in
  1) LLAMA_TOOLS+=(llama-server) ;;
  only) LLAMA_TOOLS=(llama-server) ;;
esac

# The CMake cache of the llama.cpp that llama-cpp-sys-2 built for tokscope, when there is one
# (the newest, when the target dir holds builds with other flags).
sys_cmake_cache() {
  local f newest=
  for f in "${llama_tools_repo_root}"/target/release/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt; do
    [ -f "$f" ] || continue
    if [ -z "$newest" ] || [ "$f" -nt "$newest" ]; then newest=$f; fi
  done
  [ -n "$newest" ] && { echo "$newest"; return 0; }
  return 1
}

# CMake arguments for the CPU backend. For the `native` source: llama.cpp's own defaults
# (GGML_NATIVE=ON), as its README builds it. Otherwise as llama-cpp-sys-2 0.1.160's build.rs
# sets them:
# GGML_NATIVE off unless RUSTFLAGS say target-cpu=native (ggml then turns AVX/AVX2/FMA/F16C/
# BMI2/SSE4.2 on for x86-64 by default), OpenMP on (tokscope enables the `openmp` feature),
# static libraries, Release, the compiler flags cmake-rs passes. When tokscope's own CMake cache
# exists its values win.
# The compiler flags that leave AMX out (see cpu_cmake_args).
no_amx_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

cpu_cmake_args() {
  local cache key value
  if [ "${LLAMA_TOOLS_SOURCE:-}" = native ]; then
    echo "# CPU options: llama.cpp's defaults (GGML_NATIVE=ON), as a user builds it, AMX left out" >&2
    printf '%s\n' -DGGML_NATIVE=ON
    # The one change from a user's build, made in tokscope's too (.cargo/config.toml): ggml's
    # AMX matmul segfaults on K-quants (ggml-org/llama.cpp#20824; seen here on a Xeon with
    # AMX), so on x86-64 the AMX instructions are left out and the AVX-512/VNNI kernels run.
    if [ "$(uname -m)" = x86_64 ]; then
      printf '%s\n' "-DCMAKE_C_FLAGS=${no_amx_flags}" "-DCMAKE_CXX_FLAGS=${no_amx_flags}"
    fi
  else
    local -a keys=(GGML_NATIVE GGML_AVX GGML_AVX2 GGML_AVX512 GGML_AVX512_BF16 GGML_AVX512_VBMI
      GGML_AVX512_VNNI GGML_AVX_VNNI GGML_BMI2 GGML_F16C GGML_FMA GGML_SSE42 GGML_OPENMP
      GGML_LLAMAFILE GGML_CPU_REPACK CMAKE_C_FLAGS CMAKE_CXX_FLAGS CMAKE_C_COMPILER
      CMAKE_CXX_COMPILER)
    if cache=$(sys_cmake_cache); then
      echo "# CPU options copied from ${cache}" >&2
      for key in "${keys[@]}"; do
        value=$(sed -n "s/^${key}:[A-Z]*=//p" "$cache" | head -n 1)
        [ -n "$value" ] && printf '%s\n' "-D${key}=${value}"
      done
    else
      echo "# no tokscope llama.cpp build found: using llama-cpp-sys-2's defaults" >&2
      case "${RUSTFLAGS:-}${CARGO_ENCODED_RUSTFLAGS:-}" in
        *target-cpu=native*) printf '%s\n' -DGGML_NATIVE=ON ;;
        *) printf '%s\n' -DGGML_NATIVE=OFF ;;
      esac
      local extra=
      [ "$(uname -m)" = x86_64 ] && extra=" ${no_amx_flags}"
      printf '%s\n' -DGGML_OPENMP=ON \
        "-DCMAKE_C_FLAGS=-ffunction-sections -fdata-sections -fPIC -m64${extra}" \
        "-DCMAKE_CXX_FLAGS=-ffunction-sections -fdata-sections -fPIC -m64${extra}"
    fi
  fi
  printf '%s\n' -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF -DGGML_CCACHE=OFF
}

# The llama.cpp tree vendored by the llama-cpp-sys-2 version in Cargo.lock.
sys_source_dir() {
  local version dir
  version=$(awk '/^name = "llama-cpp-sys-2"$/ { getline; gsub(/"/, "", $3); print $3; exit }' \
    "${llama_tools_repo_root}/Cargo.lock")
  [ -n "$version" ] || { echo "error: Cargo.lock names no llama-cpp-sys-2" >&2; return 1; }
  for dir in "${CARGO_HOME:-${HOME}/.cargo}"/registry/src/*/"llama-cpp-sys-2-${version}"/llama.cpp; do
    [ -f "${dir}/CMakeLists.txt" ] && { echo "$dir"; return 0; }
  done
  echo "error: llama-cpp-sys-2 ${version} is not in the cargo registry (run cargo fetch or build tokscope first)" >&2
  return 1
}

# llama_tools_dir SOURCE: where the tools of SOURCE live (not necessarily built yet).
llama_tools_dir() {
  local source=$1 cache_root
  # The build recipe's revision: a folder built by an older recipe (AMX in) is not reused.
  local recipe=-r2
  cache_root="${XDG_CACHE_HOME:-${HOME}/.cache}/tokscope/llama-tools"
  case "$source" in
    sys | native)
      local version
      version=$(awk '/^name = "llama-cpp-sys-2"$/ { getline; gsub(/"/, "", $3); print $3; exit }' \
        "${llama_tools_repo_root}/Cargo.lock")
      echo "${cache_root}/${source}-${version}${recipe}"
      ;;
    pypi) echo "${cache_root}/${LLAMA_CPP_PYTHON_VERSION:-0.3.36}${recipe}" ;;
    pypi:*) echo "${cache_root}/${source#pypi:}${recipe}" ;;
    *) echo "error: unknown llama.cpp source '${source}' (pypi[:VER], sys or native)" >&2; return 2 ;;
  esac
}

# fetch_sdist VERSION WORK: downloads (once: kept in the tools cache) and unpacks the
# llama-cpp-python sdist into WORK; prints the path of its vendored llama.cpp. Only this package
# is taken as source (`--no-binary llama-cpp-python`): its build requirements come as wheels,
# where `--no-binary :all:` made pip compile ninja and cmake from source first.
fetch_sdist() {
  local version=$1 work=$2 sdist src cache
  cache="${XDG_CACHE_HOME:-${HOME}/.cache}/tokscope/llama-tools/sdist"
  sdist="${cache}/llama_cpp_python-${version}.tar.gz"
  if [ ! -f "$sdist" ]; then
    echo "# downloading the llama-cpp-python ${version} sdist (its vendored llama.cpp)" >&2
    python3 -m pip download --quiet --no-binary llama-cpp-python --no-deps \
      "llama-cpp-python==${version}" -d "${work}/dl" >&2
    mkdir -p "$cache"
    local got
    got=$(find "${work}/dl" -maxdepth 1 -name "llama_cpp_python-${version}.tar.gz" | head -n 1)
    [ -n "$got" ] && mv "$got" "$sdist"
  fi
  [ -f "$sdist" ] || sdist=
  [ -n "$sdist" ] || { echo "error: no llama-cpp-python sdist was downloaded" >&2; return 1; }
  tar -xzf "$sdist" -C "$work"
  src=$(find "$work" -mindepth 3 -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -n 1)
  [ -n "$src" ] || { echo "error: ${sdist} has no vendor/llama.cpp" >&2; return 1; }
  echo "$src"
}

# build_llama_tools SOURCE: builds whatever of LLAMA_TOOLS is missing for SOURCE; prints the
# tools folder.
build_llama_tools() {
  local source=$1 tools_dir missing=() tool
  tools_dir=$(llama_tools_dir "$source") || return $?
  for tool in "${LLAMA_TOOLS[@]}"; do
    [ -x "${tools_dir}/bin/${tool}" ] || missing+=("$tool")
  done
  if [ "${#missing[@]}" = 0 ]; then
    echo "# llama.cpp tools: reusing ${tools_dir}" >&2
    echo "$tools_dir"
    return 0
  fi
  command -v cmake >/dev/null 2>&1 || { echo "error: cmake is needed (scripts/deps.sh)" >&2; return 1; }
  local work src origin jobs
  work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-llama-tools.XXXXXX")
  case "$source" in
    sys | native)
      # llama-cpp-sys-2 ships llama.cpp without the tools' sources: the library is the crate's,
      # the three tools' sources come from the llama-cpp-python sdist (they use only llama.h and
      # common/, which the crate does ship).
      local sys_src tool_src
      sys_src=$(sys_source_dir) || { rm -rf "$work"; return 1; }
      tool_src=$(fetch_sdist "${LLAMA_CPP_PYTHON_VERSION:-0.3.36}" "$work") || { rm -rf "$work"; return 1; }
      src="${work}/llama.cpp"
      cp -r "$sys_src" "$src"
      chmod -R u+w "$src"
      # llama-server also needs its web-UI target (built without the UI itself: no npm, no
      # download; the API endpoints are all the tests use) and that target's cmake script.
      for dir in llama-bench batched-bench perplexity server ui; do
        rm -rf "${src}/tools/${dir}"
        cp -r "${tool_src}/tools/${dir}" "${src}/tools/${dir}"
      done
      mkdir -p "${src}/scripts"
      cp "${tool_src}/scripts/ui-assets.cmake" "${src}/scripts/"
      printf 'llama_add_compile_flags()\nadd_subdirectory(batched-bench)\nadd_subdirectory(llama-bench)\nadd_subdirectory(perplexity)\nadd_subdirectory(mtmd)\nadd_subdirectory(ui)\nadd_subdirectory(server)\n' \
        >"${src}/tools/CMakeLists.txt"
      origin="llama-cpp-sys-2 vendored llama.cpp (${sys_src}); tool sources from llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
      ;;
    *)
      local version=${source#pypi}
      version=${version#:}
      version=${version:-${LLAMA_CPP_PYTHON_VERSION:-0.3.36}}
      src=$(fetch_sdist "$version" "$work") || { rm -rf "$work"; return 1; }
      origin="llama-cpp-python ${version}"
      local commit
      # The sdist's changelog names the llama.cpp commit each release vendors.
      commit=$(sed -n "/^## \[${version//./\\.}\]/,/^## \[/p" "$(dirname "$(dirname "$src")")/CHANGELOG.md" |
        grep -o -m 1 'ggml-org/llama\.cpp@[0-9a-f]*' || true)
      origin="${origin}${commit:+ ${commit}}"
      ;;
  esac

  local -a cmake_args
  mapfile -t cmake_args < <(LLAMA_TOOLS_SOURCE=$source cpu_cmake_args)
  echo "# cmake ${cmake_args[*]}" >&2
  if ! cmake -S "$src" -B "${work}/build" "${cmake_args[@]}" >"${work}/configure.log" 2>&1; then
    tail -n 40 "${work}/configure.log" >&2
    rm -rf "$work"
    return 1
  fi
  jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
  echo "# building ${LLAMA_TOOLS[*]} from ${origin} (-j${jobs}, several minutes)" >&2
  if ! cmake --build "${work}/build" --target "${LLAMA_TOOLS[@]}" -j"$jobs" >"${work}/build.log" 2>&1; then
    tail -n 40 "${work}/build.log" >&2
    rm -rf "$work"
    return 1
  fi
  mkdir -p "${tools_dir}/bin"
  for tool in "${LLAMA_TOOLS[@]}"; do
    cp "${work}/build/bin/${tool}" "${tools_dir}/bin/"
  done
  cp "${work}/configure.log" "${tools_dir}/configure.log"
  {
    echo "$origin"
    grep -E 'set\(GGML_VERSION_(MAJOR|MINOR|PATCH)' "${src}/ggml/CMakeLists.txt" |
      sed -E 's/.*GGML_VERSION_([A-Z]+) +([0-9]+).*/\2/' | paste -sd. - | sed 's/^/ggml /'
    printf 'cmake'
    printf ' %q' "${cmake_args[@]}"
    echo
  } >"${tools_dir}/VERSION"
  rm -rf "$work"
  echo "# llama.cpp tools built into ${tools_dir}" >&2
  echo "$tools_dir"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  source_arg=pypi
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --source) [ "$#" -ge 2 ] || { echo "error: --source needs a value" >&2; exit 2; }; source_arg=$2; shift 2 ;;
      -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
      *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
  done
  dir=$(build_llama_tools "$source_arg")
  cat "${dir}/VERSION"
  echo "$dir"
fi
