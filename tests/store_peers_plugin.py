"""A pytest plugin that runs the Store tests LangGraph's stores ship (``InMemoryStore``'s in
langgraph-checkpoint, ``PostgresStore``'s and ``SqliteStore``'s, sync and async, in
langgraph-checkpoint-postgres and -sqlite) with streamsaver's stores in their place: the test
bodies and fixtures unchanged, the class names they make a store by bound to streamsaver's.

Once the test modules are imported, this plugin rebinds in each (and in their conftest) the
names of the stores it knows to ``RedisStreamStore`` and ``AsyncRedisStreamStore`` made as
those are (``InMemoryStore(index=...)``, ``PostgresStore.from_conn_string(uri, index=...,
ttl=..., pool_config=...)``), and psycopg's connections, which their fixtures use to create and
drop a database, to ones that do nothing. Each store gets a prefix of its own on the server
``STREAMSAVER_STORE_PEERS_REDIS_URL``, deleted after its test. The peers' ``index`` options
map to streamsaver's (``text_fields`` is ``fields``). tests/store_peers.py fetches the sdists
and runs them this way.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis

from streamsaver import AsyncRedisStreamStore, RedisStreamStore

URL_VARIABLE = "STREAMSAVER_STORE_PEERS_REDIS_URL"
_prefixes: list[str] = []


def _url() -> str:
    url = os.environ.get(URL_VARIABLE)
    if not url:
        raise RuntimeError(f"{URL_VARIABLE} is not set: the Redis server the stores use")
    return url


def _prefix() -> str:
    prefix = f"peer{uuid4().hex[:10]}"
    _prefixes.append(prefix)
    return prefix


def _index(index: Any) -> Any:
    if not isinstance(index, dict):
        return index
    mapped = {k: v for k, v in index.items() if k in ("dims", "embed", "fields")}
    if "fields" not in mapped and index.get("text_fields") is not None:
        mapped["fields"] = index["text_fields"]
    return mapped


class _NoDatabase:
    """psycopg's ``Connection``, for the fixtures that create, clear and drop a Postgres
    database around each test: there is none, so nothing to do."""

    @classmethod
    def connect(cls, *_: Any, **__: Any) -> _NoDatabase:
        return cls()

    def __enter__(self) -> _NoDatabase:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def execute(self, *_: Any, **__: Any) -> None:
        return None


class _AsyncNoDatabase:
    """psycopg's ``AsyncConnection``, as ``_NoDatabase``."""

    @classmethod
    async def connect(cls, *_: Any, **__: Any) -> _AsyncNoDatabase:
        return cls()

    async def __aenter__(self) -> _AsyncNoDatabase:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def execute(self, *_: Any, **__: Any) -> None:
        return None


class PeerStore(RedisStreamStore):
    """``RedisStreamStore`` made as ``InMemoryStore``, ``SqliteStore`` and ``PostgresStore``
    are. The Postgres fixtures rewrite the store's ``MIGRATIONS`` and run SQL on a
    ``_cursor()`` around ``setup()``: none to rewrite, and SQL that does nothing."""

    @contextmanager
    def _cursor(self) -> Iterator[_NoDatabase]:
        yield _NoDatabase()

    def __init__(self, *_: Any, index: Any = None, ttl: Any = None, **__: Any) -> None:
        super().__init__(
            redis.Redis.from_url(_url()), prefix=_prefix(), index=_index(index), ttl=ttl
        )
        # on the instance only: a test of the class's migrations fails rather than pass empty
        self.MIGRATIONS: list[str] = []

    @classmethod
    @contextmanager
    def from_conn_string(  # type: ignore[override]
        cls, _conn_string: str, *, index: Any = None, ttl: Any = None, **__: Any
    ) -> Iterator[PeerStore]:
        store = cls(index=index, ttl=ttl)
        try:
            yield store
        finally:
            store.stop_ttl_sweeper()
            store._saver.client.close()


class AsyncPeerStore(AsyncRedisStreamStore):
    """``AsyncRedisStreamStore`` made as ``AsyncSqliteStore`` and ``AsyncPostgresStore`` are
    (see ``PeerStore``)."""

    @asynccontextmanager
    async def _cursor(self) -> AsyncIterator[_AsyncNoDatabase]:
        yield _AsyncNoDatabase()

    def __init__(self, *_: Any, index: Any = None, ttl: Any = None, **__: Any) -> None:
        client = aredis.Redis.from_url(_url())
        super().__init__(client, prefix=_prefix(), index=_index(index), ttl=ttl)
        self.MIGRATIONS: list[str] = []

    @classmethod
    @asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls, _conn_string: str, *, index: Any = None, ttl: Any = None, **__: Any
    ) -> AsyncIterator[AsyncPeerStore]:
        store = cls(index=index, ttl=ttl)
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper()
            await store._saver.client.aclose()


REPLACED: dict[str, type] = {
    "InMemoryStore": PeerStore,
    "SqliteStore": PeerStore,
    "AsyncSqliteStore": AsyncPeerStore,
    "PostgresStore": PeerStore,
    "AsyncPostgresStore": AsyncPeerStore,
    "Connection": _NoDatabase,
    "AsyncConnection": _AsyncNoDatabase,
}


def pytest_configure(config: pytest.Config) -> None:
    # the test servers run without persistence on purpose
    config.addinivalue_line("filterwarnings", "ignore::streamsaver.NoPersistenceWarning")


def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    # a fixture or test looks its store class up in its module when it runs: rebinding the
    # names once the modules (and the conftest, whose fixtures connect to Postgres) are
    # imported is enough
    modules = {id(m): m for item in items if (m := getattr(item, "module", None))}
    for plugin in session.config.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", "").endswith("conftest.py"):
            modules[id(plugin)] = plugin
    for module in modules.values():
        for name, replacement in REPLACED.items():
            if name in vars(module):
                setattr(module, name, replacement)


@pytest.fixture(autouse=True)
def _drop_store_keys() -> Iterator[None]:
    yield
    with redis.Redis.from_url(_url()) as client:
        while _prefixes:
            prefix = _prefixes.pop()
            keys = list(client.scan_iter(match=prefix + ":*", count=1000))
            for start in range(0, len(keys), 500):
                client.unlink(*keys[start : start + 500])
