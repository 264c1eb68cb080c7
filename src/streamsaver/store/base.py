"""What every Store operation shares: the store's options and keys, how a namespace and key
are named in the bucket's keys, and how an index row becomes an ``Item``.

The operations themselves are written on top of ``StoreBase`` by concern: the batch and its
writes (``store.ops``), its reads and searches (``store.reads``), and what reads or replays
the buckets' logs whole (``store.logs``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import SearchItem, TTLConfig

from ..core.codec import Field
from ..core.flow import Eval
from ..core.keys import STORE_BUCKETS, StoreKeys, lp, store_keys
from ..core.replies import as_text
from .index import StoreIndex
from .vectors import VectorIndex

__all__ = ["StoreBase", "buckets", "joined", "member_of", "split_member"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def buckets() -> range:
    return range(STORE_BUCKETS)


def joined(namespace: tuple[str, ...]) -> str:
    # labels hold no "." (validate_op_namespace), so joining with it is injective
    return ".".join(namespace)


def member_of(namespace: tuple[str, ...], key: object) -> str:
    """An item's member in its bucket's indexes: its namespace, length-prefixed, then its key."""
    return lp(joined(namespace)) + str(key)


def split_member(member: bytes) -> tuple[tuple[str, ...], str]:
    size, _, rest = member.partition(b":")
    n = int(size)
    return tuple(rest[:n].decode().split(".")), rest[n:].decode()


def _at(us: bytes | int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


@dataclass(eq=False)
class StoreBase:
    """The options and keys of one store, checked by its shell, and the I/O-free helpers
    every operation reads them through."""

    prefix: str
    serde: SerializerProtocol
    _: KW_ONLY
    # on one server a single script can visit every bucket; a cluster needs one per bucket
    cluster: bool
    chain: bool
    max_payload_bytes: int
    ttl: TTLConfig | None
    index: StoreIndex | None = None
    # the server's vector index, once setup_vectors found it usable
    vectors: VectorIndex | None = field(default=None, init=False)
    _keys: builtins.list[StoreKeys] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._keys = [store_keys(self.prefix, b) for b in buckets()]

    def keys(self, bucket: int) -> StoreKeys:
        return self._keys[bucket]

    def _every_bucket(self, args: Sequence[Field | int]) -> builtins.list[Eval]:
        """A read of every bucket: one script per bucket on a cluster (pipelined, one round
        trip per node), one script for all of them on a single server."""
        keys = [(k.log, k.ix, k.item, k.ns, k.nsz) for k in self._keys]
        if self.cluster:
            return [Eval("store_read", k, args) for k in keys]
        return [Eval("store_read", [key for k in keys for key in k], args)]

    def _refresh(self, asked: bool | None) -> bool:
        if asked is not None:
            return asked
        return bool((self.ttl or {}).get("refresh_on_read", True))

    def _value(self, row: Any) -> Any:
        return self.serde.loads_typed((as_text(row[2]), row[3]))

    def _item(
        self,
        namespace: tuple[str, ...],
        key: str,
        row: Any,
        kind: type[Any],
        value: Any = None,
        score: float | None = None,
    ) -> Any:
        created, updated = row[:2]
        extra = {"score": score} if kind is SearchItem else {}
        return kind(
            namespace=namespace,
            key=key,
            value=self._value(row) if value is None else value,
            created_at=_at(created),
            updated_at=_at(updated),
            **extra,
        )

    def _serde(self, values: bool) -> SerializerProtocol | None:
        return self.serde if values else None
