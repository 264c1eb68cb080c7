"""A batch's reads, I/O-free: its gets (grouped per bucket), its searches and namespace
listings, pipelined in one round trip; a search that looks at every item under its prefix in
slices (``store.scan``); a ranked search through the server's vector index (``store.vectors``)
one by one; then the values of the ranked pages in one round trip more. As ``InMemoryStore``
answers them, from the store as it was before the batch's own writes.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import _compare_values, _does_match
from redis.exceptions import ResponseError

from ..core.codec import Field
from ..core.errors import DataLostError
from ..core.flow import Call, Each, Eval, Flow
from ..core.keys import store_bucket
from ..core.replies import as_text
from ..core.slicing import DEFAULT_SLICE_MS
from .base import StoreBase, joined, member_of, split_member
from .index import Embedded
from .scan import scan_items
from .vectors import absent, enough, nearest

__all__ = ["ReadOperations"]

Page = builtins.list[tuple[float | None, Any]]
"""A search's page: (score, (member, row, decoded value or None)) per item."""


class ReadOperations(StoreBase):
    """The read half of ``StoreOperations.batch``."""

    def _reads(
        self, ops: Sequence[Op], embedded: Embedded | None
    ) -> Flow[tuple[builtins.list[Result], dict[int, builtins.list[Field]]]]:
        """The results of the reads among ``ops`` (None for the puts), and the TTL refreshes
        they ask for, per bucket."""
        # searches with a query, when the server's vector index is used: asked one by one
        nearest_ops = {
            i
            for i, op in enumerate(ops)
            if isinstance(op, SearchOp) and op.query and embedded and self.vectors
        }
        reads = _Plan(ops, self, nearest_ops)
        replies = yield from self._read(ops, reads)
        pages = self._pages(ops, reads, replies, embedded)
        for i in sorted(nearest_ops):
            op = ops[i]
            assert isinstance(op, SearchOp) and op.query and embedded
            pages[i] = yield from self._nearest(op, embedded.queries[op.query], embedded)
        # the values of ranked pages, by the event ids the ranking saw (a snapshot: an event's
        # value never changes), in a second round trip
        yield from self._values(pages.values())
        return self._answer(ops, reads, replies, pages)

    def _read(self, ops: Sequence[Op], reads: _Plan) -> Flow[builtins.list[Any]]:
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
            prefix = joined(op.namespace_prefix) if isinstance(op, SearchOp) else ""
            try:
                rows = yield from scan_items(
                    self._keys, self.cluster, prefix, kind, vec, DEFAULT_SLICE_MS
                )
            except ResponseError as exc:
                raise _lost(exc) from None
            reads.spans[i] = (len(replies), len(replies) + 1)
            replies.append(rows)
        return replies

    def _values(self, pages: Iterable[Page]) -> Flow[None]:
        """Fill in the values of the ranked rows on ``pages`` (those without one), by the
        event ids the ranking saw: one round trip, a script per bucket, if any is missing."""
        wanted: dict[int, builtins.list[Any]] = {}
        for page in pages:
            for _, (member, row, _) in page:
                if row[3] is None:
                    bucket = store_bucket(joined(split_member(member)[0]))
                    wanted.setdefault(bucket, []).append(row)
        if not wanted:
            return
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

    def _pages(
        self, ops: Sequence[Op], reads: _Plan, replies: Sequence[Any], embedded: Embedded | None
    ) -> dict[int, Page]:
        """Each search's page (``Page``)."""
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
        reads: _Plan,
        replies: Sequence[Any],
        pages: dict[int, Page],
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
                    refresh(get, bucket, member_of(get.namespace, get.key), row)
        for i, (start, end) in reads.spans.items():
            op = ops[i]
            if isinstance(op, ListNamespacesOp):
                results[i] = _namespaces(op, [row for reply in replies[start:end] for row in reply])
        for i, scored in pages.items():
            op = ops[i]
            assert isinstance(op, SearchOp)  # pages are the searches'
            results[i] = [
                self._item(*split_member(member), row, SearchItem, value, score)
                for score, (member, row, value) in scored
            ]
            for _, (member, row, _) in scored:
                namespace, _ = split_member(member)
                refresh(op, store_bucket(joined(namespace)), member, row)
        return results, touch

    def _nearest(self, op: SearchOp, query: Sequence[float], embedded: Embedded) -> Flow[Page]:
        """A ranked search's page through the server's vector index: the nearest documents,
        more each round, until the candidates surely hold the page (``store.vectors.enough``),
        then ``StoreIndex.rank`` of those candidates, as the exact path ranks all items: the
        same items, order and scores. A page the vectors cannot fill (items without vectors
        follow, unscored) is the exact path's."""
        assert self.vectors is not None and self.index is not None
        if op.limit == 0:
            return []
        wanted = op.offset + op.limit
        prefix = joined(op.namespace_prefix)
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
                bucket = store_bucket(joined(split_member(member)[0]))
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

    def _exact(self, op: SearchOp, embedded: Embedded) -> Flow[Page]:
        """One search's page by the exact path, values read."""
        reads = _Plan([op], self)
        replies = yield from self._read([op], reads)
        page = self._pages([op], reads, replies, embedded)[0]
        yield from self._values([page])
        return page


class _Plan:
    """A batch's reads: the scripts to pipeline, and which replies answer which operation."""

    def __init__(self, ops: Sequence[Op], core: StoreBase, skip: Iterable[int] = ()) -> None:
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
                by_bucket.setdefault(store_bucket(joined(op.namespace)), []).append((i, op))
        for bucket, wanted in by_bucket.items():
            self.gets[bucket] = (len(self.evals), wanted)
            k = core.keys(bucket)
            members = [member_of(op.namespace, op.key) for _, op in wanted]
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
                    # (ReadOperations._read), answered as 'rank' rows when no value is needed
                    values_needed = bool(op.filter)
                    self.scanned[i] = ("values" if values_needed else "rank", ranked)
                    if not values_needed:
                        self.ranked.add(i)
                    continue
                args = ("search", joined(op.namespace_prefix), op.offset + op.limit)
                self.evals += core._every_bucket(args)
            elif isinstance(op, ListNamespacesOp):
                # every namespace, in slices (store/scan.py): a store of a namespace per user has
                # thousands a bucket
                self.scanned[i] = ("names", False)
                continue
            else:
                continue
            self.spans[i] = (start, len(self.evals))


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
