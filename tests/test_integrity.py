"""Whole or an error, never partial (design principle 12): a checkpoint naming a channel value
that nothing stores is refused on put and raises on every read; a thread that lost keys to an
eviction raises instead of reading as nothing; the server is checked for evictions and for
persistence at setup. Real servers throughout, started here when a test needs its own."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import (
    AsyncRedisStreamSaver,
    DanglingVersionError,
    IntegrityError,
    MissingIndexError,
    MissingValueError,
    NoPersistenceWarning,
    RedisStreamSaver,
    UnsupportedServerError,
)
from streamsaver.core.keys import thread_keys
from streamsaver.core.server import check_eviction
from streamsaver.embedded import EmbeddedRedis
from tests.test_saver import generate_config


def _config(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    return generate_config(thread_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id)


def _put(
    saver: RedisStreamSaver,
    parent: Any,
    values: dict[str, Any],
    versions: dict[str, Any],
    new: dict[str, Any],
) -> Any:
    cp = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.put(parent, cp, generate_metadata(), new)


# --- put: a checkpoint naming a value nothing stores is refused --------------------------------


def test_put_refuses_a_version_neither_new_nor_stored_and_writes_nothing(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    first = _put(sync_saver, _config("t"), {"a": 1, "b": "x"}, {"a": 1, "b": 1}, {"a": 1, "b": 1})
    log = thread_keys(sync_saver.prefix, "t").log
    # b at version 7 was never stored and the checkpoint the writer continues is not in the
    # thread: the writer believes in a history the thread lacks. (Under a live parent, a
    # channel version the thread lacks is one LangGraph renamed: tests/test_langgraph_migration.py)
    lost = _config("t", generate_checkpoint()["id"])
    with pytest.raises(DanglingVersionError) as err:
        _put(sync_saver, lost, {"a": 2, "b": "y"}, {"a": 2, "b": 7}, {"a": 2})
    message = str(err.value)
    assert "'b'" in message and "version 7" in message and "'t'" in message
    assert "nothing written" in message and "get_tuple" in message
    assert isinstance(err.value, IntegrityError)
    assert redis_client.xlen(log) == 1
    got = sync_saver.get_tuple(_config("t"))
    assert got is not None and got.config == first
    # an unchanged channel at a stored version, and a new one, are both fine
    second = _put(sync_saver, first, {"a": 2, "b": "x"}, {"a": 2, "b": 1}, {"a": 2})
    got = sync_saver.get_tuple(second)
    assert got is not None and got.checkpoint["channel_values"] == {"a": 2, "b": "x"}


def test_put_does_not_resolve_a_version_from_another_namespace(
    sync_saver: RedisStreamSaver,
) -> None:
    _put(sync_saver, _config("t", ns="sub"), {"b": "x"}, {"b": 1}, {"b": 1})
    with pytest.raises(DanglingVersionError, match="namespace ''"):
        _put(sync_saver, _config("t"), {"a": 1, "b": "x"}, {"a": 1, "b": 1}, {"a": 1})
    assert sync_saver.get_tuple(_config("t")) is None


async def test_the_async_saver_refuses_it_too(async_saver: AsyncRedisStreamSaver) -> None:
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1, "gone": 3})
    with pytest.raises(DanglingVersionError, match="'gone'"):
        await async_saver.aput(_config("t"), cp, generate_metadata(), {"a": 1})
    assert await async_saver.aget_tuple(_config("t")) is None


# --- reads: a checkpoint whose value is missing raises on every path ---------------------------


def _dangling_thread(saver: RedisStreamSaver, client: redis.Redis) -> tuple[str, str]:
    """Thread "bad": a copy of only the second checkpoint of a thread whose first stored b,
    replayed into indexes; b's value is in no event of "bad". (thread id, checkpoint id)"""
    first = _put(saver, _config("src"), {"a": 1, "b": "x"}, {"a": 1, "b": 1}, {"a": 1, "b": 1})
    second = _put(saver, first, {"a": 2, "b": "x"}, {"a": 2, "b": 1}, {"a": 2})
    (_, fields), *_ = client.xrevrange(thread_keys(saver.prefix, "src").log, count=1)
    event = {k: v for k, v in fields.items() if k not in (b"ch", b"dg")}
    client.xadd(thread_keys(saver.prefix, "bad").log, {**event, b"thread": b"bad"})
    assert saver.rebuild("bad").applied == 1
    return "bad", second["configurable"]["checkpoint_id"]


def test_every_read_of_a_checkpoint_with_a_missing_value_raises(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    thread, checkpoint_id = _dangling_thread(sync_saver, redis_client)
    cold = RedisStreamSaver(redis_client, prefix=sync_saver.prefix)
    reads = {
        "latest": lambda: cold.get_tuple(_config(thread)),
        "by id": lambda: cold.get_tuple(_config(thread, checkpoint_id)),
        "list": lambda: list(cold.list(_config(thread))),
        "list of every namespace": lambda: list(cold.list({"configurable": {"thread_id": thread}})),
        "list by id": lambda: list(cold.list(_config(thread, checkpoint_id))),
        "list(None)": lambda: list(cold.list(None)),
        "after a read cached values": lambda: sync_saver.get_tuple(_config(thread)),
    }
    for name, read in reads.items():
        with pytest.raises(MissingValueError) as err:
            read()
        message = str(err.value)
        for part in ("'bad'", "namespace ''", repr(checkpoint_id), "channel 'b'", "version 1"):
            assert part in message, (name, part, message)
    # the thread it was copied from is whole
    assert cold.get_tuple(_config("src")) is not None


async def test_the_async_saver_raises_on_a_missing_value_too(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, redis_url: str
) -> None:
    thread, _ = _dangling_thread(sync_saver, redis_client)
    client = aredis.Redis.from_url(redis_url)
    saver = AsyncRedisStreamSaver(client, prefix=sync_saver.prefix)
    with pytest.raises(MissingValueError, match="channel 'b'"):
        await saver.aget_tuple(_config(thread))
    with pytest.raises(MissingValueError, match="channel 'b'"):
        [item async for item in saver.alist(_config(thread))]
    await client.aclose()


def test_channels_empty_at_a_version_read_back_as_empty_through_prune_copy_and_keep_last(
    redis_client: redis.Redis, prefix: str
) -> None:
    """An empty channel is stored as a marker, so it is never mistaken for a lost value."""
    for saver in (
        RedisStreamSaver(redis_client, prefix=prefix),
        RedisStreamSaver(redis_client, prefix=prefix + "k", keep_last=1),
        RedisStreamSaver(redis_client, prefix=prefix + "n", delta_cache_bytes=0),
    ):
        # b is new at version 1 but has no value (consumed, or a delta channel): empty
        stored = _put(saver, _config("t"), {"a": [1]}, {"a": 1, "b": 1}, {"a": 1, "b": 1})
        for step in range(2, 5):
            a = list(range(1, step + 1))
            stored = _put(saver, stored, {"a": a}, {"a": step, "b": 1}, {"a": step})
        saver.copy_thread("t", "copy")
        saver.prune(["t"], strategy="keep_latest")
        for thread in ("t", "copy"):
            got = saver.get_tuple(_config(thread))
            assert got is not None
            assert got.checkpoint["channel_values"] == {"a": [1, 2, 3, 4]}
            assert got.checkpoint["channel_versions"] == {"a": 4, "b": 1}
            assert all(
                "b" not in t.checkpoint["channel_values"] for t in saver.list(_config(thread))
            )
        # and the history still resolves for a writer that continues it
        _put(saver, stored, {"a": [0]}, {"a": 5, "b": 1}, {"a": 5})


def test_a_thread_that_expired_between_steps_refuses_its_writers_next_put(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=0.05)
    keys = thread_keys(prefix, "t")
    first = _put(saver, _config("t"), {"a": 1, "b": "x"}, {"a": 1, "b": 1}, {"a": 1, "b": 1})
    deadline = time.monotonic() + 10
    while redis_client.exists(*keys) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert redis_client.exists(*keys) == 0, "the thread did not expire"
    # the writer still holds the state it read: b unchanged, a new
    with pytest.raises(DanglingVersionError, match="channel 'b'"):
        _put(saver, first, {"a": 2, "b": "x"}, {"a": 2, "b": 1}, {"a": 2})
    assert redis_client.exists(*keys) == 0  # nothing written
    assert saver.get_tuple(_config("t")) is None  # expired whole: nothing, not a part


# --- a crash: restart from an RDB older than the last acknowledged writes ----------------------


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as started:
        yield started


def test_after_a_restart_from_an_older_snapshot_the_writers_next_put_is_refused(
    server: EmbeddedRedis,
) -> None:
    client = redis.Redis.from_url(server.url, retry=None)
    writer = RedisStreamSaver(client, prefix="c")
    stored = _put(writer, _config("t"), {"m": ["hi"], "b": "x"}, {"m": 1, "b": 1}, {"m": 1, "b": 1})
    snapshot = writer.get_tuple(stored)
    assert client.save()  # the RDB holds the first checkpoint only
    after = _put(writer, stored, {"m": ["hi", "yo"], "b": "y"}, {"m": 2, "b": 2}, {"m": 2, "b": 2})
    server.kill()
    server.restart()  # loads the older RDB: the second checkpoint and b=2 are gone
    log = thread_keys("c", "t").log
    assert client.xlen(log) == 1
    # the writer goes on from what it acknowledged: m grows (its delta cache holds m at 2),
    # b stays at 2, a version the restarted server never had
    with pytest.raises(DanglingVersionError, match=r"channel 'b'.*version 2"):
        _put(writer, after, {"m": ["hi", "yo", "ok"], "b": "y"}, {"m": 3, "b": 2}, {"m": 3})
    assert client.xlen(log) == 1
    # no read returns partial state: what is there is whole, what is gone is absent
    for reader in (writer, RedisStreamSaver(client, prefix="c")):
        assert reader.get_tuple(_config("t")) == snapshot
        assert reader.get_tuple(after) is None
        assert list(reader.list(_config("t"))) == [snapshot]
    assert writer.verify("t")[2] == []
    client.close()


# --- eviction ----------------------------------------------------------------------------------


def test_setup_refuses_a_policy_that_can_evict_unless_allowed(server: EmbeddedRedis) -> None:
    admin = redis.Redis.from_url(server.url)
    admin.config_set("maxmemory-policy", "allkeys-lru")
    with redis.Redis.from_url(server.url) as client:
        with pytest.raises(UnsupportedServerError) as err:
            RedisStreamSaver(client, prefix="e").setup()
        message = str(err.value)
        assert "'allkeys-lru'" in message
        assert "CONFIG SET maxmemory-policy noeviction" in message
        assert "allow_eviction=True" in message
        # refused before anything is written, from every entry point
        with pytest.raises(UnsupportedServerError, match="allkeys-lru"):
            _put(RedisStreamSaver(client, prefix="e"), _config("t"), {"a": 1}, {"a": 1}, {"a": 1})
        with (
            pytest.raises(UnsupportedServerError, match="allkeys-lru"),
            RedisStreamSaver.from_conn_string(server.url, prefix="e"),
        ):
            pass
        assert admin.dbsize() == 0
        RedisStreamSaver(client, prefix="e", allow_eviction=True).setup()
        with RedisStreamSaver.from_conn_string(server.url, allow_eviction=True) as saver:
            assert saver.allow_eviction
        # volatile-* evicts only keys with a TTL: the saver's have one only with ttl_seconds
        admin.config_set("maxmemory-policy", "volatile-lru")
        RedisStreamSaver(client, prefix="e").setup()
        with pytest.raises(UnsupportedServerError, match=r"'volatile-lru'.*ttl_seconds"):
            RedisStreamSaver(client, prefix="e", ttl_seconds=60).setup()
        admin.config_set("maxmemory-policy", "noeviction")
        RedisStreamSaver(client, prefix="e", ttl_seconds=60).setup()
    admin.close()


async def test_the_async_from_conn_string_refuses_it_too(server: EmbeddedRedis) -> None:
    with redis.Redis.from_url(server.url) as admin:
        admin.config_set("maxmemory-policy", "allkeys-random")
    with pytest.raises(UnsupportedServerError, match="allkeys-random"):
        async with AsyncRedisStreamSaver.from_conn_string(server.url):
            pass
    async with AsyncRedisStreamSaver.from_conn_string(server.url, allow_eviction=True) as saver:
        assert saver.server_version is not None


def test_on_a_cluster_every_primary_must_qualify_and_replicas_do_not_count() -> None:
    ok = {"maxmemory_policy": "noeviction", "role": "master"}
    replica = {"maxmemory_policy": "allkeys-lru", "role": "slave"}
    check_eviction({"a:1": ok, "b:2": ok, "c:3": replica}, ttl=True)
    bad = {"maxmemory_policy": "allkeys-lfu", "role": "master"}
    with pytest.raises(UnsupportedServerError, match="b:2 has maxmemory-policy 'allkeys-lfu'"):
        check_eviction({"a:1": ok, "b:2": bad}, ttl=False)


def test_after_evictions_every_read_is_whole_or_an_integrity_error() -> None:
    with EmbeddedRedis(["--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru"]) as server:
        admin = redis.Redis.from_url(server.url)
        saver = RedisStreamSaver(redis.Redis.from_url(server.url), prefix="ev", allow_eviction=True)
        written: dict[str, list[Any]] = {}
        for i in range(150):
            thread, parent, acked = f"t{i}", _config(f"t{i}"), []
            for step in range(1, 4):
                values = {"msgs": ["x" * 300] * step, "const": "c" * 200}
                versions = {"msgs": step, "const": 1}
                new = versions if step == 1 else {"msgs": step}
                parent = _put(saver, parent, values, versions, new)
                acked.append(saver.get_tuple(parent))
            written[thread] = acked
        stats = admin.info("stats")
        assert stats["evicted_keys"] == 0, "the threads must be written before any eviction"
        # now memory runs short: other data pushes the threads' keys out, some of each
        used = admin.info("memory")["used_memory"]
        admin.config_set("maxmemory", used + 512 * 1024)
        n = 0
        while admin.info("stats")["evicted_keys"] < 200:
            admin.set(f"filler:{n}", b"f" * 4096)
            n += 1
        partial = raised = whole = 0
        cold = RedisStreamSaver(redis.Redis.from_url(server.url), prefix="ev", allow_eviction=True)
        for thread, acked in written.items():
            keys = thread_keys("ev", thread)
            present = admin.exists(*keys)
            partial += 0 < present < 3
            reads = [
                (lambda t=thread: cold.get_tuple(_config(t)), acked[-1]),
                (lambda t=thread: list(cold.list(_config(t))), list(reversed(acked))),
                *((lambda c=t.config: cold.get_tuple(c), t) for t in acked),
            ]
            for read, expected in reads:
                try:
                    got = read()
                except IntegrityError:
                    raised += 1
                    continue
                if got is None or got == []:
                    # nothing is only right for a thread with no key left
                    assert admin.exists(*keys) == 0, (thread, present)
                else:
                    assert got == expected, thread
                    whole += 1
        assert partial > 0 and raised > 0 and whole > 0, (partial, raised, whole)
        admin.close()


def test_a_thread_whose_log_was_evicted_says_its_data_is_lost(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _put(sync_saver, _config("t"), {"a": 1}, {"a": 1}, {"a": 1})
    keys = thread_keys(sync_saver.prefix, "t")
    redis_client.delete(keys.log)  # as an eviction would
    for read in (
        lambda: sync_saver.get_tuple(_config("t")),
        lambda: sync_saver.get_tuple(stored),
        lambda: list(sync_saver.list(_config("t"))),
    ):
        with pytest.raises(IntegrityError, match="lost and a rebuild cannot help"):
            read()


def test_a_thread_whose_indexes_were_evicted_says_rebuild(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _put(sync_saver, _config("t"), {"a": 1}, {"a": 1}, {"a": 1})
    sync_saver.put_writes(stored, [("a", 2)], "task")
    keys = thread_keys(sync_saver.prefix, "t")
    for lost in ([keys.ix], [keys.ptr], [keys.ix, keys.ptr]):
        before = sync_saver.get_tuple(stored)
        redis_client.delete(*lost)
        with pytest.raises(MissingIndexError, match="streamsaver rebuild t"):
            sync_saver.get_tuple(_config("t"))
        with pytest.raises(MissingIndexError, match="streamsaver rebuild t"):
            list(sync_saver.list(_config("t")))
        if keys.ptr in lost:
            with pytest.raises(MissingIndexError, match="streamsaver rebuild t"):
                sync_saver.get_tuple(stored)
        else:
            assert sync_saver.get_tuple(stored) == before  # by id, ptr alone answers: whole
        sync_saver.rebuild("t")
        assert sync_saver.get_tuple(stored) == before
    # a thread with only pending writes (no checkpoint yet) is not mistaken for one
    sync_saver.put_writes(_config("w", "future"), [("a", 1)], "task")
    assert sync_saver.get_tuple(_config("w")) is None
    assert list(sync_saver.list(_config("w"))) == []


# --- persistence -------------------------------------------------------------------------------


def _setup_warnings(url: str, **options: Any) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught, redis.Redis.from_url(url) as client:
        warnings.simplefilter("always")
        RedisStreamSaver(client, **options).setup()
    return [w for w in caught if issubclass(w.category, NoPersistenceWarning)]


def test_setup_warns_when_the_server_persists_nothing(server: EmbeddedRedis) -> None:
    with redis.Redis.from_url(server.url) as client:
        with pytest.warns(NoPersistenceWarning, match="neither AOF.*nor RDB"):
            RedisStreamSaver(client).setup()
        client.config_set("save", "3600 1")
        assert _setup_warnings(server.url) == []
        client.config_set("save", "")
        client.config_set("appendonly", "yes")
        assert _setup_warnings(server.url) == []
        client.config_set("appendonly", "no")
        # a least-privilege user cannot read the save points: that half is skipped quietly
        client.acl_setuser(
            "app", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-config"]
        )
    url = server.url.replace("redis://", "redis://app:pw@")
    assert _setup_warnings(url) == []
