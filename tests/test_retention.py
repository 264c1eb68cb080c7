"""Retention on a real Redis: a thread's time to live, keep_last, and delete_for_runs that takes
the deleted runs' payloads out of the log."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import ormsgpack
import pytest
import redis
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver

from streamsaver import InvalidInputError, MissingIndexError, RedisStreamSaver
from streamsaver.core.feeds import SLOT_KINDS
from streamsaver.core.keys import thread_keys
from streamsaver.events import SkippedEvent
from tests import graphs
from tests.test_saver import generate_config

MESSAGE = "a message long enough that storing it twice would show " * 2


def wait_for(condition: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.05)


def thread_key_names(client: redis.Redis, prefix: str) -> set[bytes]:
    """Every key under the prefix but the per-slot keys (feeds, thread indexes, the audit
    streams that record deleted threads), which belong to no thread."""
    shared = tuple(f"}}:{kind}".encode() for kind in SLOT_KINDS)
    return {k for k in client.scan_iter(match=f"{prefix}:*", count=1000) if not k.endswith(shared)}


class History:
    """Writes one checkpoint history, the same checkpoints to every saver given, the way a graph
    does: a message list that grows every step (stored as appends), a channel written once at
    step 1 and read unchanged after, a counter, and pending writes for every checkpoint."""

    def __init__(self, *savers: RedisStreamSaver, thread_id: str = "t", ns: str = "") -> None:
        self.savers, self.thread_id, self.ns = savers, thread_id, ns
        self.values: dict[str, Any] = {}
        self.versions: dict[str, Any] = {}
        self.ids: list[str] = []

    def step(self, step: int, parent: str | None = None, run: str | None = None) -> str:
        new = {
            "messages": [*self.values.get("messages", []), f"{step}: {MESSAGE}"],
            "n": step,
            "note": f"note of step {step}",
        }
        if step == 1:
            new["once"] = "written at step 1 only"
        self.values.update(new)
        for channel in new:
            self.versions[channel] = self.savers[0].get_next_version(self.versions.get(channel))
        checkpoint = generate_checkpoint(
            channel_values=dict(self.values), channel_versions=dict(self.versions)
        )
        parent = parent if parent is not None else (self.ids[-1] if self.ids else None)
        metadata = generate_metadata(step=step, run_id=run or f"run-{step // 4}")
        for saver in self.savers:
            config = generate_config(self.thread_id, checkpoint_ns=self.ns, checkpoint_id=parent)
            stored = saver.put(config, checkpoint, metadata, {ch: self.versions[ch] for ch in new})
            writes = [("n", step), ("__interrupt__", f"interrupt at step {step}")]
            saver.put_writes(stored, writes, f"task{step}")
        self.ids.append(checkpoint["id"])
        return checkpoint["id"]

    def run(self, steps: int, start: int = 0) -> History:
        for step in range(start, start + steps):
            self.step(step)
        return self

    def fork(self, from_id: str, step: int) -> str:
        """A checkpoint continuing ``from_id``, as update_state would, with the values then."""
        saver = self.savers[0]
        base = saver.get_tuple(
            generate_config(self.thread_id, checkpoint_ns=self.ns, checkpoint_id=from_id)
        )
        assert base is not None
        self.values = dict(base.checkpoint["channel_values"])
        self.versions = dict(base.checkpoint["channel_versions"])
        return self.step(step, parent=from_id)


def config(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    return generate_config(thread_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id)


def listed(saver: RedisStreamSaver, thread_id: str = "t", **kw: Any) -> list[CheckpointTuple]:
    return list(saver.list({"configurable": {"thread_id": thread_id}}, **kw))


def cold(saver: RedisStreamSaver) -> RedisStreamSaver:
    """A saver on the same keys that holds nothing yet: its reads assemble every value."""
    return RedisStreamSaver(saver.client, prefix=saver.prefix)  # type: ignore[arg-type]


@pytest.fixture
def reference(redis_client: redis.Redis, prefix: str) -> RedisStreamSaver:
    return RedisStreamSaver(redis_client, prefix=prefix + ":ref")


def kept_saver(client: redis.Redis, prefix: str, keep: int, **kw: Any) -> RedisStreamSaver:
    return RedisStreamSaver(client, prefix=prefix + ":kept", keep_last=keep, **kw)


def assert_reads_match(saver: RedisStreamSaver, reference: RedisStreamSaver, thread_id: str) -> int:
    """Every checkpoint the saver still lists reads exactly as in the reference (which keeps
    everything), warm and cold; returns how many there are."""
    kept = listed(saver, thread_id)
    assert kept, "nothing kept"
    for item in kept:
        want = reference.get_tuple(item.config)
        assert want is not None
        assert item == want
        assert saver.get_tuple(item.config) == want
        assert cold(saver).get_tuple(item.config) == want
    assert listed(cold(saver), thread_id) == kept
    return len(kept)


# --------------------------------------------------------------------------- #
# options
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "bad",
    [
        {"ttl_seconds": 0},
        {"ttl_seconds": -1},
        {"ttl_seconds": float("inf")},
        {"ttl_seconds": "60"},
        {"ttl_seconds": True},
        {"keep_last": 0},
        {"keep_last": 2.5},
        {"keep_last": True},
        {"keep_last": "3"},
    ],
)
def test_bad_retention_options_raise_typed_errors(
    redis_client: redis.Redis, prefix: str, bad: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError, match=next(iter(bad))):
        RedisStreamSaver(redis_client, prefix=prefix, **bad)


# --------------------------------------------------------------------------- #
# time to live
# --------------------------------------------------------------------------- #


def test_an_expired_thread_leaves_no_key_behind(redis_client: redis.Redis, prefix: str) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=600)
    History(saver, thread_id="t").run(3)
    History(saver, thread_id="sub", ns="child:1").run(2)
    History(saver, thread_id="gone").run(2)
    saver.copy_thread("t", "copy")
    saver.rebuild("t")
    assert all(
        redis_client.pttl(k) > 500_000 for t in ("t", "copy") for k in thread_keys(prefix, t)
    )
    # the last writes, by a saver whose threads live one second
    short = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=1, audit_retention_seconds=1)
    for thread_id in ("t", "sub", "copy"):
        short.put_writes(config(thread_id, "last"), [("x", 1)], "late")
    short.delete_thread("gone")
    keys = thread_key_names(redis_client, prefix)
    # a deleted thread leaves its deletion's mark in its ptr, for the audit retention
    expected = {k.encode() for t in ("t", "sub", "copy") for k in thread_keys(prefix, t)}
    expected.add(thread_keys(prefix, "gone").ptr.encode())
    assert keys == expected
    assert all(0 < redis_client.pttl(k) <= 1000 for k in keys)
    wait_for(lambda: not thread_key_names(redis_client, prefix))
    assert saver.threads() == []
    assert saver.get_tuple(config("t")) is None


def test_every_write_restarts_the_clock_of_every_key_and_reads_do_not(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=3600)
    history = History(saver).run(3)
    keys = thread_keys(prefix, "t")

    def shorten() -> None:
        for key in keys:
            assert redis_client.pexpire(key, 60_000)

    def ttls() -> list[int]:
        # in one script: the server's clock does not move between the readings
        script = "local t = {} for i, k in ipairs(KEYS) do t[i] = redis.call('PTTL', k) end "
        script += "return t"
        return list(redis_client.eval(script, len(keys), *keys))

    for write in (
        lambda: history.step(3),
        lambda: saver.put_writes(config("t", history.ids[-1]), [("x", 1)], "late"),
    ):
        shorten()
        write()
        assert all(60_000 < ttl <= 3_600_000 for ttl in ttls()), ttls()
        assert len(set(ttls())) == 1  # one expiry time for all
    shorten()
    saver.get_tuple(config("t"))
    listed(saver)
    list(saver.tail("t", after="0", follow=False))
    assert all(ttl <= 60_000 for ttl in ttls())


def test_maintenance_keeps_the_time_left_on_every_key(
    redis_client: redis.Redis, prefix: str
) -> None:
    """prune, delete_for_runs and rebuild re-create the indexes; they expire with the log."""
    saver = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=3600)
    History(saver).run(8)
    keys = thread_keys(prefix, "t")
    for run in (
        lambda: saver.delete_for_runs(["run-0"]),
        lambda: saver.prune(["t"]),
        lambda: saver.rebuild("t"),
    ):
        for key in keys:
            redis_client.pexpire(key, 60_000)
        run()
        ttls = [redis_client.pttl(k) for k in keys]
        assert all(50_000 < ttl <= 60_000 for ttl in ttls), ttls


def test_a_thread_without_ttl_keeps_no_expiry(redis_client: redis.Redis, prefix: str) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, keep_last=2)
    History(saver).run(9)
    saver.delete_for_runs(["run-1"])
    saver.rebuild("t")
    assert all(redis_client.pttl(k) == -1 for k in thread_keys(prefix, "t"))


def test_readers_skip_the_events_of_an_expired_thread(
    redis_client: redis.Redis, prefix: str
) -> None:
    short = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=0.5)
    History(short, thread_id="brief").run(2)
    keep = RedisStreamSaver(redis_client, prefix=prefix)
    History(keep, thread_id="stays").run(2)
    wait_for(lambda: not redis_client.exists(thread_keys(prefix, "brief").log))

    reports: list[SkippedEvent] = []
    events = list(keep.tail_all(after="0", follow=False, on_skip=reports.append))
    assert {e.thread_id for e in events} == {"stays"} and len(events) == 4
    assert len(reports) == 4
    assert {r.thread_id for r in reports} == {"brief"}
    assert all(r.reason.startswith("gone") for r in reports)

    skipped: list[SkippedEvent] = []
    handled = []
    with keep.consumer_group("g", "m", start="0", block_ms=50, on_skip=skipped.append) as group:
        for delivery in group:
            handled.append(delivery.event.thread_id)
            group.ack(delivery)
            if len(handled) == 4:
                break
    assert handled == ["stays"] * 4
    assert [r.thread_id for r in skipped] == ["brief"] * 4


# --------------------------------------------------------------------------- #
# keep_last
# --------------------------------------------------------------------------- #


def test_keep_last_keeps_reads_exact_and_the_log_bounded(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver
) -> None:
    saver = kept_saver(redis_client, prefix, 3)
    history = History(saver, reference)
    log = thread_keys(saver.prefix, "t").log
    longest = 0
    for step in range(50):
        history.step(step)
        n = len(listed(saver))
        assert 3 <= n <= 6 or step < 3
        longest = max(longest, redis_client.xlen(log))
    # two events per checkpoint, at most 2N checkpoints, and the last compaction's tombstone
    assert longest <= 13
    assert assert_reads_match(saver, reference, "t") >= 3
    latest = saver.get_tuple(config("t"))
    assert latest is not None
    values = latest.checkpoint["channel_values"]
    # written once at step 1, by a checkpoint pruned long ago, and still read at step 49
    assert values["once"] == "written at step 1 only"
    assert len(values["messages"]) == 50
    assert latest.pending_writes == [
        ("task49", "__interrupt__", "interrupt at step 49"),
        ("task49", "n", 49),
    ]
    assert [c.config for c in listed(saver, limit=3)] == [
        c.config for c in listed(reference, limit=3)
    ]
    assert saver.verify("t")[2] == []


def test_keep_last_stores_what_changed_not_copies(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver
) -> None:
    """After compactions the log holds one whole message list, for the oldest kept checkpoint;
    later ones hold their new message as an append part."""
    saver = kept_saver(redis_client, prefix, 4)
    History(saver, reference).run(40)
    entries = redis_client.xrange(thread_keys(saver.prefix, "t").log)
    checkpoints = [f for _, f in entries if f[b"k"] == b"checkpoint"]
    assert 4 <= len(checkpoints) <= 8
    message_bytes = sum(
        len(value)
        for f in checkpoints
        for name, value in f.items()
        if name.startswith(b"b") and name[1:].isdigit() and MESSAGE.encode() in value
    )
    latest = saver.get_tuple(config("t"))
    assert latest is not None
    final = len(saver.serde.dumps_typed(latest.checkpoint["channel_values"]["messages"])[1])
    # a whole copy per kept checkpoint would be about len(checkpoints) * final; the snapshot
    # and appends of one chain stay within twice the final value
    assert final <= message_bytes <= 2.2 * final
    # every kept checkpoint but the oldest stores its new message as an append part
    for f in checkpoints[1:]:
        kinds = [ormsgpack.unpackb(v)[0] for n, v in f.items() if MESSAGE.encode() in v]
        assert kinds in (["append"], ["msgpack"])
    assert_reads_match(saver, reference, "t")


def test_keep_last_counts_each_namespace_and_keeps_forks_across_the_boundary(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver
) -> None:
    saver = kept_saver(redis_client, prefix, 2)
    root = History(saver, reference).run(6)
    child = History(saver, reference, ns="child:1").run(3)
    # a fork from a checkpoint about to be pruned, continued past several compactions: its
    # values were first written by checkpoints that no longer exist
    root.fork(root.ids[3], 100)
    root.run(6, start=101)
    child.run(9, start=3)
    per_ns = {
        ns: [c for c in listed(saver) if c.config["configurable"]["checkpoint_ns"] == ns]
        for ns in ("", "child:1")
    }
    assert all(2 <= len(v) <= 4 for v in per_ns.values())
    assert_reads_match(saver, reference, "t")
    latest = saver.get_tuple(config("t"))
    assert latest is not None
    assert len(latest.checkpoint["channel_values"]["messages"]) == 4 + 7


@pytest.mark.parametrize("thread_id", ["", "a:{b}:log", "*?[]\n", "é🙂"])
def test_keep_last_with_hostile_ids(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver, thread_id: str
) -> None:
    saver = kept_saver(redis_client, prefix, 2)
    for ns in ("", thread_id or ":", "1:x", "1:x\xff"):
        History(saver, reference, thread_id=thread_id, ns=ns).run(7)
    assert assert_reads_match(saver, reference, thread_id) >= 8
    assert saver.verify(thread_id)[2] == []


def test_keep_last_survives_copy_and_rebuild(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver
) -> None:
    saver = kept_saver(redis_client, prefix, 3)
    History(saver, reference).run(20)
    before = listed(saver)
    saver.copy_thread("t", "copy")
    for item in listed(saver, "copy"):
        cid = item.config["configurable"]["checkpoint_id"]
        want = saver.get_tuple(config("t", cid))
        assert want is not None
        assert (item.checkpoint, item.metadata, item.pending_writes) == (
            want.checkpoint,
            want.metadata,
            want.pending_writes,
        )
    assert len(listed(saver, "copy")) == len(before)
    # replaying the compacted log gives back identical reads
    keys = thread_keys(saver.prefix, "t")
    redis_client.delete(keys.ix, keys.ptr)
    with pytest.raises(MissingIndexError):
        listed(saver)  # never an empty history while the log holds one
    applied, skipped, problems = saver.rebuild("t")
    assert applied > 0 and skipped == 0 and not problems
    assert listed(cold(saver)) == before
    assert_reads_match(saver, reference, "t")


def test_a_compaction_costs_the_writer_no_extra_round_trip(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver
) -> None:
    """The put that compacts learns where its values went, so the next put still sends only
    its new message, in one script call."""
    saver = kept_saver(redis_client, prefix, 2)
    history = History(saver, reference).run(4)  # the 5th put compacts
    calls: list[str] = []
    execute = saver._execute

    def counting(op: Any) -> Any:
        calls.append(getattr(op, "script", type(op).__name__))
        return execute(op)

    saver._execute = counting  # type: ignore[method-assign]

    def newest_parts(saver: RedisStreamSaver) -> list[str]:
        log = thread_keys(saver.prefix, "t").log
        checkpoint = redis_client.xrevrange(log, count=2)[1][1]
        assert checkpoint[b"k"] == b"checkpoint"
        return [ormsgpack.unpackb(v)[0] for v in checkpoint.values() if MESSAGE.encode() in v]

    for step in range(4, 12):
        history.step(step)
        # stored as the saver that never compacts stores it (an append, or a due snapshot)
        assert newest_parts(saver) == newest_parts(reference)
    assert calls == ["append_compacting", "append"] * 8
    assert redis_client.xlen(thread_keys(saver.prefix, "t").log) < 12
    assert_reads_match(saver, reference, "t")


def test_writes_that_arrive_before_their_checkpoint_survive_a_compaction(
    redis_client: redis.Redis, prefix: str
) -> None:
    """LangGraph may send a step's writes before that step's checkpoint is stored."""
    saver = kept_saver(redis_client, prefix, 2)
    History(saver, ns="other").run(1)
    History(saver).run(4)
    early = generate_checkpoint()
    elsewhere = generate_checkpoint()
    saver.put_writes(config("t", early["id"]), [("x", "early")], "task")
    saver.put_writes(config("t", elsewhere["id"], ns="other"), [("y", "waiting")], "task")
    # this put compacts the thread (4 checkpoints in its namespace, keep_last=2)
    saver.put(config("t"), early, generate_metadata(step=4), {})
    assert redis_client.xlen(thread_keys(saver.prefix, "t").log) < 10
    saver.put(config("t", ns="other"), elsewhere, generate_metadata(step=1), {})
    for cfg, want in (
        (config("t", early["id"]), [("task", "x", "early")]),
        (config("t", elsewhere["id"], ns="other"), [("task", "y", "waiting")]),
    ):
        got = cold(saver).get_tuple(cfg)
        assert got is not None and got.pending_writes == want


def test_prune_keep_latest_keeps_records_of_deletions(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    History(saver).run(8)
    saver.delete_for_runs(["run-0"])
    saver.prune(["t"])
    kinds = [f[b"k"] for _, f in redis_client.xrange(thread_keys(prefix, "t").log)]
    # the prune's own tombstone first (docs/audit.md), then the deletion record it kept
    assert kinds == [b"pruned", b"delete", b"checkpoint", b"writes"]
    assert len(listed(saver)) == 1


# --------------------------------------------------------------------------- #
# delete_for_runs
# --------------------------------------------------------------------------- #


def test_delete_for_runs_takes_the_payloads_out_of_the_log(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    history = History(saver)
    for step in range(9):
        history.step(step, run="secret" if step in (1, 2) else f"run-{step}")
    survivors = {c.config["configurable"]["checkpoint_id"]: c for c in listed(saver)}
    deleted = set(history.ids[1:3])
    for cid in deleted:
        survivors.pop(cid)
    saver.delete_for_runs(["secret"])

    entries = redis_client.xrange(thread_keys(prefix, "t").log)
    dump = b"".join(v for _, f in entries for v in f.values())
    # what only those runs stored: their notes (later steps wrote new ones) and their writes
    for step in (1, 2):
        assert f"note of step {step}".encode() not in dump
        assert f"interrupt at step {step}".encode() not in dump
    assert b"note of step 3" in dump and b"interrupt at step 3" in dump
    assert not any(f.get(b"id", b"").decode() in deleted for _, f in entries)
    # what was deleted, and when, stays: the last event names it, without payloads
    last = entries[-1][1]
    assert last[b"k"] == b"delete" and ormsgpack.unpackb(last[b"runs"]) == ["secret"]
    assert set(ormsgpack.unpackb(last[b"items"])[1::2]) == deleted
    assert {k for k in last} == {b"k", b"sv", b"thread", b"items", b"runs", b"upto", b"ch", b"dg"}
    assert last[b"upto"].decode() == max(deleted)

    # the survivors read as before, though values they read were stored by deleted events
    # (step 1 wrote "once", and the message list chain ran through steps 1 and 2)
    got = {c.config["configurable"]["checkpoint_id"]: c for c in listed(cold(saver))}
    assert got == survivors
    latest = saver.get_tuple(config("t"))
    assert latest is not None and latest.checkpoint["channel_values"]["once"] == (
        "written at step 1 only"
    )
    assert saver.verify("t")[2] == []
    # a rebuild gives the same reads
    keys = thread_keys(prefix, "t")
    redis_client.delete(keys.ix, keys.ptr)
    saver.rebuild("t")
    assert {c.config["configurable"]["checkpoint_id"]: c for c in listed(cold(saver))} == survivors
    # and later deletions keep the earlier records
    saver.delete_for_runs(["run-8"])
    kinds = [f[b"k"] for _, f in redis_client.xrange(keys.log)]
    assert kinds.count(b"delete") == 2 and kinds[-1] == b"delete"


def test_delete_for_runs_of_every_checkpoint_leaves_only_the_record(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    History(saver).run(3, start=0)  # all in run-0
    saver.delete_for_runs(["run-0"])
    entries = redis_client.xrange(thread_keys(prefix, "t").log)
    assert [f[b"k"] for _, f in entries] == [b"pruned", b"delete"]
    assert saver.get_tuple(config("t")) is None


# --------------------------------------------------------------------------- #
# a real graph
# --------------------------------------------------------------------------- #


def test_a_graph_on_keep_last_reads_its_latest_states_as_in_memory(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = kept_saver(redis_client, prefix, 3, ttl_seconds=3600)
    memory = InMemorySaver()
    states = []
    for cp in (saver, memory):
        graph = graphs.build_linear(cp)
        t = graphs.thread("g")
        for i in range(12):
            graph.invoke({"log": [f"in{i}"], "total": i}, t)
        norm = graphs.Normalizer()
        history = [norm(s) for s in graph.get_state_history(t)]
        states.append((norm(graph.get_state(t)), history))
    (ours, our_history), (ref, ref_history) = states
    assert ours == ref
    assert ours["values"]["total"] == 120 and len(ours["values"]["log"]) == 12 * 4
    # the newest snapshots, the last 3 to 6 per namespace, are those of the full history
    assert 3 <= len(our_history) <= 6 < len(ref_history)
    assert our_history == ref_history[: len(our_history)]
    assert saver.verify("g")[2] == []


def test_conformance_suite_with_keep_last(redis_url: str) -> None:
    """The suite puts at most 4 checkpoints in a namespace, so keep_last=2 lets it see all it
    wrote while every put runs the retention path (count, TTL) of the append script; with
    keep_last=1 the tests that list a whole history fail, as they should."""
    import asyncio
    from uuid import uuid4

    from langgraph.checkpoint.conformance import checkpointer_test, validate

    from tests.test_conformance import SyncDriven, _assert_all_passed

    async def factory() -> Iterator[SyncDriven]:  # type: ignore[misc]
        client = redis.Redis.from_url(redis_url)
        yield SyncDriven(
            RedisStreamSaver(client, prefix=f"conf{uuid4().hex[:8]}", keep_last=2, ttl_seconds=600)
        )
        client.close()

    report = asyncio.run(validate(checkpointer_test(name="keep_last=2")(factory)))
    _assert_all_passed(report)


async def test_async_saver_compacts_and_expires_alike(redis_url: str, prefix: str) -> None:
    import redis.asyncio as aredis

    from streamsaver import AsyncRedisStreamSaver

    client = aredis.Redis.from_url(redis_url)
    saver = AsyncRedisStreamSaver(client, prefix=prefix, keep_last=2, ttl_seconds=600)
    parent: str | None = None
    messages: list[str] = []
    version = None
    for step in range(9):
        messages.append(f"{step}: {MESSAGE}")
        version = saver.get_next_version(version)
        checkpoint = generate_checkpoint(
            channel_values={"messages": list(messages)}, channel_versions={"messages": version}
        )
        stored = await saver.aput(
            config("t", parent), checkpoint, generate_metadata(step=step), {"messages": version}
        )
        await saver.aput_writes(stored, [("n", step)], "task")
        parent = checkpoint["id"]
    kept = [c async for c in saver.alist({"configurable": {"thread_id": "t"}})]
    assert 2 <= len(kept) <= 4
    assert kept[0].checkpoint["channel_values"]["messages"] == messages
    assert kept[0].pending_writes == [("task", "n", 8)]
    for key in thread_keys(prefix, "t"):
        assert await client.pttl(key) > 500_000
    await client.aclose()


def test_compactions_keep_the_digest_chain_verifiable(
    redis_client: redis.Redis, prefix: str, reference: RedisStreamSaver
) -> None:
    # keep_last compacts every few puts, delete_for_runs once more: each leaves a 'pruned'
    # tombstone that carries the trimmed range on, and the chain verifies after each
    saver = kept_saver(redis_client, prefix, 2)
    History(saver, reference).run(12)
    assert saver.verify_chain("t").ok
    first = redis_client.xrange(thread_keys(saver.prefix, "t").log, count=1)[0][1]
    assert first[b"k"] == b"pruned" and int(first[b"n"]) > 12
    saver.delete_for_runs(["run-1"])
    assert saver.verify_chain("t").ok
    assert saver.verify("t")[2] == []
