#!/usr/bin/env python3
"""Long-day figures of the chat TUI, measured from outside in a real terminal (tmux).

  scripts/long-day.py [--bin target/release/tokscope] [--keys 20] [--sizes 20,196]
                      [--paste-mb 1] [--tokenizer FILE]

What it prints, one block per case:
  paste   a paste of --paste-mb MiB into the input of a chat on a synthetic model that has the
          real Llama 3 tokenizer (128,256 tokens; `tokscope synth --fetch-tokenizer`), then
          --keys single keys typed after it.
  resume  a saved conversation of S MiB (many ordinary turns: "turns"; or one turn holding all
          of it: "one-turn") resumed with `chat --resume`, then --keys keys typed and PageUp.
For each: time until the screen shows it, the key-to-screen latency of each key (send-keys
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
    a = ap.parse_args()
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
    for kind, unit in (
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
    for mib in [float(x) for x in a.sizes.split(",") if x]:
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


if __name__ == "__main__":
    main()
