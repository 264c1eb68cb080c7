"""The server's vector index (RediSearch, Redis 8's Query Engine) for the Store's semantic
search, used when the server has one (docs/store.md). I/O-free: the index's name and
definition, the ``FT.*`` commands, and the parsing of their replies.

The index only picks candidates: its documents are derived keys that ``lua/store/store.lua``'s one
projection writes (one HASH per vector of an item, while the bucket's ``mft`` holds the dims),
and the client scores the candidates exactly as the exact path does. A FLAT (brute-force) COSINE
index computes in float32, so its order can differ from the exact float64 scores by rounding:
``enough`` says when the candidates surely hold the whole page despite that.
"""

from __future__ import annotations

import hashlib
import math
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from ..core.errors import InvalidUsageError
from ..core.keys import StoreKeys
from ..core.replies import as_text

__all__ = ["ROUNDING", "VectorIndex"]

# how far a float32 cosine of the index can be from the float64 one of the exact path: float32
# keeps ~7 digits, and a dot product of d terms loses at most ~d ulps (d = 4096: ~2.5e-4)
ROUNDING = 1e-3


class VectorIndex:
    """The index of one store prefix: ``<prefix>:{store}:vectors``, within the prefix's ACL
    key pattern (``FT.SEARCH`` checks the index name against it), over the documents of
    every bucket (``<prefix>:{<slot tag>}:mv:``)."""

    def __init__(self, prefix: str, dims: int, keys: Sequence[StoreKeys]) -> None:
        self.name = f"{prefix}:{{store}}:vectors"
        self.dims = dims
        self.prefixes = [k.ft[: -len("mft")] + "mv:" for k in keys]

    def info(self) -> tuple[str, ...]:
        return ("FT.INFO", self.name)

    def create(self) -> tuple[str | int, ...]:
        return (
            "FT.CREATE", self.name, "ON", "HASH", "PREFIX", len(self.prefixes), *self.prefixes,
            "SCHEMA", "p", "TAG", "v", "VECTOR", "FLAT", 6, "TYPE", "FLOAT32",
            "DIM", self.dims, "DISTANCE_METRIC", "COSINE",
        )  # fmt: skip

    def check(self, info: Any) -> bool:
        """Refuse an index of this name that is not the one ``create`` makes (other dims, or
        made by hand): its candidates would not be the store's. Whether it is complete (not
        still reading the keys that were there when it was made)."""
        found = _mapping(info)
        definition = _mapping(found.get("index_definition", []))
        attributes = map(_mapping, found.get("attributes", []))
        vector = next((a for a in attributes if as_text(a.get("identifier")) == "v"), {})
        made = (
            [as_text(p) for p in definition.get("prefixes", [])],
            as_text(vector.get("algorithm")),
            as_text(vector.get("distance_metric")),
            int(vector.get("dim", 0) or 0),
        )
        if made != (self.prefixes, "FLAT", "COSINE", self.dims):
            raise InvalidUsageError(
                f"the server's vector index {self.name!r} is a {made[1]} {made[2]} index of "
                f"{made[3]} dims over other keys, not this store's (FLAT COSINE, "
                f"index['dims']={self.dims}): drop it (FT.DROPINDEX {self.name} DD) and call "
                f"setup() again, or set dims to the model's size"
            )
        return as_text(found.get("indexing", 0)) in ("0", "0.0")

    def search(self, namespace_prefix: str, query: Sequence[float], k: int) -> tuple[Any, ...]:
        """The ``k`` nearest vectors under ``namespace_prefix`` ('' for all): the namespace
        is matched by its sha1 (the documents' ``p`` tags), so no user data reaches the
        query; no timeout, since a timed-out search would return a partial answer."""
        where = "*"
        if namespace_prefix:
            where = f"(@p:{{{hashlib.sha1(namespace_prefix.encode()).hexdigest()}}})"
        packed = array("f", query)
        if sys.byteorder == "big":
            packed.byteswap()
        return (
            "FT.SEARCH", self.name, f"{where}=>[KNN $k @v $q AS __d]",
            "PARAMS", 4, "k", k, "q", packed.tobytes(), "SORTBY", "__d", "ASC",
            "RETURN", 2, "__d", "m", "LIMIT", 0, k, "TIMEOUT", 0, "DIALECT", 2,
        )  # fmt: skip


def nearest(reply: Any) -> list[tuple[bytes, float]]:
    """(member, the index's cosine) per document of an ``FT.SEARCH`` reply, nearest first:
    RESP2's flat list or the map redis-py makes of it."""
    if isinstance(reply, dict):
        docs = _mapping(reply).get("results") or []
        found = [_mapping(_mapping(doc).get("extra_attributes")) for doc in docs]
    else:
        found = [_mapping(fields) for fields in reply[2::2]]
    return [(_bytes(f["m"]), 1 - float(f["__d"])) for f in found]


def enough(best: Sequence[float], wanted: int, last: float) -> bool:
    """Whether no document past the ``last`` one returned (the index's cosine) can reach the
    page: ``best`` are the exact scores of the candidates so far, highest first. An item's
    exact score is within ``ROUNDING`` of the index's, and a zero vector (cosine 0, which the
    index cannot compute: NaN, sorted last) is at most 0."""
    if len(best) < wanted or math.isnan(last):
        return False
    return max(last, 0.0) + ROUNDING < best[wanted - 1]


def absent(error: Exception) -> bool:
    """Whether ``FT.INFO``'s error says the server has the module but not the index."""
    text = str(error).lower()
    return "unknown index" in text or "no such index" in text


def unusable(error: Exception) -> bool:
    """Whether an ``FT.*`` error says the index cannot be used here: no such command (no
    module: Redis, Valkey without valkey-search) or no permission (an ACL user without the
    ``FT`` commands or the index's name)."""
    text = str(error).lower()
    return "unknown command" in text or text.startswith("noperm") or "no permissions" in text


def _mapping(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return {as_text(k): v for k, v in raw.items()}
    items = list(raw or [])
    return {as_text(k): v for k, v in zip(items[::2], items[1::2], strict=False)}


def _bytes(raw: Any) -> bytes:
    return raw if isinstance(raw, bytes) else str(raw).encode()
