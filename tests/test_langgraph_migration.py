"""A thread saved by an older LangGraph resumes: LangGraph migrates the checkpoint it loads
(``StateGraph._migrate_checkpoint`` renames ``start:X`` and node channels to ``branch:to:X``,
keeping their versions), so its next put names channels at versions stored only under their old
names. Those are stored with the checkpoint (as InMemorySaver reads them back), while a writer
whose history is gone is still refused (tests/test_integrity.py). The checkpoints below are the
layout LangGraph wrote before ``branch:to:`` channels (checkpoint ``v`` 2); LangGraph's own
tests/test_checkpoint_migration.py runs the same on a larger graph
(tests/test_langgraph_suite.py)."""

from __future__ import annotations

from typing import Any, TypedDict
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser
from redis.cluster import RedisCluster

from streamsaver import AsyncRedisStreamSaver, DanglingVersionError, RedisStreamSaver
from streamsaver.core.keys import thread_keys
from streamsaver.embedded import EmbeddedCluster
from streamsaver.transport import multiplex, resp
from tests.test_saver import generate_config


class State(TypedDict):
    x: str


def _graph() -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node("a", lambda s: {"x": s["x"] + " a"})
    builder.add_node("b", lambda s: {"x": s["x"] + " b"})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder


def _v(n: int) -> str:
    return f"{n:032}.0.5"


def _old(step: int, versions: dict[str, str], values: dict[str, Any], seen: Any) -> Any:
    checkpoint = {
        "v": 2,
        "id": f"1f00fe48-515{step + 1}-6000-800{step + 1}-000000000000",
        "ts": f"2025-04-02T17:04:20.8{step + 1}+00:00",
        "channel_versions": versions,
        "channel_values": values,
        "versions_seen": seen,
    }
    return checkpoint, {"source": "input" if step < 0 else "loop", "step": step, "parents": {}}


# START -> a -> b, stopped after a ran: a's trigger `start:a` and its output channel `a` are
# what LangGraph renames to branch:to:a (empty by then) and branch:to:b (holding "a")
OLD = [
    _old(-1, {"__start__": _v(1)}, {"__start__": {"x": "hi"}}, {"__input__": {}}),
    _old(
        0,
        {"__start__": _v(2), "x": _v(2), "start:a": _v(2)},
        {"x": "hi", "start:a": "__start__"},
        {"__input__": {}, "__start__": {"__start__": _v(1)}},
    ),
    _old(
        1,
        {"__start__": _v(2), "x": _v(3), "start:a": _v(3), "a": _v(3)},
        {"x": "hi a", "a": "a"},
        {"__input__": {}, "__start__": {"__start__": _v(1)}, "a": {"start:a": _v(2)}},
    ),
]
# what the graph shows for each checkpoint, newest first, with InMemorySaver as with streamsaver
HISTORY = [
    (2, {"x": "hi a b"}, ()),
    (1, {"x": "hi a"}, ("b",)),
    (0, {"x": "hi"}, ("a",)),
    (-1, {}, ("__start__",)),
]


def _summary(states: Any) -> list[Any]:
    return [(s.metadata["step"], s.values, s.next) for s in states]


def _save_old(saver: BaseCheckpointSaver[Any], thread: str) -> None:
    parent = None
    for checkpoint, metadata in OLD:
        config = generate_config(thread, checkpoint_id=parent)
        saver.put(config, checkpoint, metadata, checkpoint["channel_versions"])
        parent = checkpoint["id"]


def test_in_memory_saver_resumes_the_old_thread_as_expected() -> None:
    """The reference: what LangGraph's own saver gives."""
    saver = InMemorySaver()
    _save_old(saver, "t")
    app = _graph().compile(checkpointer=saver)
    assert app.invoke(None, generate_config("t")) == {"x": "hi a b"}
    assert _summary(app.get_state_history(generate_config("t"))) == HISTORY


@pytest.mark.parametrize("delta_cache_bytes", [1 << 20, 0], ids=["delta-cache", "no-cache"])
def test_a_graph_resumes_a_thread_saved_in_an_older_layout(
    redis_client: redis.Redis, prefix: str, delta_cache_bytes: int
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, delta_cache_bytes=delta_cache_bytes)
    _save_old(saver, "t")
    app = _graph().compile(checkpointer=saver)
    # main refused this put: DanglingVersionError naming branch:to:a at version 3
    assert app.invoke(None, generate_config("t")) == {"x": "hi a b"}
    assert _summary(app.get_state_history(generate_config("t"))) == HISTORY
    latest = saver.get_tuple(generate_config("t"))
    assert latest is not None
    # the renamed channels are stored with the checkpoint that named them: a fresh reader and
    # a replay of the log agree
    cold = RedisStreamSaver(redis_client, prefix=prefix)
    assert cold.get_tuple(generate_config("t")) == latest
    # the three old checkpoints, b's writes and the new checkpoint: the round that named the
    # renamed channels wrote nothing
    assert redis_client.xlen(thread_keys(prefix, "t").log) == 5
    assert saver.verify("t")[2] == []
    assert _summary(app.get_state_history(generate_config("t"))) == HISTORY


def test_a_graph_resumes_it_on_a_cluster(cluster: EmbeddedCluster) -> None:
    client = RedisCluster.from_url(cluster.url)
    saver = RedisStreamSaver(client, prefix=f"m{uuid4().hex[:8]}")
    _save_old(saver, "t")
    app = _graph().compile(checkpointer=saver)
    assert app.invoke(None, generate_config("t")) == {"x": "hi a b"}
    assert _summary(app.get_state_history(generate_config("t"))) == HISTORY
    assert saver.verify("t")[2] == []
    client.close()


@pytest.mark.parametrize("parser", ["hiredis", "python"])
async def test_the_async_saver_resumes_it_too(
    redis_url: str, prefix: str, parser: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if parser == "python":
        # as a plain install runs: redis-py's own parser, streamsaver's auto-pipeline pump
        monkeypatch.setattr(multiplex, "hiredis", None)
        monkeypatch.setattr(resp, "pack", resp.pack_python)
    parser_class = _AsyncHiredisParser if parser == "hiredis" else _AsyncRESP2Parser
    client = aredis.Redis.from_url(redis_url, parser_class=parser_class)
    saver = AsyncRedisStreamSaver(client, prefix=prefix)
    parent = None
    for checkpoint, metadata in OLD:
        config = generate_config("t", checkpoint_id=parent)
        await saver.aput(config, checkpoint, metadata, checkpoint["channel_versions"])
        parent = checkpoint["id"]
    app = _graph().compile(checkpointer=saver)
    assert await app.ainvoke(None, generate_config("t")) == {"x": "hi a b"}
    assert _summary([s async for s in app.aget_state_history(generate_config("t"))]) == HISTORY
    await client.aclose()


# --- the rule at the saver: a live parent vouches for what the thread holds --------------------


def _put(saver: RedisStreamSaver, parent: Any, values: Any, versions: Any, new: Any) -> Any:
    cp = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.put(parent, cp, generate_metadata(), new)


def _replies(saver: RedisStreamSaver) -> list[Any]:
    """What the server answers each step of the saver's calls from now on."""
    replies: list[Any] = []
    execute = saver._execute

    def recording(op: Any) -> Any:
        reply = execute(op)
        replies.append(reply)
        return reply

    saver._execute = recording  # type: ignore[method-assign]
    return replies


@pytest.mark.parametrize("keep_last", [0, 1])
def test_channels_new_under_a_live_parent_are_stored_with_the_checkpoint(
    redis_client: redis.Redis, prefix: str, keep_last: int
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, keep_last=keep_last or None)
    first = _put(
        saver, generate_config("t"), {"old": "v"}, {"old": 1, "gone": 1}, {"old": 1, "gone": 1}
    )
    # renamed: `old` now `new` holding its value, `gone` now `empty` with none, same versions
    replies = _replies(saver)
    second = _put(saver, first, {"new": "v"}, {"new": 1, "empty": 1}, {})
    # the first round names them, writing nothing; the second stores them with the checkpoint
    assert replies[0] == [b"unstored", b"new", b"empty"]
    assert isinstance(replies[1], bytes) and replies[1].count(b"-") == 1
    assert redis_client.xlen(thread_keys(prefix, "t").log) == 2
    got = saver.get_tuple(second)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"new": "v"}
    assert got.checkpoint["channel_versions"] == {"new": 1, "empty": 1}
    # and the next put, naming them unchanged, finds them stored
    third = _put(saver, second, {"new": "v", "x": 2}, {"new": 1, "empty": 1, "x": 2}, {"x": 2})
    got = saver.get_tuple(third)
    assert got is not None and got.checkpoint["channel_values"] == {"new": "v", "x": 2}
    assert saver.verify("t")[2] == []


def test_a_put_whose_parent_is_gone_is_still_refused_whole(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The crash case: the writer continues a checkpoint a prune removed, naming a value that
    went with it."""
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    first = _put(
        saver, generate_config("t"), {"a": 1, "b": "x"}, {"a": 1, "b": 1}, {"a": 1, "b": 1}
    )
    _put(saver, first, {"a": 2, "b": "y"}, {"a": 2, "b": 2}, {"a": 2, "b": 2})
    saver.prune(["t"], strategy="keep_latest")
    log = thread_keys(prefix, "t").log
    length = redis_client.xlen(log)
    with pytest.raises(DanglingVersionError, match=r"channel 'b'.*version 1"):
        _put(saver, first, {"a": 3, "b": "x", "c": 1}, {"a": 3, "b": 1, "c": 5}, {"a": 3})
    assert redis_client.xlen(log) == length
