"""What reads or replays a store's bucket logs whole, I/O-free: the history of a namespace,
the changes after a cursor and the wait for more (what ``tail`` repeats), the TTL sweep, the
rebuild and verify in slices (``store.slices``), the digest chain, and the setup of the
server's vector index (a replay fills it)."""

from __future__ import annotations

import builtins

from ..core.chain import ChainCheck
from ..core.config import check_text
from ..core.flow import Call, Each, Emit, Eval, Flow, Items, Pace, Pause
from ..core.keys import store_bucket
from ..core.pages import LogPages
from ..core.replies import as_text
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE, Replay
from ..memory_events import MemoryEvent, StoreCursor, memory_event
from .base import StoreBase, buckets, joined
from .slices import store_slices
from .vectors import VectorIndex, absent, unusable

__all__ = ["LogOperations"]

_SWEEP_BATCH = 1000
# changes(): the events a bucket is first read for, and about how many a later round reads in
# all (a pipeline of XRANGEs runs as one block: ~1-3 us an event)
_PEEK, _ROUND_EVENTS = 2, 256


class LogOperations(StoreBase):
    """The operations of ``StoreOperations`` that read or replay the logs of every bucket."""

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
        todo = [b for b, mark in zip(buckets(), marks, strict=True) if mark != dims or not complete]
        yield from store_slices(todo, self._keys, "rebuild", str(vectors.dims))
        self.vectors = vectors
        return True

    def sweep(self) -> Flow[int]:
        """Delete (as ``mdel`` events, why ``expired``) every item whose TTL ran out."""
        head = (0, "chain" if self.chain else "", "sweep", _SWEEP_BATCH)
        total = 0
        todo = builtins.list(buckets())
        while todo:
            ops = tuple(Eval("store_expire", self.keys(b), head, write=True) for b in todo)
            replies = yield Each(ops)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            total += sum(replies)
            # a bucket that hit the batch size may hold more
            todo = [b for b, n in zip(todo, replies, strict=True) if n >= _SWEEP_BATCH]
        return total

    def rebuild(self) -> Flow[Replay]:
        """Replay every bucket's log into its indexes, in slices (lua/store/store_slice.lua): each
        bucket's indexes are swapped in whole, and writes made meanwhile are kept."""
        done = yield from store_slices(buckets(), self._keys, "rebuild")
        return Replay(
            sum(r.applied for r in done.values()),
            sum(r.skipped for r in done.values()),
            [line for r in done.values() for line in r.problems],
        )

    def verify(self) -> Flow[tuple[int, int, builtins.list[str]]]:
        """Replay every bucket into scratch keys and diff with its indexes, in slices, safe
        while writers go on: (applied, skipped, problems), each problem ``bucket <bucket>
        <line>``, a line as lua/store/store_slice.lua gives it."""
        done = yield from store_slices(buckets(), self._keys, "verify")
        return (
            sum(r.applied for r in done.values()),
            sum(r.skipped for r in done.values()),
            sorted(f"bucket {b} {line}" for b, r in done.items() for line in r.problems),
        )

    def verify_chain(self) -> Flow[builtins.list[tuple[int, ChainCheck]]]:
        """Walk every bucket's digest chain (the same chain as a thread's, docs/audit.md)."""
        out = []
        for b in buckets():
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
        name = check_text(joined(tuple(namespace)), "namespace")
        if key is not None:
            check_text(key, "key")
        bucket = store_bucket(name)
        out = []
        # a caller waits for it: pages sized to a slice, without the pauses between them
        pages = LogPages(self.keys(bucket).log, DEFAULT_SLICE_MS, Pace(0))
        while page := (yield from pages.next()):
            for entry_id, fields in page:
                if fields.get(b"ns") == name.encode() and (
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
        wanted = dict.fromkeys(buckets(), count)
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
        cluster's slots (``tail`` pauses there instead)."""
        # a bucket without a position was empty when last read: anything in it is new
        ids = [after.positions.get(b, "0-0") for b in buckets()]
        logs = [k.log for k in self._keys]
        yield Call(("XREAD", "COUNT", 1, "BLOCK", max(1, block_ms), "STREAMS", *logs, *ids))

    def tail(
        self,
        after: StoreCursor | None,
        follow: bool,
        values: bool,
        block_ms: int | None,
        poll_s: float,
    ) -> Items[builtins.list[MemoryEvent]]:
        """``changes`` again and again, each batch of events emitted as it comes; whenever
        nothing is new, a ``wait`` of up to ``block_ms`` (None: on a cluster, a pause of
        ``poll_s``); without ``follow``, done once nothing is new."""
        cursor = after
        while True:
            events, cursor = yield from self.changes(cursor, 100, values)
            if events:
                yield Emit(events)
                continue
            if not follow:
                return
            if block_ms is None:
                yield Pause(poll_s)
            else:
                yield from self.wait(cursor, block_ms)
