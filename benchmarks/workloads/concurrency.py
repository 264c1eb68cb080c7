"""Workload 4: many threads at once, driven concurrently from one asyncio loop."""

from __future__ import annotations

import asyncio
import uuid
from time import perf_counter_ns, process_time_ns

from ..config import Config
from ..conversation import aagent_step, astart_thread
from ..floors import AsyncRawFloor
from ..harness import Context, Failures, open_async, rotated
from ..peers import AsyncTarget
from ..results import Metric, Section, Table
from ..stats import NS_PER_MS, median, percentile, settle
from ..traces import Trace, agent_trace

__all__ = ["run"]

KEY = "concurrency"
METRICS = [
    Metric("cps", "checkpoints/s", "ckpt/s", higher_is_better=True),
    Metric("p50", "step p50 under load", "ms"),
    Metric("p99", "step p99 under load", "ms"),
    Metric("cpu", "client CPU per checkpoint", "ms"),
]


async def _thread(target: AsyncTarget, thread: str, trace: Trace, times: list[float]) -> None:
    for step in range(len(trace)):
        start = perf_counter_ns()
        if isinstance(target, AsyncRawFloor):
            await target.run(thread, trace[step])
        else:
            await aagent_step(target, thread, step)
        times.append((perf_counter_ns() - start) / NS_PER_MS)


async def _burst(
    target: AsyncTarget, threads: int, trace: Trace
) -> tuple[float, float, list[float]]:
    """Checkpoints per second and client CPU (ms) per checkpoint with ``threads`` threads each
    running ``trace`` at once."""
    names = [f"c-{i}-{uuid.uuid4().hex}" for i in range(threads)]
    if not isinstance(target, AsyncRawFloor):
        await asyncio.gather(*(astart_thread(target, n) for n in names))
    settle()
    times: list[float] = []
    start, cpu = perf_counter_ns(), process_time_ns()
    await asyncio.gather(*(_thread(target, n, trace, times) for n in names))
    seconds = (perf_counter_ns() - start) / 1e9
    checkpoints = threads * len(trace)
    return checkpoints / seconds, (process_time_ns() - cpu) / NS_PER_MS / checkpoints, times


# per peer: checkpoints/s and client CPU per checkpoint of each round, every step's latency
Results = dict[str, tuple[list[float], list[float], list[float]]]


async def _run(ctx: Context, failures: Failures) -> Results:
    cfg = ctx.cfg
    trace = agent_trace(cfg.trace_steps)[: cfg.concurrency_steps]
    results: Results = {}
    async with open_async(ctx.peers, cfg, failures, cfg.concurrency_threads) as opened:
        with ctx.bar("concurrency", cfg.rounds * len(opened)) as bar:
            for r in range(-1, cfg.rounds):
                for o in rotated(opened, r):
                    if not failures.ok(o.name):
                        continue
                    with failures.guard(o.name):
                        # round -1 warms up: it opens the pool's connections
                        steps = trace[:1] if r < 0 else trace
                        cps, cpu, times = await _burst(o.target, cfg.concurrency_threads, steps)
                        if r >= 0:
                            rates, cpus, latencies = results.setdefault(o.name, ([], [], []))
                            rates.append(cps)
                            cpus.append(cpu)
                            latencies.extend(times)
                    if r >= 0:
                        bar.update()
    return results


def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    section = Section(KEY, "Concurrency", _description(cfg))
    failures = Failures()
    results = asyncio.run(_run(ctx, failures))
    table = Table(KEY, f"{cfg.concurrency_threads} concurrent threads", list(METRICS))
    for name, (rates, cpus, latencies) in results.items():
        if failures.ok(name) and rates:
            table.set(name, "cps", median(rates))
            table.set(name, "cpu", median(cpus))
            table.set(name, "p50", median(latencies))
            table.set(name, "p99", percentile(latencies, 99))
    for name, reason in failures.reasons.items():
        table.set(name, "cps", reason)
    for peer in ctx.peers:
        if peer.open_async is None:
            section.skipped[peer.name] = "n/a: no async saver"
    section.tables.append(table)
    return section


def _description(cfg: Config) -> str:
    return (
        f"{cfg.concurrency_threads} LangGraph threads driven at once from one asyncio loop with "
        f"each peer's async saver: every thread runs {cfg.concurrency_steps} agent steps "
        f"(`aget_tuple` + `aput_writes` + `aput`), all started together with `asyncio.gather`. "
        f"Checkpoints per second is the median over {cfg.rounds} round(s) of "
        f"threads * steps / wall time; the latencies are per step under that load. Client CPU "
        f"per checkpoint is this process's CPU time over the burst (`time.process_time`, the "
        f"servers not counted) divided by the checkpoints put, median over rounds."
    )
