"""DeltaChannel history (``get_delta_channel_history``): upstream's conformance capability on
both savers, standalone and on the cluster; the same answer as BaseCheckpointSaver's walk of
one get_tuple per ancestor; a real DeltaChannel graph against InMemorySaver."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Annotated, Any
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis
import redis.asyncio.cluster as acluster
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, DeltaChannelHistory
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Send
from redis.cluster import RedisCluster
from typing_extensions import TypedDict

from streamsaver import AsyncRedisStreamSaver, InvalidInputError, RedisStreamSaver
from streamsaver.embedded import EmbeddedCluster
from tests.conformance_delta._delta_fixtures import build_delta_chain
from tests.conformance_delta.spec_delta_channel_history import (
    ALL_DELTA_CHANNEL_HISTORY_TESTS,
    run_delta_channel_history_tests,
)
from tests.graphs import appending, map_reduce, pipeline
from tests.test_conformance import SyncDriven

# --------------------------------------------------------------------------- #
# upstream conformance: the delta_channel_history capability
# --------------------------------------------------------------------------- #


class SyncDrivenDelta(SyncDriven):
    """The conformance suite's async name on the sync saver's own method."""

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        assert isinstance(self.inner, RedisStreamSaver)
        return self.inner.get_delta_channel_history(config=config, channels=channels)


async def _passes_capability(saver: BaseCheckpointSaver[Any]) -> None:
    # upstream detects the capability by the async method being overridden
    assert (
        type(saver).aget_delta_channel_history is not BaseCheckpointSaver.aget_delta_channel_history
    )
    passed, failed, failures = await run_delta_channel_history_tests(saver)
    assert failures == []
    assert (passed, failed) == (len(ALL_DELTA_CHANNEL_HISTORY_TESTS), 0)


async def test_conformance_async_saver(redis_url: str, prefix: str) -> None:
    client = aredis.Redis.from_url(redis_url)
    await _passes_capability(AsyncRedisStreamSaver(client, prefix=prefix))
    await client.aclose()


async def test_conformance_sync_saver(sync_saver: RedisStreamSaver) -> None:
    await _passes_capability(SyncDrivenDelta(sync_saver))


async def test_conformance_async_saver_on_the_cluster(cluster: EmbeddedCluster) -> None:
    client = acluster.RedisCluster.from_url(cluster.url)
    await _passes_capability(AsyncRedisStreamSaver(client, prefix=f"d{uuid4().hex[:8]}"))
    await client.aclose()


async def test_conformance_sync_saver_on_the_cluster(cluster: EmbeddedCluster) -> None:
    client = RedisCluster.from_url(cluster.url)
    saver = RedisStreamSaver(client, prefix=f"d{uuid4().hex[:8]}")
    await _passes_capability(SyncDrivenDelta(saver))
    client.close()


# --------------------------------------------------------------------------- #
# the same answer as the default walk
# --------------------------------------------------------------------------- #


def _default_walk(
    saver: BaseCheckpointSaver[Any], config: RunnableConfig, channels: Sequence[str]
) -> Any:
    return BaseCheckpointSaver.get_delta_channel_history(saver, config=config, channels=channels)


def _encoded(saver: BaseCheckpointSaver[Any], history: Any) -> tuple[str, bytes]:
    # through the serde: equal objects of different types (a tuple and a list) differ here
    return saver.serde.dumps_typed(dict(history))


def _assert_same_as_default_walk(
    saver: RedisStreamSaver, thread_id: str, channels: Sequence[str], checkpoint_ns: str = ""
) -> int:
    """Compare at every stored checkpoint of the namespace, and at its latest by omission."""
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    }
    targets = [t.config for t in saver.list(config)] + [config]
    for target in targets:
        ours = saver.get_delta_channel_history(config=target, channels=channels)
        ref = _default_walk(saver, target, channels)
        assert ours == ref, target
        assert _encoded(saver, ours) == _encoded(saver, ref), target
    return len(targets)


def _run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


def test_same_as_default_walk_on_conformance_chains(sync_saver: RedisStreamSaver) -> None:
    driven = SyncDrivenDelta(sync_saver)
    for snapshots in ([0], [0, 3], [], [2, 5]):
        tid = str(uuid4())
        _run(
            build_delta_chain(
                driven, thread_id=tid, channel="ch", snapshots_at_steps=snapshots, total_steps=7
            )
        )
        assert _assert_same_as_default_walk(sync_saver, tid, ["ch", "other", "ch"]) == 8


def test_one_round_trip_whatever_the_walk(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    tid = str(uuid4())
    _run(build_delta_chain(SyncDrivenDelta(sync_saver), thread_id=tid, total_steps=30))
    config: RunnableConfig = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    history = sync_saver.get_delta_channel_history(config=config, channels=["messages"])
    assert [w[2] for w in history["messages"]["writes"]] == list(range(1, 29))

    def scripts() -> int:
        stats = redis_client.info("commandstats")
        verbs = ("evalsha", "eval", "fcall", "fcall_ro")
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in verbs)

    before = scripts()
    sync_saver.get_delta_channel_history(config=config, channels=["messages"])
    assert scripts() - before == 1
    # the default walk: one get_tuple script per checkpoint on the way (the first call also
    # loads the script, a failed EVALSHA more)
    _default_walk(sync_saver, config, ["messages"])
    before = scripts()
    _default_walk(sync_saver, config, ["messages"])
    assert scripts() - before == 30


def test_unknown_checkpoint_gives_empty_histories(sync_saver: RedisStreamSaver) -> None:
    config: RunnableConfig = {
        "configurable": {"thread_id": "nobody", "checkpoint_ns": "", "checkpoint_id": "x"}
    }
    expected = {"a": {"writes": []}, "b": {"writes": []}}
    assert sync_saver.get_delta_channel_history(config=config, channels=["a", "b"]) == expected
    assert _default_walk(sync_saver, config, ["a", "b"]) == expected


def test_bad_channels_raise_before_anything_is_sent(sync_saver: RedisStreamSaver) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with pytest.raises(InvalidInputError, match="list of channel names"):
        sync_saver.get_delta_channel_history(config=config, channels="messages")
    with pytest.raises(InvalidInputError, match=r"channels\[1\]"):
        sync_saver.get_delta_channel_history(config=config, channels=["a", 1])  # type: ignore[list-item]


# --------------------------------------------------------------------------- #
# a real DeltaChannel graph
# --------------------------------------------------------------------------- #


def _extend(state: list[str], writes: Sequence[Any]) -> list[str]:
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class State(TypedDict):
    # snapshot_frequency 3: a few snapshots in a short run, and steps between them
    log: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]
    total: Annotated[int, operator.add]


class Task(TypedDict):
    item: str


def build_delta_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    def plan(state: State) -> dict[str, Any]:
        return {"log": [f"plan{state['total']}"], "total": 1}

    def fan(state: State) -> list[Send]:
        # parallel tasks write the channel in one step: their order must be writes_sort_key's
        return [Send("work", {"item": f"w{state['total']}-{i}"}) for i in range(3)]

    def work(task: Task) -> dict[str, Any]:
        return {"log": [task["item"]], "total": 1}

    def done(state: State) -> dict[str, Any]:
        return {"log": f"done@{len(state['log'])}"}

    return map_reduce(State, fan, plan=plan, work=work, done=done).compile(
        checkpointer=checkpointer
    )


def _history_values(history: Any) -> Any:
    # task ids derive from checkpoint ids, which differ between savers: compare the rest
    return {
        ch: ([(w[1], w[2]) for w in h["writes"]], h.get("seed", "<none>"))
        for ch, h in history.items()
    }


def _drive_sync(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[Any]:
    graph = build_delta_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    out = [graph.invoke({"log": [f"in{i}"], "total": 0}, config) for i in range(4)]
    out.append(graph.get_state(config).values)
    out += [(s.values, s.next, s.metadata) for s in graph.get_state_history(config)]
    for snapshot in graph.get_state_history(config):
        history = saver.get_delta_channel_history(config=snapshot.config, channels=["log", "total"])
        out.append(_history_values(history))
    return out


async def _drive_async(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[Any]:
    graph = build_delta_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    out = [await graph.ainvoke({"log": [f"in{i}"], "total": 0}, config) for i in range(4)]
    out.append((await graph.aget_state(config)).values)
    out += [(s.values, s.next, s.metadata) async for s in graph.aget_state_history(config)]
    async for snapshot in graph.aget_state_history(config):
        history = await saver.aget_delta_channel_history(
            config=snapshot.config, channels=["log", "total"]
        )
        out.append(_history_values(history))
    return out


def test_delta_graph_matches_in_memory_sync(sync_saver: RedisStreamSaver) -> None:
    ours = _drive_sync(sync_saver, "delta-graph")
    assert ours == _drive_sync(InMemorySaver(), "delta-graph")
    # the graph did rebuild the channel from history: a later invoke sees every earlier item
    assert ours[3]["log"][:2] == ["in0", "plan0"]
    assert _assert_same_as_default_walk(sync_saver, "delta-graph", ["log", "total"]) > 10


async def test_delta_graph_matches_in_memory_async(async_saver: AsyncRedisStreamSaver) -> None:
    ours = await _drive_async(async_saver, "delta-graph")
    assert ours == await _drive_async(InMemorySaver(), "delta-graph")
    assert ours[3]["log"][:2] == ["in0", "plan0"]


def test_sync_saver_async_method_matches_in_memory(sync_saver: RedisStreamSaver) -> None:
    ours = _run(_drive_async(sync_saver, "delta-graph-a"))
    assert ours == _run(_drive_async(InMemorySaver(), "delta-graph-a"))


@pytest.fixture
def cluster_saver(cluster: EmbeddedCluster) -> Iterator[RedisStreamSaver]:
    client = RedisCluster.from_url(cluster.url)
    yield RedisStreamSaver(client, prefix=f"d{uuid4().hex[:8]}")
    client.close()


def test_delta_graph_matches_in_memory_on_the_cluster(cluster_saver: RedisStreamSaver) -> None:
    for thread_id in ("t-a", "t-b", "t-c"):  # threads in different slots
        assert _drive_sync(cluster_saver, thread_id) == _drive_sync(InMemorySaver(), thread_id)
        assert _assert_same_as_default_walk(cluster_saver, thread_id, ["log"]) > 10


class Inner(TypedDict):
    notes: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=2)]


def build_nested(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    inner = pipeline(Inner, **appending("notes", "x", "y"))
    sub = inner.compile(checkpointer=True)  # keeps its own history, in its own namespace

    outer = StateGraph(Inner)
    outer.add_node("sub", sub)
    outer.add_edge(START, "sub")
    return outer.compile(checkpointer=checkpointer)


def test_subgraph_namespaces_match_in_memory_and_the_default_walk(
    sync_saver: RedisStreamSaver,
) -> None:
    def drive(saver: BaseCheckpointSaver[Any]) -> list[Any]:
        graph = build_nested(saver)
        config: RunnableConfig = {"configurable": {"thread_id": "nested"}}
        return [graph.invoke({"notes": [f"in{i}"]}, config) for i in range(4)]

    assert drive(sync_saver) == drive(InMemorySaver())
    every_ns: RunnableConfig = {"configurable": {"thread_id": "nested"}}
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in sync_saver.list(every_ns)}
    assert len(namespaces) > 1
    for ns in namespaces:
        assert _assert_same_as_default_walk(sync_saver, "nested", ["notes"], ns) > 2
