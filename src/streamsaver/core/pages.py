"""A stream read in pages that each hold the server for about one slice.

XRANGE is one command: the server builds a page's whole reply before it serves another client,
so a page is a slice like any script's. Pages of a fixed count cost what their entries do: 200
of the saver's events held Redis 7.0 for 0.32 ms, 500 for ~0.8 ms, and an entry of 40 fields
costs four times one of 10. ``LogPages`` sizes each page from the last one's entries, fields
and bytes, so a page costs about the slice budget whatever the events look like, and paces them as a
long operation's slices are (``core.flow.Pace``).

A log may be rewritten between two pages: a compaction (``prune``, ``keep_last``,
``delete_for_runs``) or a deletion replaces it with a new one, whose first entry's id sorts after
every id of the old (lua/shared/slice.lua's ``first_entry_id``, lua/checkpoint/compact_slice.lua's
'fresh' check). So a reader that must see one version of the log (DESIGN.md, principle 14) reads
the log's first id after each page, in the same round trip: the same id as before its first page
means no rewrite came before that read, so none before the page either (ids of a rewritten log
only grow: the old first id never comes back). A different one raises ``LogRewrittenError``;
the reader restarts on the new log or lets it go to its caller. That costs one entry more per
page, the log's first: a compacted or deleted log's tombstone, or the thread's first checkpoint
(its input, usually small; no command returns an entry's id without its fields).
"""

from __future__ import annotations

from typing import Any

from .errors import LogRewrittenError
from .flow import Call, Each, Flow, Pace
from .replies import as_text

# the server's µs to put a stream entry in an XRANGE reply, by entry, field-value pair and KiB
# (Redis 7.0 on the 2-core machine, INFO commandstats over pages of 20 and 100 entries of 2 to
# 40 fields of 10 B to 20 KB: 0.6 µs for 2 small fields, 1.7 for 10, 5.8 for 40)
_ENTRY_US, _PAIR_US, _KIB_US = 0.3, 0.15, 0.2
# what a call costs before its first entry (lookup, reply header), and the budget's share left
_CALL_US = 30.0
# a first page, before anything is known of the entries; the most a page asks for
FIRST_COUNT, MOST_COUNT = 20, 1000
# a reply past a few hundred KiB costs more per byte (its buffers grow): 100 entries of 40 KB
# took 28 µs each, 20 of them 4.4 µs each
MOST_BYTES = 256 * 1024
# how often a reader that has handed nothing over yet starts again on a log rewritten under it
# before it gives up (``LogRewrittenError``): each rewrite is a whole compaction or deletion, so
# more than a few in one read means a writer that compacts on every put (``keep_last``)
REWRITE_RESTARTS = 5

Page = list[tuple[Any, Any]]


def page_cost(page: Page) -> tuple[float, int]:
    """The server's µs to read ``page`` (by the rates above, the call's own cost included) and
    its bytes."""
    pairs = nbytes = 0
    for _, fields in page:
        # parsed by redis-py (a dict) or raw (a flat list)
        flat = [x for pair in fields.items() for x in pair] if isinstance(fields, dict) else fields
        pairs += len(flat) // 2
        nbytes += sum(map(len, flat))
    return _CALL_US + len(page) * _ENTRY_US + pairs * _PAIR_US + nbytes / 1024 * _KIB_US, nbytes


def next_count(page: Page, budget_ms: float) -> int:
    """How many entries the next page may ask for to cost about ``budget_ms`` of server time
    and MOST_BYTES at most, if its entries are like ``page``'s."""
    if not page:
        return FIRST_COUNT
    cost_us, nbytes = page_cost(page)
    each_us = (cost_us - _CALL_US) / len(page)
    by_time = (budget_ms * 1000 - _CALL_US) / each_us
    by_bytes = MOST_BYTES * len(page) / max(nbytes, 1)
    return max(1, min(MOST_COUNT, int(by_time), int(by_bytes)))


class LogPages:
    """The entries of stream ``key`` after ``start`` (``"-"``: from the first; newest first
    from before ``start``, ``"+"`` the last, with ``newest_first``), a page per ``next()``,
    each sized to ``budget_ms`` and followed by ``pace``'s pause, ``most`` entries in all at
    most. ``next()`` returns an empty page once read. ``one_version``: each page is checked
    to come from the log the first one came from, else ``next()`` raises
    ``LogRewrittenError`` (see above)."""

    def __init__(
        self,
        key: str,
        budget_ms: float,
        pace: Pace,
        start: str | None = None,
        *,
        newest_first: bool = False,
        most: int | None = None,
        one_version: bool = False,
    ) -> None:
        self.key, self.budget_ms, self.pace = key, budget_ms, pace
        self.newest_first, self.left = newest_first, most
        self.start = start or ("+" if newest_first else "-")
        self.count, self.done = FIRST_COUNT, False
        self.one_version = one_version
        # the log's first entry id when the first page was read ('' empty); None before it
        self.first: str | None = None

    def next(self) -> Flow[Page]:
        if self.done:
            return []
        count = self.count if self.left is None else min(self.count, self.left)
        if self.newest_first:
            read: tuple[str | int, ...] = ("XREVRANGE", self.key, self.start, "-", "COUNT", count)
        else:
            read = ("XRANGE", self.key, self.start, "+", "COUNT", count)
        if self.one_version:
            page = yield from self._checked(read, rest=True)
        else:
            page = yield from self.pace.run(Call(read))
        if self.left is not None:
            self.left -= len(page)
        # a short page is the stream's end (as it was when read)
        self.done = len(page) < count or self.left == 0
        if page:
            last = page[-1][0]
            self.start = "(" + as_text(last)
            # an adaptive pace's budget grows while nobody else is served
            budget = self.pace.ms if self.pace.adapts else self.budget_ms
            self.count = next_count(page, budget)
        return page

    def entry(self, entry_id: str) -> Flow[Page]:
        """Entry ``entry_id`` alone (``[]`` if the log has none), from the version of the log
        the pages come from when they are ``one_version``."""
        read = ("XRANGE", self.key, entry_id, entry_id)
        if not self.one_version:
            found: Page = yield from self.pace.run(Call(read), rest=False)
            return found
        return (yield from self._checked(read, rest=False))

    def _checked(self, read: tuple[str | int, ...], *, rest: bool) -> Flow[Page]:
        """``read``'s page, with the log's first id read after it in the same round trip (and
        before it too, for the first page: the version every later page is compared with)."""
        first = Call(("XRANGE", self.key, "-", "+", "COUNT", 1))
        ops = (first, Call(read), first) if self.first is None else (Call(read), first)
        replies = yield from self.pace.run(Each(ops), rest=rest)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        ids = [_first_id(r) for r in (replies[::2] if self.first is None else replies[1:])]
        if self.first is None:
            self.first = ids[0]
        if any(i != self.first for i in ids):
            raise LogRewrittenError(
                f"the log {self.key!r} was rewritten (compacted or deleted) while it was read "
                f"in pages: it began with entry {self.first or '(none)'}, now with "
                f"{ids[-1] or '(none)'}",
                self.key,
            )
        page: Page = replies[-2]
        return page


def _first_id(reply: Page) -> str:
    return as_text(reply[0][0]) if reply else ""
