"""Every Store operation, written once, as a generator of Redis operations (see ``checkpoint.ops``):
``StoreOperations``, the batch and its writes here, its reads in ``store.reads``, and what
reads or replays the bucket logs whole in ``store.logs``.

A ``batch`` is at most two round trips whatever it holds: its reads (gets grouped per bucket,
each search and namespace listing) pipelined in one, then its puts and deletes (one script per
bucket, pipelined) and the TTL refreshes its reads asked for; a search with a query (and no
filter) adds one between them, for the values of its page. As in ``InMemoryStore``, reads
see the store as it was before the batch's own writes, and of two puts of one item in a batch
the last wins. Everything is validated and encoded before the first yield: bad input writes
nothing. The embeddings a batch needs are computed before it (``embed``/``aembed``: the
model's call is the shells' to make) and passed in.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterable, Mapping, Sequence

from langchain_core.runnables.config import var_child_runnable_config
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from ..core.codec import Field
from ..core.config import MAX_TTL_MS, bounded_int, check_text
from ..core.errors import InvalidInputError, PayloadTooLargeError
from ..core.flow import Each, Eval, Flow
from ..core.keys import store_bucket
from .base import joined
from .index import Embedded
from .logs import LogOperations
from .reads import ReadOperations

__all__ = ["MAX_SWEEP_MINUTES", "StoreOperations", "check_sweep_interval", "check_ttl_config"]

MAX_SWEEP_MINUTES = 525_600
_MAX_TTL_MINUTES = MAX_TTL_MS // 60_000


def check_ttl_config(ttl: object) -> TTLConfig | None:
    if ttl is None:
        return None
    known = {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
    if not isinstance(ttl, dict) or not set(ttl) <= known:
        raise InvalidInputError(
            f"ttl={ttl!r}: give a dict with keys among {sorted(known)}, e.g. "
            f'{{"default_ttl": 60, "refresh_on_read": True}} (minutes), or None'
        )
    if ttl.get("default_ttl") is not None:
        _ttl_ms(ttl["default_ttl"], "ttl['default_ttl']")
    if ttl.get("sweep_interval_minutes") is not None:
        check_sweep_interval(ttl["sweep_interval_minutes"], "ttl['sweep_interval_minutes']")
    return TTLConfig(**ttl)  # type: ignore[typeddict-item]


def check_sweep_interval(minutes: object, what: str) -> float:
    """The sweeper's interval in minutes: a number > 0, at most a year (a longer wait is
    more than the sweeper's timers can hold)."""
    if (
        not isinstance(minutes, (int, float))
        or isinstance(minutes, bool)
        or not 0 < minutes <= MAX_SWEEP_MINUTES
    ):
        raise InvalidInputError(
            f"{what}={minutes!r}: give a number of minutes > 0 and <= {MAX_SWEEP_MINUTES} "
            f"(a year) between sweeps, or None for no sweeper"
        )
    return float(minutes)


def _ttl_ms(minutes: object, what: str) -> int:
    if (
        not isinstance(minutes, (int, float))
        or isinstance(minutes, bool)
        or not 0 < minutes <= _MAX_TTL_MINUTES
    ):
        raise InvalidInputError(
            f"{what}={minutes!r}: give a number of minutes > 0 and <= {_MAX_TTL_MINUTES} "
            f"(about 31,700 years) after which the item expires, or None to keep it until "
            f"deleted"
        )
    return max(1, math.ceil(minutes * 60_000))


def _writer() -> tuple[str, str, str]:
    """(thread, run, node) of the LangGraph run this put happens in, '' when none."""
    config = var_child_runnable_config.get() or {}
    configurable = config.get("configurable") or {}
    metadata = config.get("metadata") or {}
    run = metadata.get("run_id") or configurable.get("run_id") or config.get("run_id") or ""
    return (
        str(configurable.get("thread_id") or ""),
        str(run),
        str(metadata.get("langgraph_node") or ""),
    )


class StoreOperations(ReadOperations, LogOperations):
    """The I/O-free core shared by ``RedisStreamStore`` and ``AsyncRedisStreamStore``."""

    def embed(self, ops: Sequence[Op]) -> Embedded | None:
        """The vectors ``batch`` needs (the model's call, the shell's one I/O besides Redis),
        asked only once the batch is known valid."""
        if self.index is None:
            return None
        self._validate(ops, None)
        return self.index.embed(ops)

    async def aembed(self, ops: Sequence[Op]) -> Embedded | None:
        if self.index is None:
            return None
        self._validate(ops, None)
        return await self.index.aembed(ops)

    def batch(
        self, ops: Iterable[Op], embedded: Embedded | None = None
    ) -> Flow[builtins.list[Result]]:
        ops = builtins.list(ops)
        puts = self._validate(ops, embedded)
        results, touch = yield from self._reads(ops, embedded)
        head: tuple[Field | int, ...] = (0, "chain" if self.chain else "")
        writes = [
            Eval("store_write", self.keys(bucket), (*head, *args), write=True)
            for bucket, args in puts.items()
        ]
        writes += [
            Eval("store_expire", self.keys(bucket), (*head, "touch", *args), write=True)
            for bucket, args in touch.items()
        ]
        if writes:
            for reply in (yield Each(tuple(writes))):
                if isinstance(reply, Exception):
                    raise reply
        return results

    def _validate(
        self, ops: Sequence[Op], embedded: Embedded | None
    ) -> dict[int, builtins.list[Field]]:
        """Check every operation; the script arguments of the puts, per bucket, the last put
        of an item winning."""
        puts: dict[tuple[tuple[str, ...], str], builtins.list[Field]] = {}
        writer = _writer()
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise InvalidInputError(
                    f"unknown store operation {op!r}: give GetOp, PutOp, SearchOp or "
                    f"ListNamespacesOp"
                )
            validate_op_namespace(op)
            _check_texts(op)
            if isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = self._put_args(op, writer, embedded)
            elif isinstance(op, SearchOp):
                _check_page(op.limit, op.offset)
            elif isinstance(op, ListNamespacesOp):
                _check_page(op.limit, op.offset)
                if op.max_depth is not None and (
                    not isinstance(op.max_depth, int) or op.max_depth < 1
                ):
                    raise InvalidInputError(
                        f"max_depth={op.max_depth!r}: give an int >= 1, or None for full depth"
                    )
        by_bucket: dict[int, builtins.list[Field]] = {}
        for (namespace, _), args in puts.items():
            by_bucket.setdefault(store_bucket(joined(namespace)), []).extend(args)
        return by_bucket

    def _put_args(
        self, op: PutOp, writer: tuple[str, str, str], embedded: Embedded | None
    ) -> builtins.list[Field]:
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if not isinstance(op.key, str):
            raise InvalidInputError(f"key={op.key!r}: give a string")
        if op.index not in (None, False) and not (
            isinstance(op.index, list) and all(isinstance(f, str) for f in op.index)
        ):
            raise InvalidInputError(
                f"index={op.index!r} for key {op.key!r}: give a list of paths into the value "
                f"to embed (e.g. ['text']), False for none, or None for the store's fields"
            )
        namespace, key = joined(op.namespace), op.key
        if op.value is None:
            return ["mdel", namespace, key, "", "", "", *writer, ""]
        if not isinstance(op.value, Mapping):
            raise InvalidInputError(
                f"value for key {key!r} in {op.namespace!r} must be a mapping, got "
                f"{type(op.value).__name__}; wrap it, e.g. {{'value': ...}}"
            )
        try:
            # stored as a dict, as InMemoryStore keeps it (BaseStore.put takes any Mapping)
            type_, raw = self.serde.dumps_typed(dict(op.value))
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInputError(
                f"the value for key {key!r} in {op.namespace!r} cannot be serialized by "
                f"{type(self.serde).__name__}: {exc}; store values the serializer supports "
                f"(ints within 64 bits: a larger one as a str), or pass serde= one that "
                f"handles them"
            ) from exc
        size = len(raw) + len(namespace) + len(key)
        if size > self.max_payload_bytes:
            raise PayloadTooLargeError(size, self.max_payload_bytes, f"item {key!r}")
        ttl = op.ttl if op.ttl is not None else None
        ttl_ms = "" if ttl is None else str(_ttl_ms(ttl, "ttl"))
        vec = self.index.pack(op, embedded) if self.index is not None else b""
        return ["mput", namespace, key, type_, raw, ttl_ms, *writer, vec]


def _check_texts(op: Op) -> None:
    """The labels and key of ``op`` as Redis can hold them (UTF-8: no lone surrogate)."""
    if isinstance(op, (GetOp, PutOp)):
        paths = [op.namespace]
        if isinstance(op.key, str):
            check_text(op.key, "key")
    elif isinstance(op, SearchOp):
        paths = [op.namespace_prefix]
    elif isinstance(op, ListNamespacesOp):
        paths = [condition.path for condition in op.match_conditions or ()]
    for path in paths:
        for label in path:
            check_text(label, "a namespace label")


def _check_page(limit: object, offset: object) -> None:
    for name, value in (("limit", limit), ("offset", offset)):
        bounded_int(value, name, 0)
