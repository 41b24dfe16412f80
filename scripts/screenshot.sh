#!/usr/bin/env bash
# The README's picture: the real chat on the demo model, in tmux, one question answered,
# captured with its colours and rendered to assets/screenshots/chat.png.
#
# Usage: scripts/screenshot.sh [--tokscope BIN] [--model FILE] [--out FILE.png] [--prompt TEXT]
#                              [--ref FILE]
#
# With --ref the answer is scored against that reference and drawn by KLD (Alt+K): the
# README's second picture, the demo model's Q4_0 against the demo model itself:
#   scripts/screenshot.sh --model Q4_0.gguf --ref gemma-3-270m-q4_k_m.gguf \
#     --out assets/screenshots/chat-quality.png
#
# Needs (nothing is installed by this script):
#   - tmux                                     (Debian: apt-get install tmux)
#   - python3 with Pillow                      (pip install pillow, or apt-get install python3-pil;
#                                               $PYTHON picks another interpreter, e.g. a venv's)
#   - DejaVu Sans Mono                         (Debian: apt-get install fonts-dejavu-core)
#   - the demo model                           (tokscope fetch-demo, or scripts/setup.sh)
#   - a release build                          (cargo build --release; target/release/tokscope)
# The figures on the picture are whatever this machine measured while it ran.
set -euo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
tokscope="${CARGO_TARGET_DIR:-${repo_root}/target}/release/tokscope"
model="${HOME}/.local/share/tokscope/models/gemma-3-270m-q4_k_m.gguf"
out="${repo_root}/assets/screenshots/chat.png"
prompt="What is the capital of France?"
reference=
python=${PYTHON:-python3}
cols=120
rows=36

need_value() { [ "$#" -ge 2 ] || { echo "error: $1 needs a value" >&2; exit 2; }; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    --tokscope) need_value "$@"; tokscope=$2; shift 2 ;;
    --model) need_value "$@"; model=$2; shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --prompt) need_value "$@"; prompt=$2; shift 2 ;;
    --ref) need_value "$@"; reference=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

missing=()
command -v tmux >/dev/null || missing+=("tmux (apt-get install tmux)")
"$python" -c 'import PIL' 2>/dev/null || missing+=("Pillow for ${python} (pip install pillow, or apt-get install python3-pil)")
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf ] || missing+=("DejaVu Sans Mono (apt-get install fonts-dejavu-core)")
[ -x "$tokscope" ] || missing+=("the binary ${tokscope} (cargo build --release, or --tokscope BIN)")
[ -f "$model" ] || missing+=("the demo model ${model} (tokscope fetch-demo)")
[ -z "$reference" ] || [ -f "$reference" ] || missing+=("the reference ${reference}")
if [ "${#missing[@]}" -gt 0 ]; then
  printf 'error: missing: %s\n' "${missing[@]}" >&2
  exit 3
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tokscope-screenshot.XXXXXX")
socket="tokscope-screenshot-$$"
cleanup() {
  tmux -L "$socket" kill-server 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# A fresh data and config dir: no user settings, no history on the picture.
mkdir -p "${work}/data" "${work}/config"

ref_args=
[ -z "$reference" ] || ref_args="--ref '${reference}'"
tmux -L "$socket" -f /dev/null new-session -d -x "$cols" -y "$rows" \
  "env TOKSCOPE_DATA_DIR='${work}/data' TOKSCOPE_CONFIG_DIR='${work}/config' TERM=xterm-256color '${tokscope}' chat -m '${model}' ${ref_args}; sleep 600"

# wait_for TEXT SECONDS: poll the pane until TEXT shows, or fail with the screen.
wait_for() {
  local text=$1 deadline=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if tmux -L "$socket" capture-pane -p | grep -qF -- "$text"; then return 0; fi
    sleep 0.5
  done
  echo "error: '${text}' did not show within $2 s; the screen was:" >&2
  tmux -L "$socket" capture-pane -p >&2
  exit 1
}
wait_for " ready " 300
tmux -L "$socket" send-keys -l -- "$prompt"
tmux -L "$socket" send-keys Enter
wait_for "turn 1 · done" 300
if [ -n "$reference" ]; then
  # The score comes after the answer; then the tokens are drawn by KLD.
  wait_for "Alt+K: tokens by KLD" 300
  tmux -L "$socket" send-keys M-k
  sleep 1
fi
# One frame more, so the finished figures are drawn.
sleep 1
tmux -L "$socket" capture-pane -e -p >"${work}/capture.txt"
mkdir -p "$(dirname "$out")"
"$python" "${repo_root}/scripts/ansi-to-png.py" "${work}/capture.txt" "$out" --cols "$cols"
echo "wrote ${out} ($(wc -c <"$out") bytes)"
