"""What the Store's peers offer, on ours: the async store's ``setup``, ``sweep_ttl``,
``start_ttl_sweeper`` and ``stop_ttl_sweeper`` are coroutines, as on ``AsyncPostgresStore`` and
``AsyncSqliteStore``; a sync call on the event loop raises ``asyncio.InvalidStateError`` as
theirs do (and as LangGraph's ``AsyncBatchedBaseStore``); a put takes any ``Mapping``, as
``BaseStore.put`` declares since langgraph-checkpoint 4.3."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
import redis.asyncio as aredis
from langgraph.store.base import PutOp

from streamsaver import (
    AsyncRedisStreamSaver,
    AsyncRedisStreamStore,
    InvalidInputError,
    InvalidUsageError,
    RedisStreamStore,
)

from . import store_servers
from .store_servers import Target, drop

target = store_servers.target  # the fixture: Redis 7, a 3-primary cluster, Valkey 9


@pytest.fixture
def any_store(target: Target, prefix: str) -> Iterator[RedisStreamStore]:
    client = target.client()
    yield RedisStreamStore(client, prefix=prefix)
    drop(client, prefix)
    client.close()


@pytest.fixture
async def any_astore(target: Target, prefix: str) -> AsyncIterator[AsyncRedisStreamStore]:
    client = target.aclient()
    store = AsyncRedisStreamStore(client, prefix=prefix)
    yield store
    await store.stop_ttl_sweeper()
    await client.aclose()
    with target.client() as sync:
        drop(sync, prefix)


def test_async_store_lifecycle_methods_are_coroutines() -> None:
    for name in ("setup", "sweep_ttl", "start_ttl_sweeper", "stop_ttl_sweeper"):
        assert inspect.iscoroutinefunction(getattr(AsyncRedisStreamStore, name)), name
    # the sync store's, as PostgresStore's and SqliteStore's
    for name in ("setup", "sweep_ttl", "start_ttl_sweeper", "stop_ttl_sweeper"):
        assert not inspect.iscoroutinefunction(getattr(RedisStreamStore, name)), name


async def _expired(store: AsyncRedisStreamStore, ns: tuple[str, ...], key: str) -> None:
    deadline = time.monotonic() + 10
    while await store.aget(ns, key, refresh_ttl=False) is not None:
        assert time.monotonic() < deadline, "the item never expired"
        await asyncio.sleep(0.01)


async def test_async_setup_and_sweep_ttl(any_astore: AsyncRedisStreamStore) -> None:
    astore = any_astore
    await astore.setup()
    await astore.setup()  # idempotent, as the peers'
    await astore.aput(("s",), "gone", {"v": 1}, ttl=1 / 60_000)
    await astore.aput(("s",), "kept", {"v": 2})
    await _expired(astore, ("s",), "gone")
    # expired items are out of every read already; the sweep deletes them, as events
    assert await astore.sweep_ttl() == 1
    assert await astore.sweep_ttl() == 0
    assert [e.why for e in await astore.ahistory(("s",), "gone")] == [None, "expired"]
    assert (await astore.aget(("s",), "kept")) is not None


async def test_async_sweeper_is_a_task_stopped_with_a_result(
    any_astore: AsyncRedisStreamStore,
) -> None:
    astore = any_astore
    # nothing to sweep on: a task already done, as AsyncPostgresStore returns
    idle = await astore.start_ttl_sweeper()
    assert isinstance(idle, asyncio.Task)
    await idle
    assert await astore.stop_ttl_sweeper() is True

    task = await astore.start_ttl_sweeper(0.0005)
    assert isinstance(task, asyncio.Task) and not task.done()
    assert await astore.start_ttl_sweeper(0.0005) is task  # already sweeping: the same task
    await astore.aput(("s",), "k", {"v": 1}, ttl=1 / 60_000)
    deadline = time.monotonic() + 10
    while len(await astore.ahistory(("s",), "k")) < 2:
        assert time.monotonic() < deadline, "the sweeper never swept"
        await asyncio.sleep(0.01)
    assert await astore.stop_ttl_sweeper(timeout=5) is True
    assert task.done()


def test_sync_sweeper_is_a_future_stopped_with_a_result(any_store: RedisStreamStore) -> None:
    store = any_store
    future = store.start_ttl_sweeper(0.0005)
    assert isinstance(future, concurrent.futures.Future) and not future.done()
    assert store.start_ttl_sweeper(0.0005) is future
    assert store.stop_ttl_sweeper(timeout=5) is True
    assert future.done() and future.result() is None
    assert store.stop_ttl_sweeper() is True  # not running: nothing to stop


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), 1e18, "5", True])
async def test_sweeper_interval_refused(
    store: RedisStreamStore, astore: AsyncRedisStreamStore, interval: Any
) -> None:
    with pytest.raises(InvalidInputError, match="sweep_interval_minutes"):
        store.start_ttl_sweeper(interval)
    with pytest.raises(InvalidInputError, match="sweep_interval_minutes"):
        await astore.start_ttl_sweeper(interval)
    with pytest.raises(InvalidInputError, match="sweep_interval_minutes"):
        RedisStreamStore(store._saver.client, ttl={"sweep_interval_minutes": interval})


async def test_sync_call_on_the_loop_is_an_invalid_state(
    any_astore: AsyncRedisStreamStore,
) -> None:
    astore = any_astore
    calls = [
        lambda: astore.put(("foo", "bar"), "baz", {"val": "baz"}),
        lambda: astore.get(("foo", "bar"), "baz"),
        lambda: astore.delete(("foo", "bar"), "baz"),
        lambda: astore.search(("foo", "bar")),
        lambda: astore.list_namespaces(prefix=("foo",)),
        lambda: astore.batch([PutOp(namespace=("foo", "bar"), key="baz", value={"v": 1})]),
    ]
    for call in calls:
        # what the async peers raise, and still the InvalidUsageError it was
        with pytest.raises(asyncio.InvalidStateError, match="aget") as caught:
            call()
        assert isinstance(caught.value, InvalidUsageError)
    assert await astore.aget(("foo", "bar"), "baz") is None  # nothing was written


async def test_sync_call_on_the_loop_is_an_invalid_state_for_the_saver(
    redis_url: str, prefix: str
) -> None:
    client = aredis.Redis.from_url(redis_url)
    saver = AsyncRedisStreamSaver(client, prefix=prefix)
    await saver.asetup()
    with pytest.raises(asyncio.InvalidStateError, match="aget_tuple") as caught:
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert isinstance(caught.value, InvalidUsageError)
    await client.aclose()


class _Frozen(Mapping[str, Any]):
    def __init__(self, **data: Any) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


async def test_put_takes_any_mapping(
    any_store: RedisStreamStore, any_astore: AsyncRedisStreamStore
) -> None:
    store, astore = any_store, any_astore
    store.put(("m",), "proxy", MappingProxyType({"a": 1}))
    store.put(("m",), "custom", _Frozen(b=[1, 2]))
    await astore.aput(("m",), "async", _Frozen(c="x"))
    got = {i.key: i.value for i in await astore.asearch(("m",))}
    assert got == {"proxy": {"a": 1}, "custom": {"b": [1, 2]}, "async": {"c": "x"}}
    assert all(type(v) is dict for v in got.values())
    # still no lists, strings or numbers
    for bad in ([1], "x", 3):
        with pytest.raises(InvalidInputError, match="must be a mapping"):
            store.put(("m",), "bad", bad)  # type: ignore[arg-type]
