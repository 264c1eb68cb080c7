"""The checkpointers measured side by side, each opened by a small factory on its own backend.

A factory is a context manager that yields a ready saver (or, for the raw floor, a command
sender). :func:`discover` opens each one once; a peer whose package is missing or whose server
does not answer is returned as :class:`Absent` with the reason, so the report can list it.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from .backends import (
    Backend,
    BackendKind,
    PostgresBackend,
    RedisBackend,
    SqliteBackend,
    open_backend,
)
from .floors import (
    AsyncPingFloorSaver,
    AsyncPingSocket,
    AsyncRawFloor,
    Op,
    PingFloorSaver,
    PingSocket,
    RawFloor,
)

__all__ = [
    "FLOOR",
    "MEMORY",
    "RAW",
    "SOCKET",
    "Absent",
    "AsyncTarget",
    "Peer",
    "SyncTarget",
    "discover",
]

RAW = "raw floor"
FLOOR = "floor saver"
SOCKET = "socket floor"
MEMORY = "InMemorySaver"

Saver = BaseCheckpointSaver[Any]
SyncTarget = Saver | RawFloor
AsyncTarget = Saver | AsyncRawFloor
# the async factories take the number of concurrent callers, so pooled peers can size a pool
SyncFactory = Callable[[Backend], AbstractContextManager[SyncTarget]]
AsyncFactory = Callable[[Backend, int], AbstractAsyncContextManager[AsyncTarget]]

_POSTGRES_POOL_MAX = 32
_ASYNC_POOL_MIN = 100
_ASYNC_POOL_PER_CALLER = 4
_REASON_CHARS = 300


@dataclass(frozen=True)
class Peer:
    name: str
    backend: BackendKind
    open_sync: SyncFactory
    open_async: AsyncFactory | None
    setup: str


@dataclass(frozen=True)
class Absent:
    name: str
    reason: str


def _url(backend: Backend) -> str:
    if not isinstance(backend, RedisBackend):
        raise TypeError(f"needs a Redis backend, got {backend.kind}")
    return backend.url


@contextmanager
def _sync_client(backend: Backend) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(_url(backend))
    try:
        yield client
    finally:
        client.close()


@asynccontextmanager
async def _async_client(backend: Backend, concurrency: int) -> AsyncIterator[redis.asyncio.Redis]:
    # redis-py's async pool refuses a 101st connection by default; langgraph-checkpoint-redis
    # holds more than one per caller, so every peer gets the same, roomier pool.
    client = redis.asyncio.Redis.from_url(
        _url(backend), max_connections=max(_ASYNC_POOL_MIN, _ASYNC_POOL_PER_CALLER * concurrency)
    )
    try:
        yield client
    finally:
        await client.aclose()


# -- the floors -------------------------------------------------------------------------------


def _on_client(floor: Callable[[redis.Redis], SyncTarget]) -> SyncFactory:
    """The sync peer that is *floor* on a redis-py client of its own."""

    @contextmanager
    def opened(backend: Backend) -> Iterator[SyncTarget]:
        with _sync_client(backend) as client:
            yield floor(client)

    return opened


def _on_async_client(floor: Callable[[redis.asyncio.Redis], AsyncTarget]) -> AsyncFactory:
    """The async peer that is *floor* on a redis-py asyncio client of its own."""

    @asynccontextmanager
    async def opened(backend: Backend, concurrency: int) -> AsyncIterator[AsyncTarget]:
        async with _async_client(backend, concurrency) as client:
            yield floor(client)

    return opened


def _address(backend: Backend) -> tuple[str, int]:
    url = urllib.parse.urlsplit(_url(backend))
    return url.hostname or "127.0.0.1", url.port or 6379


@contextmanager
def socket_sync(backend: Backend) -> Iterator[SyncTarget]:
    sock = PingSocket(*_address(backend))
    try:
        yield PingFloorSaver(sock)
    finally:
        sock.close()


@asynccontextmanager
async def socket_async(backend: Backend, concurrency: int) -> AsyncIterator[AsyncTarget]:
    sock = await AsyncPingSocket.connect(*_address(backend))
    try:
        yield AsyncPingFloorSaver(sock)
    finally:
        sock.close()


@contextmanager
def memory_sync(backend: Backend) -> Iterator[SyncTarget]:
    yield InMemorySaver()


@asynccontextmanager
async def memory_async(backend: Backend, concurrency: int) -> AsyncIterator[AsyncTarget]:
    yield InMemorySaver()


# -- the peers --------------------------------------------------------------------------------


@contextmanager
def sqlite_sync(backend: Backend) -> Iterator[SyncTarget]:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    assert isinstance(backend, SqliteBackend)
    conn = sqlite3.connect(backend.path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


@asynccontextmanager
async def sqlite_async(backend: Backend, concurrency: int) -> AsyncIterator[AsyncTarget]:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    assert isinstance(backend, SqliteBackend)
    async with aiosqlite.connect(backend.path) as conn:
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        yield saver


_PG_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}


@contextmanager
def postgres_sync(backend: Backend) -> Iterator[SyncTarget]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    assert isinstance(backend, PostgresBackend)
    with psycopg.connect(backend.dsn, row_factory=dict_row, **_PG_KWARGS) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        yield saver


@asynccontextmanager
async def postgres_async(backend: Backend, concurrency: int) -> AsyncIterator[AsyncTarget]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    assert isinstance(backend, PostgresBackend)
    if concurrency <= 1:
        async with await AsyncConnection.connect(
            backend.dsn, row_factory=dict_row, **_PG_KWARGS
        ) as conn:
            saver = AsyncPostgresSaver(conn)
            await saver.setup()
            yield saver
        return
    # One connection would serialize every caller; a pool is how a concurrent app runs it.
    # Capped below the server's max_connections (100 by default), which others share.
    size = min(concurrency, _POSTGRES_POOL_MAX)
    kwargs = {"row_factory": dict_row, **_PG_KWARGS}
    async with AsyncConnectionPool(
        backend.dsn, min_size=size, max_size=size, kwargs=kwargs, open=False
    ) as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        yield saver


@contextmanager
def official_sync(backend: Backend) -> Iterator[SyncTarget]:
    from langgraph.checkpoint.redis import RedisSaver

    with _sync_client(backend) as client:
        saver = RedisSaver(redis_client=client)
        saver.setup()
        yield saver


@asynccontextmanager
async def official_async(backend: Backend, concurrency: int) -> AsyncIterator[AsyncTarget]:
    from langgraph.checkpoint.redis.aio import AsyncRedisSaver

    async with _async_client(backend, concurrency) as client:
        saver = AsyncRedisSaver(redis_client=client)
        await saver.asetup()
        yield saver


@contextmanager
def plainredis_sync(backend: Backend) -> Iterator[SyncTarget]:
    from langgraph_checkpoint_plainredis import RedisSaver

    with _sync_client(backend) as client:
        yield RedisSaver(client, prefix="bench")


@asynccontextmanager
async def plainredis_async(backend: Backend, concurrency: int) -> AsyncIterator[AsyncTarget]:
    from langgraph_checkpoint_plainredis import AsyncRedisSaver

    async with _async_client(backend, concurrency) as client:
        yield AsyncRedisSaver(client, prefix="bench")


@contextmanager
def streamsaver_sync(backend: Backend, reuse_items: bool = False) -> Iterator[SyncTarget]:
    from streamsaver import RedisStreamSaver

    with _sync_client(backend) as client:
        saver = RedisStreamSaver(client, prefix="bench", reuse_items=reuse_items)
        saver.setup()
        yield saver


@asynccontextmanager
async def streamsaver_async(
    backend: Backend, concurrency: int, reuse_items: bool = False
) -> AsyncIterator[AsyncTarget]:
    from streamsaver import AsyncRedisStreamSaver

    async with _async_client(backend, concurrency) as client:
        saver = AsyncRedisStreamSaver(client, prefix="bench", reuse_items=reuse_items)
        await saver.asetup()
        yield saver


def reusing_sync(backend: Backend) -> AbstractContextManager[SyncTarget]:
    return streamsaver_sync(backend, reuse_items=True)


def reusing_async(backend: Backend, concurrency: int) -> AbstractAsyncContextManager[AsyncTarget]:
    return streamsaver_async(backend, concurrency, reuse_items=True)


CANDIDATES: tuple[Peer, ...] = (
    Peer(
        RAW,
        "redis",
        _on_client(RawFloor),
        _on_async_client(AsyncRawFloor),
        "bare redis-py XADD/XREVRANGE, one per call",
    ),
    Peer(
        FLOOR,
        "redis",
        _on_client(PingFloorSaver),
        _on_async_client(AsyncPingFloorSaver),
        "InMemorySaver + one redis-py PING per call",
    ),
    Peer(
        SOCKET,
        "redis",
        socket_sync,
        socket_async,
        "InMemorySaver + one PING per call on a bare socket (async: one pipelined connection)",
    ),
    Peer(MEMORY, "memory", memory_sync, memory_async, "langgraph-checkpoint InMemorySaver"),
    Peer("SqliteSaver", "sqlite", sqlite_sync, sqlite_async, "sqlite3 / aiosqlite, WAL file"),
    Peer(
        "PostgresSaver",
        "postgres",
        postgres_sync,
        postgres_async,
        f"psycopg 3; one connection, a pool of up to {_POSTGRES_POOL_MAX} when concurrent",
    ),
    Peer(
        "langgraph-checkpoint-redis",
        "redis-stack",
        official_sync,
        official_async,
        "RedisSaver / AsyncRedisSaver on Redis Stack (RediSearch + RedisJSON)",
    ),
    Peer(
        "langgraph-checkpoint-plainredis",
        "redis",
        plainredis_sync,
        plainredis_async,
        "RedisSaver / AsyncRedisSaver (separate sync and async classes)",
    ),
    Peer(
        "streamsaver",
        "redis",
        streamsaver_sync,
        streamsaver_async,
        "RedisStreamSaver / AsyncRedisStreamSaver",
    ),
    Peer(
        "streamsaver reuse_items",
        "redis",
        reusing_sync,
        reusing_async,
        "RedisStreamSaver / AsyncRedisStreamSaver with reuse_items=True",
    ),
)


def _reason(exc: BaseException) -> str:
    hint = " (pip install -e '.[bench]')" if isinstance(exc, ImportError) else ""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:_REASON_CHARS] + hint


def _probe_config() -> RunnableConfig:
    return {"configurable": {"thread_id": f"probe-{uuid.uuid4().hex}", "checkpoint_ns": ""}}


def _probe_sync(peer: Peer, postgres_url: str) -> None:
    with open_backend(peer.backend, postgres_url) as backend, peer.open_sync(backend) as target:
        if isinstance(target, RawFloor):
            target.run("probe", [Op("get")])
        else:
            target.get_tuple(_probe_config())


async def _probe_async(factory: AsyncFactory, peer: Peer, postgres_url: str) -> None:
    with open_backend(peer.backend, postgres_url) as backend:
        async with factory(backend, 1) as target:
            if isinstance(target, AsyncRawFloor):
                await target.run("probe", [Op("get")])
            else:
                await target.aget_tuple(_probe_config())


def discover(
    names: Sequence[str], postgres_url: str, progress: Callable[[str], None]
) -> tuple[list[Peer], list[Absent]]:
    """Every candidate peer, opened once: those that work, and the others with the reason.

    A peer whose async variant fails is kept for the sync workloads, without ``open_async``.
    """
    present: list[Peer] = []
    absent: list[Absent] = []
    wanted = [n.lower() for n in names]
    for peer in CANDIDATES:
        if wanted and not any(w in peer.name.lower() for w in wanted):
            continue
        progress(peer.name)
        try:
            _probe_sync(peer, postgres_url)
        except Exception as exc:  # any failure means the peer cannot be measured: say why
            absent.append(Absent(peer.name, _reason(exc)))
            continue
        if peer.open_async is not None:
            try:
                asyncio.run(_probe_async(peer.open_async, peer, postgres_url))
            except Exception as exc:
                absent.append(Absent(f"{peer.name} (async)", _reason(exc)))
                peer = Peer(peer.name, peer.backend, peer.open_sync, None, peer.setup)
        present.append(peer)
    return present, absent
