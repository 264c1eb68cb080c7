"""What ``RedisStreamStore`` and ``AsyncRedisStreamStore`` share, written once and I/O-free:
the constructor and its options (``StoreShell``), and of every operation both stores offer,
its signature, its docstring and the flow it runs. ``store.stores`` turns each into the sync
store's method and the async store's ``a`` method; only sending is theirs.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypedDict, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import BaseStore, IndexConfig, TTLConfig
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from ..checkpoint.base import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PREFIX,
    _check_serde,
    require_client,
)
from ..core.chain import ChainCheck
from ..core.flow import Emit, Flow, Items
from ..core.slicing import Replay
from ..memory_events import MemoryEvent, StoreCursor
from .index import StoreIndex
from .ops import StoreOperations, check_sweep_interval, check_ttl_config

__all__ = ["StoreOptions", "StoreShell", "next_batch"]

ClientT = TypeVar("ClientT")
SaverT = TypeVar("SaverT")
E = TypeVar("E")


class StoreOptions(TypedDict, total=False):
    """The options of both stores' constructors, as ``from_conn_string`` passes them on."""

    prefix: str
    serde: SerializerProtocol | None
    ttl: TTLConfig | None
    index: IndexConfig | None
    chain: bool
    max_payload_bytes: int
    allow_eviction: bool


class StoreShell(BaseStore, Generic[ClientT, SaverT]):
    """A store on a ``ClientT`` client that sends through a ``SaverT`` of its prefix."""

    supports_ttl = True

    # the clients a store takes, named as its error says, and what to use instead
    _clients: ClassVar[tuple[type, ...]]
    _needs: ClassVar[str]
    _instead: ClassVar[str]
    _saver_class: Callable[..., SaverT]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the methods stores.py makes from one operation each are the class's own: named as
        # such, help() and the API reference list them with the methods written out
        for name, value in vars(cls).items():
            if inspect.isfunction(value) and "." not in value.__qualname__:
                value.__qualname__ = f"{cls.__qualname__}.{name}"

    def __init__(
        self,
        client: ClientT,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
        chain: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        allow_eviction: bool = False,
    ) -> None:
        require_client(client, self._clients, type(self).__name__, self._needs, self._instead)
        self._saver = self._saver_class(
            client, prefix=prefix, chain=chain, allow_eviction=allow_eviction
        )
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
        self._socket_timeout: float | None = None
        if not self._ops.cluster:
            pool = client.connection_pool  # type: ignore[attr-defined]
            self._socket_timeout = pool.connection_kwargs.get("socket_timeout")
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

    def _interval(self, minutes: object) -> float | None:
        """The sweeper's interval: ``minutes``, else the ttl config's; None: no sweeper."""
        if minutes is None:
            minutes = (self.ttl_config or {}).get("sweep_interval_minutes")
        if minutes is None:
            return None
        return check_sweep_interval(minutes, "sweep_interval_minutes")

    # The operations both stores offer, under the sync store's name with a "_" before it:
    # ``sweep_ttl`` and ``asweep_ttl`` are ``_sweep_ttl``, run or awaited.

    def _sweep_ttl(self) -> Flow[int]:
        """Delete every item whose TTL ran out (an ``mdel`` event each, ``why="expired"``);
        returns how many. An item's TTL is the store's, not a Redis key expiry (which would
        drop the item without an event, and leave its index entries): reads leave an expired
        item out at once, and the sweep frees its memory and records its end."""
        return self._ops.sweep()

    def _rebuild(self) -> Flow[Replay]:
        """Re-project every index from the logs: events applied, skipped, and why."""
        return self._ops.rebuild()

    def _verify(self) -> Flow[tuple[int, int, builtins.list[str]]]:
        """Replay the logs into scratch keys and compare with the indexes: (applied, skipped,
        problems); no problems means the indexes are exactly a replay of the logs."""
        return self._ops.verify()

    def _verify_chain(self) -> Flow[builtins.list[tuple[int, ChainCheck]]]:
        """Each bucket's digest chain check (``.ok``, ``.problem``), as ``audit verify``."""
        return self._ops.verify_chain()

    def _history(
        self, namespace: tuple[str, ...], key: str | None = None, *, values: bool = False
    ) -> Flow[builtins.list[MemoryEvent]]:
        """The events of a namespace (and key), oldest first; ``values``: with each put's
        value decoded through the serde."""
        return self._ops.history(namespace, key, values)

    def _changes(
        self, after: StoreCursor | None = None, *, count: int = 100, values: bool = False
    ) -> Flow[tuple[builtins.list[MemoryEvent], StoreCursor]]:
        """Every bucket's events after ``after`` (None: from the start), at most ``count`` per
        bucket, in order within each bucket and by time across them, and the cursor to pass
        next time: one round trip (per node) however many buckets."""
        return self._ops.changes(after, count, values)

    def _tail(
        self,
        after: StoreCursor | None = None,
        *,
        follow: bool = True,
        poll_s: float = 0.5,
        values: bool = False,
    ) -> Items[builtins.list[MemoryEvent]]:
        """Memory events as they happen: ``changes`` again and again; whenever nothing is
        new, a blocking read of every log for up to ``poll_s`` (on a cluster, a sleep of
        ``poll_s``); ``follow=False`` ends once caught up. ``after=None`` starts at the
        beginning; ``store.changes()[1]`` after a full read is "from now"."""
        return self._ops.tail(after, follow, values, self._block_ms(poll_s), poll_s)


def next_batch(items: Items[builtins.list[E]]) -> Flow[builtins.list[E] | None]:
    """Step ``items`` on to the next batch it emits, and return it; None once it is done. A
    store drives an endless flow (a tail) a batch at a time this way, each batch a flow it
    runs as it runs any other, so each is handed on before the flow waits for the next."""
    reply: Any = None
    while True:
        try:
            step = items.send(reply)
        except StopIteration:
            return None
        if isinstance(step, Emit):
            return step.item
        reply = yield step
