"""Soak: many concurrent writers and a few live tailers for minutes, on a server of its own.

    python -m benchmarks.soak [--minutes 5] [--writers 64] [--tailers 4] [--trace]

Writers run agent steps (get_tuple + put_writes + put of a growing message list) from asyncio,
each moving to a fresh thread every --thread-steps steps. Tailers follow every thread
(atail_all) and one consumer group member acknowledges every event. Every --every seconds it
prints the events written and received, the client's resident memory, the bytes the saver's
delta cache holds, Redis's used_memory and the group's pending entries (PEL).

The client's working set is flat once the delta cache is full: the cache keeps the newest list
value of recently used threads as the base for the next append, up to ``delta_cache_bytes``
(--cache-mb). Until it is full the client grows by what it holds, so the run reports the
client's memory after --warmup seconds and at the end beside that bound. Redis keeps every
thread: its memory grows with the data.

At the end every tailer must have received exactly the events appended (counted by the
writers, and checked against the thread logs' lengths), and the group must have nothing
pending; otherwise, or if shutting down does not finish in time, it exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
import tracemalloc
from dataclasses import dataclass, field

import redis.asyncio as aredis

from streamsaver import AsyncRedisStreamSaver
from streamsaver.embedded import EmbeddedRedis
from streamsaver.events import Delivery

from . import script
from .conversation import aagent_step, astart_thread

PREFIX = "soak"
GROUP = "soak"
MB = 1024 * 1024


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


@dataclass
class Counts:
    written: int = 0
    acked: int = 0
    received: list[int] = field(default_factory=list)


async def _writer(saver: AsyncRedisStreamSaver, n: int, steps: int, stop: asyncio.Event,
                  counts: Counts) -> None:  # fmt: skip
    generation = 0
    while not stop.is_set():
        thread_id = f"w{n}-{generation}"
        await astart_thread(saver, thread_id)
        counts.written += 1
        for step in range(steps):
            if stop.is_set():
                break
            await aagent_step(saver, thread_id, step)
            counts.written += 2  # the writes event and the checkpoint event
        generation += 1


async def _tailer(saver: AsyncRedisStreamSaver, i: int, counts: Counts) -> None:
    async with saver.atail_all(after="0", follow=True, block_ms=200) as tail:
        async for _ in tail:
            counts.received[i] += 1


async def _member(saver: AsyncRedisStreamSaver, counts: Counts) -> None:
    """Acknowledges what it received every 50 ms, in one XACK per feed: one round trip per
    delivery would get one turn of an event loop that 64 writers keep busy, and fall behind."""
    handled: list[Delivery] = []

    async def acker() -> None:
        while True:
            await asyncio.sleep(0.05)
            if handled:
                batch = handled[:]
                del handled[:]
                await group.ack(*batch)
                counts.acked += len(batch)

    async with saver.aconsumer_group(GROUP, start="0", block_ms=200) as group:
        acking = asyncio.create_task(acker())
        try:
            async for delivery in group:
                handled.append(delivery)
        finally:
            acking.cancel()


async def _keys(client: aredis.Redis, pattern: str) -> list[bytes]:
    return [k async for k in client.scan_iter(match=pattern, count=1000, _type="STREAM")]


async def pending_by_group(client: aredis.Redis) -> dict[str, int]:
    """Entries pending (delivered, not acknowledged) per consumer group, over every feed: one
    pipelined XINFO GROUPS for all feeds, so sampling costs two round trips, not one per feed."""
    pipe = client.pipeline(transaction=False)
    for key in await _keys(client, f"{PREFIX}:{{*}}:feed"):
        pipe.xinfo_groups(key)
    total: dict[str, int] = {}
    for groups in await pipe.execute():
        for group in groups:
            name = group["name"].decode()
            total[name] = total.get(name, 0) + int(group["pending"])
    return total


async def logged_events(client: aredis.Redis) -> int:
    """Events in the thread logs themselves: what the writers' count must match."""
    pipe = client.pipeline(transaction=False)
    for key in await _keys(client, f"{PREFIX}:{{*}}:log"):
        pipe.xlen(key)
    return sum(await pipe.execute())


@dataclass
class Sample:
    elapsed: float
    rss_mb: float
    cache_mb: float
    redis_mb: float
    pending: dict[str, int]


class Soak:
    def __init__(self, args: argparse.Namespace, url: str) -> None:
        self.args = args
        conns = args.writers + args.tailers + 16
        self.client = aredis.Redis.from_url(url, max_connections=conns)
        self.saver = AsyncRedisStreamSaver(
            self.client, prefix=PREFIX, delta_cache_bytes=int(args.cache_mb * MB)
        )
        self.counts = Counts(received=[0] * args.tailers)
        self.samples: list[Sample] = []

    def cache_mb(self) -> float:
        cache = self.saver._ops.cache
        return cache.nbytes / MB if cache is not None else 0.0

    async def sample(self, started: float) -> Sample:
        info = await self.client.info("memory")
        sample = Sample(
            time.monotonic() - started,
            _rss_mb(),
            self.cache_mb(),
            int(info["used_memory"]) / MB,
            await pending_by_group(self.client),
        )
        c = self.counts
        print(f"{sample.elapsed:7.0f}  {c.written:8}  {c.written / sample.elapsed:8.0f}  "
              f"{min(c.received):8}  {c.acked:8}  {sample.rss_mb:9.1f}  {sample.cache_mb:8.1f}  "
              f"{sample.redis_mb:8.1f}  {sample.pending}", flush=True)  # fmt: skip
        self.samples.append(sample)
        return sample

    async def run(self) -> int:
        args, c = self.args, self.counts
        readers = [asyncio.create_task(_tailer(self.saver, i, c)) for i in range(args.tailers)]
        readers.append(asyncio.create_task(_member(self.saver, c)))
        await asyncio.sleep(0.5)  # readers are blocking before the first write
        stop = asyncio.Event()
        writers = [
            asyncio.create_task(_writer(self.saver, n, args.thread_steps, stop, c))
            for n in range(args.writers)
        ]
        started = time.monotonic()
        seconds = args.minutes * 60
        print(f"{args.writers} writers, {args.tailers} tailers + 1 group member, "
              f"{args.minutes:g} min; delta cache bound {args.cache_mb:g} MiB")  # fmt: skip
        print("elapsed  written   ev/s  received     acked  rss_MiB  cache_MiB  redis_MiB  "
              "pending per group")  # fmt: skip
        warm: Sample | None = None
        snapshot = None
        while (now := time.monotonic() - started) < seconds:
            await asyncio.sleep(min(args.every, max(seconds - now, 0.1)))
            sample = await self.sample(started)
            if warm is None and sample.elapsed >= args.warmup:
                warm, gc_warm = sample, gc.get_count()
                snapshot = tracemalloc.take_snapshot() if args.trace else None
        if warm is None:
            warm, gc_warm = self.samples[0], gc.get_count()

        stop.set()
        phases: dict[str, float] = {}
        ok = await self._phase(phases, "writers stop", asyncio.gather(*writers), 60)
        ok &= await self._phase(phases, "readers drain", self._drain(), 120)
        end = await self.sample(started)
        for reader in readers:
            reader.cancel()
        ok &= await self._phase(
            phases, "readers close", asyncio.gather(*readers, return_exceptions=True), 30
        )
        end.pending = await pending_by_group(self.client)
        logged = await logged_events(self.client)
        await self.client.aclose()
        return self._report(warm, gc_warm, end, snapshot, logged, phases, ok)

    async def _drain(self) -> None:
        c = self.counts
        while min(c.received) < c.written or c.acked < c.written:
            await asyncio.sleep(0.1)

    async def _phase(self, phases: dict[str, float], name: str, work: object,
                     timeout: float) -> bool:  # fmt: skip
        began = time.monotonic()
        try:
            await asyncio.wait_for(work, timeout)  # type: ignore[arg-type]
            return True
        except asyncio.TimeoutError:
            print(f"STALL: {name} did not finish within {timeout:g} s")
            return False
        finally:
            phases[name] = time.monotonic() - began

    def _report(self, warm: Sample, gc_warm: tuple[int, int, int], end: Sample,
                snapshot: tracemalloc.Snapshot | None, logged: int, phases: dict[str, float],
                ok: bool) -> int:  # fmt: skip
        c = self.counts
        lost = [c.written - r for r in c.received]
        print(f"\nevents written {c.written} (thread logs hold {logged}); received per tailer "
              f"{c.received}; group acked {c.acked}; lost per tailer {lost}")  # fmt: skip
        print(f"client RSS: {warm.rss_mb:.1f} MiB after warm-up ({warm.elapsed:.0f} s), "
              f"{end.rss_mb:.1f} MiB at the end ({end.rss_mb - warm.rss_mb:+.1f} MiB); delta cache "
              f"{warm.cache_mb:.1f} -> {end.cache_mb:.1f} MiB of its {self.args.cache_mb:g} MiB "
              f"bound")  # fmt: skip
        print(f"gc counts after warm-up {gc_warm}, at the end {gc.get_count()}; "
              f"objects tracked at the end {len(gc.get_objects())}")  # fmt: skip
        print(f"redis used_memory: {warm.redis_mb:.1f} MiB after warm-up, {end.redis_mb:.1f} MiB "
              f"at the end")  # fmt: skip
        print(f"PEL per group: after warm-up {warm.pending}, at the end {end.pending}")
        print("shutdown: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
        if snapshot is not None:
            print("\ntracemalloc, largest growth from warm-up to the end:")
            for stat in tracemalloc.take_snapshot().compare_to(snapshot, "lineno")[:15]:
                print(f"  {stat}")
        failures = []
        if any(lost) or c.acked != c.written or logged != c.written:
            failures.append("events lost or duplicated")
        if any(end.pending.values()):
            failures.append("entries left pending")
        if not ok:
            failures.append("shutdown stalled")
        print("FAIL: " + "; ".join(failures) if failures else "OK: lost=0, nothing pending")
        return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("soak", __doc__)
    parser.add_argument("--minutes", type=float, default=5, help="how long to write (5)")
    parser.add_argument("--writers", type=int, default=64, help="concurrent writers (64)")
    parser.add_argument("--tailers", type=int, default=4, help="atail_all readers (4)")
    script.thread_steps(parser)
    parser.add_argument("--every", type=float, default=15, help="seconds between samples (15)")
    parser.add_argument(
        "--warmup", type=float, default=60, help="seconds before the memory baseline (60)"
    )
    parser.add_argument(
        "--cache-mb", type=float, default=64, help="the saver's delta_cache_bytes, MiB (64)"
    )
    parser.add_argument(
        "--trace", action="store_true", help="tracemalloc: print what grew after warm-up (slow)"
    )
    args = parser.parse_args(argv)
    if args.trace:
        tracemalloc.start(1)
    with EmbeddedRedis() as server:
        return asyncio.run(Soak(args, server.url).run())


if __name__ == "__main__":
    sys.exit(main())
