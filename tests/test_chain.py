"""The digest chain: Lua writes it, Python verifies it, and tampering with the log is named."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import RedisStreamSaver
from streamsaver.core.chain import chain_digest, content_digest, written_digest
from streamsaver.core.keys import thread_keys
from streamsaver.events import ThreadEvent


def _run(saver: RedisStreamSaver, thread_id: str, steps: int = 5, run: str = "r1") -> None:
    """A thread with checkpoints, writes and binary values (every byte value, NULs included)."""
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(steps):
        versions = {"blob": saver.get_next_version(None, None), "log": f"v{step}"}
        values = {"blob": bytes(range(256)) * (step + 1), "log": [f"m{i}" for i in range(step)]}
        cp = generate_checkpoint(channel_values=values, channel_versions=versions)
        config = saver.put(config, cp, generate_metadata(step=step, run_id=run), versions)
        saver.put_writes(config, [("blob", b"\x00\xff" * step), ("log", ["w"])], f"task{step}")


def _entries(client: redis.Redis, saver: RedisStreamSaver, thread_id: str) -> list[Any]:
    return client.xrange(thread_keys(saver.prefix, thread_id).log)


def _rewrite(client: redis.Redis, log: str, entries: list[Any]) -> None:
    """Put back a log as ``entries`` [(id, {field: value})], keeping the given ids."""
    client.delete(log)
    for entry_id, fields in entries:
        client.xadd(log, fields, id=entry_id)


def test_lua_and_python_compute_the_same_digests(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _run(sync_saver, "t")
    previous = ""
    entries = _entries(redis_client, sync_saver, "t")
    assert len(entries) == 10
    for _, fields in entries:
        pairs = list(fields.items())
        # the chain fields come last, after the event's own
        assert [name for name, _ in pairs[-2:]] == [b"ch", b"dg"]
        assert content_digest(pairs) == fields[b"ch"].decode()
        assert chain_digest(previous, fields[b"ch"].decode()) == fields[b"dg"].decode()
        previous = fields[b"dg"].decode()
    check = sync_saver.verify_chain("t")
    assert check.ok and check.events == 10 and check.head == previous


def test_every_kind_of_append_keeps_the_chain(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _run(sync_saver, "t", run="r1")
    _run(sync_saver, "t", steps=2, run="r2")
    sync_saver.delete_for_runs(["r1"])
    [deleted] = [e for e in sync_saver.history("t") if e.kind == "delete"]
    assert isinstance(deleted, ThreadEvent) and deleted.runs == ("r1",)
    assert len(deleted.deleted) == 5 and deleted.digest is not None
    sync_saver.copy_thread("t", "copy")
    sync_saver.prune(["t"], strategy="keep_latest")
    for thread_id in ("t", "copy"):
        check = sync_saver.verify_chain(thread_id)
        assert check.ok, check.problem
    kinds = [f[b"k"] for _, f in _entries(redis_client, sync_saver, "t")]
    assert kinds[0] == b"pruned"  # the trimmed log starts at the tombstone
    # the copies are chained anew: no source digest survives in the target
    source = {f[b"dg"] for _, f in _entries(redis_client, sync_saver, "t")}
    assert not source & {f[b"dg"] for _, f in _entries(redis_client, sync_saver, "copy")}


def test_pruned_twice_and_copied_still_verifies(sync_saver: RedisStreamSaver) -> None:
    _run(sync_saver, "t")
    sync_saver.prune(["t"], strategy="keep_latest")
    _run(sync_saver, "t", steps=2)
    sync_saver.prune(["t"], strategy="keep_latest")
    sync_saver.copy_thread("t", "copy")  # its first event: a copy of the tombstone
    for thread_id in ("t", "copy"):
        check = sync_saver.verify_chain(thread_id)
        assert check.ok, check.problem


def test_an_altered_event_is_named(sync_saver: RedisStreamSaver, redis_client: redis.Redis) -> None:
    _run(sync_saver, "t")
    entries = _entries(redis_client, sync_saver, "t")
    victim_id, victim = entries[4]
    victim[b"b0"] = victim[b"b0"][:-1] + b"X"  # one byte of a checkpoint's value
    _rewrite(redis_client, thread_keys(sync_saver.prefix, "t").log, entries)
    problem = sync_saver.verify_chain("t").problem
    assert problem is not None
    assert (problem.event_id, problem.position) == (victim_id.decode(), 5)
    assert "altered" in problem.reason


def test_a_removed_event_is_found_at_its_successor(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _run(sync_saver, "t")
    entries = _entries(redis_client, sync_saver, "t")
    redis_client.xdel(thread_keys(sync_saver.prefix, "t").log, entries[3][0])
    problem = sync_saver.verify_chain("t").problem
    assert problem is not None
    assert problem.event_id == entries[4][0].decode()
    assert f"does not follow event {entries[2][0].decode()}" in problem.reason
    assert "removed" in problem.reason


def test_a_moved_event_is_named(sync_saver: RedisStreamSaver, redis_client: redis.Redis) -> None:
    _run(sync_saver, "t")
    log = thread_keys(sync_saver.prefix, "t").log
    entries = _entries(redis_client, sync_saver, "t")
    moved_id, moved = entries[3]
    redis_client.xdel(log, moved_id)
    new_id = redis_client.xadd(log, moved)  # re-added at the end, digests and all
    problem = sync_saver.verify_chain("t").problem
    assert problem is not None
    assert problem.event_id == entries[4][0].decode()
    assert f"event {new_id.decode()} (#10) was moved" in problem.reason


def test_removing_the_first_events_is_caught(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _run(sync_saver, "t")
    entries = _entries(redis_client, sync_saver, "t")
    log = thread_keys(sync_saver.prefix, "t").log
    redis_client.xtrim(log, minid=entries[2][0], approximate=False)
    problem = sync_saver.verify_chain("t").problem
    assert problem is not None and problem.event_id == entries[2][0].decode()
    assert "the events before it were removed" in problem.reason


def test_chaining_off_writes_no_digest_and_verify_says_so(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, chain=False)
    _run(saver, "t", steps=2)
    assert all(b"dg" not in f for _, f in _entries(redis_client, saver, "t"))
    problem = saver.verify_chain("t").problem
    assert problem is not None and problem.position == 1 and "no digest" in problem.reason
    with pytest.raises(Exception, match="chain=1"):
        RedisStreamSaver(redis_client, prefix=prefix, chain=1)  # type: ignore[arg-type]


def test_the_chain_continues_after_the_indexes_are_dropped_and_rebuilt(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _run(sync_saver, "t", steps=2)
    keys = thread_keys(sync_saver.prefix, "t")
    head = redis_client.hget(keys.ptr, "h")
    assert head == _entries(redis_client, sync_saver, "t")[-1][1][b"dg"]
    latest = sync_saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert latest is not None
    redis_client.delete(keys.ix, keys.ptr)  # the head digest goes with them: read from the log
    sync_saver.put_writes(
        latest.config,  # writes of a checkpoint the log holds: verify_chain checks that too
        [("a", 1)],
        "task",
    )
    assert sync_saver.verify_chain("t").ok
    sync_saver.rebuild("t")
    assert sync_saver.verify("t")[2] == []  # the rebuilt head is the live one
    assert redis_client.hget(keys.ptr, "h") == _entries(redis_client, sync_saver, "t")[-1][1][b"dg"]


def test_removing_the_last_event_shows_at_the_next_append(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _run(sync_saver, "t", steps=2)
    entries = _entries(redis_client, sync_saver, "t")
    redis_client.xdel(thread_keys(sync_saver.prefix, "t").log, entries[-1][0])
    assert sync_saver.verify_chain("t").ok  # a shorter log alone proves nothing...
    _run(sync_saver, "t", steps=1)
    problem = sync_saver.verify_chain("t").problem  # ...but what follows chains to the removed
    assert problem is not None and f"does not follow event {entries[-2][0].decode()}" in str(
        problem
    )


def test_tail_and_history_show_what_a_prune_removed(sync_saver: RedisStreamSaver) -> None:
    _run(sync_saver, "t", steps=3)
    before = sync_saver.verify_chain("t")
    first = next(iter(sync_saver.history("t")))
    sync_saver.prune(["t"], strategy="keep_latest")
    for events in (
        list(sync_saver.history("t")),
        list(sync_saver.tail("t", after="0", follow=False, checkpoint_ns="some-subgraph")),
    ):
        pruned = events[0]
        assert isinstance(pruned, ThreadEvent) and pruned.kind == "pruned"
        assert pruned.pruned is not None
        assert (pruned.pruned.count, pruned.pruned.first_id) == (before.events, first.id)
        assert pruned.pruned.last_digest == before.head
    assert sync_saver.rebuild("t").skipped == 0


@given(st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=300)), max_size=30))
def test_the_writers_digest_is_the_verifiers(fields: list[tuple[bytes, bytes]]) -> None:
    """One definition: what a writer sends as ch is what a verifier recomputes from the
    stored fields (a name of ch or dg is the chain's own, never digested)."""
    fields = [(name, value) for name, value in fields if name not in (b"ch", b"dg")]
    flat = [part for pair in fields for part in pair]
    assert written_digest(flat) == content_digest(fields)


def test_the_writer_sends_ch_and_a_false_one_is_named(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client computes each event's ch (the server only links it, lua/shared/common.lua): a
    writer that lies about it leaves a break verify names, as an edit after the fact would."""
    _run(sync_saver, "t", steps=2)
    assert sync_saver.verify_chain("t").ok
    calls = iter(range(1000))

    def lying(flat: Any) -> str:
        # the second event appended from here on claims the digest of other fields
        return written_digest([b"k", b"forged"] if next(calls) == 1 else flat)

    monkeypatch.setattr("streamsaver.checkpoint.state.written_digest", lying)
    _run(sync_saver, "t", steps=2)
    entries = _entries(redis_client, sync_saver, "t")
    problem = sync_saver.verify_chain("t").problem
    assert problem is not None
    assert (problem.event_id, problem.position) == (entries[5][0].decode(), 6)
    assert "altered" in problem.reason
    # the server made the links: every dg follows from the stored ch before it
    previous = ""
    for _, fields in entries:
        assert chain_digest(previous, fields[b"ch"].decode()) == fields[b"dg"].decode()
        previous = fields[b"dg"].decode()


def test_a_put_that_compacts_chains_the_copies_itself(
    redis_client: redis.Redis, prefix: str
) -> None:
    """keep_last compacts inside the put's script: the copies it appends get a ch computed
    by the server, the put's own event the client's."""
    saver = RedisStreamSaver(redis_client, prefix=prefix, keep_last=1)
    _run(saver, "t", steps=6)
    kinds = [f[b"k"] for _, f in _entries(redis_client, saver, "t")]
    assert kinds[0] == b"pruned"  # a compaction ran
    check = saver.verify_chain("t")
    assert check.ok, check.problem
