#!/usr/bin/env bash
# Decode and prefill speed of `tokscope run` on one model: R runs of a fixed ~200-token prompt
# with exactly N generated tokens (--ignore-eos), printing each run and the mean ± sd.
# Usage: scripts/bench-run.sh [MODEL] [RUNS] [TOKENS] [THREADS]
# (MODEL defaults to the demo model; THREADS to all cores.)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-}
runs=${2:-5}
tokens=${3:-128}
threads=${4:-$(nproc)}
bin=target/release/tokscope
[ -x "$bin" ] || cargo build --release --locked
prompt="$(printf 'Summarise the following notes in one paragraph. %.0s' $(seq 1 4)) $(sed -n '1,12p' docs/metrics.md | tr '\n' ' ')"
args=(run -p "$prompt" --temp 0 -n "$tokens" --ignore-eos -t "$threads" --json)
[ -n "$model" ] && args+=(-m "$model")
results=()
for i in $(seq 1 "$runs"); do
  # One line per run: the report is pretty-printed JSON.
  json=$("$bin" "${args[@]}" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))')
  results+=("$json")
  python3 - "$json" "$i" <<'PY'
import json, sys
m = json.loads(sys.argv[1])["metrics"]
print(f"run {sys.argv[2]}: prompt {m['prompt_tokens']} tok, prefill {m['prefill_tok_per_s']:.1f} tok/s, "
      f"TTFT {m['ttft_ms']:.1f} ms, decode {m['decode_tok_per_s']:.2f} tok/s over {m['tokens_generated']} tokens")
PY
done
printf '%s\n' "${results[@]}" > "${TMPDIR:-/tmp}/tokscope-bench-run.$$"
python3 - "${TMPDIR:-/tmp}/tokscope-bench-run.$$" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = rows[0]["stamp"]
print(f"model {s['model_file']} ({s['quantization']}, {s['n_params']/1e6:.0f}M params), {s['backend']}, "
      f"{s['threads']} threads, tokscope {s['tokscope_version']}, {s['llama_cpp']}")
for key, label in [("prefill_tok_per_s", "prefill tok/s"), ("decode_tok_per_s", "decode tok/s"), ("ttft_ms", "TTFT ms")]:
    v = [r["metrics"][key] for r in rows]
    sd = st.stdev(v) if len(v) > 1 else 0.0
    print(f"{label:14s} {st.mean(v):9.2f} ± {sd:.2f}  (n={len(rows)})")
PY
rm -f "${TMPDIR:-/tmp}/tokscope-bench-run.$$"
