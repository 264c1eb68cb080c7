"""The order of ``list`` over several namespaces and threads, against ``InMemorySaver``.

InMemorySaver lists threads, then each thread's namespaces, in the order it first saw them,
newest first within a namespace. streamsaver keeps no such order: it lists threads by id and a
thread's namespaces by their length-prefixed bytes (the root namespace first). Created in that
order, both savers must give the same items for every combination of limit, before and filter,
over pages that end inside and at the edge of namespaces.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.checkpoint import hotpath
from streamsaver.core.keys import lp

# sorted as the index sorts them: "12:zz..." comes before "1:a" ('2' < ':')
NAMESPACES = sorted(
    ["", "a", "b:1", "sub|x", "é", "z" * 12, "c:\n", "child:1|grand:2"],
    key=lambda ns: lp(ns).encode(),
)
THREADS = ["t-a", "t-b"]
STEPS = 4


def _fill(savers: list[BaseCheckpointSaver[Any]]) -> list[str]:
    """The same checkpoints in every saver, each namespace created whole before the next
    (InMemorySaver's order is first use); returns the ids in creation order."""
    ids = []
    for thread_id in THREADS:
        for ns in NAMESPACES:
            parent = None
            for step in range(STEPS):
                checkpoint = generate_checkpoint()
                configurable = {"thread_id": thread_id, "checkpoint_ns": ns}
                if parent:
                    configurable["checkpoint_id"] = parent
                metadata: Any = {"step": step, "source": "loop" if step % 2 else "input"}
                for saver in savers:
                    saver.put({"configurable": configurable}, checkpoint, metadata, {})
                parent = checkpoint["id"]
                ids.append(parent)
    return ids


def _summary(items: list[CheckpointTuple]) -> list[Any]:
    return [(c.config, c.parent_config, c.metadata) for c in items]


def _cases(ids: list[str]) -> list[tuple[Any, dict[str, Any]]]:
    one = {"configurable": {"thread_id": "t-b"}}
    cases: list[tuple[Any, dict[str, Any]]] = []
    for config in (one, None):
        cases += [
            (config, {}),
            (config, {"limit": 1}),
            (config, {"limit": STEPS}),  # ends at the edge of the root namespace
            (config, {"limit": 2 * STEPS + 1}),  # ends inside the third namespace
            (config, {"filter": {"source": "loop"}}),
            (config, {"filter": {"step": 2}, "limit": 3}),
        ]
        for bound in (ids[len(ids) // 3], ids[-2], ids[0]):
            before = {"configurable": {"checkpoint_id": bound}}
            cases += [
                (config, {"before": before}),
                (config, {"before": before, "limit": 5}),
                (config, {"before": before, "filter": {"source": "input"}, "limit": 4}),
            ]
    # an exact id with no namespace: every namespace that holds it (ids[-5] is the newest
    # checkpoint of t-b's second last namespace)
    exact = {"configurable": {"thread_id": "t-b", "checkpoint_id": ids[-5]}}
    cases.append((exact, {}))
    in_ns = {"configurable": {**exact["configurable"], "checkpoint_ns": NAMESPACES[-2]}}
    # an exact id and a bound both apply: nothing when the id is not below the bound
    for config in (exact, in_ns):
        for bound in (ids[-5], ids[-4]):
            cases.append((config, {"before": {"configurable": {"checkpoint_id": bound}}}))
    return cases


@pytest.mark.parametrize("page", [3, 100])
def test_list_order_matches_in_memory_saver(
    sync_saver: RedisStreamSaver, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    # small pages put page edges inside namespaces and at their ends
    monkeypatch.setattr(hotpath, "_PAGE", page)
    ref = InMemorySaver()
    ids = _fill([sync_saver, ref])
    every = list(sync_saver.list({"configurable": {"thread_id": "t-a"}}))
    assert [c.config["configurable"]["checkpoint_ns"] for c in every] == [
        ns for ns in NAMESPACES for _ in range(STEPS)
    ]
    assert NAMESPACES[0] == ""
    for config, kw in _cases(ids):
        ours = _summary(list(sync_saver.list(config, **kw)))
        assert ours == _summary(list(ref.list(config, **kw))), (config, kw)


async def test_alist_order_matches_in_memory_saver(
    async_saver: AsyncRedisStreamSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hotpath, "_PAGE", 3)
    ref = InMemorySaver()
    ids = []
    for thread_id in THREADS:
        for ns in NAMESPACES:
            for step in range(2):
                checkpoint = generate_checkpoint()
                config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
                metadata: Any = {"step": step}
                await async_saver.aput(config, checkpoint, metadata, {})
                ref.put(config, checkpoint, metadata, {})
                ids.append(checkpoint["id"])
    for config, kw in _cases(ids):
        ours = _summary([c async for c in async_saver.alist(config, **kw)])
        assert ours == _summary(list(ref.list(config, **kw))), (config, kw)


def test_a_bound_that_empties_many_namespaces_still_finds_the_rest(
    sync_saver: RedisStreamSaver,
) -> None:
    # each namespace entered counts against checkpoint/list.lua's SCAN_CAP (1000): a page that gives
    # up there must hand on a cursor that the next page continues from, not end the list
    count = 1100
    ids = []
    for i in range(count):
        checkpoint = generate_checkpoint()
        config: Any = {"configurable": {"thread_id": "wide", "checkpoint_ns": f"n{i:05d}"}}
        sync_saver.put(config, checkpoint, {}, {})
        ids.append(checkpoint["id"])
    thread: Any = {"configurable": {"thread_id": "wide"}}
    last = {"configurable": {"thread_id": "wide", "checkpoint_id": ids[-1]}}
    [found] = list(sync_saver.list(last))
    assert found.config["configurable"]["checkpoint_ns"] == f"n{count - 1:05d}"
    # only the first namespace's checkpoint is below the second's id
    below = list(sync_saver.list(thread, before={"configurable": {"checkpoint_id": ids[1]}}))
    assert [c.config["configurable"]["checkpoint_id"] for c in below] == [ids[0]]
    assert len(list(sync_saver.list(thread, filter={"step": 99}))) == 0
    assert len(list(sync_saver.list(thread))) == count
