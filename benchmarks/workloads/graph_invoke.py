"""Workload 2: real LangGraph graphs invoked again and again on one thread."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns
from typing import Any

from langchain_core.runnables import RunnableConfig

from ..config import Config
from ..conversation import thread_config
from ..floors import AsyncRawFloor, RawFloor
from ..graphs import GRAPHS, Graph, GraphSpec, graph_input
from ..harness import Context, Failures, Opened, Turn, open_async, open_sync
from ..peers import AsyncTarget, SyncTarget
from ..results import Metric, Section, Table
from ..stats import NS_PER_MS, median, percentile
from ..traces import Trace, graph_trace

__all__ = ["run"]

KEY = "graph"
WARMUP_INVOKES = 3
METRICS = [Metric("p50", "p50", "ms"), Metric("p99", "p99", "ms")]

Samples = dict[str, list[float]]


def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    section = Section(KEY, "Graph invoke", _description(cfg))
    for spec in GRAPHS:
        trace = graph_trace(spec, max(cfg.graph_invokes, WARMUP_INVOKES))
        calls = median([float(len(ops)) for ops in trace])
        for mode in ("sync", "async"):
            failures = Failures()
            if mode == "sync":
                samples = _run_sync(ctx, spec, trace, failures)
            else:
                samples = asyncio.run(_run_async(ctx, spec, trace, failures))
            table = Table(
                f"{KEY}_{spec.key}_{mode}", f"{spec.name}, {mode} (ms per invoke)", list(METRICS)
            )
            for name, values in samples.items():
                if failures.ok(name) and values:
                    table.set(name, "p50", median(values))
                    table.set(name, "p99", percentile(values, 99))
            for name, reason in failures.reasons.items():
                table.set(name, "p50", reason)
            table.note = (
                f"Saver calls per invoke (median, as recorded on InMemorySaver): {calls:g}."
            )
            section.tables.append(table)
    return section


def _graphs(opened: list[Opened[Any]], spec: GraphSpec, failures: Failures) -> dict[str, Graph]:
    graphs: dict[str, Graph] = {}
    for o in opened:
        if not isinstance(o.target, RawFloor | AsyncRawFloor):
            with failures.guard(o.name):
                graphs[o.name] = spec.build(o.target)
    return graphs


def _ms_since(start: int) -> float:
    return (perf_counter_ns() - start) / NS_PER_MS


def _invocation(turn: Turn[Any], graphs: dict[str, Graph]) -> tuple[Graph, Any, RunnableConfig]:
    """The turn's peer's graph, the turn's input and the turn's thread."""
    return graphs[turn.opened.name], graph_input(turn.index), thread_config(turn.thread)


def _time_sync(turn: Turn[SyncTarget], graphs: dict[str, Graph], trace: Trace) -> float:
    target = turn.opened.target
    if isinstance(target, RawFloor):
        start = perf_counter_ns()
        target.run(turn.thread, trace[turn.index])
        return _ms_since(start)
    graph, state, config = _invocation(turn, graphs)
    start = perf_counter_ns()
    graph.invoke(state, config)
    return _ms_since(start)


def _run_sync(ctx: Context, spec: GraphSpec, trace: Trace, failures: Failures) -> Samples:
    cfg = ctx.cfg
    with open_sync(ctx.peers, cfg, failures) as opened:
        graphs = _graphs(opened, spec, failures)
        samples: Samples = {o.name: [] for o in opened}
        taken = ctx.taken(f"{spec.key}, sync", opened, cfg.graph_invokes, WARMUP_INVOKES, failures)
        for turn in taken:
            with failures.guard(turn.opened.name):
                elapsed = _time_sync(turn, graphs, trace)
                if turn.timed:
                    samples[turn.opened.name].append(elapsed)
    return samples


async def _time_async(turn: Turn[AsyncTarget], graphs: dict[str, Graph], trace: Trace) -> float:
    target = turn.opened.target
    if isinstance(target, AsyncRawFloor):
        start = perf_counter_ns()
        await target.run(turn.thread, trace[turn.index])
        return _ms_since(start)
    graph, state, config = _invocation(turn, graphs)
    start = perf_counter_ns()
    await graph.ainvoke(state, config)
    return _ms_since(start)


async def _run_async(ctx: Context, spec: GraphSpec, trace: Trace, failures: Failures) -> Samples:
    cfg = ctx.cfg
    async with open_async(ctx.peers, cfg, failures) as opened:
        graphs = _graphs(opened, spec, failures)
        samples: Samples = {o.name: [] for o in opened}
        taken = ctx.taken(f"{spec.key}, async", opened, cfg.graph_invokes, WARMUP_INVOKES, failures)
        for turn in taken:
            with failures.guard(turn.opened.name):
                elapsed = await _time_async(turn, graphs, trace)
                if turn.timed:
                    samples[turn.opened.name].append(elapsed)
    return samples


def _description(cfg: Config) -> str:
    return (
        f"`graph.invoke` (sync) and `graph.ainvoke` (async) of real LangGraph graphs, "
        f"{cfg.graph_invokes} invokes on one thread per round (the state grows by four "
        f"messages each), {cfg.rounds} round(s) after {WARMUP_INVOKES} warm-up invokes, the "
        f"peers taking turns invoke by invoke. Milliseconds per invoke. The pipeline is a "
        f"3-node `StateGraph` whose `messages` channel has the `add_messages` reducer; the "
        f"ReAct agent is `create_react_agent` with an offline fake chat model that calls one "
        f"tool and then answers. The raw floor replays the saver calls the same invokes made "
        f"on `InMemorySaver`."
    )
