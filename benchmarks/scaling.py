"""Scale-out: checkpoints per second on a 1-primary and a 3-primary Redis Cluster.

    python -m benchmarks.scaling [--primaries 1,3] [--threads 64] [--processes 4] [--seconds 20]

For each cluster size it starts a local cluster (EmbeddedCluster), then --processes client
processes that together drive --threads concurrent async writers (AsyncRedisStreamSaver over an
asyncio RedisCluster client), each running agent steps (get_tuple + put_writes + put, a
200-byte message appended per step) on a thread of its own, moving to a fresh thread every
--thread-steps steps. It counts the checkpoints put in a --seconds window and, over the same
window, the CPU time of the Redis servers (their own ``INFO cpu``), of the client processes
(psutil) and of the whole machine, in cores: the growth from one primary to three is bounded by
whichever side runs out of cores first, and on a small machine both share the same ones.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from statistics import median

import psutil
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from streamsaver import AsyncRedisStreamSaver
from streamsaver.embedded import EmbeddedCluster

from . import script
from .conversation import aagent_step, astart_thread


async def _drive(url: str, first: int, writers: int, steps: int, go: Event, seconds: float) -> int:
    client = AsyncRedisCluster.from_url(url)
    saver = AsyncRedisStreamSaver(client, prefix="scale")
    done = 0

    async def writer(n: int, until: float) -> None:
        nonlocal done
        generation = 0
        while True:
            thread_id = f"w{n}-{generation}"
            await astart_thread(saver, thread_id)
            for step in range(steps):
                await aagent_step(saver, thread_id, step)
                if time.monotonic() >= until:
                    return
                done += 1
            generation += 1

    await saver.asetup()
    await astart_thread(saver, f"warm-{first}")  # connect to every node before the window
    while not go.is_set():
        await asyncio.sleep(0.01)
    until = time.monotonic() + seconds
    await asyncio.gather(*(writer(first + i, until) for i in range(writers)))
    await client.aclose()
    return done


def _client(url: str, first: int, writers: int, steps: int, go: Event, seconds: float,
            results: mp.Queue[int]) -> None:  # fmt: skip
    results.put(asyncio.run(_drive(url, first, writers, steps, go, seconds)))


def _server_cpu(ports: list[int]) -> float:
    total = 0.0
    for port in ports:
        with redis.Redis(host="127.0.0.1", port=port) as node:
            info = node.info("cpu")
            total += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return total


def _process_cpu(processes: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def _machine_busy() -> float:
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@dataclass
class Result:
    primaries: int
    checkpoints: int
    seconds: float
    server_cores: float
    client_cores: float
    machine_cores: float

    @property
    def rate(self) -> float:
        return self.checkpoints / self.seconds

    @property
    def other_cores(self) -> float:
        """CPU the machine spent on anything else (other processes sharing it)."""
        return max(0.0, self.machine_cores - self.server_cores - self.client_cores)

    def ms_per_checkpoint(self, cores: float) -> float:
        return cores * 1000 / self.rate if self.rate else float("nan")


def measure(primaries: int, args: argparse.Namespace) -> Result:
    ctx = mp.get_context("spawn")
    with EmbeddedCluster(primaries) as cluster:
        ports = [node.port for node in cluster.nodes]
        go, results = ctx.Event(), ctx.Queue()
        share = [args.threads // args.processes + (i < args.threads % args.processes)
                 for i in range(args.processes)]  # fmt: skip
        run = (args.thread_steps, go, args.seconds, results)
        procs = [
            ctx.Process(target=_client, args=(cluster.url, sum(share[:i]), n, *run))
            for i, n in enumerate(share)
        ]
        for p in procs:
            p.start()
        time.sleep(args.settle)  # the clients import, connect and warm up before the window
        watched = [psutil.Process(p.pid) for p in procs if p.pid is not None]
        server0, client0, machine0 = _server_cpu(ports), _process_cpu(watched), _machine_busy()
        began = time.monotonic()
        go.set()
        counts = [results.get(timeout=args.seconds + 120) for _ in procs]
        wall = time.monotonic() - began
        server1, machine1 = _server_cpu(ports), _machine_busy()
        client1 = _process_cpu(watched)
        for p in procs:
            p.join()
    return Result(
        primaries,
        sum(counts),
        args.seconds,
        (server1 - server0) / wall,
        (client1 - client0) / wall,
        (machine1 - machine0) / wall,
    )


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("scaling", __doc__)
    parser.add_argument("--primaries", default="1,3", help="cluster sizes to compare (1,3)")
    parser.add_argument("--threads", type=int, default=64, help="concurrent async writers (64)")
    parser.add_argument("--processes", type=int, default=4, help="client processes (4)")
    parser.add_argument("--seconds", type=float, default=20, help="measured window (20)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each size (3)")
    script.thread_steps(parser)
    parser.add_argument(
        "--settle", type=float, default=5, help="seconds for the clients to start (5)"
    )
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.primaries.split(",")]
    print(f"{args.threads} async writers in {args.processes} processes, {args.seconds:g} s each; "
          f"{psutil.cpu_count()} cores")  # fmt: skip
    print("round  primaries  checkpoints/s  server_cores  client_cores  other_cores  "
          "server_ms/cp  client_ms/cp")  # fmt: skip
    runs: dict[int, list[Result]] = {size: [] for size in sizes}
    # sizes alternate, round after round: the machine's other load drifts, and each size
    # should see the same drift
    for round_ in range(1, args.rounds + 1):
        for size in sizes:
            r = measure(size, args)
            runs[size].append(r)
            print(f"{round_:5}  {r.primaries:9}  {r.rate:13.0f}  {r.server_cores:12.2f}  "
                  f"{r.client_cores:12.2f}  {r.other_cores:11.2f}  "
                  f"{r.ms_per_checkpoint(r.server_cores):12.3f}  "
                  f"{r.ms_per_checkpoint(r.client_cores):12.3f}", flush=True)  # fmt: skip
    rate = {size: median(r.rate for r in rs) for size, rs in runs.items()}
    base = sizes[0]
    for size in sizes[1:]:
        print(f"{size} primaries / {base}: {rate[size] / rate[base]:.2f}x the checkpoints/s "
              f"(medians: {rate[size]:.0f} / {rate[base]:.0f})")  # fmt: skip
    # each primary is one core at most: the rate at which a primary would saturate, beside the
    # rate at which the clients would if they had every core of the machine
    server_ms = median(r.ms_per_checkpoint(r.server_cores) / r.primaries for r in runs[base])
    client_ms = median(r.ms_per_checkpoint(r.client_cores) for rs in runs.values() for r in rs)
    cores = psutil.cpu_count() or 1
    server_cap, client_cap = 1000 / server_ms, cores * 1000 / client_ms
    bound = "the clients" if client_cap < server_cap else "one primary"
    print(f"bounds: one primary saturates at ~{server_cap:.0f} checkpoints/s ({server_ms:.3f} ms "
          f"of server CPU each); clients with all {cores} cores at ~{client_cap:.0f} "
          f"checkpoints/s ({client_ms:.3f} ms of client CPU each): "
          f"{bound} bound the rate here")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
