"""Tail latency: from a write in one process to a tailer in another holding the event.

    python -m benchmarks.tail_latency [--events N] [--rounds R] [--interval-ms MS]

Three paths on one server, in rounds whose order rotates (a noisy moment on a shared machine then
hits every path alike):

- raw floor: a bare ``XADD``; a bare ``XREAD BLOCK`` (redis-py) in another process has it;
- ``saver.tail``: a ``put``; ``saver.tail(thread_id)`` in another process has the event;
- ``saver.tail_all``: a ``put``; ``saver.tail_all()`` in another process has the event.

Every path measures the same intervals with the same clock, ``time.monotonic_ns()`` (one clock
for every process of a machine); the tailer stamps right after it holds the event (decoded, for
streamsaver). The writer stamps twice, with the same instrument on every path:

- *from sent*: when its connection starts handing the command to the socket (after ``put`` has
  encoded the checkpoint). This is the figure the ratios use.
- *from return*: when the call has returned. Redis sends the blocked reader's reply before the
  writer's (it queues pending replies at the head of a list), so the floor is about zero or
  below; compare these figures by difference, not by ratio.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from typing import Any

import redis

from streamsaver import RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

from . import script
from .peers import RAW
from .report import render_table
from .results import Metric, Table
from .stats import NS_PER_MS, percentile

__all__ = ["PATHS", "TAIL", "TAIL_ALL", "Settings", "latency_table", "measure"]

TAIL = "streamsaver tail (put -> tail)"
TAIL_ALL = "streamsaver tail_all (put -> tail_all)"
PATHS = (RAW, TAIL, TAIL_ALL)
PREFIX = "lat"
RAW_KEY = "raw"
PAYLOAD = "x" * 200  # about what one agent step appends (a short message)
METRICS = [
    Metric("p50", "p50 from sent", "ms"),
    Metric("p99", "p99 from sent", "ms"),
    Metric("ret50", "p50 from return", "ms", ratios=False),
    Metric("ret99", "p99 from return", "ms", ratios=False),
]


class _Stamped(redis.Connection):
    """A connection that notes when it last began handing a command to the socket (before the
    call: the writer may lose its CPU right after a send, while the server and the tailer go on)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _Stamped.sent = time.monotonic_ns()
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Settings:
    events: int = 1000  # timed events per path and round
    rounds: int = 3
    interval_ms: float = 2.0  # pause between writes: each event finds the tailer waiting
    warmup: int = 20  # events per path and round before the timed ones, not counted


def _tailer(path: str, url: str, thread: str, count: int, ready: Event, out: Any) -> None:
    """In its own process: receive ``count`` events and send back when each one arrived."""
    received: dict[int, int] = {}
    client = redis.Redis.from_url(url)
    if path == RAW:
        last = "$"
        ready.set()
        while len(received) < count:
            reply: Any = client.xread({RAW_KEY: last}, block=5000, count=100)
            for _, entries in reply or []:
                now = time.monotonic_ns()
                for entry_id, fields in entries:
                    received[int(fields[b"i"])] = now
                    last = entry_id
    else:
        saver = RedisStreamSaver(client, prefix=PREFIX)
        with saver.tail(thread) if path == TAIL else saver.tail_all() as tail:
            ready.set()
            for event in tail:
                now = time.monotonic_ns()
                if event.thread_id == thread and event.kind == "checkpoint":
                    received[int(event.checkpoint_id or "-1")] = now
                    if len(received) >= count:
                        break
    client.close()
    out.put(received)


def _raw_writer(client: redis.Redis) -> Callable[[int], None]:
    def write(i: int) -> None:
        client.xadd(RAW_KEY, {"i": str(i), "p": PAYLOAD})

    return write


def _put_writer(saver: RedisStreamSaver, thread: str) -> Callable[[int], None]:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}

    def write(i: int) -> None:
        nonlocal config
        versions: Any = {"m": saver.get_next_version(None, None)}
        checkpoint: Any = {
            "v": 1, "id": f"{i:012d}", "ts": "", "channel_values": {"m": PAYLOAD},
            "channel_versions": versions, "versions_seen": {}, "updated_channels": None,
        }  # fmt: skip
        config = saver.put(config, checkpoint, {"source": "loop", "step": i}, versions)

    return write


Samples = dict[str, tuple[list[float], list[float]]]


def _round(url: str, path: str, thread: str, settings: Settings) -> tuple[list[float], list[float]]:
    """One path's go: a tailer process, then the writes. The latencies (ms) of the timed events,
    from sent and from return."""
    client = redis.Redis.from_url(url, connection_class=_Stamped)
    if path == RAW:
        write = _raw_writer(client)
    else:
        write = _put_writer(RedisStreamSaver(client, prefix=PREFIX), thread)
    # the thread exists before the tailer starts, so tail_all finds its feed at once
    write(-1)
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    total = settings.warmup + settings.events
    proc = ctx.Process(target=_tailer, args=(path, url, thread, total, ready, out))
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError(f"the {path} tailer did not start")
        time.sleep(0.2)  # its blocking read is at the server before the first write
        sent: dict[int, int] = {}
        returned: dict[int, int] = {}
        for i in range(total):
            write(i)
            returned[i] = time.monotonic_ns()
            sent[i] = _Stamped.sent
            time.sleep(settings.interval_ms / 1000)
        received: dict[int, int] = out.get(timeout=60)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        client.close()
    timed = range(settings.warmup, total)
    return (
        [(received[i] - sent[i]) / NS_PER_MS for i in timed],
        [(received[i] - returned[i]) / NS_PER_MS for i in timed],
    )


Progress = Callable[[], None]


def measure(url: str, settings: Settings, progress: Progress | None = None) -> Samples:
    """Every path's latencies (ms) over every round, from sent and from return."""
    samples: Samples = {path: ([], []) for path in PATHS}
    for r in range(settings.rounds):
        for k in range(len(PATHS)):
            path = PATHS[(r + k) % len(PATHS)]
            from_sent, from_return = _round(url, path, f"tail-latency-{r}-{k}", settings)
            samples[path][0].extend(from_sent)
            samples[path][1].extend(from_return)
            if progress is not None:
                progress()
    return samples


def latency_table(samples: Samples, title: str) -> Table:
    table = Table("tail", title, list(METRICS), references=(RAW,))
    for path, (from_sent, from_return) in samples.items():
        if from_sent:
            table.set(path, "p50", percentile(from_sent, 50))
            table.set(path, "p99", percentile(from_sent, 99))
            table.set(path, "ret50", percentile(from_return, 50))
            table.set(path, "ret99", percentile(from_return, 99))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("tail_latency", __doc__)
    defaults = Settings()
    parser.add_argument(
        "--events", type=int, default=defaults.events, help="timed events per path and round"
    )
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="rounds (paths rotate)")
    parser.add_argument(
        "--interval-ms", type=float, default=defaults.interval_ms, help="pause between writes"
    )
    args = parser.parse_args(argv)
    settings = Settings(events=args.events, rounds=args.rounds, interval_ms=args.interval_ms)
    with EmbeddedRedis() as server:
        samples = measure(server.url, settings)
    title = (
        f"{settings.events} events per path and round, {settings.rounds} round(s), "
        f"{settings.interval_ms:g} ms apart"
    )
    print("\n".join(render_table(latency_table(samples, title), PATHS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
