"""What the digest chain costs: the agent step with chaining on, against the same saver with it off.

    python -m benchmarks.chain_overhead [--steps N] [--rounds R] [--url URL]

Two ``RedisStreamSaver``s on one server and one client, ``chain=True`` and ``chain=False``, each
on its own fresh thread per round, run the agent step of ``benchmarks.conversation``
(``get_tuple`` + ``put_writes`` + ``put`` on a growing conversation). They take turns step by
step and the one that goes first alternates, so a noisy moment hits both alike. Each call is
timed on its own; the figures are medians over every step of every round, and the ratio is
chained / unchained (1.03 = 3% slower). Without --url (or $REDIS_URL) it starts a throwaway
redis-server.
"""

from __future__ import annotations

import gc
import sys
import uuid
from time import perf_counter_ns

import redis

from streamsaver import RedisStreamSaver

from . import script
from .conversation import make_message, next_checkpoint, start_thread, thread_config
from .stats import NS_PER_MS, median, percentile, settle

CALLS = ("get_tuple", "put_writes", "put", "step")
Times = dict[str, list[float]]


def _step(saver: RedisStreamSaver, thread_id: str, step: int, times: Times) -> None:
    t0 = perf_counter_ns()
    latest = saver.get_tuple(thread_config(thread_id))
    t1 = perf_counter_ns()
    assert latest is not None
    message = make_message(step)
    saver.put_writes(latest.config, [("messages", message)], str(uuid.uuid4()))
    t2 = perf_counter_ns()
    nxt = next_checkpoint(saver, latest.checkpoint, message, step)
    t3 = perf_counter_ns()
    saver.put(latest.config, nxt.checkpoint, nxt.metadata, nxt.new_versions)
    t4 = perf_counter_ns()
    for name, ns in zip(CALLS, (t1 - t0, t2 - t1, t4 - t3, t4 - t0), strict=True):
        times[name].append(ns / NS_PER_MS)


def measure(url: str, steps: int, rounds: int, warmup: int) -> dict[str, Times]:
    client = redis.Redis.from_url(url)
    savers = {
        "chained": RedisStreamSaver(client, prefix=f"chain-on-{uuid.uuid4().hex[:6]}"),
        "unchained": RedisStreamSaver(
            client, prefix=f"chain-off-{uuid.uuid4().hex[:6]}", chain=False
        ),
    }
    times: dict[str, Times] = {name: {call: [] for call in CALLS} for name in savers}
    try:
        for r in range(-1, rounds):  # round -1 warms both up, untimed
            threads = {name: f"r{r}-{uuid.uuid4().hex}" for name in savers}
            for name, saver in savers.items():
                start_thread(saver, threads[name])
            # what exists now is never garbage: freezing it keeps each collection short
            gc.freeze()
            for step in range(warmup if r < 0 else steps):
                settle()  # before both turns of the step, so neither pays the other's garbage
                order = list(savers) if (step + r) % 2 == 0 else list(reversed(savers))
                for name in order:
                    sink: Times = {call: [] for call in CALLS}
                    _step(savers[name], threads[name], step, sink if r < 0 else times[name])
        for saver in savers.values():
            for thread_id in saver.thread_ids():
                saver.delete_thread(thread_id)
    finally:
        client.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("chain_overhead", __doc__, url=True)
    parser.add_argument("--steps", type=int, default=300, help="steps per round (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first (default 30)")
    args = parser.parse_args(argv)
    with script.server(args.url) as url:
        times = measure(url, args.steps, args.rounds, args.warmup)
    on, off = times["chained"], times["unchained"]
    print(f"{args.steps} agent steps x {args.rounds} rounds, chained and unchained interleaved\n")
    print(
        "| call | chained p50 | unchained p50 | ratio of p50s | paired ratio p50 "
        "| chained p99 | unchained p99 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for call in CALLS:
        a, b = median(on[call]), median(off[call])
        # the same step of the same round, run back to back: the noise of the moment cancels
        paired = median([x / y for x, y in zip(on[call], off[call], strict=True)])
        print(
            f"| {call} | {a:.3f} ms | {b:.3f} ms | {a / b:.3f} | {paired:.3f} | "
            f"{percentile(on[call], 99):.3f} ms | {percentile(off[call], 99):.3f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
