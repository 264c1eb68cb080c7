"""Tail latency: from ``put`` returning in one process to a tailer receiving the event in another.

    python -m benchmarks.tail_latency [--events N] [--interval-ms MS]

Beside it, in the same run, the raw floor: a bare ``XADD`` in one process and a bare
``XREAD BLOCK`` in another. Both sides stamp ``time.time_ns()`` (one machine, one clock). Two
figures: from the write's call starting (always positive, so ratios mean something) and from
the write returning to its caller (the issue's definition; negative when the tailer wins the
race against the writer's own reply).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from multiprocessing.synchronize import Event
from typing import Any

import redis

from streamsaver import RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

THREAD = "tail-latency"
RAW = "raw floor (XADD -> XREAD BLOCK)"
OURS = "streamsaver (put -> tail)"


def _raw_tailer(url: str, n: int, ready: Event, out: Any) -> None:
    client = redis.Redis.from_url(url)
    received: dict[str, int] = {}
    last = "$"
    ready.set()
    while len(received) < n:
        for _, entries in client.xread({"raw": last}, block=5000, count=100) or []:
            now = time.time_ns()
            for entry_id, fields in entries:
                received[fields[b"i"].decode()] = now
                last = entry_id
    out.put(received)


def _saver_tailer(url: str, prefix: str, n: int, ready: Event, out: Any) -> None:
    saver = RedisStreamSaver(redis.Redis.from_url(url), prefix=prefix)
    received: dict[str, int] = {}
    with saver.tail(THREAD, after="$", follow=True) as tail:
        ready.set()
        for event in tail:
            if event.kind == "checkpoint" and event.checkpoint_id:
                received[event.checkpoint_id] = time.time_ns()
                if len(received) >= n:
                    break
    out.put(received)


def _latencies(received: dict[str, int], marks: dict[str, int]) -> list[float]:
    return [(received[k] - marks[k]) / 1e6 for k in marks]


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


Figures = dict[str, tuple[float, float]]


def _run(url: str, events: int, interval: float) -> tuple[Figures, Figures]:
    ctx = mp.get_context("spawn")
    from_start: Figures = {}
    from_return: Figures = {}
    client = redis.Redis.from_url(url)

    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_raw_tailer, args=(url, events, ready, out))
    proc.start()
    ready.wait(30)
    time.sleep(0.2)  # the tailer's XREAD must be blocking before the first XADD
    started, sent = {}, {}
    for i in range(events):
        started[str(i)] = time.time_ns()
        client.xadd("raw", {"i": str(i), "p": "x" * 200})
        sent[str(i)] = time.time_ns()
        time.sleep(interval)
    received = out.get(timeout=60)
    proc.join(10)
    from_start[RAW] = _percentiles(_latencies(received, started))
    from_return[RAW] = _percentiles(_latencies(received, sent))

    saver = RedisStreamSaver(client, prefix="lat")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_saver_tailer, args=(url, "lat", events, ready, out))
    proc.start()
    ready.wait(30)
    time.sleep(0.2)
    config: Any = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    put_from, put_at = {}, {}
    for i in range(events):
        checkpoint: Any = {
            "v": 1, "id": f"{i:012d}", "ts": "", "channel_values": {"m": "x" * 200},
            "channel_versions": {"m": saver.get_next_version(None, None)},
            "versions_seen": {}, "updated_channels": None,
        }  # fmt: skip
        versions = checkpoint["channel_versions"]
        put_from[checkpoint["id"]] = time.time_ns()
        config = saver.put(config, checkpoint, {"source": "loop", "step": i}, versions)
        put_at[checkpoint["id"]] = time.time_ns()
        time.sleep(interval)
    received = out.get(timeout=60)
    proc.join(10)
    from_start[OURS] = _percentiles(_latencies(received, put_from))
    from_return[OURS] = _percentiles(_latencies(received, put_at))
    client.close()
    return from_start, from_return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tail_latency", description=__doc__)
    parser.add_argument("--events", type=int, default=1000, help="events per side (default 1000)")
    parser.add_argument(
        "--interval-ms", type=float, default=2.0, help="pause between writes (default 2 ms)"
    )
    args = parser.parse_args(argv)
    with EmbeddedRedis() as server:
        from_start, from_return = _run(server.url, args.events, args.interval_ms / 1000)
    floor_p50, floor_p99 = from_start[RAW]
    print(f"{args.events} events per path, {args.interval_ms:g} ms apart\n")
    print(
        "| path | p50 from write start | x raw | p99 from write start | x raw "
        "| p50 from write return | p99 from write return |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (p50, p99) in from_start.items():
        back50, back99 = from_return[name]
        print(
            f"| {name} | {p50:.3f} ms | {p50 / floor_p50:.2f}x | {p99:.3f} ms | "
            f"{p99 / floor_p99:.2f}x | {back50:.3f} ms | {back99:.3f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
