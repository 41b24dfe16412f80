#!/usr/bin/env python3
"""An outside observer of a token stream: starts COMMAND with its stdout on a pipe, reads the
pipe as the bytes arrive and records, for each read, the monotonic clock (ns), the number of
bytes and the number of newlines in it, one "t_ns bytes newlines" line per read in FILE.

    scripts/observe-stream.py FILE -- tokscope run --token-lines ...

With `run --token-lines` every generated token is one line, so the newlines a read brings are
the tokens that arrived with it (several, when the pipe coalesced their writes).

The observer starts the command itself, so it is reading before the first byte can be written
(an observer started beside the command in a shell pipeline may still be starting up, Python's
interpreter takes tens of milliseconds, while the first tokens pile up in the pipe). Nothing
of tokscope is used: the times are this process's, taken the moment each read returns. The
command's stderr passes through; the exit status is the command's.
"""
import os
import subprocess
import sys
import time


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print("usage: observe-stream.py FILE -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    reads = []
    proc = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE, bufsize=0)
    fd = proc.stdout.fileno()
    while True:
        data = os.read(fd, 65536)
        t = time.perf_counter_ns()
        if not data:
            break
        reads.append((t, len(data), data.count(b"\n")))
    status = proc.wait()
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for t, n, lines in reads:
            out.write(f"{t} {n} {lines}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
