"""What both savers share, free of I/O: the constructor and its options' checks, versions, the
operations core, and the reader cores their tails and consumer groups drive.

Each shell (``saver``, ``aio``) names the clients it drives and attaches its transport to one
(``_attach``); everything else a saver is made of is built here, once."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods

from ..core.codec import Codec
from ..core.config import MAX_OPTION, MAX_TTL_MS, bounded_int
from ..core.delta import DeltaCache
from ..core.durability import Durability, DurabilityMode
from ..core.errors import InvalidInputError
from ..core.keys import DEFAULT_PREFIX, validate_prefix
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE
from ..lua import SOURCES
from ..tailing import default_consumer_name
from ..tailing.feeds import FeedTail
from ..tailing.groups import GroupReader
from ..tailing.thread import ThreadTail
from ..transport.clients import client_options, probe_options
from ..transport.core import Scripts
from ..transport.moves import DEFAULT_SLOT_MOVE_TIMEOUT_S, check_timeout
from .ops import Operations
from .options import GroupOptions, SaverOptions, TailAllOptions, TailOptions, check_options
from .projections import Projections

__all__ = [
    "DEFAULT_DELTA_CACHE_BYTES",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_PREFIX",
    "StreamSaverBase",
    "check_client",
    "from_conn_string_options",
    "require_client",
]

DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
DEFAULT_DELTA_CACHE_BYTES = 64 * 1024 * 1024

ClientT = TypeVar("ClientT")


def check_client(client: object, saver: str) -> None:
    get_kwargs = getattr(client, "get_connection_kwargs", None)
    if get_kwargs is not None and get_kwargs().get("decode_responses"):
        raise InvalidInputError(
            f"{saver} got a Redis client with decode_responses=True; checkpoints are binary, so "
            f"create the client with decode_responses=False (the default)"
        )


def require_client(
    client: object, kinds: tuple[type, ...], saver: str, needs: str, instead: str
) -> None:
    """Refuse a client ``saver`` cannot drive (``needs`` says which it can, ``instead`` who
    drives this one), or one that decodes replies."""
    if not isinstance(client, kinds):
        raise InvalidInputError(
            f"{saver} needs {needs} client, got {type(client).__name__}; {instead}"
        )
    check_client(client, saver)


def from_conn_string_options(
    options: Mapping[str, object],
    connect_timeout: float | None,
    socket_timeout: float | None,
    retries: int,
    *,
    sync: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``from_conn_string``'s client options and its probe's, once ``options`` hold nothing
    the constructor takes but ``from_conn_string`` does not pass on (the constructor checks
    the rest)."""
    check_options(options, SaverOptions.__optional_keys__, "from_conn_string")
    kwargs = client_options(
        connect_timeout,
        socket_timeout,
        retries,
        sync=sync,
        wait_ms=options.get("durability_timeout_ms", 1000 if options.get("durability") else None),
    )
    return kwargs, probe_options(kwargs, sync=sync)


def config_readable(client: object) -> bool:
    """Whether setup may ask CONFIG GET: not for a named ACL user, which a least-privilege
    setup denies CONFIG (streamsaver.acl), so asking would only fill the server's ACL LOG."""
    get_kwargs = getattr(client, "get_connection_kwargs", None)
    kwargs = get_kwargs() if get_kwargs is not None else {}
    return kwargs.get("username") in (None, "default")


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _check_seconds(name: str, value: object, means: str) -> float | None:
    """``value`` seconds, None, or a typed error: the scripts compute expiry times in Lua's
    doubles, exact only below 2^53 ms (MAX_TTL_MS)."""
    if value is None:
        return None
    seconds = _number(value)
    if seconds is None or not 0.001 <= seconds <= MAX_TTL_MS / 1000:
        raise InvalidInputError(
            f"{name}={value!r}: give a number of seconds >= 0.001 and <= "
            f"{MAX_TTL_MS // 1000} {means}"
        )
    return seconds


# the audit retention's default (docs/retention.md, "What a deletion leaves")
DEFAULT_AUDIT_RETENTION_S = 7 * 24 * 3600


# a long operation that rests more than this many times as long as it works never finishes in
# practice: it is a mistake, not a choice
_MOST_PAUSE = 1000


def _check_slices(slice_ms: object, slice_pause: object) -> tuple[float, float]:
    """The slices' budget and pace; one left None takes its default (core/slicing.py)."""
    budget = DEFAULT_SLICE_MS if slice_ms is None else _number(slice_ms)
    pause = DEFAULT_SLICE_PAUSE if slice_pause is None else _number(slice_pause)
    if budget is None or not 0 < budget <= MAX_OPTION:
        raise InvalidInputError(
            f"slice_ms={slice_ms!r}: give a number of ms > 0 and <= {MAX_OPTION}, the server "
            f"time each slice of a long operation (rebuild, verify, prune, copy, "
            f"delete_for_runs) may take"
        )
    if pause is None or not 0 <= pause <= _MOST_PAUSE:
        raise InvalidInputError(
            f"slice_pause={slice_pause!r}: give a number >= 0 and <= {_MOST_PAUSE}, how many "
            f"times as long as it was busy a long operation waits after each slice (0: no pause)"
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


class StreamSaverBase(BaseCheckpointSaver[str], Generic[ClientT]):
    """The constructor both savers share: it checks ``client`` and every option, builds the
    operations core, and hands the client to the shell's ``_attach``."""

    # which clients the shell drives, and what it says of another: require_client's arguments
    _client_types: ClassVar[tuple[type, ...]]
    _client_text: ClassVar[tuple[str, str, str]]
    _cluster: bool

    def __init__(
        self,
        client: ClientT,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        delta_cache_bytes: int = DEFAULT_DELTA_CACHE_BYTES,
        durability: DurabilityMode = "none",
        replicas: int = 1,
        durability_timeout_ms: int = 1000,
        fencing: bool = False,
        ttl_seconds: float | None = None,
        audit_retention_seconds: float | None = DEFAULT_AUDIT_RETENTION_S,
        keep_last: int | None = None,
        chain: bool = True,
        allow_eviction: bool = False,
        reuse_items: bool = False,
        slot_move_timeout_s: float = DEFAULT_SLOT_MOVE_TIMEOUT_S,
        slice_ms: float | None = None,
        slice_pause: float | None = None,
    ) -> None:
        require_client(client, self._client_types, *self._client_text)
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
        # see Codec.reuse_items and docs/reuse.md
        self.reuse_items = reuse_items
        self.ttl_seconds = _check_seconds(
            "ttl_seconds",
            ttl_seconds,
            "(about 31,700 years) after which a thread without writes expires, or None to keep "
            "threads until deleted",
        )
        self.audit_retention_seconds = _check_seconds(
            "audit_retention_seconds",
            audit_retention_seconds,
            "for which a deleted thread's record stays, or None to keep it until the thread id "
            "is used again",
        )
        if keep_last is not None:
            bounded_int(
                keep_last,
                "keep_last",
                1,
                " (checkpoints kept per namespace), or None to keep every checkpoint",
            )
        self.keep_last = keep_last
        self.chain = chain
        # long operations' slices (Operations.slice_ms, slice_pause)
        self.slice_ms, self.slice_pause = _check_slices(slice_ms, slice_pause)
        # neither given: the pace adapts to other clients (core.flow.Pace); either given, both
        # are fixed, the other at its default
        self.pace_adapts = slice_ms is None and slice_pause is None
        self._projections = Projections(self.prefix)
        self._ops = self._operations()
        # how scripts reach the server, and whether the user may only read (transport/core.py)
        self._seam = Scripts(SOURCES)
        self.client = client
        self._ops.read_config = config_readable(client)
        self.server_version: tuple[int, ...] | None = None
        self._attach(client)

    def _attach(self, client: ClientT) -> None:
        """The shell's transport over ``client``; it sets ``_cluster``."""
        raise NotImplementedError

    def _operations(self) -> Operations:
        cache = DeltaCache(self.delta_cache_bytes) if self.delta_cache_bytes else None
        codec = Codec(self.serde, self.max_payload_bytes, self.reuse_items)
        ops = Operations(self.prefix, codec, cache, self.durability)
        ops.fencing = self.fencing
        ops.ttl_ms = math.ceil(self.ttl_seconds * 1000) if self.ttl_seconds else 0
        retention = self.audit_retention_seconds
        ops.audit_retention_ms = math.ceil(retention * 1000) if retention else 0
        ops.keep_last = self.keep_last or 0
        ops.chain = self.chain
        ops.slice_ms, ops.slice_pause = self.slice_ms, self.slice_pause
        ops.pace_adapts = self.pace_adapts
        ops.allow_eviction = self.allow_eviction
        ops.projections = self._projections
        return ops

    # A property, not BaseCheckpointSaver's plain attribute: a serde assigned after construction
    # (`saver.serde = EncryptedSerializer(...)`) must reach every reader and writer of values, or
    # plaintext is stored.
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

    def __copy__(self) -> StreamSaverBase[ClientT]:
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
        self._ops.feed_maxlen = bounded_int(value, "feed_maxlen", 0)

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

    # The cores of tail, tail_all and consumer_group, which each shell wraps in its driver.
    def _thread_tail(self, method: str, thread_id: str, options: TailOptions) -> ThreadTail:
        check_options(options, TailOptions.__optional_keys__, method)
        return ThreadTail(self.prefix, self._ops.codec, thread_id, **options)

    def _feed_tail(self, method: str, options: TailAllOptions) -> FeedTail:
        check_options(options, TailAllOptions.__optional_keys__, method)
        return FeedTail(self.prefix, self._ops.codec, cluster=self._cluster, **options)

    def _group_reader(
        self, method: str, group: str, consumer: str | None, options: GroupOptions
    ) -> GroupReader:
        check_options(options, GroupOptions.__optional_keys__, method)
        return GroupReader(
            self.prefix,
            self._ops.codec,
            group=group,
            consumer=default_consumer_name() if consumer is None else consumer,
            cluster=self._cluster,
            **options,
        )


def page_limit(limit: object) -> int | None:
    if limit is None:
        return None
    return bounded_int(limit, "limit", 1, ", or None for every thread")
