"""Rebuild throughput: events re-projected per second by ``rebuild --all``.

    python -m benchmarks.rebuild [--events 100000] [--threads 1000] [--url URL]

Fills a fresh prefix with ``--events`` events (a checkpoint and its writes per step) spread
over ``--threads`` threads, then times, in the same run and on the same entries:

- the floor: every log read back with XRANGE, pipelined like the rebuild (the bytes a replay
  must at least touch, without projecting them);
- the thread indexes' rebuild (lua/checkpoint/replay_slice.lua, ``--batch`` threads per call of
  rebuild_many);
- ``rebuild --all`` as the command runs it: that, then the projector's keys
(lua/projector/seed.lua).

Both rebuilds run twice: with the saver's default slices (0.25 ms of server time each, then a
pause as long as the work: at most half the server, so other tenants wait at most a slice), and
as a recovery would run them with nobody else to spare (``--recovery-slice-ms``, no pause; the
CLI's ``--slice-ms`` and ``--slice-pause``). The floor is unpaced.

Each is run ``--repeat`` times; the best run counts (the machine is shared). Without --url it
starts a throwaway redis-server.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import redis

from streamsaver import RedisStreamSaver
from streamsaver.maintenance import rebuild_threads
from streamsaver.maintenance.threads import REBUILD_BATCH

from . import script


def fill(saver: RedisStreamSaver, events: int, threads: int) -> list[str]:
    steps = max(1, events // threads // 2)
    ids = [f"bench-{n}" for n in range(threads)]
    for thread_id in ids:
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        for step in range(steps):
            checkpoint: Any = {
                "v": 1, "id": f"{step:08d}", "ts": "", "channel_values": {"n": step},
                "channel_versions": {"n": step + 1}, "versions_seen": {}, "updated_channels": None,
            }  # fmt: skip
            meta = {"step": step, "source": "loop", "run_id": f"run-{step % 7}"}
            config = saver.put(config, checkpoint, meta, {"n": step + 1})
            saver.put_writes(config, [("n", step), ("log", f"step {step}")], "task")
    return ids


def read_floor(saver: RedisStreamSaver, ids: list[str], batch: int) -> int:
    """XRANGE every log, ``batch`` threads per round trip: the entries a replay reads."""
    read = 0
    client: Any = saver.client
    for start in range(0, len(ids), batch):
        pipe = client.pipeline(transaction=False)
        for thread_id in ids[start : start + batch]:
            pipe.xrange(saver._ops.keys(thread_id).log, "-", "+")
        read += sum(len(entries) for entries in pipe.execute())
    return read


def best(label: str, run: Callable[[], int], repeat: int) -> tuple[str, int, float]:
    times, events = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        events = run()
        times.append(time.perf_counter() - started)
    return label, events, min(times)


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("rebuild", __doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument(
        "--batch", type=int, default=REBUILD_BATCH, help="threads per rebuild_many call"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--recovery-slice-ms",
        type=float,
        default=50.0,
        help="slice_ms of the recovery rows (slice_pause 0)",
    )
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    args = parser.parse_args(argv)
    with script.server(args.url) as url, redis.Redis.from_url(url) as client:
        saver = RedisStreamSaver(client, prefix=f"bench{uuid4().hex[:8]}")
        started = time.perf_counter()
        ids = fill(saver, args.events, args.threads)
        print(
            f"filled {len(ids)} threads in {time.perf_counter() - started:.1f} s "
            f"(Redis {'.'.join(map(str, saver.server_version or ()))})",
            file=sys.stderr,
        )

        recovery = RedisStreamSaver(
            client, prefix=saver.prefix, slice_ms=args.recovery_slice_ms, slice_pause=0
        )

        def indexes(by: RedisStreamSaver) -> Callable[[], int]:
            return lambda: rebuild_threads(by, ids, batch=args.batch).applied

        def everything(by: RedisStreamSaver) -> Callable[[], int]:
            def run() -> int:
                applied = indexes(by)()
                by.seed_projections()
                return applied

            return run

        fast = f"slice_ms {args.recovery_slice_ms:g}, no pause"
        rows = [
            best(
                "floor: XRANGE every log", lambda: read_floor(saver, ids, args.batch), args.repeat
            ),
            best("rebuild thread indexes", indexes(saver), args.repeat),
            best("rebuild --all (+ projector keys)", everything(saver), args.repeat),
            best(f"rebuild indexes, {fast}", indexes(recovery), args.repeat),
            best(f"rebuild --all, {fast}", everything(recovery), args.repeat),
        ]
        floor = rows[0][1] / rows[0][2]
        print(f"| {'what':<44} | {'events':>7} | {'seconds':>7} | {'events/s':>9} | floor |")
        print(f"|{'-' * 46}|{'-' * 9}|{'-' * 9}|{'-' * 11}|-------|")
        for label, events, seconds in rows:
            rate = events / seconds
            print(
                f"| {label:<44} | {events:>7} | {seconds:>7.2f} | {rate:>9,.0f} | "
                f"{rate / floor:>5.2f} |"
            )
        keys = list(client.scan_iter(match=f"{saver.prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
