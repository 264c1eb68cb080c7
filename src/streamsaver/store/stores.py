"""``RedisStreamStore`` and ``AsyncRedisStreamStore``: LangGraph Stores whose every put and
delete is an event in a Redis stream (docs/store.md).

Both are thin shells: ``store.ops`` yields the Redis operations, and each store sends them
through a saver of the same prefix on the same client, so scripts, cluster redirections,
reloads after a restart and error translation have one implementation.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any

import redis
import redis.asyncio as aredis
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import BaseStore, IndexConfig, Op, Result, TTLConfig
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from ..checkpoint.aio import AsyncRedisStreamSaver
from ..checkpoint.base import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_PREFIX, _check_serde, check_client
from ..checkpoint.saver import RedisStreamSaver
from ..core.chain import ChainCheck
from ..core.errors import InvalidInputError, InvalidUsageError, StreamSaverError
from ..core.slicing import Replay
from ..memory_events import MemoryEvent, StoreCursor
from .index import StoreIndex
from .ops import StoreOperations, check_ttl_config

__all__ = ["AsyncRedisStreamStore", "RedisStreamStore"]

logger = logging.getLogger(__name__)


class _Store(BaseStore):
    """What the two stores' constructors share: the options, checked once, and the
    attributes LangGraph's other stores expose."""

    supports_ttl = True

    def _setup_shell(
        self,
        client: Any,
        prefix: str,
        serde: SerializerProtocol | None,
        ttl: TTLConfig | None,
        index: IndexConfig | None,
        chain: bool,
        max_payload_bytes: int,
        /,
    ) -> None:
        if serde is not None:
            _check_serde(serde)
        self._ops = StoreOperations(
            prefix,
            maybe_add_typed_methods(serde) if serde is not None else JsonPlusSerializer(),
            cluster=isinstance(client, (RedisCluster, AsyncRedisCluster)),
            chain=chain,
            max_payload_bytes=max_payload_bytes,
            ttl=check_ttl_config(ttl),
            index=StoreIndex(index) if index is not None else None,
        )
        self.ttl_config = self._ops.ttl
        self._socket_timeout: float | None = (
            None
            if self._ops.cluster
            else client.connection_pool.connection_kwargs.get("socket_timeout")
        )
        # as InMemoryStore and PostgresStore name them (LangGraph's server reads index_config)
        self.index_config = self._ops.index.config if self._ops.index else None
        self.embeddings = self._ops.index.embeddings if self._ops.index else None

    def _block_ms(self, poll_s: float) -> int | None:
        """How long a tail blocks waiting for news: ``poll_s``, within the client's socket
        timeout; None on a cluster, where a tail sleeps ``poll_s`` instead."""
        if self._ops.cluster:
            return None
        ms = poll_s * 1000
        if self._socket_timeout:
            ms = min(ms, self._socket_timeout * 500)
        return max(1, int(ms))

    def _sweep_minutes(self, given: float | None) -> float | None:
        return given or (self.ttl_config or {}).get("sweep_interval_minutes")


class RedisStreamStore(_Store):
    """A LangGraph ``BaseStore`` on a ``redis.Redis`` (or ``RedisCluster``) client.

    Every put and delete is appended as an event to a stream; the indexes that answer get,
    search and list_namespaces are projected from it in the same script, and ``rebuild``
    replays them. ``ttl`` as ``PostgresStore``'s: ``{"default_ttl": minutes,
    "refresh_on_read": bool, "sweep_interval_minutes": minutes}``."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
        chain: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        allow_eviction: bool = False,
    ) -> None:
        if not isinstance(client, (redis.Redis, RedisCluster)):
            raise InvalidInputError(
                f"RedisStreamStore needs a redis.Redis or RedisCluster client, got "
                f"{type(client).__name__}; for redis.asyncio clients use AsyncRedisStreamStore"
            )
        check_client(client, "RedisStreamStore")
        self._saver = RedisStreamSaver(
            client, prefix=prefix, chain=chain, allow_eviction=allow_eviction
        )
        self._setup_shell(client, prefix, serde, ttl, index, chain, max_payload_bytes)
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
        chain: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        allow_eviction: bool = False,
        cluster: bool | None = None,
    ) -> Iterator[RedisStreamStore]:
        """A store on a client it creates from ``url`` (``rediss://user:password@...`` for TLS
        and an ACL user) and closes on exit; the server is checked on entry (``setup``).
        ``cluster``: use a ``RedisCluster`` client; ``None`` asks the server. A ttl with
        ``sweep_interval_minutes`` starts the sweeper, stopped on exit."""
        options: dict[str, Any] = {
            "prefix": prefix,
            "serde": serde,
            "ttl": ttl,
            "index": index,
            "chain": chain,
            "max_payload_bytes": max_payload_bytes,
            "allow_eviction": allow_eviction,
        }
        if cluster is None:
            with redis.Redis.from_url(url) as probe:
                cluster = bool(probe.info("cluster").get("cluster_enabled"))
        client = RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)
        try:
            store = cls(client, **options)
            store.setup()
            store.start_ttl_sweeper()
            try:
                yield store
            finally:
                store.stop_ttl_sweeper()
        finally:
            client.close()

    def setup(self) -> None:
        """Check the server (as the savers' ``setup``), and with ``index`` use the server's
        vector index when it has one (docs/store.md: created, and filled by a replay, the
        first time). Idempotent."""
        self._saver.setup()
        self._saver._run(self._ops.setup_vectors())

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        ops = builtins.list(ops)
        return self._saver._run(self._ops.batch(ops, self._ops.embed(ops)))

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        # the client blocks: a worker thread keeps the event loop free
        return await asyncio.to_thread(self.batch, builtins.list(ops))

    def sweep_ttl(self) -> int:
        """Delete every item whose TTL ran out (an ``mdel`` event each); returns how many."""
        return self._saver._run(self._ops.sweep())

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep in a daemon thread every ``sweep_interval_minutes`` (default: the ttl
        config's); nothing when neither is set."""
        minutes = self._sweep_minutes(sweep_interval_minutes)
        if not minutes or self._sweeper is not None:
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(float(minutes) * 60):
                try:
                    self.sweep_ttl()
                except StreamSaverError:
                    # a server away for a while: the next round sweeps what this one could not
                    logger.warning("TTL sweep failed; retrying next interval", exc_info=True)

        self._sweeper = threading.Thread(target=run, name="streamsaver-store-sweeper", daemon=True)
        self._sweeper.start()

    def stop_ttl_sweeper(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join()
            self._sweeper = None

    def rebuild(self) -> Replay:
        """Re-project every index from the logs: events applied, skipped, and why."""
        return self._saver._run(self._ops.rebuild())

    def verify(self) -> tuple[int, int, builtins.list[str]]:
        """Replay the logs into scratch keys and compare with the indexes: (applied, skipped,
        problems); no problems means the indexes are exactly a replay of the logs."""
        return self._saver._run(self._ops.verify())

    def verify_chain(self) -> builtins.list[tuple[int, ChainCheck]]:
        """Each bucket's digest chain check (``.ok``, ``.problem``), as ``audit verify``."""
        return self._saver._run(self._ops.verify_chain())

    def history(
        self, namespace: tuple[str, ...], key: str | None = None, *, values: bool = False
    ) -> builtins.list[MemoryEvent]:
        """The events of a namespace (and key), oldest first; ``values``: with each put's
        value decoded through the serde."""
        return self._saver._run(self._ops.history(namespace, key, values))

    def changes(
        self, after: StoreCursor | None = None, *, count: int = 100, values: bool = False
    ) -> tuple[builtins.list[MemoryEvent], StoreCursor]:
        """Every bucket's events after ``after`` (None: from the start), at most ``count`` per
        bucket, in order within each bucket and by time across them, and the cursor to pass
        next time: one round trip (per node) however many buckets."""
        return self._saver._run(self._ops.changes(after, count, values))

    def tail(
        self,
        after: StoreCursor | None = None,
        *,
        follow: bool = True,
        poll_s: float = 0.5,
        values: bool = False,
    ) -> Iterator[MemoryEvent]:
        """Memory events as they happen: ``changes`` again and again; whenever nothing is
        new, a blocking read of every log for up to ``poll_s`` (on a cluster, a sleep of
        ``poll_s``); ``follow=False`` ends once caught up. ``after=None`` starts at the
        beginning; ``store.changes()[1]`` after a full read is "from now"."""
        cursor = after
        while True:
            events, cursor = self.changes(cursor, values=values)
            yield from events
            if not events:
                if not follow:
                    return
                block_ms = self._block_ms(poll_s)
                if block_ms is None:
                    time.sleep(poll_s)
                else:
                    self._saver._run(self._ops.wait(cursor, block_ms))


class AsyncRedisStreamStore(_Store):
    """The asyncio twin of ``RedisStreamStore``, on a ``redis.asyncio`` client. Its sync
    methods work from other threads while its event loop runs."""

    def __init__(
        self,
        client: aredis.Redis | AsyncRedisCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
        chain: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        allow_eviction: bool = False,
    ) -> None:
        if not isinstance(client, (aredis.Redis, AsyncRedisCluster)):
            raise InvalidInputError(
                f"AsyncRedisStreamStore needs a redis.asyncio.Redis or RedisCluster client, "
                f"got {type(client).__name__}; for synchronous clients use RedisStreamStore"
            )
        check_client(client, "AsyncRedisStreamStore")
        self._saver = AsyncRedisStreamSaver(
            client, prefix=prefix, chain=chain, allow_eviction=allow_eviction
        )
        self._setup_shell(client, prefix, serde, ttl, index, chain, max_payload_bytes)
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, url: str, **options: Any
    ) -> AsyncIterator[AsyncRedisStreamStore]:
        """See ``RedisStreamStore.from_conn_string``."""
        cluster = options.pop("cluster", None)
        if cluster is None:
            probe = aredis.Redis.from_url(url)
            try:
                cluster = bool((await probe.info("cluster")).get("cluster_enabled"))
            finally:
                await probe.aclose()
        client = AsyncRedisCluster.from_url(url) if cluster else aredis.Redis.from_url(url)
        try:
            store = cls(client, **options)
            await store.asetup()
            store.start_ttl_sweeper()
            try:
                yield store
            finally:
                await store.stop_ttl_sweeper()
        finally:
            await client.aclose()

    async def asetup(self) -> None:
        """See ``RedisStreamStore.setup``."""
        await self._saver.asetup()
        await self._saver._run(self._ops.setup_vectors())

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        ops = builtins.list(ops)
        return await self._saver._run(self._ops.batch(ops, await self._ops.aembed(ops)))

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        loop = self._saver.loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            raise InvalidUsageError(
                "Synchronous calls to AsyncRedisStreamStore are only allowed from a thread "
                "other than its event loop's, once that loop runs; on the loop use the async "
                "interface (e.g. `await store.aget(...)`), and in synchronous code use "
                "RedisStreamStore"
            )
        return asyncio.run_coroutine_threadsafe(self.abatch(builtins.list(ops)), loop).result()

    async def asweep_ttl(self) -> int:
        return await self._saver._run(self._ops.sweep())

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep in a task on the running loop every ``sweep_interval_minutes`` (default: the
        ttl config's); nothing when neither is set."""
        minutes = self._sweep_minutes(sweep_interval_minutes)
        if not minutes or self._sweeper is not None:
            return

        async def run() -> None:
            while True:
                await asyncio.sleep(float(minutes) * 60)
                try:
                    await self.asweep_ttl()
                except StreamSaverError:
                    logger.warning("TTL sweep failed; retrying next interval", exc_info=True)

        self._sweeper = asyncio.get_running_loop().create_task(run())

    async def stop_ttl_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def arebuild(self) -> Replay:
        return await self._saver._run(self._ops.rebuild())

    async def averify(self) -> tuple[int, int, builtins.list[str]]:
        return await self._saver._run(self._ops.verify())

    async def averify_chain(self) -> builtins.list[tuple[int, ChainCheck]]:
        return await self._saver._run(self._ops.verify_chain())

    async def ahistory(
        self, namespace: tuple[str, ...], key: str | None = None, *, values: bool = False
    ) -> builtins.list[MemoryEvent]:
        return await self._saver._run(self._ops.history(namespace, key, values))

    async def achanges(
        self, after: StoreCursor | None = None, *, count: int = 100, values: bool = False
    ) -> tuple[builtins.list[MemoryEvent], StoreCursor]:
        return await self._saver._run(self._ops.changes(after, count, values))

    async def atail(
        self,
        after: StoreCursor | None = None,
        *,
        follow: bool = True,
        poll_s: float = 0.5,
        values: bool = False,
    ) -> AsyncIterator[MemoryEvent]:
        """See ``RedisStreamStore.tail``."""
        cursor = after
        while True:
            events, cursor = await self.achanges(cursor, values=values)
            for event in events:
                yield event
            if not events:
                if not follow:
                    return
                block_ms = self._block_ms(poll_s)
                if block_ms is None:
                    await asyncio.sleep(poll_s)
                else:
                    await self._saver._run(self._ops.wait(cursor, block_ms))
