"""Every Store operation, written once, as a generator of Redis operations (see ``checkpoint.ops``).

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
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.memory import _compare_values, _does_match
from redis.exceptions import ResponseError

from ..core.chain import ChainCheck
from ..core.codec import Field
from ..core.errors import DataLostError, InvalidInputError, PayloadTooLargeError
from ..core.flow import Call, Each, Eval, Flow, Pace
from ..core.keys import STORE_BUCKETS, StoreKeys, lp, store_bucket, store_keys
from ..core.pages import LogPages
from ..core.replies import as_text
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE, Replay
from ..memory_events import MemoryEvent, StoreCursor, memory_event
from .index import Embedded, StoreIndex
from .scan import scan_items
from .slices import store_slices
from .vectors import VectorIndex, absent, enough, nearest, unusable

__all__ = ["StoreOperations", "check_ttl_config"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SWEEP_BATCH = 1000
# changes(): the events a bucket is first read for, and about how many a later round reads in
# all (a pipeline of XRANGEs runs as one block: ~1-3 us an event)
_PEEK, _ROUND_EVENTS = 2, 256


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
    sweep = ttl.get("sweep_interval_minutes")
    if sweep is not None and (not isinstance(sweep, (int, float)) or sweep <= 0):
        raise InvalidInputError(
            f"ttl['sweep_interval_minutes']={sweep!r}: give minutes > 0, or None for no sweeper"
        )
    return TTLConfig(**ttl)  # type: ignore[typeddict-item]


def _ttl_ms(minutes: object, what: str) -> int:
    if (
        not isinstance(minutes, (int, float))
        or isinstance(minutes, bool)
        or not math.isfinite(minutes)
        or minutes <= 0
    ):
        raise InvalidInputError(
            f"{what}={minutes!r}: give a number of minutes > 0 after which the item expires, "
            f"or None to keep it until deleted"
        )
    return max(1, math.ceil(minutes * 60_000))


def _joined(namespace: tuple[str, ...]) -> str:
    # labels hold no "." (validate_op_namespace), so joining with it is injective
    return ".".join(namespace)


def _at(us: bytes | int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


def _split_member(member: bytes) -> tuple[tuple[str, ...], str]:
    size, _, rest = member.partition(b":")
    n = int(size)
    return tuple(rest[:n].decode().split(".")), rest[n:].decode()


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


class StoreOperations:
    """The I/O-free core shared by ``RedisStreamStore`` and ``AsyncRedisStreamStore``."""

    def __init__(
        self,
        prefix: str,
        serde: SerializerProtocol,
        *,
        cluster: bool,
        chain: bool,
        max_payload_bytes: int,
        ttl: TTLConfig | None,
        index: StoreIndex | None = None,
    ) -> None:
        self.prefix = prefix
        self.index = index
        self.serde = serde
        # on one server a single script can visit every bucket; a cluster needs one per bucket
        self.cluster = cluster
        self.chain = chain
        self.max_payload_bytes = max_payload_bytes
        self.ttl = ttl

        self._keys = [store_keys(prefix, b) for b in _all()]
        # the server's vector index, once setup_vectors found it usable
        self.vectors: VectorIndex | None = None

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

    def setup_vectors(self) -> Flow[bool]:
        """Use the server's vector index if it has one (RediSearch, Redis 8): find or create
        it, and have every bucket keep its documents (a replay of each bucket that does not
        yet, which also sets its ``mft``). False, and the exact path, without ``index``, on a
        cluster, without the module, or for a user without the ``FT`` commands (creating the
        index takes ``FT.CREATE``, which a tenant must not have: docs/security.md)."""
        if self.index is None or self.cluster:
            return False
        vectors = VectorIndex(self.prefix, self.index.dims, self._keys)
        (info,) = yield Each((Call(vectors.info()),))
        if isinstance(info, Exception):
            if unusable(info):
                return False
            if not absent(info):
                raise info
            (made,) = yield Each((Call(vectors.create(), write=True),))
            if isinstance(made, Exception):
                if unusable(made):
                    return False
                if "already exists" not in str(made).lower():
                    raise made
                (info,) = yield Each((Call(vectors.info()),))
        # A new index reads the documents already there in the background, and a search
        # before it is done would miss some: a replay rewrites them, and RediSearch indexes a
        # write at once. So every bucket is replayed unless the index is complete and the
        # bucket keeps its documents already.
        complete = not isinstance(info, Exception) and vectors.check(info)
        marks = yield Each(tuple(Call(("GET", k.ft)) for k in self._keys))
        dims = str(vectors.dims).encode()
        todo = [b for b, mark in zip(_all(), marks, strict=True) if mark != dims or not complete]
        yield from store_slices(todo, self._keys, "rebuild", str(vectors.dims))
        self.vectors = vectors
        return True

    def batch(
        self, ops: Iterable[Op], embedded: Embedded | None = None
    ) -> Flow[builtins.list[Result]]:
        ops = builtins.list(ops)
        puts = self._validate(ops, embedded)
        # searches with a query, when the server's vector index is used: asked one by one
        nearest_ops = {
            i
            for i, op in enumerate(ops)
            if isinstance(op, SearchOp) and op.query and embedded and self.vectors
        }
        reads = _Reads(ops, self, nearest_ops)
        replies = yield from self._read(ops, reads)
        pages = self._pages(ops, reads, replies, embedded)
        for i in sorted(nearest_ops):
            op = ops[i]
            assert isinstance(op, SearchOp) and op.query and embedded
            pages[i] = yield from self._nearest(op, embedded.queries[op.query], embedded)
        # the values of ranked pages, by the event ids the ranking saw (a snapshot: an event's
        # value never changes), in a second round trip
        wanted: dict[int, builtins.list[Any]] = {}
        for page in pages.values():
            for _, (member, row, _) in page:
                if row[3] is None:
                    wanted.setdefault(store_bucket(_joined(_split_member(member)[0])), []).append(
                        row
                    )
        if wanted:
            yield from self._values(wanted)
        results, touch = self._answer(ops, reads, replies, pages)
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

    def _read(self, ops: Sequence[Op], reads: _Reads) -> Flow[builtins.list[Any]]:
        """The replies of ``reads``: its scripts, pipelined, then each search that looks at
        every item under its prefix, in slices (store/scan.py), as one reply more each."""
        replies = builtins.list((yield Each(tuple(reads.evals))) if reads.evals else ())
        for reply in replies:
            if isinstance(reply, Exception):
                raise _lost(reply)
        for i, (start, end) in builtins.list(reads.spans.items()):
            if isinstance(ops[i], SearchOp) and any(r == [b"scan"] for r in replies[start:end]):
                # too deep a page for one script: every item under the prefix, in slices
                for j in range(start, end):
                    replies[j] = []
                reads.scanned[i] = ("values", False)
        for i, (kind, vec) in reads.scanned.items():
            op = ops[i]
            prefix = _joined(op.namespace_prefix) if isinstance(op, SearchOp) else ""
            try:
                rows = yield from scan_items(
                    self._keys, self.cluster, prefix, kind, vec, DEFAULT_SLICE_MS
                )
            except ResponseError as exc:
                raise _lost(exc) from None
            reads.spans[i] = (len(replies), len(replies) + 1)
            replies.append(rows)
        return replies

    def _values(self, wanted: dict[int, builtins.list[Any]]) -> Flow[None]:
        """Fill in the values of ranked rows (per bucket), by the event ids the ranking saw."""
        values = tuple(
            Eval("store_read", (self.keys(b).log,), ("events", *(r[4] for r in rows)))
            for b, rows in wanted.items()
        )
        for rows, reply in zip(wanted.values(), (yield Each(values)), strict=True):
            if isinstance(reply, Exception):
                raise reply
            for row, got in zip(rows, reply, strict=True):
                if not got:
                    raise _lost(Exception(f"STREAMSAVER_STORE_LOST {as_text(row[4])}"))
                row[2], row[3] = got

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
            by_bucket.setdefault(store_bucket(_joined(namespace)), []).extend(args)
        return by_bucket

    def _pages(
        self, ops: Sequence[Op], reads: _Reads, replies: Sequence[Any], embedded: Embedded | None
    ) -> dict[int, builtins.list[tuple[float | None, Any]]]:
        """Each search's page: (score, (member, row, decoded value or None)) per item."""
        pages = {}
        for i, (start, end) in reads.spans.items():
            op = ops[i]
            if not isinstance(op, SearchOp):
                continue
            found = []
            for member, *row in (row for reply in replies[start:end] for row in reply):
                if i in reads.ranked:
                    # 'rank' rows, as the others: created, updated, vt, v, id, ttl, vec
                    row = [row[0], row[1], None, None, row[2], row[3], row[4]]
                if not op.filter:
                    # decoded later, only if on the page
                    found.append((member, row, None))
                    continue
                value = self._value(row)
                if all(_compare_values(value.get(k), v) for k, v in op.filter.items()):
                    found.append((member, row, value))
            # newest first across buckets; ties (other servers' clocks) by the member's bytes,
            # as lua/store/store_read.lua breaks them
            found.sort(key=lambda x: (-int(x[1][1]), x[0]))
            if self.index is not None and embedded is not None and op.query:
                candidates = [(x, x[1][6]) for x in found]
                query = embedded.queries[op.query]
                pages[i] = self.index.rank(query, candidates, op.offset, op.limit)
            else:
                pages[i] = [(None, x) for x in found[op.offset : op.offset + op.limit]]
        return pages

    def _answer(
        self,
        ops: Sequence[Op],
        reads: _Reads,
        replies: Sequence[Any],
        pages: dict[int, builtins.list[tuple[float | None, Any]]],
    ) -> tuple[builtins.list[Result], dict[int, builtins.list[Field]]]:
        """The results of the reads, and the TTL refreshes they ask for, per bucket."""
        results: builtins.list[Result] = [None] * len(ops)
        touch: dict[int, builtins.list[Field]] = {}

        def refresh(op: GetOp | SearchOp, bucket: int, member: str | bytes, row: Any) -> None:
            if int(row[5]) > 0 and self._refresh(op.refresh_ttl):
                touch.setdefault(bucket, []).extend((member, row[4]))

        for bucket, (at, wanted) in reads.gets.items():
            for (i, get), row in zip(wanted, replies[at], strict=True):
                if row:
                    results[i] = self._item(get.namespace, str(get.key), row, Item)
                    refresh(get, bucket, _member(get.namespace, get.key), row)
        for i, (start, end) in reads.spans.items():
            op = ops[i]
            if isinstance(op, ListNamespacesOp):
                results[i] = _namespaces(op, [row for reply in replies[start:end] for row in reply])
        for i, scored in pages.items():
            op = ops[i]
            assert isinstance(op, SearchOp)  # pages are the searches'
            results[i] = [
                self._item(*_split_member(member), row, SearchItem, value, score)
                for score, (member, row, value) in scored
            ]
            for _, (member, row, _) in scored:
                namespace, _ = _split_member(member)
                refresh(op, store_bucket(_joined(namespace)), member, row)
        return results, touch

    def _nearest(
        self, op: SearchOp, query: Sequence[float], embedded: Embedded
    ) -> Flow[builtins.list[tuple[float | None, Any]]]:
        """A ranked search's page through the server's vector index: the nearest documents,
        more each round, until the candidates surely hold the page (``store.vectors.enough``),
        then ``StoreIndex.rank`` of those candidates, as the exact path ranks all items: the
        same items, order and scores. A page the vectors cannot fill (items without vectors
        follow, unscored) is the exact path's."""
        assert self.vectors is not None and self.index is not None
        if op.limit == 0:
            return []
        wanted = op.offset + op.limit
        prefix = _joined(op.namespace_prefix)
        k = max(2 * wanted, 16)
        seen: dict[bytes, Any] = {}  # member -> (member, row, value), or None: dead, filtered
        while True:
            (reply,) = yield Each((Call(self.vectors.search(prefix, query, k)),))
            if isinstance(reply, Exception):
                if not absent(reply):
                    raise reply
                # the index was dropped: the exact path, until setup() makes it again
                self.vectors = None
                return (yield from self._exact(op, embedded))
            docs = nearest(reply)
            asked: dict[int, builtins.list[bytes]] = {}
            for member in dict.fromkeys(m for m, _ in docs if m not in seen):
                bucket = store_bucket(_joined(_split_member(member)[0]))
                asked.setdefault(bucket, []).append(member)
            reads = tuple(
                Eval("store_read", (self.keys(b).log, self.keys(b).item), ("vecs", *members))
                for b, members in asked.items()
            )
            for members, reply in zip(asked.values(), (yield Each(reads)) if reads else [],
                                      strict=True):  # fmt: skip
                if isinstance(reply, Exception):
                    raise _lost(reply)
                for member, row in zip(members, reply, strict=True):
                    seen[member] = self._candidate(op, member, row)
            # the exact path's candidate order: newest first, ties by the member's bytes
            found = sorted((x for x in seen.values() if x), key=lambda x: (-int(x[1][1]), x[0]))
            candidates = [(x, x[1][6]) for x in found]
            ranked = self.index.rank(query, candidates, 0, wanted)
            best = [score for score, _ in ranked if score is not None]
            if len(docs) < k:
                # every vector under the prefix seen: a short page needs the unscored items
                if len(best) < wanted:
                    return (yield from self._exact(op, embedded))
                break
            if enough(best, wanted, docs[-1][1]):
                break
            k *= 4
        return self.index.rank(query, candidates, op.offset, op.limit)

    def _candidate(self, op: SearchOp, member: bytes, row: Any) -> Any:
        """A found item as the exact path's search holds it, None if it is gone, expired or
        not what the filter asks."""
        if not row:
            return None
        if not op.filter:
            return (member, builtins.list(row), None)
        value = self._value(row)
        if all(_compare_values(value.get(k), v) for k, v in op.filter.items()):
            return (member, builtins.list(row), value)
        return None

    def _exact(
        self, op: SearchOp, embedded: Embedded
    ) -> Flow[builtins.list[tuple[float | None, Any]]]:
        """One search's page by the exact path, values read."""
        reads = _Reads([op], self)
        replies = yield from self._read([op], reads)
        page = self._pages([op], reads, replies, embedded)[0]
        unread: dict[int, builtins.list[Any]] = {}
        for _, (member, row, _) in page:
            if row[3] is None:
                bucket = store_bucket(_joined(_split_member(member)[0]))
                unread.setdefault(bucket, []).append(row)
        if unread:
            yield from self._values(unread)
        return page

    def _put_args(
        self, op: PutOp, writer: tuple[str, str, str], embedded: Embedded | None
    ) -> builtins.list[Field]:
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if not isinstance(op.key, str):
            raise InvalidInputError(f"key={op.key!r}: give a string")
        namespace, key = _joined(op.namespace), op.key
        if op.value is None:
            return ["mdel", namespace, key, "", "", "", *writer, ""]
        if not isinstance(op.value, dict):
            raise InvalidInputError(
                f"value for key {key!r} in {op.namespace!r} must be a dict, got "
                f"{type(op.value).__name__}; wrap it, e.g. {{'value': ...}}"
            )
        type_, raw = self.serde.dumps_typed(dict(op.value))
        size = len(raw) + len(namespace) + len(key)
        if size > self.max_payload_bytes:
            raise PayloadTooLargeError(size, self.max_payload_bytes, f"item {key!r}")
        ttl = op.ttl if op.ttl is not None else None
        ttl_ms = "" if ttl is None else str(_ttl_ms(ttl, "ttl"))
        vec = self.index.pack(op, embedded) if self.index is not None else b""
        return ["mput", namespace, key, type_, raw, ttl_ms, *writer, vec]

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

    def sweep(self) -> Flow[int]:
        """Delete (as ``mdel`` events, why ``expired``) every item whose TTL ran out."""
        head = (0, "chain" if self.chain else "", "sweep", _SWEEP_BATCH)
        total = 0
        buckets = builtins.list(range(STORE_BUCKETS))
        while buckets:
            ops = tuple(Eval("store_expire", self.keys(b), head, write=True) for b in buckets)
            replies = yield Each(ops)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            total += sum(replies)
            # a bucket that hit the batch size may hold more
            buckets = [b for b, n in zip(buckets, replies, strict=True) if n >= _SWEEP_BATCH]
        return total

    def rebuild(self) -> Flow[Replay]:
        """Replay every bucket's log into its indexes, in slices (lua/store/store_slice.lua): each
        bucket's indexes are swapped in whole, and writes made meanwhile are kept."""
        done = yield from store_slices(_all(), self._keys, "rebuild")
        return Replay(
            sum(r.applied for r in done.values()),
            sum(r.skipped for r in done.values()),
            [line for r in done.values() for line in r.problems],
        )

    def verify(self) -> Flow[tuple[int, int, builtins.list[str]]]:
        """Replay every bucket into scratch keys and diff with its indexes, in slices, safe
        while writers go on: (applied, skipped, problems), each problem ``bucket <bucket>
        <line>``, a line as lua/store/store_slice.lua gives it."""
        done = yield from store_slices(_all(), self._keys, "verify")
        return (
            sum(r.applied for r in done.values()),
            sum(r.skipped for r in done.values()),
            sorted(f"bucket {b} {line}" for b, r in done.items() for line in r.problems),
        )

    def verify_chain(self) -> Flow[builtins.list[tuple[int, ChainCheck]]]:
        """Walk every bucket's digest chain (the same chain as a thread's, docs/audit.md)."""
        out = []
        for b in _all():
            check = ChainCheck()
            pages = LogPages(self.keys(b).log, DEFAULT_SLICE_MS, Pace(DEFAULT_SLICE_PAUSE))
            while page := (yield from pages.next()):
                for entry_id, fields in page:
                    check.add(as_text(entry_id), builtins.list(fields.items()))
            out.append((b, check))
        return out

    def history(
        self, namespace: tuple[str, ...], key: str | None, values: bool
    ) -> Flow[builtins.list[MemoryEvent]]:
        """The events of ``namespace`` (and ``key``), oldest first, from its bucket's log."""
        joined = _joined(tuple(namespace))
        bucket = store_bucket(joined)
        out = []
        # a caller waits for it: pages sized to a slice, without the pauses between them
        pages = LogPages(self.keys(bucket).log, DEFAULT_SLICE_MS, Pace(0))
        while page := (yield from pages.next()):
            for entry_id, fields in page:
                if fields.get(b"ns") == joined.encode() and (
                    key is None or fields.get(b"key") == key.encode()
                ):
                    event = memory_event(bucket, as_text(entry_id), fields, self._serde(values))
                    if event is not None:
                        out.append(event)
        return out

    def changes(
        self, after: StoreCursor | None, count: int, values: bool
    ) -> Flow[tuple[builtins.list[MemoryEvent], StoreCursor]]:
        """The events of every bucket after ``after`` (up to ``count`` per bucket), by time,
        and the cursor to read on from. Redis runs a pipeline's commands back to back, so one
        read of ``count`` events from each of the 256 logs (a tail starting from the first
        event of a big store) held every other client as long: the first round reads at most
        _PEEK events a bucket, every bucket in one round trip (all an idle tail costs); the
        buckets that had that many are read on in rounds of about _ROUND_EVENTS events.
        Entries this version cannot read are passed over (the cursor moves past them)."""
        positions = dict(after.positions) if after is not None else {}
        events: builtins.list[MemoryEvent] = []
        wanted = dict.fromkeys(_all(), count)
        width, first = len(wanted), True
        while wanted:
            batch = builtins.list(wanted.items())[:width]
            reads = tuple(
                Call(("XRANGE", self.keys(b).log, "(" + positions[b] if b in positions else "-",
                      "+", "COUNT", min(left, _PEEK) if first else left))
                for b, left in batch
            )  # fmt: skip
            for (b, left), page in zip(batch, (yield Each(reads)), strict=True):
                if isinstance(page, Exception):
                    raise page
                for entry_id, fields in page:
                    event = memory_event(b, as_text(entry_id), fields, self._serde(values))
                    if event is not None:
                        events.append(event)
                if page:
                    positions[b] = as_text(page[-1][0])
                more = left - len(page)
                if first and len(page) == min(left, _PEEK) and more:
                    wanted[b] = more
                else:
                    del wanted[b]
            width, first = max(1, _ROUND_EVENTS // count), False
        events.sort(key=lambda e: (e.at, e.bucket, e.id))
        return events, StoreCursor(positions=positions)

    def wait(self, after: StoreCursor, block_ms: int) -> Flow[None]:
        """Block until a bucket's log holds an event after ``after``, or ``block_ms`` passed:
        one ``XREAD BLOCK`` of every log, so a tail wakes when something is written rather
        than at its next poll. A single server only: one command cannot read across a
        cluster's slots (the shells sleep there instead)."""
        # a bucket without a position was empty when last read: anything in it is new
        ids = [after.positions.get(b, "0-0") for b in _all()]
        logs = [k.log for k in self._keys]
        yield Call(("XREAD", "COUNT", 1, "BLOCK", max(1, block_ms), "STREAMS", *logs, *ids))

    def _serde(self, values: bool) -> SerializerProtocol | None:
        return self.serde if values else None


class _Reads:
    """A batch's reads: the scripts to pipeline, and which replies answer which operation."""

    def __init__(self, ops: Sequence[Op], core: StoreOperations, skip: Iterable[int] = ()) -> None:
        self.evals: builtins.list[Eval] = []
        # bucket -> (its reply's index, the gets it answers)
        self.gets: dict[int, tuple[int, builtins.list[tuple[int, GetOp]]]] = {}
        # operation index -> the replies [start, end) that answer it
        self.spans: dict[int, tuple[int, int]] = {}
        # searches read as 'rank' rows (no values: the page's come in a second round trip)
        self.ranked: set[int] = set()
        # searches that look at every item under their prefix, and namespace listings: (the
        # rows: 'rank', 'values' or 'names'; with vectors)
        self.scanned: dict[int, tuple[str, bool]] = {}
        by_bucket: dict[int, builtins.list[tuple[int, GetOp]]] = {}
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                by_bucket.setdefault(store_bucket(_joined(op.namespace)), []).append((i, op))
        for bucket, wanted in by_bucket.items():
            self.gets[bucket] = (len(self.evals), wanted)
            k = core.keys(bucket)
            members = [_member(op.namespace, op.key) for _, op in wanted]
            self.evals.append(Eval("store_read", (k.log, k.item), ("get", *members)))
        skipped = set(skip)
        for i, op in enumerate(ops):
            start = len(self.evals)
            if i in skipped:
                continue
            if isinstance(op, SearchOp):
                ranked = core.index is not None and bool(op.query)
                if op.filter or ranked:
                    # a filter or a ranking looks at every item under the prefix: in slices
                    # (StoreOperations._read), answered as 'rank' rows when no value is needed
                    values_needed = bool(op.filter)
                    self.scanned[i] = ("values" if values_needed else "rank", ranked)
                    if not values_needed:
                        self.ranked.add(i)
                    continue
                args = ("search", _joined(op.namespace_prefix), op.offset + op.limit)
                self.evals += core._every_bucket(args)
            elif isinstance(op, ListNamespacesOp):
                # every namespace, in slices (store/scan.py): a store of a namespace per user
                # has thousands a bucket
                self.scanned[i] = ("names", False)
                continue
            else:
                continue
            self.spans[i] = (start, len(self.evals))


def _member(namespace: tuple[str, ...], key: object) -> str:
    return lp(_joined(namespace)) + str(key)


def _all() -> range:
    return range(STORE_BUCKETS)


def _check_page(limit: object, offset: object) -> None:
    for name, value, low in (("limit", limit, 0), ("offset", offset, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise InvalidInputError(f"{name}={value!r}: give an int >= {low}")


def _namespaces(op: ListNamespacesOp, rows: Sequence[bytes]) -> builtins.list[tuple[str, ...]]:
    """InMemoryStore's listing: match conditions, max_depth, sorted, then the page."""
    namespaces = [tuple(as_text(r).split(".")) for r in rows]
    if op.match_conditions:
        namespaces = [
            ns for ns in namespaces if all(_does_match(c, ns) for c in op.match_conditions)
        ]
    if op.max_depth is not None:
        namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
    else:
        namespaces = sorted(set(namespaces))
    return namespaces[op.offset : op.offset + op.limit]


def _lost(reply: Exception) -> Exception:
    message = str(reply)
    if "STREAMSAVER_STORE_LOST" not in message:
        return reply
    eid = message.split("STREAMSAVER_STORE_LOST", 1)[1].strip()
    return DataLostError(
        f"a store index names event {eid}, which its bucket's log no longer holds; run "
        f"store.verify() to see every such entry, and store.rebuild() to re-project the "
        f"indexes from the logs"
    )
