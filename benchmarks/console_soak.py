"""Console soak: many clients on the console's ``/events`` stream for a minute, on a server of
its own, while a writer runs agent steps.

    python -m benchmarks.console_soak [--clients 200] [--seconds 60] [--warmup 10]

It runs ``streamsaver.web.serve`` in a process of its own and reports that process's
resident memory: idle (no client: the floor, measured in the same run), after --warmup
seconds with every client connected, and at the end, as ratios to the floor; and the events
each client received against the events written. It exits 1 if a client missed an event or
the console's memory grew by more than 10% between the warm-up and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys

import httpx
import redis.asyncio as aredis

from streamsaver import AsyncRedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

from .conversation import aagent_step, astart_thread


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run(clients: int, seconds: float, warmup: float) -> int:
    with EmbeddedRedis() as server:
        port = _free_port()
        code = (
            "import sys; from streamsaver.web import serve; "
            "serve(sys.argv[1], port=int(sys.argv[2]))"
        )
        console = subprocess.Popen([sys.executable, "-c", code, server.url, str(port)])
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(
                timeout=30, limits=httpx.Limits(max_connections=clients + 10)
            ) as http:
                for _ in range(200):
                    try:
                        await http.get(base + "/static/console.css")
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
                await http.get(base + "/")  # the saver and its scripts, as a first visitor
                floor = _rss_kb(console.pid)
                received = [0] * clients
                stop = asyncio.Event()

                async def hold(i: int) -> None:
                    async with http.stream("GET", base + "/events") as response:
                        async for line in response.aiter_lines():
                            received[i] += line.startswith("id:")

                written = 0

                async def write() -> None:
                    nonlocal written
                    client = aredis.Redis.from_url(server.url)
                    saver = AsyncRedisStreamSaver(client)
                    try:
                        while not stop.is_set():
                            thread = f"soak-{written}"
                            await astart_thread(saver, thread)
                            for step in range(5):
                                await aagent_step(saver, thread, step)
                                await asyncio.sleep(0.1)
                            written += 1
                    finally:
                        await client.aclose()

                holders = [asyncio.create_task(hold(i)) for i in range(clients)]
                await asyncio.sleep(2)
                writer = asyncio.create_task(write())
                await asyncio.sleep(warmup)
                warm = _rss_kb(console.pid)
                await asyncio.sleep(seconds - warmup)
                end = _rss_kb(console.pid)
                stop.set()
                await writer
                await asyncio.sleep(2)  # the last events reach every client
                for task in holders:
                    task.cancel()
                await asyncio.gather(*holders, return_exceptions=True)
        finally:
            console.terminate()
            console.wait(10)
    print(f"{clients} clients for {seconds:.0f} s, {written} threads of 5 steps written")
    print(
        f"console RSS: idle {floor} KiB (floor); after {warmup:.0f} s {warm / floor:.2f}x; "
        f"at the end {end / floor:.2f}x"
    )
    print(f"events per client: min {min(received)}, max {max(received)}")
    failed = end > warm * 1.1 or min(received) != max(received)
    print("FAILED" if failed else "ok")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=10)
    args = parser.parse_args()
    os.environ.pop("STREAMSAVER_TOKEN", None)
    sys.exit(asyncio.run(run(args.clients, args.seconds, args.warmup)))


if __name__ == "__main__":
    main()
