"""Retention cost: the agent step on savers with ``keep_last`` / ``ttl_seconds`` beside one that
keeps everything, in the same run.

    python -m benchmarks.retention [--steps N] [--keep 5,20,100] [--rounds R]

``keep_last=N`` compacts a thread inside the put that would make a namespace hold more than 2N
checkpoints, so most puts cost what they cost without it and one in about N pays for a
compaction of N checkpoints. The amortized figure is the mean step time; p99 and max show the
compacting puts. Savers take turns step by step, on their own threads, so drift hits all alike.
Then, one saver at a time on a fresh thread, the server's own time in scripts per step
(``INFO commandstats``): the compaction's cost without the client's noise.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import redis

from streamsaver import RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

from . import script
from .conversation import agent_step, start_thread

BASELINE = "keep everything"


def _variants(client: redis.Redis, keeps: list[int]) -> dict[str, RedisStreamSaver]:
    savers = {BASELINE: RedisStreamSaver(client, prefix="bench-all")}
    savers["ttl_seconds=3600"] = RedisStreamSaver(client, prefix="bench-ttl", ttl_seconds=3600)
    for n in keeps:
        savers[f"keep_last={n}"] = RedisStreamSaver(client, prefix=f"bench-k{n}", keep_last=n)
    return savers


def _log_size(client: redis.Redis, saver: RedisStreamSaver, thread_id: str) -> tuple[int, int]:
    log = saver._ops.keys(thread_id).log
    entries = client.xrange(log)
    return len(entries), sum(len(v) for _, f in entries for v in f.values())


def _run(url: str, steps: int, keeps: list[int], rounds: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    savers = _variants(client, keeps)
    times: dict[str, list[float]] = {name: [] for name in savers}
    sizes: dict[str, tuple[int, int]] = {}
    for r in range(rounds):
        thread_id = f"round-{r}"
        for saver in savers.values():
            start_thread(saver, thread_id)
        names = list(savers)
        for step in range(steps):
            # rotate who goes first, so no saver always follows the same one
            shift = step % len(names)
            for name in names[shift:] + names[:shift]:
                began = time.perf_counter_ns()
                agent_step(savers[name], thread_id, step)
                times[name].append((time.perf_counter_ns() - began) / 1e6)
        for name, saver in savers.items():
            sizes[name] = _log_size(client, saver, thread_id)
    server: dict[str, float] = {}
    for name, saver in savers.items():
        start_thread(saver, "server-time")
        client.config_resetstat()
        for step in range(steps):
            agent_step(saver, "server-time", step)
        stats = client.info("commandstats")
        verbs = ("evalsha", "eval", "fcall", "fcall_ro")
        usec = sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in verbs)
        server[name] = usec / steps
    client.close()
    return {"times": times, "sizes": sizes, "server": server}


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("retention", __doc__)
    parser.add_argument("--steps", type=int, default=400, help="agent steps per thread")
    parser.add_argument("--keep", default="5,20,100", help="keep_last values to measure")
    parser.add_argument("--rounds", type=int, default=2, help="threads per saver")
    args = parser.parse_args(argv)
    keeps = [int(k) for k in args.keep.split(",") if k.strip()]
    with EmbeddedRedis() as server:
        result = _run(server.url, args.steps, keeps, args.rounds)
    times, sizes, server = result["times"], result["sizes"], result["server"]
    base = statistics.fmean(times[BASELINE])
    print(f"agent step (get_tuple + put_writes + put), {args.steps} steps x {args.rounds} rounds")
    print(
        f"{'saver':<18} {'mean ms':>8} {'ratio':>6} {'p50':>6} {'p99':>6} {'max':>7} "
        f"{'log entries':>12} {'log bytes':>10} {'server us':>10} {'ratio':>6}"
    )
    for name, samples in times.items():
        ordered = sorted(samples)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        mean = statistics.fmean(samples)
        entries, size = sizes[name]
        print(
            f"{name:<18} {mean:8.3f} {mean / base:6.2f} {statistics.median(samples):6.3f} "
            f"{p99:6.3f} {ordered[-1]:7.3f} {entries:12d} {size:10d} {server[name]:10.1f} "
            f"{server[name] / server[BASELINE]:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
