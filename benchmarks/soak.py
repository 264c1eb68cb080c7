"""Soak: many concurrent writers and a few live tailers for minutes, on a server of its own.

    python -m benchmarks.soak [--seconds 300] [--writers 64] [--tailers 4]

Writers run agent steps (get_tuple + put_writes + put of a growing message list) from asyncio,
each moving to a fresh thread every --thread-steps steps, so the client's working set is flat
(Redis keeps every thread: its memory grows with the data, reported per event). Tailers follow
every thread (atail_all) and one consumer group
member acknowledges every event. Every --every seconds it prints the client's resident memory,
Redis's used_memory and the group's pending entries; at the end, every tailer must have
received every event appended (nothing lost) and the group must have nothing pending.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import redis.asyncio as aredis
from redis.exceptions import ResponseError

from streamsaver import AsyncRedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

from .conversation import aagent_step, astart_thread


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def _writer(saver: AsyncRedisStreamSaver, n: int, steps: int, stop: asyncio.Event,
                  written: list[int]) -> None:  # fmt: skip
    generation = 0
    while not stop.is_set():
        thread_id = f"w{n}-{generation}"
        await astart_thread(saver, thread_id)
        written[0] += 1
        for step in range(steps):
            if stop.is_set():
                break
            await aagent_step(saver, thread_id, step)
            written[0] += 2  # the writes event and the checkpoint event
        generation += 1


async def _tailer(saver: AsyncRedisStreamSaver, received: list[int]) -> None:
    async with saver.atail_all(after="0", follow=True, block_ms=200) as tail:
        async for _ in tail:
            received[0] += 1


async def _member(saver: AsyncRedisStreamSaver, acked: list[int]) -> None:
    async with saver.aconsumer_group("soak", start="0", block_ms=200) as group:
        async for delivery in group:
            await group.ack(delivery)
            acked[0] += 1


async def _pending(client: aredis.Redis, prefix: str) -> int:
    total = 0
    async for key in client.scan_iter(match=f"{prefix}:feed:*", _type="STREAM"):
        try:
            total += int((await client.xpending(key, "soak"))["pending"])
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise  # a feed the group has not joined yet has nothing pending
    return total


async def soak(
    url: str, seconds: float, writers: int, tailers: int, steps: int, every: float
) -> int:
    prefix = "soak"
    client = aredis.Redis.from_url(url, max_connections=writers + tailers + 16)
    saver = AsyncRedisStreamSaver(client, prefix=prefix)
    written, acked = [0], [0]
    received = [[0] for _ in range(tailers)]
    stop = asyncio.Event()
    readers = [asyncio.create_task(_tailer(saver, r)) for r in received]
    readers.append(asyncio.create_task(_member(saver, acked)))
    await asyncio.sleep(0.5)  # readers are blocking before the first write
    tasks = [asyncio.create_task(_writer(saver, n, steps, stop, written)) for n in range(writers)]
    started = time.monotonic()
    print("elapsed_s  events  events/s  client_rss_MB  redis_B/event  group_pending")
    samples: list[tuple[float, float]] = []
    while time.monotonic() - started < seconds:
        await asyncio.sleep(every)
        elapsed = time.monotonic() - started
        info = await client.info("memory")
        rss, used = _rss_mb(), int(info["used_memory"]) / max(written[0], 1)
        samples.append((rss, used))
        print(f"{elapsed:9.0f}  {written[0]:6}  {written[0] / elapsed:8.0f}  {rss:13.1f}  "
              f"{used:13.0f}  {await _pending(client, prefix):13}")  # fmt: skip
    stop.set()
    await asyncio.gather(*tasks)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        min(r[0] for r in received) < written[0] or acked[0] < written[0]
    ):
        await asyncio.sleep(0.2)
    for reader in readers:
        reader.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    pending = await _pending(client, prefix)
    half = len(samples) // 2
    print(f"\nwritten {written[0]} events; each tailer received {[r[0] for r in received]}; "
          f"group acked {acked[0]}; pending at the end {pending}")  # fmt: skip
    if half:
        first, second = samples[:half], samples[half:]
        for i, name, unit in ((0, "client RSS", "MB"), (1, "redis used_memory per event", "B")):
            a = sum(s[i] for s in first) / len(first)
            b = sum(s[i] for s in second) / len(second)
            print(f"{name}: {a:.1f} {unit} over the first half, {b:.1f} {unit} the second "
                  f"({b / a:.2f}x)")  # fmt: skip
    await client.aclose()
    lost = any(r[0] < written[0] for r in received) or acked[0] < written[0]
    return 1 if lost or pending else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=300, help="how long to write (300)")
    parser.add_argument("--writers", type=int, default=64, help="concurrent writers (64)")
    parser.add_argument("--tailers", type=int, default=4, help="atail_all readers (4)")
    parser.add_argument("--thread-steps", type=int, default=50, help="steps per thread (50)")
    parser.add_argument("--every", type=float, default=15, help="seconds between samples (15)")
    args = parser.parse_args(argv)
    with EmbeddedRedis() as server:
        return asyncio.run(
            soak(
                server.url, args.seconds, args.writers, args.tailers, args.thread_steps, args.every
            )
        )


if __name__ == "__main__":
    sys.exit(main())
