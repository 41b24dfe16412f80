#!/usr/bin/env python3
"""The chat in a real terminal while an answer streams faster than the eye (issue 60, item 1):
what reached the screen, what was saved, and what the UI thread spent. Standard library and
tmux only; used by scripts/bench-stream.sh.

    stream-screen.py --out FILE [--numbered N] [--expect TEXTFILE] -- tokscope chat ARGS...

It starts the chat as the only program of a tmux pane on its own socket (so the pane's pid is
the chat's), waits for `ready`, reads the UI thread's CPU for one idle second, types a message
and presses Enter, then captures the pane (tmux's emulated screen) as fast as it can until the
turn is saved to the history file. After the turn it pages up (PageUp, ten lines a page) from
the end of the answer to its start, capturing each page.

With `--numbered N` (the scripted server's stream " t00001 t00002 ..."): every page of the
finished answer must be one run of consecutive numbers (a lost, doubled or reordered token on
screen breaks the run), the pages together must cover 1..N with no gap, and the saved answer
must equal the stream byte for byte. A capture taken while streaming may catch tmux part way
through applying a frame (the chat's frame is several writes; tmux's grid is read between
them), so a capture that is not one run is counted by kind (`kind_of_break`): a skipped number
fails the run, a step back at one seam (a part-applied frame, or a doubled token) is counted
and reported, and the pages settle the doubled case. With `--expect FILE` (a local model's
answer from `run`, same seed): the saved answer must equal the file.

The UI thread is the chat's main thread (the tokio loop that updates and draws; its tid is the
pid): its CPU is the first field of /proc/PID/task/PID/schedstat (ns on CPU), read before Enter
and once the turn is saved; the process's is utime + stime of /proc/PID/stat, every thread.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

TOKEN = re.compile(r"\bt(\d{5})\b")


def tmux(sock, *args, check=True):
    out = subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def capture(sock):
    return tmux(sock, "capture-pane", "-p", "-t", "main")


def wait_for(sock, pred, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        screen = capture(sock)
        if pred(screen):
            return screen
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {seconds} s waiting for {what}; the screen:\n{capture(sock)}")


def ui_cpu_ns(pid):
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def process_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_names(pid):
    names = {}
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(f"{task}/comm") as f:
                names[int(os.path.basename(task))] = f.read().strip()
        except OSError:
            pass
    return names


def settled(sock, old, seconds, what):
    """The screen once it differs from `old` and two captures 30 ms apart agree: a whole
    frame, not one tmux is part way through applying."""
    screen = wait_for(sock, lambda s: s != old, seconds, what)
    while True:
        time.sleep(0.03)
        again = capture(sock)
        if again == screen:
            return screen
        screen = again


def numbers(screen):
    return [int(m) for m in TOKEN.findall(screen)]


def ordered_run(nums):
    return all(b == a + 1 for a, b in zip(nums, nums[1:]))


def runs(nums):
    out = [[nums[0]]] if nums else []
    for a, b in zip(nums, nums[1:]):
        if b == a + 1:
            out[-1].append(b)
        else:
            out.append([b])
    return out


def kind_of_break(nums):
    """Why a capture taken while streaming is not one ordered run. `gap`: a number is skipped
    going down the screen, a token lost. `back`: at one seam the numbers go back, the rows
    below holding earlier tokens: tmux was part way through a frame (the rows above the write
    point the new frame's, those below the previous frame's; one token at the seam may be half
    of each), or a token doubled. Anything else: `other`."""
    parts = runs(nums)
    if len(parts) == 3 and len(parts[1]) == 1:
        parts = [parts[0], parts[2]]
    if len(parts) == 2 and parts[1][0] > parts[0][-1] + 1:
        return "gap"
    if len(parts) == 2:
        return "back"
    return "other"


def saved_turn(data_dir):
    files = glob.glob(os.path.join(data_dir, "history", "*.json"))
    if not files:
        return None
    try:
        with open(files[0]) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc["turns"][-1] if doc.get("turns") else None


def page_through(sock, n):
    """From the end of the finished answer, PageUp until its first token is on screen; every
    page one ordered run, each reaching down to where the page below it began (no gap), the
    first page ending at n and the last starting at 1. (From the bottom: Home sets the scroll
    past the top, and a PageDown from there stays at the top; a finding, not checked here.)
    Returns (pages, problems)."""
    tmux(sock, "send-keys", "-t", "main", "End")
    wait_for(sock, lambda s: n in numbers(s), 10, "the end of the answer")
    screen = settled(sock, "", 10, "the end of the answer")
    pages, problems, seen_min = 0, [], n + 1
    while True:
        pages += 1
        nums = numbers(screen)
        if not nums or not ordered_run(nums):
            problems.append(f"page {pages} is not one ordered run: {nums[:5]}...{nums[-5:]}")
        elif pages == 1 and nums[-1] != n:
            problems.append(f"the last page ends at t{nums[-1]:05d}, not t{n:05d}")
        elif nums[-1] < seen_min - 1:
            problems.append(f"page {pages} ends at t{nums[-1]:05d}, before t{seen_min:05d}: a gap")
        if nums:
            seen_min = min(seen_min, nums[0])
        if seen_min <= 1:
            break
        tmux(sock, "send-keys", "-t", "main", "PageUp")
        try:
            screen = settled(sock, screen, 5, "the page above")
        except RuntimeError:
            problems.append(f"PageUp did not move above t{seen_min:05d}")
            break
    if seen_min != 1:
        problems.append(f"the pages start at t{seen_min:05d}, not t00001")
    return pages, problems


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--home", required=True, help="data and config dirs go under it")
    p.add_argument("--numbered", type=int, default=0)
    p.add_argument("--expect")
    p.add_argument("--width", type=int, default=120)
    p.add_argument("--height", type=int, default=40)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("chat", nargs=argparse.REMAINDER)
    a = p.parse_args()
    chat = a.chat[1:] if a.chat[:1] == ["--"] else a.chat
    data = os.path.join(a.home, "data")
    sock = f"tokscope-bench-stream-{os.getpid()}"
    tmux(sock, "-f", "/dev/null", "new-session", "-d", "-s", "main", "-x", str(a.width), "-y", str(a.height),
         "-e", f"TOKSCOPE_DATA_DIR={data}", "-e", f"TOKSCOPE_CONFIG_DIR={os.path.join(a.home, 'config')}",
         "env", "TERM=xterm-256color", *chat)
    result = {"captures": 0, "captures_with_tokens": 0, "breaks": {"gap": 0, "back": 0, "other": 0},
              "first_breaks": [], "problems": []}
    try:
        pid = int(tmux(sock, "display", "-p", "-t", "main", "#{pane_pid}").strip())
        wait_for(sock, lambda s: s.lstrip().startswith("ready"), 60, "the chat to be ready")
        result["threads"] = sorted(set(thread_names(pid).values()))
        idle0, t_idle = ui_cpu_ns(pid), time.monotonic()
        time.sleep(1.0)
        result["ui_idle_ms_per_s"] = (ui_cpu_ns(pid) - idle0) / 1e6 / (time.monotonic() - t_idle)
        tmux(sock, "send-keys", "-t", "main", "-l", "go")
        wait_for(sock, lambda s: "› go" in s, 10, "the typed message")
        ui0, proc0, t0 = ui_cpu_ns(pid), process_cpu_s(pid), time.monotonic()
        tmux(sock, "send-keys", "-t", "main", "Enter")
        deadline = t0 + a.timeout
        turn = None
        while time.monotonic() < deadline:
            screen = capture(sock)
            result["captures"] += 1
            nums = numbers(screen)
            if nums:
                result["captures_with_tokens"] += 1
                if a.numbered and not ordered_run(nums):
                    result["breaks"][kind_of_break(nums)] += 1
                    if len(result["first_breaks"]) < 3:
                        result["first_breaks"].append(screen)
            turn = saved_turn(data)
            if turn is not None:
                break
        if turn is None:
            raise RuntimeError(f"no turn saved within {a.timeout} s; the screen:\n{capture(sock)}")
        result["ui_cpu_ms"] = (ui_cpu_ns(pid) - ui0) / 1e6
        result["process_cpu_ms"] = (process_cpu_s(pid) - proc0) * 1e3
        result["wall_s"] = time.monotonic() - t0
        result["metrics"] = turn["metrics"]
        answer = turn["assistant"]
        if a.numbered:
            sent = "".join(f" t{i:05d}" for i in range(1, a.numbered + 1))
            result["saved_equals_sent"] = answer == sent
            if answer != sent:
                result["problems"].append(f"the saved answer differs from the stream ({len(answer)} vs {len(sent)} chars)")
            result["pages"], page_problems = page_through(sock, a.numbered)
            result["problems"] += page_problems
            lost = result["breaks"]["gap"] + result["breaks"]["other"]
            if lost:
                result["problems"].append(f"{lost} captures while streaming skip a token or are out of order")
        if a.expect:
            with open(a.expect, newline="") as f:  # the text as saved: a "\r" stays a "\r"
                expected = f.read()
            result["saved_equals_expected"] = answer == expected
            if answer != expected:
                result["problems"].append("the saved answer differs from the expected text")
        tmux(sock, "send-keys", "-t", "main", "C-q")
    except Exception as e:  # noqa: BLE001 - reported in the JSON and the exit status
        result["problems"].append(f"error: {e}")
    finally:
        tmux(sock, "kill-server", check=False)
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
