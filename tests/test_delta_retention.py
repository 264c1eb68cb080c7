"""Retention never drops what a DeltaChannel still needs: prune(keep_latest), keep_last
compaction and delete_for_runs, with a real DeltaChannel graph against InMemorySaver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from redis.cluster import RedisCluster
from typing_extensions import TypedDict

from streamsaver import AsyncRedisStreamSaver, InvalidInputError, RedisStreamSaver
from streamsaver.embedded import EmbeddedCluster
from tests.graphs import appending, pipeline


def _extend(state: list[str], writes: Sequence[Any]) -> list[str]:
    return [*state, *(x for w in writes for x in w)]


class State(TypedDict):
    # an invoke updates the channel 3 times (input, a, b); 7 puts snapshots between runs, so
    # the latest checkpoint of a thread is rarely one and reads ancestors of earlier runs
    log: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=7)]


def build(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    return pipeline(State, **appending("log", "a", "b")).compile(checkpointer=checkpointer)


THREAD: RunnableConfig = {"configurable": {"thread_id": "delta-kept"}}


def _invoke(graph: Any, i: int) -> Any:
    return graph.invoke({"log": [f"in{i}"]}, {**THREAD, "metadata": {"run_id": _run_id(i)}})


def _run_id(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def _reference(invokes: int) -> tuple[list[Any], Any]:
    graph = build(InMemorySaver())
    results = [_invoke(graph, i) for i in range(invokes)]
    return results, graph.get_state(THREAD).values


def _ran(saver: BaseCheckpointSaver[Any], invokes: int) -> Any:
    """The graph on *saver*, once it ran ``invokes`` times on THREAD."""
    graph = build(saver)
    for i in range(invokes):
        _invoke(graph, i)
    return graph


def _checkpoints(saver: RedisStreamSaver) -> int:
    return len(list(saver.list(THREAD)))


def test_prune_keep_latest_keeps_the_ancestors_delta_channels_read(
    sync_saver: RedisStreamSaver,
) -> None:
    graph = _ran(sync_saver, 4)
    before = graph.get_state(THREAD).values
    history = sync_saver.get_delta_channel_history(config=THREAD, channels=["log"])
    stored = _checkpoints(sync_saver)

    sync_saver.prune(["delta-kept"])

    assert _checkpoints(sync_saver) < stored  # older than the nearest snapshot went
    assert graph.get_state(THREAD).values == before
    assert sync_saver.get_delta_channel_history(config=THREAD, channels=["log"]) == history
    # what was kept is an ordinary log: a replay projects the same indexes
    assert sync_saver.verify("delta-kept")[2] == []
    # the thread goes on from the pruned state exactly as from the whole history
    results, state = _reference(6)
    assert [_invoke(graph, i) for i in (4, 5)] == results[4:]
    assert graph.get_state(THREAD).values == state


@pytest.mark.parametrize("keep", [1, 2, 5])
def test_keep_last_runs_a_delta_graph_as_in_memory(redis_url: str, prefix: str, keep: int) -> None:
    client = redis.Redis.from_url(redis_url)
    saver = RedisStreamSaver(client, prefix=prefix, keep_last=keep)
    graph = build(saver)
    results = [_invoke(graph, i) for i in range(8)]
    reference, state = _reference(8)
    assert results == reference
    assert graph.get_state(THREAD).values == state
    assert _checkpoints(saver) < 8 * 4  # it did compact
    # puts appended as they are while a compaction would drop little (lua/checkpoint/compact.lua)
    # project what a replay projects
    assert saver.verify("delta-kept")[2] == []
    # and every kept checkpoint still rebuilds as the default walk does
    for snapshot in saver.list(THREAD):
        ours = saver.get_delta_channel_history(config=snapshot.config, channels=["log"])
        assert ours == BaseCheckpointSaver.get_delta_channel_history(
            saver, config=snapshot.config, channels=["log"]
        )
    client.close()


async def test_async_prune_keeps_the_ancestors_delta_channels_read(
    redis_url: str, prefix: str
) -> None:
    client = aredis.Redis.from_url(redis_url)
    saver = AsyncRedisStreamSaver(client, prefix=prefix)
    graph = build(saver)
    for i in range(4):
        await graph.ainvoke({"log": [f"in{i}"]}, {**THREAD, "metadata": {"run_id": _run_id(i)}})
    before = (await graph.aget_state(THREAD)).values
    await saver.aprune(["delta-kept"])
    assert (await graph.aget_state(THREAD)).values == before
    await client.aclose()


def test_delete_for_runs_refuses_to_drop_ancestors_a_kept_checkpoint_reads(
    sync_saver: RedisStreamSaver,
) -> None:
    graph = _ran(sync_saver, 4)
    before = graph.get_state(THREAD).values
    stored = _checkpoints(sync_saver)

    with pytest.raises(InvalidInputError, match="DeltaChannels of the kept checkpoint") as err:
        sync_saver.delete_for_runs([_run_id(1)])
    assert _run_id(1) in str(err.value) and "delete_thread" in str(err.value)
    assert _checkpoints(sync_saver) == stored
    assert graph.get_state(THREAD).values == before

    # the latest run is no one's ancestor: it goes, and the thread reads as after run 2
    sync_saver.delete_for_runs([_run_id(3)])
    _, state = _reference(3)
    assert graph.get_state(THREAD).values == state
    # every run at once leaves nothing that needs them
    sync_saver.delete_for_runs([_run_id(i) for i in range(3)])
    assert _checkpoints(sync_saver) == 0


def test_keep_last_and_delete_for_runs_on_the_cluster(cluster: EmbeddedCluster) -> None:
    client = RedisCluster.from_url(cluster.url)
    saver = RedisStreamSaver(client, prefix=f"d{uuid4().hex[:8]}", keep_last=2)
    graph = build(saver)
    results = [_invoke(graph, i) for i in range(6)]
    reference, state = _reference(6)
    assert results == reference
    assert graph.get_state(THREAD).values == state
    with pytest.raises(InvalidInputError, match="DeltaChannels of the kept checkpoint"):
        saver.delete_for_runs([_run_id(4)])
    assert graph.get_state(THREAD).values == state
    client.close()


def test_delete_for_runs_refuses_an_ancestor_a_checkpoint_put_after_its_check_reads(
    sync_saver: RedisStreamSaver,
) -> None:
    """The DeltaChannel check runs in slices before the delete event is appended: a checkpoint
    put between them that reads a deleted run's writes is checked by the append itself."""
    from streamsaver.core.flow import Eval

    graph = _ran(sync_saver, 3)
    flow = sync_saver._ops.delete_for_runs([_run_id(2)])
    op, checked = next(flow), False
    with pytest.raises(InvalidInputError, match="DeltaChannels of the kept checkpoint"):
        while True:
            reply = sync_saver._execute(op)
            if isinstance(op, Eval) and op.script == "delete_runs" and not checked:
                checked = True
                # run 3 continues run 2: its DeltaChannels read run 2's writes
                _invoke(graph, 3)
            op = flow.send(reply)
    assert checked
    _, state = _reference(4)
    assert graph.get_state(THREAD).values == state
