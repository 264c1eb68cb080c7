"""The audit trail's flows, which the savers drive (sync and async alike): a thread's history
as a person reads it (whole, a page, or the latest events of many threads), the verification
of its digest chain and references, its deletions, and its export.

All of it is I/O-free and works entry by entry, so a log of any length streams through in
constant memory: the savers feed it their log pages (``saver.history``, ``saver.verify_chain``,
``saver.export_audit``); the export format (``exports``) is documented in docs/audit.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Protocol

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core.chain import Break, ChainCheck
from ..core.config import thread_id_str
from ..core.errors import InvalidInputError
from ..core.flow import Call, Each, Entry, Flow, Items, Pace, consume, expand_items
from ..core.keys import ThreadKeys
from ..core.nodes import SendTargets
from ..core.pages import LogPages
from ..core.stream_ids import is_entry_id
from ..events import SkippedEvent, ThreadDeletion, ThreadEvent
from ..tailing.decode import decode_event, entries
from ..tailing.naming import name_batch
from .exports import ExportWriter as ExportWriter
from .timeline import Timeline

__all__ = ["Break", "ChainCheck", "LogSource", "export", "latest"]


class LogSource(Protocol):
    """What the audit trail reads through: the checkpointer's operations (``checkpoint.ops``),
    which pass it here. A Protocol, so the audit trail imports no saver and the savers may
    import it."""

    slice_ms: float

    def keys(self, thread_id: str) -> ThreadKeys: ...

    def log_entries(self, thread_id: str) -> Items[Entry]: ...

    def deletion_entries(self, thread_id: str) -> Items[Entry]: ...

    def references(self, thread_id: str) -> Flow[list[str] | None]: ...


def history(
    ops: LogSource, thread_id: str, serde: SerializerProtocol, values: bool
) -> Items[ThreadEvent | SkippedEvent]:
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
    log = ops.keys(thread_id_str(thread_id, "thread_id")).log
    end = "+" if before is None else f"({before}"
    # a caller waits for it: pages sized to a slice (10,000 events in one XREVRANGE would hold
    # every tenant for ~18 ms), without the pauses between them
    pages = LogPages(log, ops.slice_ms, Pace(0), end, newest_first=True, most=limit + 1)
    newest_first: list[tuple[str, dict[bytes, bytes] | None]] = []
    while page := (yield from pages.next()):
        newest_first += entries(page)
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
    check = ChainCheck()
    yield from consume(ops.log_entries(thread_id), lambda e: check.add(*e))
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
    for thread_id in thread_ids:
        writer.begin(thread_id, (yield from deletions(ops, thread_id)))
        yield from consume(ops.log_entries(thread_id), writer.entry)
        writer.end()
    return writer.events
