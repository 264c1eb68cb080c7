"""DeltaChannel graph invoke: streamsaver's one-round-trip ``get_delta_channel_history`` beside
``InMemorySaver`` and beside streamsaver with LangGraph's default walk (one ``get_tuple`` per
ancestor back to the channel's snapshot), in the same run.

    python -m benchmarks.delta_history [--invokes N] [--rounds R] [--snapshot-frequency F]

The graph is a 3-node pipeline whose ``messages`` channel is a ``DeltaChannel`` (a list with an
extending reducer, LangGraph's default snapshot_frequency of 100): each invoke stores no list
value, and starting the next invoke rebuilds the channel from the writes of every checkpoint
since the last snapshot. Savers take turns invoke by invoke, each on its own thread, so drift
hits all alike. Milliseconds per invoke (sync ``invoke``, then async ``ainvoke``).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, TypedDict

import redis
import redis.asyncio as aredis
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, DeltaChannelHistory
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

from . import script
from .conversation import text

BASELINE = "InMemorySaver"


def _extend(state: list[str], writes: Sequence[Any]) -> list[str]:
    return [*state, *(x for w in writes for x in w)]


def build(checkpointer: BaseCheckpointSaver[Any], snapshot_frequency: int) -> Any:
    # functional form: the channel's frequency is a runtime value, which a class body's
    # annotations (strings under `from __future__ import annotations`) cannot see
    channel = DeltaChannel(_extend, snapshot_frequency=snapshot_frequency)
    state = TypedDict("state", {"messages": Annotated[list[str], channel]})  # type: ignore[misc]  # noqa: UP013

    def node(name: str) -> Any:
        return lambda s: {"messages": [text((name, len(s["messages"])))]}

    g = StateGraph(state)
    for name in ("plan", "act", "answer"):
        g.add_node(name, node(name))
    g.add_edge(START, "plan")
    g.add_edge("plan", "act")
    g.add_edge("act", "answer")
    g.add_edge("answer", END)
    return g.compile(checkpointer=checkpointer)


class DefaultWalk(RedisStreamSaver):
    """streamsaver as it was before: LangGraph's walk, one get_tuple per ancestor."""

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        return dict(
            BaseCheckpointSaver.get_delta_channel_history(self, config=config, channels=channels)
        )


class AsyncDefaultWalk(AsyncRedisStreamSaver):
    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        history = await BaseCheckpointSaver.aget_delta_channel_history(
            self, config=config, channels=channels
        )
        return dict(history)


def _config(name: str, r: int) -> RunnableConfig:
    return {"configurable": {"thread_id": f"{name}-{r}"}}


def _input(i: int) -> dict[str, Any]:
    return {"messages": [text(("question", i))]}


def _savers(client: Any, sync: bool) -> dict[str, BaseCheckpointSaver[Any]]:
    ours, walk = (
        (RedisStreamSaver, DefaultWalk) if sync else (AsyncRedisStreamSaver, AsyncDefaultWalk)
    )
    a = "" if sync else "a"
    return {
        BASELINE: InMemorySaver(),
        "streamsaver": ours(client, prefix=f"bench-{a}delta"),
        "streamsaver, default walk": walk(client, prefix=f"bench-{a}walk"),
    }


def _turns(
    savers: dict[str, BaseCheckpointSaver[Any]], freq: int, invokes: int, rounds: int
) -> Iterator[tuple[str, Any, dict[str, Any], RunnableConfig]]:
    """Each saver's graph with its input and thread, in turn; the saver that goes first rotates
    from one invoke to the next, so a noisy moment hits them all alike."""
    graphs = {name: build(saver, freq) for name, saver in savers.items()}
    names = list(graphs)
    for r in range(rounds):
        for i in range(invokes):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                yield name, graphs[name], _input(i), _config(name, r)


def _sync(url: str, invokes: int, rounds: int, freq: int) -> dict[str, list[float]]:
    client = redis.Redis.from_url(url)
    times: dict[str, list[float]] = defaultdict(list)
    for name, graph, given, config in _turns(_savers(client, True), freq, invokes, rounds):
        began = time.perf_counter_ns()
        graph.invoke(given, config)
        times[name].append((time.perf_counter_ns() - began) / 1e6)
    client.close()
    return times


async def _async(url: str, invokes: int, rounds: int, freq: int) -> dict[str, list[float]]:
    client = aredis.Redis.from_url(url)
    times: dict[str, list[float]] = defaultdict(list)
    for name, graph, given, config in _turns(_savers(client, False), freq, invokes, rounds):
        began = time.perf_counter_ns()
        await graph.ainvoke(given, config)
        times[name].append((time.perf_counter_ns() - began) / 1e6)
    await client.aclose()
    return times


def _report(title: str, times: dict[str, list[float]]) -> None:
    base = statistics.median(times[BASELINE])
    print(title)
    print(f"{'saver':<28} {'p50 ms':>8} {'mean ms':>8} {'p99 ms':>8} {'p50 / InMemorySaver':>20}")
    for name, samples in times.items():
        ordered = sorted(samples)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        p50 = statistics.median(samples)
        print(
            f"{name:<28} {p50:8.3f} {statistics.fmean(samples):8.3f} {p99:8.3f} {p50 / base:20.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("delta_history", __doc__)
    parser.add_argument("--invokes", type=int, default=100, help="invokes per thread")
    parser.add_argument("--rounds", type=int, default=2, help="threads per saver")
    parser.add_argument("--snapshot-frequency", type=int, default=100)
    args = parser.parse_args(argv)
    with EmbeddedRedis() as server:
        sync_times = _sync(server.url, args.invokes, args.rounds, args.snapshot_frequency)
        async_times = asyncio.run(
            _async(server.url, args.invokes, args.rounds, args.snapshot_frequency)
        )
    what = (
        f"{args.invokes} invokes x {args.rounds} rounds, "
        f"snapshot_frequency {args.snapshot_frequency}"
    )
    _report(f"DeltaChannel pipeline, sync invoke ({what})", sync_times)
    _report(f"DeltaChannel pipeline, async ainvoke ({what})", async_times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
