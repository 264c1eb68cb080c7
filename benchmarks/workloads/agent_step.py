"""Workload 1: the agent step (get_tuple + put_writes + put) on a growing conversation."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns, process_time_ns

from ..config import Config
from ..conversation import MESSAGE_BYTES, aagent_step, agent_step, astart_thread, start_thread
from ..floors import AsyncRawFloor, RawFloor
from ..harness import Context, Failures, Turn, open_async, open_sync
from ..peers import AsyncTarget, SyncTarget
from ..results import Metric, Section, Series, Table
from ..stats import NS_PER_MS, median, percentile
from ..traces import Trace, agent_trace

__all__ = ["run"]

KEY = "agent_step"
METRICS = [
    Metric("p50", "p50", "ms"),
    Metric("p99", "p99", "ms"),
    Metric("cpu", "client CPU p50", "ms"),
]

# samples[peer][step] holds that step's (wall, client CPU) time in every round
Samples = dict[str, list[list[tuple[float, float]]]]


def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    section = Section(KEY, "Agent step", _description(cfg))
    trace = agent_trace(cfg.trace_steps)[: cfg.agent_steps]
    for mode in ("sync", "async"):
        failures = Failures()
        if mode == "sync":
            samples = _run_sync(ctx, trace, failures)
        else:
            samples = asyncio.run(_run_async(ctx, trace, failures))
        section.tables.append(_table(mode, samples, failures))
        section.series.append(_series(mode, samples, failures))
    return section


def _table(mode: str, samples: Samples, failures: Failures) -> Table:
    table = Table(f"{KEY}_{mode}", f"Agent step, {mode} (ms per step)", list(METRICS))
    for name, per_step in samples.items():
        flat = [t for step in per_step for t, _ in step]
        if failures.ok(name) and flat:
            table.set(name, "p50", median(flat))
            table.set(name, "p99", percentile(flat, 99))
            table.set(name, "cpu", median([c for step in per_step for _, c in step]))
    for name, reason in failures.reasons.items():
        table.set(name, "p50", reason)
    return table


def _series(mode: str, samples: Samples, failures: Failures) -> Series:
    lines = {
        name: (
            [float(i) for i in range(len(per_step))],
            [median([t for t, _ in s]) for s in per_step],
        )
        for name, per_step in samples.items()
        if failures.ok(name) and all(per_step)
    }
    return Series(
        f"{KEY}_{mode}_by_step",
        f"Agent step latency by conversation length, {mode} (median over rounds)",
        "step (messages in the conversation)",
        "ms per step",
        lines,
    )


def _elapsed(start: int, cpu: int) -> tuple[float, float]:
    return (perf_counter_ns() - start) / NS_PER_MS, (process_time_ns() - cpu) / NS_PER_MS


def _time_sync(turn: Turn[SyncTarget], trace: Trace) -> tuple[float, float]:
    target = turn.opened.target
    if isinstance(target, RawFloor):
        start, cpu = perf_counter_ns(), process_time_ns()
        target.run(turn.thread, trace[turn.index])
        return _elapsed(start, cpu)
    if turn.index == 0:
        start_thread(target, turn.thread)
    start, cpu = perf_counter_ns(), process_time_ns()
    agent_step(target, turn.thread, turn.index)
    return _elapsed(start, cpu)


def _run_sync(ctx: Context, trace: Trace, failures: Failures) -> Samples:
    cfg = ctx.cfg
    with open_sync(ctx.peers, cfg, failures) as opened:
        samples: Samples = {o.name: [[] for _ in trace] for o in opened}
        taken = ctx.taken("agent step, sync", opened, len(trace), cfg.warmup_steps, failures)
        for turn in taken:
            with failures.guard(turn.opened.name):
                elapsed = _time_sync(turn, trace)
                if turn.timed:
                    samples[turn.opened.name][turn.index].append(elapsed)
    return samples


async def _time_async(turn: Turn[AsyncTarget], trace: Trace) -> tuple[float, float]:
    target = turn.opened.target
    if isinstance(target, AsyncRawFloor):
        start, cpu = perf_counter_ns(), process_time_ns()
        await target.run(turn.thread, trace[turn.index])
        return _elapsed(start, cpu)
    if turn.index == 0:
        await astart_thread(target, turn.thread)
    start, cpu = perf_counter_ns(), process_time_ns()
    await aagent_step(target, turn.thread, turn.index)
    return _elapsed(start, cpu)


async def _run_async(ctx: Context, trace: Trace, failures: Failures) -> Samples:
    cfg = ctx.cfg
    async with open_async(ctx.peers, cfg, failures) as opened:
        samples: Samples = {o.name: [[] for _ in trace] for o in opened}
        taken = ctx.taken("agent step, async", opened, len(trace), cfg.warmup_steps, failures)
        for turn in taken:
            with failures.guard(turn.opened.name):
                elapsed = await _time_async(turn, trace)
                if turn.timed:
                    samples[turn.opened.name][turn.index].append(elapsed)
    return samples


def _description(cfg: Config) -> str:
    return (
        f"Per step: `get_tuple(latest)` + `put_writes` (one {MESSAGE_BYTES}-byte message to "
        f"`messages`) + `put` of a child checkpoint whose `messages` value is the whole list, "
        f"{cfg.agent_steps} steps on a fresh thread per round, {cfg.rounds} round(s) after a "
        f"{cfg.warmup_steps}-step warm-up. Messages alternate `HumanMessage`/`AIMessage` with "
        f"pseudo-random words, so step *n* reads and writes a list of *n* messages. Peers take "
        f"turns step by step, the first one rotating. Milliseconds per step; the by-step plots "
        f"show how the cost grows with the conversation. Client CPU is this process's CPU time "
        f"over the step (`time.process_time`): the saver's and its client library's work, "
        f"without the server's."
    )
