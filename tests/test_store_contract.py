"""Store contract cases that need more than one call at a time or the passing of time, on
every server the store supports (Redis 7, a 3-primary cluster, Valkey 9), sync and async:
concurrent writers to one key, large values, TTL expiry and refresh. The call-by-call
comparison with InMemoryStore is tests/test_store.py's Hypothesis suite, on the same servers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from streamsaver import AsyncRedisStreamStore, RedisStreamStore

from . import store_servers
from .store_servers import Target, drop

target = store_servers.target  # the fixture: Redis 7, a 3-primary cluster, Valkey 9

# hostile on purpose: a hash tag, glob characters, a newline, unicode
NS = ("team:{a}", "u*?[1]\n", "é中😀")
KEY = "k:{x}*"


@pytest.fixture
def store(target: Target, prefix: str) -> Iterator[RedisStreamStore]:
    client = target.client()
    yield RedisStreamStore(client, prefix=prefix)
    drop(client, prefix)
    client.close()


@pytest.fixture
async def astore(target: Target, prefix: str) -> AsyncIterator[AsyncRedisStreamStore]:
    client = target.aclient()
    yield AsyncRedisStreamStore(client, prefix=prefix)
    await client.aclose()
    with target.client() as sync:
        drop(sync, prefix)


def _value(writer: int, n: int) -> dict[str, Any]:
    # each value's parts name their writer, so a value torn between two writes shows
    return {"writer": writer, "n": n, "body": [f"{writer}-{n}"] * (50 * (writer + 1))}


def _whole(value: dict[str, Any]) -> bool:
    return value["body"] == [f"{value['writer']}-{value['n']}"] * (50 * (value["writer"] + 1))


def _last_write_won(store_value: dict[str, Any], events: list[Any], writes: int) -> None:
    puts = [e for e in events if e.kind == "put"]
    assert len(puts) == writes
    assert all(e.value is not None and _whole(e.value) for e in puts)
    # the item is the log's last put, and each put replaced the one before it in the log
    assert store_value == puts[-1].value
    assert [e.old_digest for e in puts[1:]] == [e.value_digest for e in puts[:-1]]


def test_concurrent_writers_to_one_key(target: Target, store: RedisStreamStore) -> None:
    writers, each = 6, 15
    start = threading.Barrier(writers)

    def write(w: int) -> None:
        # a client each: the threads' writes race on the server, not in one client's lock
        with target.client() as client:
            mine = RedisStreamStore(client, prefix=store._ops.prefix)
            start.wait()
            for n in range(each):
                mine.put(NS, KEY, _value(w, n))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = store.get(NS, KEY)
    assert got is not None and _whole(got.value)
    _last_write_won(got.value, store.history(NS, KEY, values=True), writers * each)
    assert store.verify()[2] == []


async def test_async_concurrent_writers_to_one_key(astore: AsyncRedisStreamStore) -> None:
    await asyncio.gather(*(astore.aput(NS, KEY, _value(w % 4, w)) for w in range(40)))
    got = await astore.aget(NS, KEY)
    assert got is not None and _whole(got.value)
    _last_write_won(got.value, await astore.ahistory(NS, KEY, values=True), 40)
    assert (await astore.averify())[2] == []


def test_large_value_round_trips(store: RedisStreamStore) -> None:
    big = {"blob": "x" * 3_000_000, "nested": {"list": list(range(50_000))}}
    store.put(NS, KEY, big)
    got = store.get(NS, KEY)
    assert got is not None and got.value == big
    assert [i.key for i in store.search(NS[:1])] == [KEY]


def test_ttl_expiry_and_refresh(target: Target, prefix: str) -> None:
    client = target.client()
    try:
        store = RedisStreamStore(client, prefix=prefix, ttl={"refresh_on_read": True})
        two_s = 2 / 60
        store.put(NS, "read", {"v": 1}, ttl=two_s)
        store.put(NS, "unread", {"v": 2}, ttl=two_s)
        store.put(NS[:1], "kept", {"v": 3})
        time.sleep(1.2)
        assert store.get(NS, "read") is not None  # restarts its two seconds
        time.sleep(1.2)
        # `unread` ran out (2.0 s) and is gone from every read before any sweep; `read`,
        # refreshed at 1.2 s, lives until 3.2 s
        assert store.get(NS, "unread", refresh_ttl=False) is None
        assert store.get(NS, "read", refresh_ttl=False) is not None
        assert [i.key for i in store.search(NS[:1], refresh_ttl=False)] == ["kept", "read"]
        assert store.sweep_ttl() == 1
        assert [e.kind for e in store.history(NS, "read")] == ["put", "touch"]
        assert store.history(NS, "unread")[-1].why == "expired"
        assert store.list_namespaces() == sorted([NS, NS[:1]])
        assert store.verify()[2] == []
    finally:
        drop(client, prefix)
        client.close()


async def test_async_ttl_expiry(target: Target, prefix: str) -> None:
    client = target.aclient()
    try:
        store = AsyncRedisStreamStore(client, prefix=prefix, ttl={"default_ttl": 0.5 / 60})
        await store.aput(NS, KEY, {"v": 1})
        await asyncio.sleep(0.8)
        assert await store.aget(NS, KEY) is None
        assert await store.alist_namespaces() == []
        assert await store.asweep_ttl() == 1
        assert (await store.averify())[2] == []
    finally:
        await client.aclose()
        with target.client() as sync:
            drop(sync, prefix)


def test_tail_wakes_when_a_memory_is_written(target: Target, store: RedisStreamStore) -> None:
    """A following tail sees a put long before its poll_s runs out: on a single server it
    blocks on the logs (XREAD), so the put wakes it; a cluster tail sleeps poll_s, so there it
    is given a short one."""
    poll_s = 0.2 if target.kind == "cluster" else 120.0
    cursor = store.changes()[1]
    seen: list[str] = []

    def follow() -> None:
        for event in store.tail(cursor, poll_s=poll_s):
            seen.append(event.key)
            return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    time.sleep(0.3)  # the tail is now idle, waiting
    store.put(NS, KEY, {"v": 1})
    reader.join(timeout=30)
    assert seen == [KEY]


async def test_async_tail_wakes_when_a_memory_is_written(
    target: Target, astore: AsyncRedisStreamStore
) -> None:
    poll_s = 0.2 if target.kind == "cluster" else 120.0
    cursor = (await astore.achanges())[1]

    async def first() -> str:
        async for event in astore.atail(cursor, poll_s=poll_s):
            return event.key
        return ""

    reader = asyncio.create_task(first())
    await asyncio.sleep(0.3)
    # a client of its own: the tail's connection is blocked in its read
    client = target.aclient()
    try:
        await AsyncRedisStreamStore(client, prefix=astore._ops.prefix).aput(NS, KEY, {"v": 1})
        assert await asyncio.wait_for(reader, timeout=30) == KEY
    finally:
        await client.aclose()
