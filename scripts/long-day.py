#!/usr/bin/env python3
"""Long-day figures of the chat TUI, measured from outside in a real terminal (tmux).

  scripts/long-day.py [--bin target/release/tokscope] [--keys 20] [--sizes 20,196]
                      [--paste-mb 1] [--tokenizer FILE] [--cases paste,resume,turns]
                      [--turns 100] [--turn-ctx 2048] [--turn-tokens 16] [--threads 1]
                      [--deep-ctx 32768] [--deep-paste-words 6000] [--deep-cancels 5]
                      [--deep-depth-words 1500] [--deep-model FILE]

What it prints, one block per case:
  paste   a paste of --paste-mb MiB into the input of a chat on a synthetic model that has the
          real Llama 3 tokenizer (128,256 tokens; `tokscope synth --fetch-tokenizer`), then
          --keys single keys typed after it.
  resume  a saved conversation of S MiB (many ordinary turns: "turns"; or one turn holding all
          of it: "one-turn") resumed with `chat --resume`, then --keys keys typed and PageUp.
  turns   (issue 60, "a day of 100 turns") --turns scripted messages typed into a chat on the demo
          model (-c --turn-ctx, -n --turn-tokens, -t --threads) one after the other, each sent
          when the previous answer is saved. Per turn, read back from the history file the chat
          writes after each answer (the chat's own figures): TTFT, prompt tokens, tokens reused
          from the KV cache and tokens prefilled; and the chat's resident memory (VmRSS) after
          the turn. It asserts that every turn after the first prefills only what is new (the
          previous prompt and answer are reused from the KV cache, except on a turn where the
          context filled), prints the turn where the context filled and the chat's notice then,
          turns 1-5 against the last 5 (TTFT median and range), the memory slope, the history
          file's size and the time `chat --resume` takes to show the 100-turn conversation.
  deep    (issue 60, "the chat at 32k context") a chat at -c --deep-ctx on a synthetic Llama 3.2 1B
          (Q4_0; the Llama 3 tokenizer as for paste): first `run -c 16777216`, refused before
          anything is allocated (its message printed); the KV cache's size as the welcome screen
          says it; --deep-cancels times Esc during the prefill of a paste of
          --deep-paste-words words, from the key to the status line saying stopped; then a
          paste of --deep-depth-words words and a 300-word message at that depth, each turn's
          figures from the history file, against `bench -d DEPTH -p N -n 16` with DEPTH and N
          the second turn's reused and prefilled tokens.
For paste and resume: time until the screen shows it, the key-to-screen latency of each key (send-keys
until capture-pane shows the key: median, p90, max), and the chat's peak resident memory
(VmHWM from /proc) against the size of the text it holds.

Key-to-screen is measured by polling `tmux capture-pane` (a fork each time, a few ms): the
figures include that polling delay, so they are upper bounds of the chat's own latency.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SOCK = f"tokscope-longday-{os.getpid()}"


def tmux(*args, check=True):
    return subprocess.run(
        ["tmux", "-L", SOCK, "-f", "/dev/null", *args],
        check=check,
        capture_output=True,
        text=True,
    ).stdout


def screen():
    return tmux("capture-pane", "-p", "-t", "m")


def wait(pred, what, timeout):
    start = time.perf_counter()
    while True:
        s = screen()
        if pred(s):
            return time.perf_counter() - start, s
        if time.perf_counter() - start > timeout:
            sys.exit(f"long-day: timed out after {timeout} s waiting for {what}:\n{s}")
        time.sleep(0.002)


def chat_pid():
    shell = int(tmux("display", "-p", "-t", "m", "#{pane_pid}").strip())
    return shell


def vm_hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start(bin_, env, args, what_ready):
    envs = " ".join(f"{k}={v}" for k, v in env.items())
    tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", "m",
         f"exec env {envs} {bin_} chat {args}")
    t0 = time.perf_counter()
    _, s = wait(what_ready, "the first frame", 600)
    return time.perf_counter() - t0, s


def input_box(s):
    """The input box's text as shown (its rows joined, without their prompt column and
    without spaces, so a key wrapped onto the next row is still found)."""
    rows = s.splitlines()
    top = max((i for i, r in enumerate(rows) if r.startswith(" message")), default=None)
    if top is None:
        return ""
    return "".join(r[2:] for r in rows[top + 1:]).replace(" ", "")


def keys(n, marker_prefix=""):
    """Types n distinct keys; returns each key's send-to-screen time in ms."""
    out = []
    typed = ""
    alphabet = "QZXJKVWQZXJKVWQZXJKVWQZXJKVW"
    for i in range(n):
        c = alphabet[i % len(alphabet)]
        typed += c
        want = marker_prefix + typed[-6:]
        t0 = time.perf_counter()
        tmux("send-keys", "-t", "m", "-l", c)
        dt, _ = wait(lambda s: want in input_box(s), f"key {i} ({want!r})", 120)
        out.append(dt * 1000)
        del t0
    return out


def summary(name, ms):
    ms = sorted(ms)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return (f"{name}: n={len(ms)} median={statistics.median(ms):.1f} ms "
            f"p90={p90:.1f} ms max={ms[-1]:.1f} ms")


def stop():
    tmux("send-keys", "-t", "m", "C-q", check=False)
    time.sleep(0.5)
    tmux("kill-server", check=False)


def conversation(path, mib, one_turn):
    """A saved conversation of about `mib` MiB of text, in the history format."""
    para = ("The keeper climbed the stairs again, counting each of the 117 steps, and wrote "
            "in the log that the wind had turned to the north-east. ") * 4
    answer = "\n\n".join([para] * 8) + "\n\n- one\n- two\n\n```\ncode block\n```\n"
    target = mib * (1 << 20)
    turns = []
    if one_turn:
        n = target // len(answer) + 1
        turns.append({"user": "tell me everything", "assistant": "\n\n".join([answer] * n),
                      "stop_reason": "max_tokens", "metrics": None, "model_file": None,
                      "finished_unix_s": 1764547200})
    else:
        total = 0
        i = 0
        while total < target:
            user = f"question {i}: what happened next?"
            turns.append({"user": user, "assistant": answer, "stop_reason": "end_of_generation",
                          "metrics": None, "model_file": None,
                          "finished_unix_s": 1764547200 + i})
            total += len(user) + len(answer)
            i += 1
    conv = {"version": 1, "id": "20261201-000000-beef", "created_unix_s": 1764547200,
            "updated_unix_s": 1764547200, "model_file": None, "system_prompt": None,
            "turns": turns}
    with open(path, "w") as f:
        json.dump(conv, f)
    return sum(len(t["user"]) + len(t["assistant"]) for t in turns)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/tokscope")
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--sizes", default="20,196")
    ap.add_argument("--paste-mb", type=float, default=1.0)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--cases", default="paste,resume",
                    help="which cases to run, of paste, resume, turns")
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--turn-ctx", type=int, default=2048)
    ap.add_argument("--turn-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--turn-model", default=os.path.expanduser(
        "~/.local/share/tokscope/models/gemma-3-270m-q4_k_m.gguf"),
        help="the turns case's model (default: the demo model, fetched when missing)")
    ap.add_argument("--deep-model", default=None,
                    help="the deep case's model (default: a synthetic Llama 3.2 1B, Q4_0)")
    ap.add_argument("--deep-ctx", type=int, default=32768)
    ap.add_argument("--deep-paste-words", type=int, default=6000)
    ap.add_argument("--deep-cancels", type=int, default=5)
    ap.add_argument("--deep-depth-words", type=int, default=1500)
    a = ap.parse_args()
    a.cases = {c for c in a.cases.split(",") if c}
    unknown = a.cases - {"paste", "resume", "turns", "deep"}
    if unknown:
        sys.exit(f"long-day: unknown case {sorted(unknown)}: the cases are paste, resume, "
                 "turns, deep")
    bin_ = os.path.realpath(a.bin)
    work = tempfile.mkdtemp(prefix="tokscope-longday-")
    try:
        run(a, bin_, work)
    finally:
        tmux("kill-server", check=False)
        shutil.rmtree(work, ignore_errors=True)


def run(a, bin_, work):
    data = os.path.join(work, "data")
    env = {"TOKSCOPE_DATA_DIR": data, "TOKSCOPE_CONFIG_DIR": os.path.join(work, "cfg")}
    if "turns" in a.cases:
        turns(a, bin_, env, data)
    if "deep" in a.cases:
        deep(a, bin_, env, data, work)
    if not a.cases & {"paste", "resume"}:
        return
    model = os.path.join(work, "tiny-llama3-vocab.gguf")
    synth = [bin_, "synth", "-o", model, "--preset", "tiny"]
    synth += ["--tokenizer", a.tokenizer] if a.tokenizer else ["--fetch-tokenizer"]
    subprocess.run(synth, check=True, capture_output=True,
                   env={**os.environ, **env})
    print(f"machine: {os.cpu_count()} cores; model: synthetic tiny with the Llama 3 tokenizer "
          "(128,256 tokens)")
    print(f"binary: {bin_}")

    ready = lambda s: "ready" in s.splitlines()[0] if s.strip() else False

    empty = None  # peak RSS of a chat with nothing in it, once ready
    # --- paste: plain ASCII (a file, a log) and mixed Unicode (accents, CJK, emoji) ---
    for kind, unit in () if "paste" not in a.cases else (
        ("ascii", "lorem ipsum dolor sit amet, consectetur adipiscing elit; "),
        ("unicode", "héllo wörld, 日本語のテキスト, ünïcödé 🦀 tëxt; "),
    ):
        took, _ = start(bin_, env, f"-m {model} -t 1 -c 4096 -n 4", ready)
        pid = chat_pid()
        paste = os.path.join(work, "paste.txt")
        with open(paste, "w") as f:
            f.write(unit * int(a.paste_mb * (1 << 20) / len(unit.encode())))
        size = os.path.getsize(paste)
        base = vm_hwm_mib(pid)
        empty = base if empty is None else empty
        tmux("load-buffer", "-b", "big", paste)
        t0 = time.perf_counter()
        tmux("paste-buffer", "-p", "-b", "big", "-t", "m")
        tail = unit.strip()[-4:].replace(" ", "")
        wait(lambda s: tail in input_box(s), "the paste", 600)
        shown = time.perf_counter() - t0
        ms = keys(a.keys)
        print(f"\n[paste {kind}] {size / (1 << 20):.2f} MiB pasted into the input; chat ready "
              f"in {took:.2f} s")
        print(f"paste on screen after {shown * 1000:.0f} ms")
        print(summary("key-to-screen after the paste", ms))
        print(f"peak RSS {vm_hwm_mib(pid):.0f} MiB (before the paste {base:.0f} MiB)")
        stop()

    # --- resume ---
    for mib in [float(x) for x in a.sizes.split(",") if x and "resume" in a.cases]:
        for one_turn in (False, True):
            kind = "one-turn" if one_turn else "turns"
            hist = os.path.join(data, "history")
            shutil.rmtree(hist, ignore_errors=True)
            os.makedirs(hist, mode=0o700)
            path = os.path.join(hist, "20261201-000000-beef.json")
            text = conversation(path, int(mib), one_turn)
            fsize = os.path.getsize(path)
            took, _ = start(bin_, env, f"-m {model} -t 1 -n 4 --resume 20261201-000000-beef",
                            lambda s: ready(s) and "keeper" in s)
            pid = chat_pid()
            ms = keys(a.keys)
            t0 = time.perf_counter()
            before = screen()
            tmux("send-keys", "-t", "m", "PageUp")
            wait(lambda s: s != before, "PageUp", 600)
            page = (time.perf_counter() - t0) * 1000
            print(f"\n[resume {kind}] file {fsize / (1 << 20):.1f} MiB, text "
                  f"{text / (1 << 20):.1f} MiB")
            print(f"first frame with the conversation after {took:.2f} s")
            print(summary("key-to-screen", ms))
            print(f"PageUp redrawn after {page:.0f} ms")
            hwm = vm_hwm_mib(pid)
            print(f"peak RSS {hwm:.0f} MiB: {hwm - empty:.0f} MiB above an empty chat "
                  f"({empty:.0f} MiB) = {(hwm - empty) / (text / (1 << 20)):.1f}x the text")
            stop()


def saved_turns(hist):
    """The turns of the one conversation in `hist` (none before its first save)."""
    files = [f for f in os.listdir(hist) if f.endswith(".json")] if os.path.isdir(hist) else []
    if not files:
        return [], None
    path = os.path.join(hist, files[0])
    try:
        with open(path) as f:
            return json.load(f)["turns"], path
    except (json.JSONDecodeError, OSError):
        return [], path  # caught mid-write: the save is atomic, so this is a rename race


def vm_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def spread(xs):
    xs = sorted(xs)
    return f"median {statistics.median(xs):.1f} (range {xs[0]:.1f}-{xs[-1]:.1f}, n={len(xs)})"


def slope(xs, ys):
    """Least-squares slope of ys over xs."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def chart(rows, fills):
    """A text chart, one line per 10 turns: the median TTFT (bar), the prompt's size and the
    chat's RSS at the last of them; ◆ marks a group where the context filled."""
    groups = [rows[i:i + 10] for i in range(0, len(rows), 10)]
    top = max(statistics.median(r[1] for r in g) for g in groups)
    print("turns    median TTFT ms                                    prompt tokens  RSS MiB")
    for g in groups:
        ttft = statistics.median(r[1] for r in g)
        bar = "█" * max(1, round(40 * ttft / top))
        mark = "◆" if any(r[0] in fills for r in g) else " "
        print(f"{g[0][0]:3d}-{g[-1][0]:<3d} {ttft:7.1f} {bar:<40} {mark} {g[-1][2]:6d} "
              f"{g[-1][6]:10.1f}")


def words(n_words, seed):
    """Plain English-like text of n_words words (about 1.3 Llama 3 tokens a word), different
    for each seed so that no KV prefix is shared between two pastes."""
    vocab = ("river stone window garden morning silver letter harbour candle meadow bridge "
             "lantern orchard valley thunder pencil marble feather compass blanket").split()
    x = seed * 2654435761 % 4294967296 or 1
    out = []
    for i in range(n_words):
        x = (x * 1103515245 + 12345) % 2147483648
        out.append(vocab[x % len(vocab)] + (f" {i}." if i % 12 == 11 else ""))
    return " ".join(out)


def status(s):
    return s.splitlines()[0].strip() if s.strip() else ""


def paste(work, text):
    path = os.path.join(work, "paste.txt")
    with open(path, "w") as f:
        f.write(text)
    tmux("load-buffer", "-b", "deep", path)
    tmux("paste-buffer", "-p", "-b", "deep", "-t", "m")
    tail = text.split()[-2]
    wait(lambda s: tail.replace(" ", "") in input_box(s), "the paste", 120)


def deep(a, bin_, env, data, work):
    """The chat at a long context (issue 60 item 5): see the module's docstring."""
    model = a.deep_model or os.path.join(work, "llama3.2-1b-synth.gguf")
    if not a.deep_model:
        synth = [bin_, "synth", "--preset", "llama3.2-1b", "--type", "q4_0", "-o", model]
        synth += ["--tokenizer", a.tokenizer] if a.tokenizer else ["--fetch-tokenizer"]
        subprocess.run(synth, check=True, capture_output=True, env={**os.environ, **env})
    print(f"\n[deep] {os.path.basename(model)} ({os.path.getsize(model) / 1e9:.2f} GB), "
          f"chat -c {a.deep_ctx} -t {a.threads}")
    # The refusal, before anything is allocated: a context whose cache cannot fit.
    r = subprocess.run([bin_, "run", "-m", model, "-c", "16777216", "-p", "hi", "-n", "1",
                        "-t", "1"], capture_output=True, text=True, env={**os.environ, **env})
    print(f"run -c 16777216 (the largest -c): exit {r.returncode}; stderr:")
    for line in r.stderr.strip().splitlines()[-3:]:
        print(f"  {line}")
    hist = os.path.join(data, "history")
    shutil.rmtree(hist, ignore_errors=True)
    args = f"-m {model} -t {a.threads} -c {a.deep_ctx} -n 16 --temp 0"
    ready = lambda s: "ready" in status(s)
    took, s = start(bin_, env, args, ready)
    said = [l.split("│")[0].strip() for l in s.splitlines() if "KV cache" in l]
    print(f"ready in {took:.2f} s; the welcome screen says: {said}")
    # Esc during the prefill of a long paste: from the key to the status line saying stopped.
    stops = []
    for i in range(a.deep_cancels):
        tmux("send-keys", "-t", "m", "C-n")
        paste(work, words(a.deep_paste_words, 100 + i))
        tmux("send-keys", "-t", "m", "Enter")
        wait(lambda s: status(s).startswith("prefill"), "the prefill", 120)
        time.sleep(2.0 + i * 0.7)
        t0 = time.perf_counter()
        tmux("send-keys", "-t", "m", "Escape")
        wait(lambda s: "stopped" in status(s), "the stop", 120)
        stops.append((time.perf_counter() - t0) * 1000)
    print(f"Esc during the prefill of a {a.deep_paste_words}-word paste, 2-{2 + 0.7 * (a.deep_cancels - 1):.1f} s "
          f"into it, to the status line saying stopped (polled, an upper bound): {spread(stops)} ms")
    # The figures at depth: a paste of --deep-depth words, then a message of 300 words at
    # that depth (its prefill and its decode are bench's pp and tg at the depth).
    tmux("send-keys", "-t", "m", "C-n")
    shutil.rmtree(hist, ignore_errors=True)
    for n, (count, seed) in enumerate([(a.deep_depth_words, 7), (300, 8)], 1):
        paste(work, words(count, seed))
        tmux("send-keys", "-t", "m", "Enter")
        deadline = time.perf_counter() + 1800
        while len(saved_turns(hist)[0]) < n:
            if time.perf_counter() > deadline:
                sys.exit(f"long-day: turn {n} at depth was not saved:\n{screen()}")
            time.sleep(0.2)
    turns_, _ = saved_turns(hist)
    roof = [l.strip() for l in screen().splitlines() if "ceiling" in l or "MBU" in l]
    stop()
    for t in turns_:
        m = t["metrics"]
        print(f"turn: prompt {m['prompt_tokens']} tokens, {m['cached_tokens']} reused, "
              f"{m['prefilled_tokens']} prefilled; TTFT {m['ttft_ms']:.0f} ms = queue "
              f"{m['queue_ms']:.1f} + template/tokenize {m['template_tokenize_ms']:.1f} + prefill "
              f"{m['prefill_ms']:.0f} + first sample {m['first_sample_ms']:.1f}; prefill "
              f"{m['prefill_tok_per_s']:.1f} tok/s; decode {m['decode_tok_per_s']:.2f} tok/s "
              f"({m['tokens_generated']} tokens)")
    print(f"the metrics pane at the end: {roof}")
    m = turns_[-1]["metrics"]
    depth = m["cached_tokens"]
    # The message's prefill ran over `depth` cached tokens (bench's pp at -d depth); its answer
    # was decoded after the message too, over depth + prefilled cells (bench's tg at that
    # depth, not at -d depth: at depth 2119 + 416 the answer's steps read 20% more cells).
    prefilled = m["prefilled_tokens"]
    for test, d in ((["-p", str(prefilled), "-n", "0"], depth),
                    (["-p", "0", "-n", "16"], depth + prefilled)):
        cmd = [bin_, "bench", "-m", model, "-t", str(a.threads), *test, "-d", str(d),
               "-r", "3", "-o", "md+"]
        print("$ " + " ".join(os.path.basename(c) if c == bin_ else c for c in cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
        print(r.stdout.strip())
        if r.returncode:
            print(r.stderr.strip()[-2000:])


def turns(a, bin_, env, data):
    """The day of many turns (issue 60 item 4): see the module's docstring."""
    if not os.path.exists(a.turn_model):
        subprocess.run([bin_, "fetch-demo"], check=True)
    hist = os.path.join(data, "history")
    shutil.rmtree(hist, ignore_errors=True)
    args = (f"-m {a.turn_model} -t {a.threads} -c {a.turn_ctx} -n {a.turn_tokens} --temp 0")
    ready = lambda s: "ready" in s.splitlines()[0] if s.strip() else False
    took, _ = start(bin_, env, args, ready)
    pid = chat_pid()
    print(f"\n[turns] {a.turns} turns on {os.path.basename(a.turn_model)}: chat {args} "
          f"(in tmux, the real chat binary); ready in {took:.2f} s")
    rss = []
    notices = {}
    rows = []
    for i in range(1, a.turns + 1):
        msg = f"Turn {i}: name one animal, in one word."
        tmux("send-keys", "-t", "m", "-l", msg)
        wait(lambda s: msg[-12:].replace(" ", "") in input_box(s), f"turn {i}'s message", 60)
        tmux("send-keys", "-t", "m", "Enter")
        deadline = time.perf_counter() + 300
        while True:
            saved, path = saved_turns(hist)
            if len(saved) >= i:
                break
            if time.perf_counter() > deadline:
                sys.exit(f"long-day: turn {i} was not saved within 300 s:\n{screen()}")
            time.sleep(0.01)
        rss.append(vm_rss_mib(pid))
        s = screen()
        if "no longer fits" in s:
            notices[i] = " ".join(l.strip() for l in s.splitlines() if "fits" in l or
                                  "left out" in l)
    saved, path = saved_turns(hist)
    fills = []
    for i, t in enumerate(saved, 1):
        m = t["metrics"]
        rows.append((i, m["ttft_ms"], m["prompt_tokens"], m["cached_tokens"],
                     m["prefilled_tokens"], m["tokens_generated"], rss[i - 1]))
    print("turn  ttft_ms  prompt_tokens  cached  prefilled  generated  rss_mib")
    for r in rows:
        print(f"{r[0]:4d} {r[1]:8.1f} {r[2]:14d} {r[3]:7d} {r[4]:10d} {r[5]:10d} {r[6]:8.1f}")
    # KV reuse: every turn after the first prefills only what the cache does not hold, i.e.
    # all of the previous turn's prompt and answer are reused (the answer's last token is
    # sampled, never decoded, so it and the new message are what is prefilled). A turn whose
    # prompt shrank is one where the oldest messages were left out (the context filled).
    failures = []
    for prev, cur in zip(rows, rows[1:]):
        if cur[2] < prev[2]:
            fills.append(cur[0])
            continue
        held = prev[2] + prev[5] - 1
        if cur[3] < held:
            failures.append(f"turn {cur[0]}: {cur[3]} tokens reused from the KV cache, but "
                            f"the cache held {held} of this prompt (turn {prev[0]}'s "
                            f"{prev[2]} prompt + {prev[5] - 1} decoded answer tokens)")
    new_only = [r[4] for r in rows[1:] if r[0] not in fills]
    print(f"prefilled per turn after the first (the new message, its template and the previous "
          f"answer's last token): {spread(new_only)} tokens")
    for fill in fills:
        print(f"context filled at turn {fill} (-c {a.turn_ctx}): prompt {rows[fill - 2][2]} -> "
              f"{rows[fill - 1][2]} tokens (prefilled {rows[fill - 1][4]}, TTFT "
              f"{rows[fill - 1][1]:.1f} ms); the screen after it: {notices.get(fill, '(no notice)')}")
    # The notice stays on screen until another replaces it: it must be there after every turn
    # where the context filled, and not before the first.
    if any(f not in notices for f in fills) or (notices and min(notices) < min(fills, default=len(rows) + 1)):
        failures.append(f"the notice was on screen after turns {sorted(notices)}, the context "
                        f"filled at turns {fills}: every fill must be said, and only a fill")
    if not fills:
        print(f"the context (-c {a.turn_ctx}) did not fill in {len(rows)} turns")
    k = min(5, len(rows) // 2)
    first, last = [r[1] for r in rows[:k]], [r[1] for r in rows[-k:]]
    print(f"TTFT turns 1-{k}: {spread(first)} ms; turns {len(rows) - k + 1}-{len(rows)}: "
          f"{spread(last)} ms; turn 1 {rows[0][1]:.1f} ms, turn {len(rows)} {rows[-1][1]:.1f} ms")
    if fills and fills[0] > 2 * k:
        deep = rows[fills[0] - 1 - k:fills[0] - 1]
        print(f"TTFT of the {k} turns before the context filled (turns {deep[0][0]}-{deep[-1][0]}, "
              f"prompt {deep[0][2]}-{deep[-1][2]} tokens): {spread([r[1] for r in deep])} ms")
    chart(rows, fills)
    # Memory between fills: a line through each stretch of turns, and the step at each fill.
    edges = [2] + fills + [len(rows) + 1]
    for lo, hi in zip(edges, edges[1:]):
        part = [r for r in rows if lo <= r[0] < hi]
        if len(part) >= 3:
            per_turn = slope([r[0] for r in part], [r[6] for r in part]) * 1024
            print(f"RSS over turns {part[0][0]}-{part[-1][0]}: {part[0][6]:.1f} -> "
                  f"{part[-1][6]:.1f} MiB, slope {per_turn:.1f} KiB per turn")
    for f in fills:
        print(f"RSS step at the fill of turn {f}: {rows[f - 2][6]:.1f} -> {rows[f - 1][6]:.1f} MiB")
    print(f"RSS after turn 1 {rows[0][6]:.1f} MiB, after turn {len(rows)} {rows[-1][6]:.1f} MiB")
    stop()
    fsize = os.path.getsize(path)
    conv_id = os.path.basename(path)[:-5]
    # Resume against a fresh start, alternating, so that the machine's load hits both alike.
    times, fresh = [], []
    base = f"-m {a.turn_model} -t {a.threads} -c {a.turn_ctx}"
    for _ in range(3):
        took, _ = start(bin_, env, f"{base} --resume {conv_id}",
                        lambda s: ready(s) and f"Turn {len(rows)}:" in s)
        times.append(took * 1000)
        stop()
        took, _ = start(bin_, env, base, ready)
        fresh.append(took * 1000)
        stop()
        shutil.rmtree(os.path.join(hist, "..", "in-flight"), ignore_errors=True)
    print(f"history file {fsize / 1024:.1f} KiB for {len(rows)} turns; `chat --resume` to the "
          f"first ready frame showing turn {len(rows)}: {spread(times)} ms; a new chat to its "
          f"first ready frame: {spread(fresh)} ms (3 starts each, alternating, model load "
          f"included in both)")
    if failures:
        sys.exit("long-day: KV reuse failed:\n  " + "\n  ".join(failures))
    print("KV reuse: every turn after the first prefilled only what the cache did not hold")


if __name__ == "__main__":
    main()
