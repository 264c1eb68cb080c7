"""A message a node wrote is stored once: the next checkpoint's append part names the write's
bytes instead of repeating them (core.delta.Written), on a real Redis."""

from __future__ import annotations

import uuid
from typing import Any

import ormsgpack
import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import copy_checkpoint, create_checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from streamsaver import CorruptIndexError, RedisStreamSaver
from streamsaver.core.keys import thread_keys

SHARED = b"\x94\xa6shared"


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _start(saver: Any, thread_id: str) -> None:
    saver.put(_config(thread_id), empty_checkpoint(), {"source": "input", "step": -1}, {})


def _step(saver: Any, thread_id: str, n: int) -> None:
    """What a chat node does: read the latest, write one message, put the grown list."""
    latest = saver.get_tuple(_config(thread_id))
    kind = HumanMessage if n % 2 == 0 else AIMessage
    message = kind(content=f"message {n} " + "words " * 30, id=f"m{n}")
    saver.put_writes(latest.config, [("messages", message)], str(uuid.uuid4()))
    base = copy_checkpoint(latest.checkpoint)
    version = saver.get_next_version(base["channel_versions"].get("messages"), None)
    base["channel_values"]["messages"] = [*base["channel_values"].get("messages", []), message]
    base["channel_versions"]["messages"] = version
    saver.put(
        latest.config,
        create_checkpoint(base, None, n),
        {"source": "loop", "step": n},
        {"messages": version},
    )


def _conversation(saver: RedisStreamSaver, thread_id: str, steps: int) -> InMemorySaver:
    """Run the same steps through InMemorySaver, whose reads are the reference."""
    reference = InMemorySaver()
    for target in (saver, reference):
        _start(target, thread_id)
    for n in range(steps):
        for target in (saver, reference):
            _step(target, thread_id, n)
    return reference


def _parts(client: redis.Redis, prefix: str, thread_id: str) -> list[bytes]:
    return [
        fields[b"b0"]
        for _, fields in client.xrange(thread_keys(prefix, thread_id).log)
        if fields[b"k"] == b"checkpoint" and b"b0" in fields
    ]


def _assert_same_reads(saver: RedisStreamSaver, reference: InMemorySaver, thread_id: str) -> None:
    ours = list(saver.list(_config(thread_id)))
    theirs = list(reference.list(_config(thread_id)))
    # same steps, newest first; ids and task ids are random per saver, so values are compared
    for a, b in zip(ours, theirs, strict=True):
        assert a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
        assert [w[1:] for w in a.pending_writes or []] == [w[1:] for w in b.pending_writes or []]


def test_the_written_message_is_not_stored_again(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    reference = _conversation(sync_saver, "t", 40)
    parts = _parts(redis_client, sync_saver.prefix, "t")
    # every part is a whole value (the first, and the geometrically spaced snapshots) or
    # names the message its step wrote: none repeats a message's bytes as an append
    whole = [p for p in parts if ormsgpack.unpackb(p)[0] == "msgpack"]
    assert len(whole) + sum(p.startswith(SHARED) for p in parts) == len(parts) == 40
    assert len(whole) <= 4
    assert all(len(p) < 64 for p in parts if p.startswith(SHARED))
    _assert_same_reads(sync_saver, reference, "t")
    # a reader that holds nothing follows the references on the server
    cold = RedisStreamSaver(redis_client, prefix=sync_saver.prefix)
    _assert_same_reads(cold, reference, "t")
    assert cold.rebuild("t")[1] == 0
    assert cold.verify("t")[2] == []
    _assert_same_reads(cold, reference, "t")


def test_a_copy_carries_the_bytes_not_references_into_its_source(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    # more events than one copy page (200), so some references point into an earlier page
    reference = _conversation(sync_saver, "t", 150)
    sync_saver.copy_thread("t", "copy")
    assert not any(p.startswith(SHARED) for p in _parts(redis_client, sync_saver.prefix, "copy"))
    ours = list(sync_saver.list(_config("copy")))
    theirs = list(reference.list(_config("t")))
    assert [t.checkpoint["channel_values"] for t in ours] == [
        t.checkpoint["channel_values"] for t in theirs
    ]
    sync_saver.delete_thread("t")
    cold = RedisStreamSaver(redis_client, prefix=sync_saver.prefix)
    assert [t.checkpoint["channel_values"] for t in cold.list(_config("copy"))] == [
        t.checkpoint["channel_values"] for t in theirs
    ]


def test_a_prune_between_the_write_and_the_put_sends_the_bytes(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    reference = _conversation(sync_saver, "t", 5)
    latest = sync_saver.get_tuple(_config("t"))
    assert latest is not None
    message = AIMessage(content="pruned away " + "x" * 200, id="late")
    sync_saver.put_writes(latest.config, [("messages", message)], "task")
    # another process prunes: the write's event is re-appended under a new id, the old trimmed
    RedisStreamSaver(redis_client, prefix=sync_saver.prefix).prune(["t"], strategy="keep_latest")
    base = copy_checkpoint(latest.checkpoint)
    version = sync_saver.get_next_version(base["channel_versions"]["messages"], None)
    base["channel_values"]["messages"] = [*base["channel_values"]["messages"], message]
    base["channel_versions"]["messages"] = version
    put = sync_saver.put(
        latest.config,
        create_checkpoint(base, None, 5),
        {"source": "loop", "step": 5},
        {"messages": version},
    )
    assert not _parts(redis_client, sync_saver.prefix, "t")[-1].startswith(SHARED)
    got = RedisStreamSaver(redis_client, prefix=sync_saver.prefix).get_tuple(put)
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"] == base["channel_values"]["messages"]
    del reference


def test_a_reference_to_a_missing_write_is_reported_not_misread(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _conversation(sync_saver, "t", 3)
    latest = _parts(redis_client, sync_saver.prefix, "t")[-1]
    assert latest.startswith(SHARED)
    named = ormsgpack.unpackb(latest)[1].split()[0]
    redis_client.xdel(thread_keys(sync_saver.prefix, "t").log, named)  # by hand
    cold = RedisStreamSaver(redis_client, prefix=sync_saver.prefix)
    with pytest.raises(CorruptIndexError, match="not in the log"):
        cold.get_tuple(_config("t"))
    with pytest.raises(CorruptIndexError, match="not in the log"):
        cold.copy_thread("t", "copy")


def test_keep_last_compactions_copy_the_bytes_a_shared_part_names(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, keep_last=2)
    reference = _conversation(saver, "t", 30)
    # compactions ran (the log holds far fewer than 61 events) and trimmed every write that
    # an older part named; what is left reads back and replays exactly
    assert redis_client.xlen(thread_keys(prefix, "t").log) < 20
    cold = RedisStreamSaver(redis_client, prefix=prefix)
    ours = [t.checkpoint["channel_values"] for t in cold.list(_config("t"))]
    theirs = [t.checkpoint["channel_values"] for t in reference.list(_config("t"))]
    assert ours == theirs[: len(ours)] and len(ours) >= 2
    assert cold.verify("t")[2] == []
