"""What both savers share, free of I/O: options, validation, versions, the operations core."""

from __future__ import annotations

import math
import random
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods

from ..core.codec import Codec
from ..core.delta import DeltaCache
from ..core.durability import Durability, DurabilityMode
from ..core.errors import InvalidInputError
from ..core.keys import validate_prefix
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE
from ..lua import SOURCES
from ..transport.core import Scripts
from ..transport.moves import DEFAULT_SLOT_MOVE_TIMEOUT_S, check_timeout
from .ops import Operations
from .projections import Projections

__all__ = [
    "DEFAULT_DELTA_CACHE_BYTES",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_PREFIX",
    "StreamSaverBase",
    "check_client",
]

DEFAULT_PREFIX = "streamsaver"
DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
DEFAULT_DELTA_CACHE_BYTES = 64 * 1024 * 1024


def check_client(client: object, saver: str) -> None:
    get_kwargs = getattr(client, "get_connection_kwargs", None)
    if get_kwargs is not None and get_kwargs().get("decode_responses"):
        raise InvalidInputError(
            f"{saver} got a Redis client with decode_responses=True; checkpoints are binary, so "
            f"create the client with decode_responses=False (the default)"
        )


def config_readable(client: object) -> bool:
    """Whether setup may ask CONFIG GET: not for a named ACL user, which a least-privilege
    setup denies CONFIG (streamsaver.acl), so asking would only fill the server's ACL LOG."""
    get_kwargs = getattr(client, "get_connection_kwargs", None)
    kwargs = get_kwargs() if get_kwargs is not None else {}
    return kwargs.get("username") in (None, "default")


def _check_ttl(ttl_seconds: object) -> float | None:
    if ttl_seconds is None:
        return None
    if (
        not isinstance(ttl_seconds, (int, float))
        or isinstance(ttl_seconds, bool)
        or not math.isfinite(ttl_seconds)
        or ttl_seconds < 0.001
    ):
        raise InvalidInputError(
            f"ttl_seconds={ttl_seconds!r}: give a number of seconds >= 0.001 after which a "
            f"thread without writes expires, or None to keep threads until deleted"
        )
    return float(ttl_seconds)


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _check_slices(slice_ms: object, slice_pause: object) -> tuple[float, float]:
    budget, pause = _number(slice_ms), _number(slice_pause)
    if budget is None or budget <= 0:
        raise InvalidInputError(
            f"slice_ms={slice_ms!r}: give a number of ms > 0, the server time each slice of a "
            f"long operation (rebuild, verify, prune, copy, delete_for_runs) may take"
        )
    if pause is None or pause < 0:
        raise InvalidInputError(
            f"slice_pause={slice_pause!r}: give a number >= 0, how many times as long as it "
            f"was busy a long operation waits after each slice (0: no pause)"
        )
    return budget, pause


def _check_serde(serde: object) -> None:
    typed = all(callable(getattr(serde, m, None)) for m in ("dumps_typed", "loads_typed"))
    untyped = all(callable(getattr(serde, m, None)) for m in ("dumps", "loads"))
    if not (typed or untyped):
        raise InvalidInputError(
            f"serde={serde!r}: give a serializer with dumps_typed/loads_typed (LangGraph's "
            f"SerializerProtocol), e.g. JsonPlusSerializer() or EncryptedSerializer(...)"
        )


class StreamSaverBase(BaseCheckpointSaver[str]):
    def __init__(
        self,
        *,
        prefix: str,
        serde: SerializerProtocol | None,
        max_payload_bytes: int,
        delta_cache_bytes: int,
        durability: DurabilityMode,
        replicas: int,
        durability_timeout_ms: int,
        fencing: bool = False,
        ttl_seconds: float | None = None,
        keep_last: int | None = None,
        chain: bool = True,
        allow_eviction: bool = False,
        reuse_items: bool = False,
        slot_move_timeout_s: float = DEFAULT_SLOT_MOVE_TIMEOUT_S,
        slice_ms: float = DEFAULT_SLICE_MS,
        slice_pause: float = DEFAULT_SLICE_PAUSE,
    ) -> None:
        if serde is not None:
            _check_serde(serde)
        super().__init__(serde=serde)
        # how long a command keeps resending while its cluster slot migrates (transport/moves.py)
        self.slot_move_timeout_s = check_timeout(slot_move_timeout_s)
        for name, value, low in (
            ("max_payload_bytes", max_payload_bytes, 1),
            ("delta_cache_bytes", delta_cache_bytes, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidInputError(f"{name}={value!r}: give an int of bytes >= {low}")
        self.prefix = validate_prefix(prefix)
        self.max_payload_bytes = max_payload_bytes
        self.delta_cache_bytes = delta_cache_bytes
        self.durability = Durability(durability, replicas, durability_timeout_ms)
        for name, flag in (
            ("fencing", fencing),
            ("chain", chain),
            ("allow_eviction", allow_eviction),
            ("reuse_items", reuse_items),
        ):
            if not isinstance(flag, bool):
                raise InvalidInputError(f"{name}={flag!r}: give True or False")
        self.fencing = fencing
        self.allow_eviction = allow_eviction
        # see Codec.reuse_items and the README, "Reusing list items"
        self.reuse_items = reuse_items
        self.ttl_seconds = _check_ttl(ttl_seconds)
        if keep_last is not None and (
            not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1
        ):
            raise InvalidInputError(
                f"keep_last={keep_last!r}: give an int >= 1 (checkpoints kept per namespace), "
                f"or None to keep every checkpoint"
            )
        self.keep_last = keep_last
        if not isinstance(chain, bool):
            raise InvalidInputError(
                f"chain={chain!r}: give True (every event carries digests chaining it to the one "
                f"before, docs/audit.md) or False"
            )
        self.chain = chain
        # long operations' slices (Operations.slice_ms, slice_pause)
        self.slice_ms, self.slice_pause = _check_slices(slice_ms, slice_pause)
        self._projections = Projections(self.prefix)
        self._ops = self._operations()
        # how scripts reach the server, and whether the user may only read (transport/core.py)
        self._seam = Scripts(SOURCES)

    def _operations(self) -> Operations:
        cache = DeltaCache(self.delta_cache_bytes) if self.delta_cache_bytes else None
        codec = Codec(self.serde, self.max_payload_bytes, self.reuse_items)
        ops = Operations(self.prefix, codec, cache, self.durability)
        ops.fencing = self.fencing
        ops.ttl_ms = math.ceil(self.ttl_seconds * 1000) if self.ttl_seconds else 0
        ops.keep_last = self.keep_last or 0
        ops.chain = self.chain
        ops.slice_ms, ops.slice_pause = self.slice_ms, self.slice_pause
        ops.allow_eviction = self.allow_eviction
        ops.projections = self._projections
        return ops

    # A property, not BaseCheckpointSaver's plain attribute: a serde assigned after construction
    # (`saver.serde = EncryptedSerializer(...)`) must reach every reader and writer of values,
    # or plaintext is stored.
    @property
    def serde(self) -> SerializerProtocol:
        # BaseCheckpointSaver.__init__ reads the class default before anything was assigned
        serde: SerializerProtocol = vars(self).get("_serde", BaseCheckpointSaver.serde)
        return serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        _check_serde(value)
        serde = maybe_add_typed_methods(value)
        self._serde = serde
        ops: Operations | None = vars(self).get("_ops")
        if ops is None:
            return  # still in __init__
        # in place: tailers and consumer groups already opened hold this very codec
        ops.codec.serde = serde
        if ops.cache is not None:
            # what the cache holds is the old serde's encoding of values
            ops.cache = DeltaCache(self.delta_cache_bytes)

    def __copy__(self) -> StreamSaverBase:
        # a copy (with_allowlist's) gets a serde of its own: it must not share the codec the
        # serde setter changes in place, nor the delta cache
        clone = type(self).__new__(type(self))
        vars(clone).update(vars(self))
        clone._ops = clone._operations()
        clone._ops.feed_maxlen = self._ops.feed_maxlen
        clone._ops.read_config = self._ops.read_config
        return clone

    @property
    def feed_maxlen(self) -> int:
        """Pointers each feed keeps (approximate MAXLEN) for ``tail_all`` and consumer groups;
        0 writes none. Feeds are derived notifications: the thread logs keep every event."""
        return self._ops.feed_maxlen

    @feed_maxlen.setter
    def feed_maxlen(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInputError(f"feed_maxlen={value!r}: give an int >= 0")
        self._ops.feed_maxlen = value

    def get_next_version(self, current: Any, channel: None = None) -> str:
        """``"<counter>.<random>"``: ordered by the zero-padded counter, and distinct between
        two forks of one checkpoint, whose channel values must not share a version."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(str(current).split(".", 1)[0])
        return f"{counter + 1:010d}.{random.getrandbits(32):08x}"


def page_limit(limit: object) -> int | None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InvalidInputError(f"limit={limit!r}: give an int >= 1, or None for every thread")
    return limit
