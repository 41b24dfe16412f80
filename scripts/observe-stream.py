#!/usr/bin/env python3
"""An outside observer of a token stream: reads stdin as the bytes arrive and records, for each
read, the monotonic clock (ns) and the number of bytes, one "t_ns bytes" line per read in FILE.

    tokscope run ... | scripts/observe-stream.py FILE

Nothing of tokscope is used: the times are this process's, taken the moment each read returns,
so a figure tokscope reports about its own stream can be checked from outside.
"""
import os
import sys
import time


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: observe-stream.py FILE", file=sys.stderr)
        return 2
    fd = sys.stdin.fileno()
    reads = []
    while True:
        data = os.read(fd, 65536)
        t = time.perf_counter_ns()
        if not data:
            break
        reads.append((t, len(data)))
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for t, n in reads:
            out.write(f"{t} {n}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
