"""A checkpoint's pending writes are indexed as one list while they are few, then one ptr field
each (lua/shared/common.lua's pending_writes()), so a put_writes reads and writes only what its own
writes need: a fan-out of n tasks costs O(n), where one list of them all, re-read and re-packed
per call, cost O(n^2); a step's single write costs one ptr field, not three."""

from __future__ import annotations

from typing import Any

import ormsgpack
import redis
from langgraph.checkpoint.base import empty_checkpoint

from streamsaver import RedisStreamSaver
from streamsaver.core.keys import lp, thread_keys

from .test_slices import one_verify


def _start(saver: RedisStreamSaver, thread_id: str) -> Any:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})


def _two_tasks(saver: RedisStreamSaver) -> Any:
    """Thread "t"'s checkpoint, with task "one"'s two writes (one special) and task "two"'s."""
    stored = _start(saver, "t")
    saver.put_writes(stored, [("a", 1), ("__error__", "first")], "one")
    saver.put_writes(stored, [("b", 2)], "two")
    return stored


def _rebuilt_alike(saver: RedisStreamSaver, stored: Any, pending_writes: Any) -> None:
    """A rebuild gives the checkpoint the same pending writes, indexed as a replay does."""
    saver.rebuild("t")
    assert saver.verify("t")[1:] == (0, [])
    again = saver.get_tuple(stored)
    assert again is not None and again.pending_writes == pending_writes


def test_no_index_field_grows_with_the_writes_a_checkpoint_holds(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _start(sync_saver, "t")
    tasks = [f"task-{i:03}" for i in range(300)]
    for task in tasks:
        sync_saver.put_writes(stored, [("fan", task), ("__error__", f"{task} failed")], task)
    # a retry keeps the first ordinary write and overwrites the special one
    sync_saver.put_writes(stored, [("fan", "again"), ("__error__", "last")], tasks[7])
    got = sync_saver.get_tuple(stored)
    assert got is not None
    writes = {(task, channel): value for task, channel, value in got.pending_writes}
    assert len(got.pending_writes) == 600
    assert writes[(tasks[7], "fan")] == tasks[7]
    assert writes[(tasks[7], "__error__")] == "last"
    assert writes[(tasks[299], "__error__")] == "task-299 failed"
    # what a put_writes reads and rewrites does not grow with the 600 writes the checkpoint
    # holds: on the earlier layout one field held them all (~30 KB)
    ptr = redis_client.hgetall(thread_keys(sync_saver.prefix, "t").ptr)
    assert max(len(value) for value in ptr.values()) < 100
    # the index is what a replay of the log gives
    assert sync_saver.verify("t")[1:] == (0, [])
    _rebuilt_alike(sync_saver, stored, got.pending_writes)


def _writes_index(redis_client: redis.Redis, saver: RedisStreamSaver, stored: Any) -> Any:
    """The checkpoint's 'w' field in ptr, and the names of its per-write fields."""
    ptr = thread_keys(saver.prefix, "t").ptr
    fields = redis_client.hgetall(ptr)
    count = fields[f"w{lp('')}{stored['configurable']['checkpoint_id']}".encode()]
    return count, sorted(name for name in fields if name[:1] in (b"u", b"v"))


def test_a_few_writes_stay_one_list_and_move_to_a_field_each_past_eight(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _two_tasks(sync_saver)
    # a retry: the ordinary write keeps its first value, the special one takes the latest
    sync_saver.put_writes(stored, [("a", 9), ("__error__", "second")], "one")
    # three writes cost one ptr field (a step's usual one write would take three)
    count, per_write = _writes_index(redis_client, sync_saver, stored)
    assert per_write == []
    assert ormsgpack.unpackb(count)[::4] == ["one", "one", "two"]
    few = sync_saver.get_tuple(stored)
    assert few is not None
    assert sorted(few.pending_writes) == sorted(
        [("one", "a", 1), ("one", "__error__", "second"), ("two", "b", 2)]
    )
    assert sync_saver.verify("t")[1:] == (0, [])
    more = [f"task-{i}" for i in range(6)]
    for task in more:
        sync_saver.put_writes(stored, [("c", task)], task)
    count, per_write = _writes_index(redis_client, sync_saver, stored)
    assert count == b"9" and len(per_write) == 18
    sync_saver.put_writes(stored, [("a", 10), ("__error__", "third")], "one")
    got = sync_saver.get_tuple(stored)
    assert got is not None
    assert sorted(got.pending_writes) == sorted(
        [
            ("one", "a", 1),
            ("one", "__error__", "third"),
            ("two", "b", 2),
            *[(task, "c", task) for task in more],
        ]
    )
    assert sync_saver.verify("t")[1:] == (0, [])
    _rebuilt_alike(sync_saver, stored, got.pending_writes)


def test_few_writes_indexed_a_field_each_are_read_and_extended(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _two_tasks(sync_saver)
    expected = sync_saver.get_tuple(stored)
    assert expected is not None
    # the pending writes as the earlier layout indexed even a few: one ptr field each
    ptr = thread_keys(sync_saver.prefix, "t").ptr
    checkpoint_id = stored["configurable"]["checkpoint_id"]
    p = lp("")
    count, _ = _writes_index(redis_client, sync_saver, stored)
    flat = ormsgpack.unpackb(count)
    fields: dict[str, Any] = {f"w{p}{checkpoint_id}": len(flat) // 4}
    for i in range(0, len(flat), 4):
        task, idx, eid, pos = flat[i : i + 4]
        fields[f"v{p}{lp(checkpoint_id)}{i // 4 + 1}"] = f"{eid} {pos} {idx} {task}"
        fields[f"u{p}{lp(checkpoint_id)}{lp(task)}{idx}"] = i // 4 + 1
    redis_client.hset(ptr, mapping=fields)
    # an index the earlier layout wrote is not damage: verify (sliced, and as one script)
    # compares what the writes are, not how they are held
    assert sync_saver.verify("t")[1:] == (0, [])
    assert one_verify(sync_saver, "t")[1:] == (0, [])

    got = sync_saver.get_tuple(stored)
    assert got is not None and got.pending_writes == expected.pending_writes
    sync_saver.put_writes(stored, [("a", 9), ("__error__", "second")], "one")
    sync_saver.put_writes(stored, [("c", 3)], "three")
    got = sync_saver.get_tuple(stored)
    assert got is not None
    assert sorted(got.pending_writes) == sorted(
        [("one", "a", 1), ("one", "__error__", "second"), ("two", "b", 2), ("three", "c", 3)]
    )
    _rebuilt_alike(sync_saver, stored, got.pending_writes)


def test_verify_still_finds_pending_writes_that_differ_in_either_layout(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _start(sync_saver, "t")
    sync_saver.put_writes(stored, [("a", 1)], "one")
    ptr = thread_keys(sync_saver.prefix, "t").ptr
    field = f"w{lp('')}{stored['configurable']['checkpoint_id']}"
    # the list form, one write's task renamed: not what the log says
    flat = ormsgpack.unpackb(redis_client.hget(ptr, field))
    redis_client.hset(ptr, field, ormsgpack.packb(["other", *flat[1:]]))
    assert sync_saver.verify("t")[2] == [f"ptr differs {field}"]
    assert one_verify(sync_saver, "t")[2] == [f"ptr differs {field}"]
    # the field-each form naming a write that is not there
    redis_client.hset(ptr, field, 1)
    assert sync_saver.verify("t")[2] == [f"ptr differs {field}"]
    assert one_verify(sync_saver, "t")[2] == [f"ptr differs {field}"]
    # and gone altogether
    redis_client.hdel(ptr, field)
    assert sync_saver.verify("t")[2] == [f"ptr missing {field}"]


def test_task_ids_with_any_bytes_keep_their_writes_apart(sync_saver: RedisStreamSaver) -> None:
    stored = _start(sync_saver, "t")
    # a task id that looks like the rest of a record, or like another task's id and idx
    tasks = ["a b", "a", "a b 1", "", "line\nbreak", "1:x", "ü {x} * $"]
    for task in tasks:
        sync_saver.put_writes(stored, [("c", task), ("__error__", task)], task)
    got = sync_saver.get_tuple(stored)
    assert got is not None
    assert sorted(got.pending_writes) == sorted(
        (task, channel, task) for task in tasks for channel in ("c", "__error__")
    )
    assert sync_saver.verify("t")[1:] == (0, [])
