#!/usr/bin/env python3
"""Helper of scripts/peers-bench.sh (issue 35, item 1): tokscope load, AIPerf and GuideLLM
against one server, the same request shape. Standard library only.

  peers_bench.py prompts BASE_URL MODEL N LEN OUT TEXT DIR
      N prompts of exactly LEN tokens of the server's own tokenizer (llama-server's or vLLM's
      /tokenize and /detokenize), cut from TEXT at N different places so that no two share a
      prefix, each checked by tokenizing it again; written for each tool: DIR/prompts-tokscope.jsonl
      ({"prompt"}), DIR/prompts-aiperf.jsonl ({"text", "output_length"}) and
      DIR/prompts-guidellm.jsonl ({"prompt", "output_tokens_count"}). Every tool then sends the
      same texts, each as one user message, with max tokens OUT and ignore_eos.
  peers_bench.py counters BEFORE AFTER
      The server's Prometheus counters (prompt tokens, generated tokens, requests) over a run:
      AFTER minus BEFORE, as JSON.
  peers_bench.py table DIR
      One table per level from each run's raw outputs under DIR: median of the rounds and their
      range, each tool's figures under its own definitions, and tokscope's figures under each
      peer's definition beside them.
"""
import gzip
import json
import os
import re
import statistics
import sys
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


class Tokenizer:
    """llama-server: {"content"} -> {"tokens"}, {"tokens"} -> {"content"}; vLLM: {"model",
    "prompt"} -> {"tokens"}, {"model", "tokens"} -> {"prompt"}."""

    def __init__(self, base, model):
        self.base, self.model = base.rstrip("/"), model
        try:
            post(self.base + "/tokenize", {"content": "a"})["tokens"]
            self.kind = "llama-server"
        except Exception:
            post(self.base + "/tokenize", {"model": model, "prompt": "a", "add_special_tokens": False})["tokens"]
            self.kind = "vllm"

    def encode(self, text):
        if self.kind == "llama-server":
            return post(self.base + "/tokenize", {"content": text})["tokens"]
        return post(self.base + "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})["tokens"]

    def decode(self, tokens):
        if self.kind == "llama-server":
            return post(self.base + "/detokenize", {"tokens": tokens})["content"]
        return post(self.base + "/detokenize", {"model": self.model, "tokens": tokens})["prompt"]


def prompts(base, model, n, length, out, text_path, d):
    tok = Tokenizer(base, model)
    text = " ".join(open(text_path, encoding="utf-8").read().split())
    ids = tok.encode(text)
    stride = (len(ids) - 2 * length) // n
    if stride < 1:
        sys.exit(f"{text_path}: {len(ids)} tokens, too few for {n} prompts of {length}")
    made = []
    for i in range(n):
        for shift in range(0, 40):
            start = i * stride + shift
            for extra in (0, 1, -1, 2, -2):
                s = tok.decode(ids[start : start + length + extra]).strip()
                if len(tok.encode(s)) == length:
                    made.append(s)
                    break
            else:
                continue
            break
        else:
            sys.exit(f"prompt {i}: no window near token {i * stride} tokenizes to exactly {length} tokens")
    with open(os.path.join(d, "prompts-tokscope.jsonl"), "w") as a, open(
        os.path.join(d, "prompts-aiperf.jsonl"), "w"
    ) as b, open(os.path.join(d, "prompts-guidellm.jsonl"), "w") as c:
        for s in made:
            a.write(json.dumps({"prompt": s}) + "\n")
            b.write(json.dumps({"text": s, "output_length": out}) + "\n")
            c.write(json.dumps({"prompt": s, "output_tokens_count": out}) + "\n")
    print(f"{n} prompts of {length} tokens ({tok.kind} tokenizer, each checked), {out} output tokens")


def parse_prom(path):
    sums = {}
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            try:
                sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                pass
    return sums


def counters(before, after):
    a, b = parse_prom(before), parse_prom(after)

    def delta(*endings):
        for name in b:
            if any(name.endswith(e) for e in endings) and not name.endswith("_created"):
                return b[name] - a.get(name, 0.0)
        return None

    print(json.dumps({
        "prompt_tokens": delta(":prompt_tokens_total"),
        "generated_tokens": delta(":tokens_predicted_total", ":generation_tokens_total"),
        "requests": delta(":request_success_total"),
    }))


# ---- the table ----

def load_json(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rt") as f:
            return json.load(f)
    with open(path) as f:
        return json.load(f)


def first(*paths):
    for p in paths:
        if os.path.exists(p):
            return p
    return None


def cpu(run):
    p = os.path.join(run, "time.txt")
    if not os.path.exists(p):
        return None
    # GNU time writes "Command exited with non-zero status N" first when the command failed
    wall, user, sys_, _rss = open(p).read().splitlines()[-1].split()[:4]
    return float(user) + float(sys_)


def read_tokscope(run):
    lv = load_json(os.path.join(run, "load.json"))["levels"][0]
    v = lv.get("vllm_convention") or {}
    n = lv["completion_tokens"] / max(lv["completed"], 1)
    f = {
        "requests": lv["completed"],
        "in_tok": lv["prompt_tokens"] / max(lv["completed"], 1),
        "out_tok": n,
        "ttft50": lv["ttft"]["p50_ms"], "ttft99": lv["ttft"]["p99_ms"],
        "gap50": lv["itl"]["p50_ms"], "gap99": lv["itl"]["p99_ms"],
        "tpot50": lv["tpot"]["p50_ms"], "tpot99": lv["tpot"]["p99_ms"],
        "e2e50": lv["e2el"]["p50_ms"], "e2e99": lv["e2el"]["p99_ms"],
        "out_tps": lv["output_tok_per_s"], "req_ps": lv["request_per_s"],
        # GuideLLM's TPOT, (last token - request start) / N, on tokscope's figures: N is fixed
        "e2e_per_n50": lv["e2el"]["p50_ms"] / n, "e2e_per_n99": lv["e2el"]["p99_ms"] / n,
    }
    if v:
        f.update({
            "v_ttft50": v["ttft"]["p50_ms"], "v_ttft99": v["ttft"]["p99_ms"],
            "v_gap50": v["itl"]["p50_ms"], "v_gap99": v["itl"]["p99_ms"],
            "v_tpot50": v["tpot"]["p50_ms"], "v_tpot99": v["tpot"]["p99_ms"],
            "v_e2e50": v["e2el"]["p50_ms"], "v_e2e99": v["e2el"]["p99_ms"],
        })
    return f


def read_aiperf(run):
    d = load_json(first(os.path.join(run, "profile_export_aiperf.json"), os.path.join(run, "profile_export_aiperf.json.gz")))
    g = lambda k, p: d[k][p]
    return {
        "requests": int(d["request_count"]["avg"]),
        "in_tok": g("input_sequence_length", "avg"), "out_tok": g("output_sequence_length", "avg"),
        "ttft50": g("time_to_first_token", "p50"), "ttft99": g("time_to_first_token", "p99"),
        "gap50": g("inter_chunk_latency", "p50"), "gap99": g("inter_chunk_latency", "p99"),
        "tpot50": g("inter_token_latency", "p50"), "tpot99": g("inter_token_latency", "p99"),
        "e2e50": g("request_latency", "p50"), "e2e99": g("request_latency", "p99"),
        "out_tps": d["output_token_throughput"]["avg"], "req_ps": d["request_throughput"]["avg"],
    }


def read_guidellm(run):
    d = load_json(first(os.path.join(run, "benchmarks.json"), os.path.join(run, "benchmarks.json.gz")))
    m = d["benchmarks"][0]["metrics"]
    s = lambda k: m[k]["successful"]
    p = lambda k, q: s(k)["percentiles"][q]
    return {
        "requests": m["request_totals"]["successful"],
        "in_tok": s("prompt_token_count")["mean"], "out_tok": s("output_token_count")["mean"],
        "ttft50": p("time_to_first_token_ms", "p50"), "ttft99": p("time_to_first_token_ms", "p99"),
        "tpot50": p("inter_token_latency_ms", "p50"), "tpot99": p("inter_token_latency_ms", "p99"),
        "e2e50": p("request_latency", "p50") * 1000, "e2e99": p("request_latency", "p99") * 1000,
        "out_tps": s("output_tokens_per_second")["mean"], "req_ps": s("requests_per_second")["mean"],
        "e2e_per_n50": p("time_per_output_token_ms", "p50"), "e2e_per_n99": p("time_per_output_token_ms", "p99"),
    }


def read_vllm_bench(run):
    d = load_json(os.path.join(run, "result.json"))
    return {
        "requests": d["completed"],
        # its own count of the random prompt's tokens, before the chat template
        "in_tok": d["total_input_tokens"] / d["completed"], "out_tok": d["total_output_tokens"] / d["completed"],
        "ttft50": d["median_ttft_ms"], "ttft99": d["p99_ttft_ms"],
        "gap50": d["median_itl_ms"], "gap99": d["p99_itl_ms"],
        "tpot50": d["median_tpot_ms"], "tpot99": d["p99_tpot_ms"],
        # E2E only with --percentile-metrics ...,e2el
        "e2e50": d.get("median_e2el_ms"), "e2e99": d.get("p99_e2el_ms"),
        "out_tps": d["output_throughput"], "req_ps": d["request_throughput"],
    }


READERS = {"tokscope": read_tokscope, "aiperf": read_aiperf, "guidellm": read_guidellm, "vllm-bench": read_vllm_bench}

ROWS = [
    ("requests measured", "requests", 0),
    ("input tokens / request (usage)", "in_tok", 1),
    ("output tokens / request (usage)", "out_tok", 1),
    ("TTFT p50 ms", "ttft50", 1),
    ("TTFT p99 ms", "ttft99", 1),
    ("ITL p50 ms: gap between chunks (a)", "gap50", 2),
    ("ITL p99 ms: gap between chunks (a)", "gap99", 2),
    ("TPOT p50 ms: (E2E-TTFT)/(N-1) per request (b)", "tpot50", 2),
    ("TPOT p99 ms: (E2E-TTFT)/(N-1) per request (b)", "tpot99", 2),
    ("E2E p50 ms", "e2e50", 0),
    ("E2E p99 ms", "e2e99", 0),
    ("output tok/s", "out_tps", 1),
    ("requests/s", "req_ps", 3),
    ("E2E/N p50 ms: GuideLLM's TPOT (c)", "e2e_per_n50", 2),
    ("E2E/N p99 ms: GuideLLM's TPOT (c)", "e2e_per_n99", 2),
    ("client CPU s (user+sys)", "cpu", 2),
]
VROWS = [
    ("TTFT p50 ms (first chunk with a choice)", "v_ttft50", 1),
    ("TTFT p99 ms", "v_ttft99", 1),
    ("ITL p50 ms (one undivided gap per chunk)", "v_gap50", 2),
    ("ITL p99 ms", "v_gap99", 2),
    ("TPOT p50 ms", "v_tpot50", 2),
    ("TPOT p99 ms", "v_tpot99", 2),
    ("E2E p50 ms", "v_e2e50", 0),
    ("E2E p99 ms", "v_e2e99", 0),
]


def cell(values, digits):
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} [{min(values):.{digits}f}–{max(values):.{digits}f}]"


def table(d):
    runs = {}
    for name in sorted(os.listdir(d)):
        m = re.match(r"(.+)-r(\d+)-(tokscope|aiperf|guidellm|vllm-bench)$", name)
        if not m or not os.path.isdir(os.path.join(d, name)):
            continue
        level, rnd, tool = m.groups()
        try:
            f = READERS[tool](os.path.join(d, name))
        except Exception as e:  # a run that failed is said, not hidden
            print(f"# {name}: no figures ({type(e).__name__}: {e})")
            continue
        f["cpu"] = cpu(os.path.join(d, name))
        runs.setdefault(level, {}).setdefault(tool, []).append(f)
    for level, tools in runs.items():
        names = [t for t in ("tokscope", "aiperf", "guidellm", "vllm-bench") if t in tools]
        rounds = max(len(v) for v in tools.values())
        print(f"\n### {level}: median of {rounds} rounds [range]\n")
        print("| figure | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for label, key, digits in ROWS:
            cells = [cell([f.get(key) for f in tools[t]], digits) for t in names]
            if all(c == "—" for c in cells):
                continue
            print(f"| {label} | " + " | ".join(cells) + " |")
        if "tokscope" in tools and any("v_ttft50" in f for f in tools["tokscope"]):
            print(f"\ntokscope's `vllm_convention` (vLLM's benchmark's definitions, interpolated percentiles), {level}:\n")
            print("| figure | tokscope, vLLM's definitions |")
            print("|---|---|")
            for label, key, digits in VROWS:
                print(f"| {label} | {cell([f.get(key) for f in tools['tokscope']], digits)} |")
    print("""
(a) tokscope: `itl`, each chunk's gap divided among its tokens (llama-server: one token a chunk,
    so the gap); AIPerf: `inter_chunk_latency`, one entry per content chunk after the first;
    vllm bench serve: `itl`, one undivided gap per chunk. GuideLLM reports no per-gap figure.
(b) tokscope: `tpot`; AIPerf: `inter_token_latency` (its ITL is this per-request mean); GuideLLM:
    `inter_token_latency_ms` (its ITL is this per-request mean, weighted by N-1); vllm bench
    serve: `tpot`.
(c) GuideLLM's `time_per_output_token_ms` = (last token - request start) / N, TTFT included;
    tokscope's row is its E2E percentile / N (N is the same for every request here).""")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "prompts" and len(sys.argv) == 9:
        _, _, base, model, n, length, out, text, d = sys.argv
        prompts(base, model, int(n), int(length), int(out), text, d)
    elif cmd == "counters" and len(sys.argv) == 4:
        counters(sys.argv[2], sys.argv[3])
    elif cmd == "table" and len(sys.argv) == 3:
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
