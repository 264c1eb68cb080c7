"""Long operations run in bounded slices (issue 13): a sliced rebuild gives exactly what one
replay script gives, keeps the writes made between its slices, and starts again when the log
is rewritten under it; deleting a long thread reads only what it must."""

from __future__ import annotations

from typing import Any

import redis

from streamsaver import RedisStreamSaver
from streamsaver._keys import rebuild_keys, thread_keys
from streamsaver._ops import Each, Eval, Replay
from tests.test_deletion import history, put
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
    """The rebuild as one replay.lua call, what slices must equal."""
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


def test_writes_between_slices_are_kept(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    configs = history(sync_saver, 30)
    sync_saver._ops.slice_events = 5
    flow = sync_saver._ops.rebuild("t")
    reply = sync_saver._execute(next(flow))
    # a writer between slices: the live indexes get it, the log too, and so must the rebuild
    late = put(sync_saver, configs[-1], 30)
    sync_saver.put_writes(late, [("messages", "late write")], "late-task")
    try:
        while True:
            reply = sync_saver._execute(flow.send(reply))
    except StopIteration as stop:
        sliced = stop.value
    after = indexes(redis_client, sync_saver, "t")
    assert sync_saver.get_tuple(generate_config("t")).config == late  # type: ignore[union-attr]
    assert one_script(sync_saver, "t") == sliced
    assert indexes(redis_client, sync_saver, "t") == after


def test_a_log_rewritten_between_slices_restarts_the_rebuild(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 30)
    sync_saver._ops.slice_events = 5
    flow = sync_saver._ops.rebuild("t")
    reply = sync_saver._execute(next(flow))
    # a compaction trims what the first slice replayed
    sync_saver.prune(["t"], strategy="keep_latest")
    try:
        while True:
            reply = sync_saver._execute(flow.send(reply))
    except StopIteration as stop:
        sliced = stop.value
    after = indexes(redis_client, sync_saver, "t")
    assert sliced.applied == redis_client.xlen(thread_keys(sync_saver.prefix, "t").log)
    assert one_script(sync_saver, "t") == sliced
    assert indexes(redis_client, sync_saver, "t") == after


def test_a_rebuilt_thread_with_a_ttl_keeps_expiring_with_its_log(
    redis_url: str, prefix: str, redis_client: redis.Redis
) -> None:
    with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix, ttl_seconds=300) as s:
        history(s, 12)
        s._ops.slice_events = 3
        s.rebuild("t")
        keys = thread_keys(prefix, "t")
        ttls = [redis_client.pttl(k) for k in keys]
        assert all(0 < t <= 300_000 for t in ttls)
        assert max(ttls) - min(ttls) < 1000


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
    log = thread_keys(sync_saver.prefix, "t").log
    ((_, fields),) = redis_client.xrange(log)
    assert fields[b"k"] == b"thread_deleted"
    assert fields[b"upto"] == cp["id"].encode()


def test_a_copy_imports_in_pages_bounded_in_events_and_bytes(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 60, pad=20_000)
    sizes: list[tuple[int, int]] = []
    original = sync_saver._execute

    def watching(op: Any) -> Any:
        if isinstance(op, Eval) and op.script == "import":
            args, n, i = op.args[3:], 0, 0
            while i < len(args):
                i, n = i + int(args[i]) + 1, n + 1
            sizes.append((n, sum(len(a) for a in args if isinstance(a, bytes))))
        return original(op)

    sync_saver._execute = watching  # type: ignore[method-assign]
    sync_saver.copy_thread("t", "t2")
    source, target = (thread_keys(sync_saver.prefix, t).log for t in ("t", "t2"))
    assert sum(n for n, _ in sizes) == redis_client.xlen(source) == redis_client.xlen(target)
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
