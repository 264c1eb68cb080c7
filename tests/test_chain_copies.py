"""A sliced compaction copies a kept checkpoint whose values' chains are long (a pruned
conversation) as the log first stored them: the chain's parts, oldest first, in copies of that
checkpoint a few at a time, then the checkpoint itself (lua/checkpoint/compact_slice.lua). What
readers get is what they got before the prune, cold or warm; a rebuild of the new log gives the
same indexes; verify, the digest chain, copy_thread and delete_for_runs go on as for any log.
A tiny slice budget makes every walk of a chain and every copy stop after one part, so the
walk resumes over many calls, and its links wait in the plan."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base.id import uuid6

from streamsaver import RedisStreamSaver
from streamsaver.audit import verify_export
from streamsaver.core.flow import Eval
from streamsaver.core.keys import compact_keys, thread_keys

CHANNELS = ("messages", "notes")


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _message(step: int, channel: str) -> str:
    return f"{channel} {step:05d} " + "abcdefghij" * 100


def _conversation(saver: RedisStreamSaver, thread_id: str, steps: int, start: int = 0,
                  run: str = "r1") -> None:  # fmt: skip
    """Each step a write of one message to each channel, then a checkpoint holding them all."""
    if start == 0:
        empty = {"v": 1, "id": str(uuid6()), "ts": "", "channel_values": {},
                 "channel_versions": {}, "versions_seen": {}}  # fmt: skip
        saver.put(_config(thread_id), empty, {"source": "input", "step": -1, "run_id": run}, {})  # type: ignore[arg-type]
    for step in range(start, start + steps):
        latest = saver.get_tuple(_config(thread_id))
        assert latest is not None
        saver.put_writes(
            latest.config, [(c, _message(step, c)) for c in CHANNELS], str(uuid.uuid4())
        )
        previous = latest.checkpoint
        values, versions = dict(previous["channel_values"]), dict(previous["channel_versions"])
        for c in CHANNELS:
            versions[c] = saver.get_next_version(versions.get(c), None)
            values[c] = [*values.get(c, []), _message(step, c)]
        checkpoint = {**previous, "id": str(uuid6()), "channel_values": values,
                      "channel_versions": versions}  # fmt: skip
        metadata = {"source": "loop", "step": step, "run_id": run}
        saver.put(latest.config, checkpoint, metadata, {c: versions[c] for c in CHANNELS})  # type: ignore[arg-type]


def _reads(saver: RedisStreamSaver, thread_id: str) -> list[Any]:
    latest = saver.get_tuple(_config(thread_id))
    assert latest is not None
    history = list(saver.list(_config(thread_id)))
    return [
        latest.checkpoint,
        latest.metadata,
        latest.pending_writes,
        [(c.checkpoint, c.metadata, c.pending_writes) for c in history],
    ]


def _indexes(client: redis.Redis, saver: RedisStreamSaver, thread_id: str) -> Any:
    keys = thread_keys(saver.prefix, thread_id)
    return client.zrange(keys.ix, 0, -1), client.hgetall(keys.ptr)


@pytest.mark.parametrize("slice_ms", [0.25, 0.01])
def test_a_pruned_long_chain_is_copied_in_parts_and_reads_back_whole(
    redis_client: redis.Redis, prefix: str, slice_ms: float
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, slice_ms=slice_ms, slice_pause=0)
    _conversation(saver, "t", 120)
    latest = saver.get_tuple(_config("t"))
    assert latest is not None
    # pending writes of the kept checkpoint are copied after it
    saver.put_writes(latest.config, [("messages", "pending")], "task-1")
    before = _reads(saver, "t")[:3]
    saver.prune(["t"], strategy="keep_latest")

    log = thread_keys(prefix, "t").log
    entries: Any = redis_client.xrange(log)
    copies = [f for _, f in entries if f[b"k"] == b"checkpoint"]
    assert len(copies) > 1  # the chain went in parts
    assert {f[b"id"] for f in copies} == {latest.checkpoint["id"].encode()}
    after = _reads(saver, "t")
    assert after[:3] == before
    assert len(after[3]) == 1 and after[3][0] == tuple(before)
    cold = RedisStreamSaver(redis_client, prefix=prefix)
    assert _reads(cold, "t") == after
    for c in CHANNELS:
        assert before[0]["channel_values"][c] == [_message(s, c) for s in range(120)]

    assert saver.verify("t")[1:] == (0, [])
    assert saver.verify_chain("t").ok
    out = io.StringIO()
    saver.export_audit(["t"], out)
    [check] = verify_export(out.getvalue().splitlines(), saver.serde)
    assert check.problem is None and check.events == len(entries)
    # principle 1: a replay of the new log gives the same indexes
    indexes = _indexes(redis_client, saver, "t")
    keys = thread_keys(prefix, "t")
    redis_client.delete(keys.ix, keys.ptr)
    saver.rebuild("t")
    assert _indexes(redis_client, saver, "t") == indexes
    assert _reads(RedisStreamSaver(redis_client, prefix=prefix), "t") == after

    saver.copy_thread("t", "t2")
    assert _reads(saver, "t2")[:3] == before
    assert saver.verify("t2")[1:] == (0, [])

    # delete_for_runs compacts in the same slices: every kept checkpoint, the pruned one too,
    # is copied again with its chain
    _conversation(saver, "t", 3, start=120, run="r2")
    saver.delete_for_runs(["r2"])
    # (the next step's writes went to the kept checkpoint, and stay: it is not of run r2)
    kept = _reads(saver, "t")
    assert kept[:2] == before[:2] and before[2][0] in kept[2]
    assert _reads(RedisStreamSaver(redis_client, prefix=prefix), "t") == kept
    assert saver.verify("t")[1:] == (0, [])
    assert saver.verify_chain("t").ok


def test_a_compaction_abandoned_inside_a_chain_leaves_nothing_the_next_one_reads(
    redis_client: redis.Redis, prefix: str
) -> None:
    """A compaction stopped while it walked a chain (its state says where) and a new one, with
    another token, over the same scratch keys: the new one starts its own walk."""
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    _conversation(saver, "t", 60)
    before = _reads(saver, "t")
    ops: Any = saver._ops
    keys = ops.keys("t")
    scratch = compact_keys(keys)

    def call(start: bool) -> Any:
        args = (*ops._appending_args(), 1, "abandoned", "start" if start else "", 1, "0.001")
        return saver._execute(Eval("compact_slice", (*ops.appending(keys), *scratch), args))

    call(True)
    for _ in range(50):
        call(False)
        if redis_client.hget(scratch[3], "walk"):
            break
    assert redis_client.hget(scratch[3], "walk")  # stopped inside a walk
    saver.prune(["t"], strategy="keep_latest")
    after = _reads(saver, "t")
    assert after[:3] == before[:3]
    assert _reads(RedisStreamSaver(redis_client, prefix=prefix), "t") == after
    assert saver.verify("t")[1:] == (0, [])
