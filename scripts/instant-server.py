#!/usr/bin/env python3
"""An OpenAI-compatible streaming server that answers at once, for measuring a load generator's
own cost (issue 35, item 6). Standard library only; 127.0.0.1 only.

POST /v1/chat/completions streams `max_tokens` chunks of one token each, then the usage chunk
and [DONE]. Between two chunks it sleeps `--gap-ms` (0: back to back, written in one go).
With `--rate R` it paces instead (issue 60, item 1): chunk i is due at t0 + i/R on
CLOCK_MONOTONIC (t0: the first chunk's write), and each wake-up writes every chunk then due in
one write, so the schedule holds at rates above what a sleep per chunk can reach (asyncio wakes
about once a millisecond: at 10,000 tok/s about ten one-token chunks per write; `--tick-ms T`
wakes each stream at most once every T ms, so that many streams at once cost the server fewer
wake-ups). With
`--numbered` token i (from 1) is " t00001" style: distinct and in order, so a reader of the
stream or of a screen can tell a lost, doubled or reordered token.
GET /v1/models names one model. Anything else is 404 (so a client falls back from /tokenize).

The server times its own part of each request on CLOCK_MONOTONIC: from the request's last
byte read to the first chunk written (`first_us`), and the whole stream (`stream_us`). It also
times each stream's own rate the way tokscope defines decode tok/s, (N - 1) / (the last token's
write - the first's), kept per stream (`stream_tok_per_s`, in request order). On
SIGTERM or SIGINT it writes their count, mean, p50, p99 and max to `--stats FILE` (JSON) and
exits. A load generator's added latency per request is then its TTFT minus the server's
`first_us` (both on one machine, over loopback).

Usage: instant-server.py --port P [--gap-ms G | --rate R [--tick-ms T]] [--numbered] [--stats FILE]
"""
import argparse
import asyncio
import json
import signal
import statistics
import time

MODEL = "instant"


def chunk(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def summary(values):
    if not values:
        return {"count": 0}
    s = sorted(values)
    return {
        "count": len(s),
        "mean": statistics.fmean(s),
        "p50": s[len(s) // 2],
        "p99": s[min(len(s) - 1, int(0.99 * len(s)))],
        "max": s[-1],
    }


class Server:
    def __init__(self, gap_ms, rate, numbered, tick_ms):
        self.gap = gap_ms / 1000.0
        self.rate = rate
        self.tick = tick_ms / 1000.0
        self.numbered = numbered
        self.first_us = []
        self.stream_us = []
        self.tok_per_s = []
        self.open = 0
        self.max_open = 0

    async def read_request(self, reader):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v.strip())
        body = await reader.readexactly(length) if length else b""
        return method, path, body

    async def handle(self, reader, writer):
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            while True:
                try:
                    method, path, body = await self.read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError, ValueError):
                    return
                got = time.monotonic_ns()
                if method == "GET" and path.endswith("/models"):
                    data = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(data) + data)
                    await writer.drain()
                    continue
                if method != "POST" or not path.endswith("/chat/completions"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                request = json.loads(body or b"{}")
                n = int(request.get("max_tokens") or 16)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                first = None
                if self.rate:
                    first, last = await self.paced(writer, n)
                    if n > 1:
                        self.tok_per_s.append((n - 1) / ((last - first) / 1e9))
                elif self.gap == 0:
                    out = [chunk(self.piece(i)) for i in range(n)]
                    writer.write(b"".join(out))
                    await writer.drain()
                    first = time.monotonic_ns()
                else:
                    for i in range(n):
                        writer.write(chunk(self.piece(i)))
                        await writer.drain()
                        if first is None:
                            first = time.monotonic_ns()
                        if i + 1 < n:
                            await asyncio.sleep(self.gap)
                usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
                writer.write(chunk({"choices": [], "usage": usage}) + b"data: [DONE]\n\n")
                await writer.drain()
                done = time.monotonic_ns()
                self.first_us.append((first - got) / 1000.0)
                self.stream_us.append((done - got) / 1000.0)
                return
        finally:
            self.open -= 1
            writer.close()

    def token(self, i):
        return f" t{i + 1:05d}" if self.numbered else " tok"

    def piece(self, i):
        return {"choices": [{"index": 0, "delta": {"content": self.token(i)}}], "model": MODEL}

    async def paced(self, writer, n):
        """Writes chunk i at t0 + i/rate or as soon after as the loop wakes (t0: the first
        chunk's write), waking at most once a `--tick-ms`; returns the monotonic times (ns) of
        the first and the last chunk's write."""
        if self.numbered:  # the same bytes as chunk(self.piece(i)), made many times faster
            template = chunk(self.piece(0)).replace(b" t00001", b" t%05d")
            pieces = [template % (i + 1) for i in range(n)]
        else:
            pieces = [chunk(self.piece(0))] * n
        step_ns = 1e9 / self.rate
        t0 = last = None
        i = 0
        while i < n:
            now = time.monotonic_ns()
            if t0 is None:
                t0, due = now, 1
            else:
                due = min(n, int((now - t0) / step_ns) + 1)
            if due > i:
                writer.write(b"".join(pieces[i:due]))
                last = now
                i = due
                await writer.drain()
            else:
                await asyncio.sleep(max(self.tick, (t0 + i * step_ns - now) / 1e9))
        return t0, last

    def stats(self):
        return {
            "first_chunk_us": summary(self.first_us),
            "stream_us": summary(self.stream_us),
            "stream_tok_per_s": self.tok_per_s,
            "max_open_connections": self.max_open,
        }


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--gap-ms", type=float, default=0.0)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--numbered", action="store_true")
    p.add_argument("--tick-ms", type=float, default=0.0)
    p.add_argument("--stats")
    args = p.parse_args()
    server = Server(args.gap_ms, args.rate, args.numbered, args.tick_ms)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", args.port, backlog=4096, limit=1 << 20)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with srv:
        await stop.wait()
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(server.stats(), f, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
