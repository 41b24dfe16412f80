#!/usr/bin/env python3
"""An OpenAI-compatible streaming server that answers at once, for measuring a load generator's
own cost (issue 35, item 6). Standard library only; 127.0.0.1 only.

POST /v1/chat/completions streams `max_tokens` chunks of one token each, then the usage chunk
and [DONE]. Between two chunks it sleeps `--gap-ms` (0: back to back, written in one go).
GET /v1/models names one model. Anything else is 404 (so a client falls back from /tokenize).

The server times its own part of each request on CLOCK_MONOTONIC: from the request's last
byte read to the first chunk written (`first_us`), and the whole stream (`stream_us`). On
SIGTERM or SIGINT it writes their count, mean, p50, p99 and max to `--stats FILE` (JSON) and
exits. A load generator's added latency per request is then its TTFT minus the server's
`first_us` (both on one machine, over loopback).

Usage: instant-server.py --port P [--gap-ms G] [--stats FILE]
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
    def __init__(self, gap_ms):
        self.gap = gap_ms / 1000.0
        self.first_us = []
        self.stream_us = []
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
                piece = {"choices": [{"index": 0, "delta": {"content": " tok"}}], "model": MODEL}
                first = None
                if self.gap == 0:
                    out = [chunk(piece) for _ in range(n)]
                    writer.write(b"".join(out))
                    await writer.drain()
                    first = time.monotonic_ns()
                else:
                    for i in range(n):
                        writer.write(chunk(piece))
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

    def stats(self):
        return {
            "first_chunk_us": summary(self.first_us),
            "stream_us": summary(self.stream_us),
            "max_open_connections": self.max_open,
        }


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--gap-ms", type=float, default=0.0)
    p.add_argument("--stats")
    args = p.parse_args()
    server = Server(args.gap_ms)
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
