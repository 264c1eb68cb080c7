"""``RedisStreamStore`` and ``AsyncRedisStreamStore``: LangGraph Stores whose every put and
delete is an event in a Redis stream (docs/store.md).

Both are thin shells: ``store.ops`` yields the Redis operations, and each store sends them
through a saver of the same prefix on the same client, so scripts, cluster redirections,
reloads after a restart and error translation have one implementation. What the two share
(the constructor, and each operation's signature and docstring) is written once in
``store.shell``; ``_runs``/``_awaits`` (``_streams``/``_astreams`` for a tail) make one of its
operations the sync store's method and the async store's ``a`` method.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis
import redis.asyncio as aredis
from langgraph.store.base import Op, Result
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from typing_extensions import Unpack

from ..checkpoint.aio import AsyncRedisStreamSaver
from ..checkpoint.bridges import run_on
from ..checkpoint.saver import RedisStreamSaver
from ..core.errors import StreamSaverError
from ..core.flow import Flow, Items
from ..transport.clients import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RETRIES,
    DEFAULT_SOCKET_TIMEOUT_S,
    client_options,
    probe_options,
)
from ..transport.opening import aopen_client, open_client
from .shell import StoreOptions, StoreShell, next_batch

__all__ = ["AsyncRedisStreamStore", "RedisStreamStore"]

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
E = TypeVar("E")
F = TypeVar("F", bound=Callable[..., Any])

# one of StoreShell's operations: its "self" is either store
Operation = Callable[Concatenate[Any, P], T]


def _named(method: F, operation: Callable[..., Any], prefix: str = "") -> F:
    """``method`` under the public name of ``operation`` (``_history``: ``history``, or with
    ``prefix`` ``ahistory``), with its docstring and parameters (for ``help`` and
    ``inspect``; not its return annotation: the method returns what the flow returns)."""
    shown: Any = method
    shown.__doc__ = operation.__doc__
    shown.__name__ = shown.__qualname__ = prefix + operation.__name__.lstrip("_")
    signature = inspect.signature(operation)
    shown.__signature__ = signature.replace(return_annotation=inspect.Signature.empty)
    return method


def _runs(operation: Operation[P, Flow[T]]) -> Callable[Concatenate[RedisStreamStore, P], T]:
    def run(self: RedisStreamStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._saver._run(operation(self, *args, **kwargs))

    return _named(run, operation)


def _streams(
    operation: Operation[P, Items[builtins.list[E]]],
) -> Callable[Concatenate[RedisStreamStore, P], Iterator[E]]:
    def run(self: RedisStreamStore, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[E]:
        flow = operation(self, *args, **kwargs)
        while (batch := self._saver._run(next_batch(flow))) is not None:
            yield from batch

    return _named(run, operation)


def _awaits(
    operation: Operation[P, Flow[T]], prefix: str = "a"
) -> Callable[Concatenate[AsyncRedisStreamStore, P], Coroutine[Any, Any, T]]:
    async def run(self: AsyncRedisStreamStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._saver._run(operation(self, *args, **kwargs))

    return _named(run, operation, prefix)


def _astreams(
    operation: Operation[P, Items[builtins.list[E]]],
) -> Callable[Concatenate[AsyncRedisStreamStore, P], AsyncIterator[E]]:
    async def run(
        self: AsyncRedisStreamStore, /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncIterator[E]:
        flow = operation(self, *args, **kwargs)
        while (batch := await self._saver._run(next_batch(flow))) is not None:
            for item in batch:
                yield item

    return _named(run, operation, "a")


class RedisStreamStore(StoreShell[redis.Redis | RedisCluster, RedisStreamSaver]):
    """A LangGraph ``BaseStore`` on a ``redis.Redis`` (or ``RedisCluster``) client.

    Every put and delete is appended as an event to a stream; the indexes that answer get,
    search and list_namespaces are projected from it in the same script, and ``rebuild``
    replays them. ``ttl`` as ``PostgresStore``'s: ``{"default_ttl": minutes,
    "refresh_on_read": bool, "sweep_interval_minutes": minutes}``."""

    _clients = (redis.Redis, RedisCluster)
    _needs = "a redis.Redis or RedisCluster"
    _instead = "for redis.asyncio clients use AsyncRedisStreamStore"
    _saver_class = RedisStreamSaver
    _sweeper: threading.Thread | None = None
    _swept: concurrent.futures.Future[None]
    _stop: threading.Event

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        url: str,
        *,
        cluster: bool | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT_S,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        **options: Unpack[StoreOptions],
    ) -> Iterator[RedisStreamStore]:
        """A store on a client it creates from ``url`` (``rediss://user:password@...`` for TLS
        and an ACL user) and closes on exit; the server is checked on entry (``setup``).
        ``cluster``: use a ``RedisCluster`` client; ``None`` asks the server. A ttl with
        ``sweep_interval_minutes`` starts the sweeper, stopped on exit. ``connect_timeout``,
        ``socket_timeout`` and ``retries`` as ``RedisStreamSaver.from_conn_string`` takes
        them; ``options``: the constructor's."""
        kwargs = client_options(connect_timeout, socket_timeout, retries, sync=True)
        client = open_client(url, cluster, kwargs, probe_options(kwargs, sync=True))
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

    rebuild = _runs(StoreShell._rebuild)
    verify = _runs(StoreShell._verify)
    verify_chain = _runs(StoreShell._verify_chain)

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        ops = builtins.list(ops)
        return self._saver._run(self._ops.batch(ops, self._ops.embed(ops)))

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        # the client blocks: a worker thread keeps the event loop free
        return await asyncio.to_thread(self.batch, builtins.list(ops))

    sweep_ttl = _runs(StoreShell._sweep_ttl)

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep (``sweep_ttl``) every ``sweep_interval_minutes`` (default: the ttl config's)
        in a daemon thread, as ``PostgresStore``'s; returns a future done once it stopped.
        Without an interval nothing sweeps (reads leave expired items out all the same) and
        the future is done; when it sweeps already, its future."""
        minutes = self._interval(sweep_interval_minutes)
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._swept
        swept: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._swept = swept
        if minutes is None:
            swept.set_result(None)
            return swept
        self._stop = stop = threading.Event()

        def run() -> None:
            try:
                while not stop.wait(minutes * 60):
                    try:
                        self.sweep_ttl()
                    except StreamSaverError:
                        # a server away for a while: the next round sweeps what this one could not
                        logger.warning("TTL sweep failed; retrying next interval", exc_info=True)
            finally:
                swept.set_result(None)

        self._sweeper = threading.Thread(target=run, name="streamsaver-store-sweeper", daemon=True)
        self._sweeper.start()
        return swept

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper (after the sweep it may be in), waiting up to ``timeout`` seconds
        (None: as long as it takes); False if it still runs then, True otherwise."""
        if self._sweeper is None:
            return True
        self._stop.set()
        self._sweeper.join(timeout)
        if self._sweeper.is_alive():
            return False
        self._sweeper = None
        return True

    history = _runs(StoreShell._history)
    changes = _runs(StoreShell._changes)
    tail = _streams(StoreShell._tail)


class AsyncRedisStreamStore(StoreShell[aredis.Redis | AsyncRedisCluster, AsyncRedisStreamSaver]):
    """The asyncio twin of ``RedisStreamStore``, on a ``redis.asyncio`` client. Its sync
    methods work from other threads while its event loop runs."""

    _clients = (aredis.Redis, AsyncRedisCluster)
    _needs = "a redis.asyncio.Redis or RedisCluster"
    _instead = "for synchronous clients use RedisStreamStore"
    _saver_class = AsyncRedisStreamSaver
    _sweeper: asyncio.Task[None] | None = None
    _astop: asyncio.Event

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        url: str,
        *,
        cluster: bool | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT_S,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        **options: Unpack[StoreOptions],
    ) -> AsyncIterator[AsyncRedisStreamStore]:
        """See ``RedisStreamStore.from_conn_string``."""
        kwargs = client_options(connect_timeout, socket_timeout, retries, sync=False)
        client = await aopen_client(url, cluster, kwargs, probe_options(kwargs, sync=False))
        try:
            store = cls(client, **options)
            await store.setup()
            await store.start_ttl_sweeper()
            try:
                yield store
            finally:
                await store.stop_ttl_sweeper()
        finally:
            await client.aclose()

    async def setup(self) -> None:
        """See ``RedisStreamStore.setup``: a coroutine here, as ``AsyncPostgresStore``'s."""
        await self._saver.asetup()
        await self._saver._run(self._ops.setup_vectors())

    async def asetup(self) -> None:
        """``setup``, by the name the async saver's has."""
        await self.setup()

    arebuild = _awaits(StoreShell._rebuild)
    averify = _awaits(StoreShell._verify)
    averify_chain = _awaits(StoreShell._verify_chain)

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        ops = builtins.list(ops)
        return await self._saver._run(self._ops.batch(ops, await self._ops.aembed(ops)))

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        return run_on(
            self._saver.loop,
            self.abatch(builtins.list(ops)),
            "Synchronous calls to AsyncRedisStreamStore are only allowed from a thread other "
            "than its event loop's, once that loop runs; on the loop use the async interface "
            "(e.g. `await store.aget(...)`), and in synchronous code use RedisStreamStore",
        )

    # a coroutine under the sync name, as AsyncPostgresStore's and AsyncSqliteStore's
    sweep_ttl = _awaits(StoreShell._sweep_ttl, "")
    asweep_ttl = _awaits(StoreShell._sweep_ttl)

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep (``sweep_ttl``) every ``sweep_interval_minutes`` (default: the ttl config's)
        in a task on the running loop, as ``AsyncPostgresStore``'s; returns the task. Without
        an interval nothing sweeps (reads leave expired items out all the same) and the task
        is done at once; when it sweeps already, its task."""
        minutes = self._interval(sweep_interval_minutes)
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        if minutes is None:
            return asyncio.create_task(asyncio.sleep(0))
        self._astop = stop = asyncio.Event()

        async def run() -> None:
            while True:
                with suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), minutes * 60)
                    return
                try:
                    await self.sweep_ttl()
                except StreamSaverError:
                    logger.warning("TTL sweep failed; retrying next interval", exc_info=True)

        self._sweeper = asyncio.get_running_loop().create_task(run())
        return self._sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper (after the sweep it may be in), waiting up to ``timeout`` seconds
        (None: as long as it takes); False if it still runs then, True otherwise."""
        if self._sweeper is None:
            return True
        self._astop.set()
        await asyncio.wait({self._sweeper}, timeout=timeout)
        if not self._sweeper.done():
            return False
        self._sweeper = None
        return True

    ahistory = _awaits(StoreShell._history)
    achanges = _awaits(StoreShell._changes)
    atail = _astreams(StoreShell._tail)
