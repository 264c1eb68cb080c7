"""The audit trail's flows, which the savers drive (sync and async alike): a thread's history
as a person reads it (whole, a page, or the latest events of many threads), the verification
of its digest chain and references, its deletions, and its export.

All of it is I/O-free and works entry by entry, so a log of any length streams through in
constant memory: the savers feed it their log pages (``saver.history``, ``saver.verify_chain``,
``saver.export_audit``); the export format (``exports``) is documented in docs/audit.md.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Protocol, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core.chain import Break, ChainCheck
from ..core.config import id_list, thread_id_str
from ..core.errors import InvalidInputError, LogRewrittenError
from ..core.flow import Call, Each, Entry, Flow, Items, Pace, consume, expand_items
from ..core.keys import ThreadKeys
from ..core.nodes import SendTargets
from ..core.pages import REWRITE_RESTARTS, LogPages
from ..core.stream_ids import id_key, is_entry_id
from ..events import SkippedEvent, ThreadDeletion, ThreadEvent
from ..tailing.decode import decode_event, entries
from ..tailing.naming import name_batch
from .exports import ExportWriter as ExportWriter
from .timeline import Timeline

__all__ = ["Break", "ChainCheck", "LogSource", "export", "latest"]

T = TypeVar("T")
# an export's section of one thread is kept in memory up to this, then in a temporary file, until
# it is whole: a log rewritten under the export starts the section again
_SPOOL_BYTES = 1024 * 1024


class LogSource(Protocol):
    """What the audit trail reads through: the checkpointer's operations (``checkpoint.ops``),
    which pass it here. A Protocol, so the audit trail imports no saver and the savers may
    import it."""

    slice_ms: float

    def keys(self, thread_id: str) -> ThreadKeys: ...

    def log_entries(self, thread_id: str) -> Items[Entry]:
        """The whole log, in pages of one version of it (``LogRewrittenError`` otherwise)."""
        ...

    def deletion_entries(self, thread_id: str) -> Items[Entry]: ...

    def references(self, thread_id: str) -> Flow[list[str] | None]: ...


def _once(thread_id: str, read: Callable[[], Flow[T]]) -> Flow[T]:
    """``read()``'s result, read again from the start when the thread's log was rewritten
    under it (a compaction, a deletion), at most REWRITE_RESTARTS times: for reads that hand
    nothing over before they end."""
    for restart in range(REWRITE_RESTARTS + 1):
        try:
            return (yield from read())
        except LogRewrittenError as exc:
            if restart == REWRITE_RESTARTS:
                raise LogRewrittenError(
                    f"thread {thread_id!r}: its log was rewritten {restart + 1} times while it "
                    f"was read ({exc}); read it again when it is compacted less often (a "
                    f"keep_last saver compacts it every few puts)",
                    exc.key,
                ) from exc
    raise AssertionError("unreachable")


def history(
    ops: LogSource, thread_id: str, serde: SerializerProtocol, values: bool
) -> Items[ThreadEvent | SkippedEvent]:
    """The thread's events as a person reads them, streamed as the log's pages come: what was
    handed over cannot be taken back, so a log rewritten under it raises
    ``LogRewrittenError`` rather than go on in another log."""
    timeline: Timeline[None] = Timeline(serde, values=values)
    log = ops.keys(thread_id_str(thread_id, "thread_id")).log

    def events(
        found: Iterable[tuple[ThreadEvent | SkippedEvent, None]],
    ) -> list[ThreadEvent | SkippedEvent]:
        return [event for event, _ in found]

    return expand_items(
        ops.log_entries(thread_id),
        lambda e: events(timeline.add(log, *e, None)),
        lambda: events(timeline.flush()),
    )


def page(
    ops: LogSource, thread_id: str, serde: SerializerProtocol, before: str | None, limit: int
) -> Flow[tuple[list[ThreadEvent | SkippedEvent], bool]]:
    """The ``limit`` events before event id ``before`` (the newest without one), oldest
    first, and whether older ones exist: read from the newest back (``XREVRANGE``), so a page
    costs the same at the head of a million-event log as of a short one. Forks are marked
    within the page."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
        raise InvalidInputError(f"limit must be an integer from 1 to 10000, got {limit!r}")
    if before is not None and not is_entry_id(before):
        raise InvalidInputError(
            f"before must be an event id like '1717000000000-0' (an event's id), got {before!r}"
        )
    thread_id = thread_id_str(thread_id, "thread_id")
    log = ops.keys(thread_id).log
    end = "+" if before is None else f"({before}"

    def read() -> Flow[tuple[list[tuple[str, dict[bytes, bytes] | None]], str]]:
        # a caller waits for it: pages sized to a slice (10,000 events in one XREVRANGE would
        # hold every tenant for ~18 ms), without the pauses between them
        pages = LogPages(
            log, ops.slice_ms, Pace(0), end, newest_first=True, most=limit + 1, one_version=True
        )
        found: list[tuple[str, dict[bytes, bytes] | None]] = []
        while page := (yield from pages.next()):
            found += entries(page)
        return found, pages.first or ""

    newest_first, first = yield from _once(thread_id, read)
    if before is not None and first and id_key(before) < id_key(first):
        # ``before`` is an id of a log that is gone: every id of the one now holding the
        # thread sorts after it, so its "older" events would read as none
        raise LogRewrittenError(
            f"thread {thread_id!r}: event {before} is not in its log, which now begins at "
            f"{first}: the log was compacted or deleted after that page was read; read the "
            f"newest page again (before=None)",
            log,
        )
    timeline: Timeline[None] = Timeline(serde)
    ready = [
        found
        for i, f in reversed(newest_first[:limit])
        for found in timeline.add(log, i, list((f or {}).items()), None)
    ]
    events = [event for event, _ in [*ready, *timeline.flush()]]
    return events, len(newest_first) > limit


def latest(
    ops: LogSource, thread_ids: Iterable[str], serde: SerializerProtocol, count: int
) -> Flow[dict[str, list[ThreadEvent | SkippedEvent]]]:
    """Each thread's last ``count`` events, newest first: one pipelined round trip for a page
    of threads (the console's last node and activity), however long their logs are."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InvalidInputError(f"count must be a positive integer, got {count!r}")
    ids = [thread_id_str(t, "thread_id") for t in thread_ids]
    logs = [ops.keys(t).log for t in ids]
    replies = yield Each(tuple(Call(("XREVRANGE", log, "+", "-", "COUNT", count)) for log in logs))
    codec = Timeline[None](serde).codec
    found: dict[str, list[ThreadEvent | SkippedEvent]] = {}
    for thread_id, log, reply in zip(ids, logs, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        oldest_first = [
            (decode_event(codec, log, entry_id, fields or {}), None)
            for entry_id, fields in reversed(entries(reply))
        ]
        named = name_batch(SendTargets(), oldest_first)
        found[thread_id] = [event for event, _ in reversed(named)]
    return found


def verify_chain(ops: LogSource, thread_id: str) -> Flow[ChainCheck]:
    """The log's digest chain, and every reference its events make (one script, the same
    check as ``verify``'s): an intact chain over a log whose events point nowhere is no proof
    the trail is whole."""

    def read() -> Flow[ChainCheck]:
        check = ChainCheck()
        yield from consume(ops.log_entries(thread_id), lambda e: check.add(*e))
        return check

    # a chain read across a rewrite would join two logs, and report the seam as tampering
    check = yield from _once(thread_id, read)
    references = yield from ops.references(thread_id)
    if references is None:
        check.unchecked = (
            "references not checked: this user may only read, and the check replays the log "
            "into scratch keys (run it as the saver's user)"
        )
    else:
        check.references = references
    return check


def _deletion(entry: Entry) -> ThreadDeletion:
    entry_id, fields = entry
    named = {k.decode(): v.decode() for k, v in fields}
    return ThreadDeletion(
        id=entry_id,
        thread_id=named["thread"],
        timestamp=datetime.fromtimestamp(int(entry_id.split("-")[0]) / 1000, tz=timezone.utc),
        events=int(named["n"]),
        last_id=named["last"] or None,
        head=named["head"],
    )


def deletions(ops: LogSource, thread_id: str) -> Flow[list[ThreadDeletion]]:
    found: list[ThreadDeletion] = []
    yield from consume(ops.deletion_entries(thread_id), lambda e: found.append(_deletion(e)))
    return found


def export(ops: LogSource, writer: ExportWriter, thread_ids: Iterable[str]) -> Flow[int]:
    """Each thread's section (its deletions, its events, its end) is written to ``writer``'s
    stream once whole: a log rewritten under its pages (a compaction, ``keep_last``'s puts, a
    deletion) starts the section again on the new log, so the file never joins two logs (which
    ``audit verify --file`` would rightly report as tampered)."""
    # every id checked before the first line is written: bad input writes nothing
    ids = id_list(thread_ids, "thread_ids")
    writer.header()
    out = writer.out
    for thread_id in ids:
        before = writer.events

        def section(thread_id: str = thread_id, before: int = before) -> Flow[None]:
            writer.events = before
            writer.out.seek(0)
            writer.out.truncate()
            writer.begin(thread_id, (yield from deletions(ops, thread_id)))
            yield from consume(ops.log_entries(thread_id), writer.entry)
            writer.end()

        with tempfile.SpooledTemporaryFile(_SPOOL_BYTES, "w+", encoding="utf-8") as spool:
            writer.out = spool  # type: ignore[assignment]
            try:
                yield from _once(thread_id, section)
            finally:
                writer.out = out
            spool.seek(0)
            shutil.copyfileobj(spool, out)
    return writer.events
