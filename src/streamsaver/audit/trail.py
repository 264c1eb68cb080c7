"""The audit trail: a thread's history as a person reads it, exports, and their verification.

All of it is I/O-free and works entry by entry, so a log of any length streams through in
constant memory: the savers feed it their log pages (``saver.history``, ``saver.verify_chain``,
``saver.export_audit``), and ``verify_export`` reads an export file without Redis. The export
format is documented in docs/audit.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, Protocol, TextIO, TypeVar

import ormsgpack
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core.chain import Break, ChainCheck, Pairs
from ..core.codec import Codec
from ..core.config import thread_id_str
from ..core.delta import array_header
from ..core.errors import InvalidInputError
from ..core.flow import Call, Each, Entry, Flow, Items, Pace, consume, expand_items
from ..core.keys import ThreadKeys
from ..core.nodes import SendTargets
from ..core.pages import LogPages
from ..core.replies import jsonable
from ..core.stream_ids import is_entry_id
from ..events import SkippedEvent, ThreadDeletion, ThreadEvent, Undecoded
from ..tailing.decode import decode_event, entries
from ..tailing.naming import Namer, name_batch

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Break",
    "ChainCheck",
    "ExportCheck",
    "ExportWriter",
    "LogSource",
    "Timeline",
    "latest",
    "read_export",
    "verify_export",
]

C = TypeVar("C")

FORMAT = "streamsaver.audit"
# 2: the node and task labels name a Send's node (``sends``, ``sent_to``). A version 1 file's
# labels were worked out by the rules of its day, so they are not compared (the digest chain
# still covers the fields they were worked out from)
FORMAT_VERSION = 2


class LogSource(Protocol):
    """What the audit trail reads through: the checkpointer's operations (``checkpoint.ops``),
    which pass it here. A Protocol, so the audit trail imports no saver and the savers may
    import it."""

    slice_ms: float

    def keys(self, thread_id: str) -> ThreadKeys: ...

    def log_entries(self, thread_id: str) -> Items[Entry]: ...

    def deletion_entries(self, thread_id: str) -> Items[Entry]: ...

    def references(self, thread_id: str) -> Flow[list[str] | None]: ...


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, default=jsonable, ensure_ascii=False)


class _Lenient(SerializerProtocol):
    """The saver's serializer, reporting a value it cannot read (ciphertext without the key,
    an unknown type) as ``Undecoded`` instead of failing: an audit shows every event."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.serde.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        try:
            return self.serde.loads_typed(data)
        except Exception as exc:  # any user serde; the raw bytes stay in the log and export
            return self.unreadable(data, exc)

    def unreadable(self, data: tuple[str, bytes], exc: Exception) -> Any:
        return Undecoded(type=data[0], size=len(data[1]), error=type(exc).__name__)


class Timeline(Generic[C]):
    """Turns a thread's log entries, fed in order, into ``ThreadEvent``s with what only their
    order tells: ``fork`` (a checkpoint whose parent is not the previous checkpoint of its
    namespace), the node of a Send's writes saved before their checkpoint (``tailing.naming``;
    ``add`` may hold events back until it comes, so a caller carries what it needs along)
    and, with ``values``, the checkpoint values each event stores, decoded."""

    def __init__(self, serde: SerializerProtocol, *, values: bool = False) -> None:
        self.serde = _Lenient(serde)
        self.codec = Codec(self.serde, 0)  # decodes only; the size limit is for writing
        self.values = values
        self._latest: dict[str, str] = {}  # namespace -> its previous checkpoint id
        self._namer: Namer[C] = Namer()

    def add(
        self, stream: str, entry_id: str, fields: Pairs, carry: C
    ) -> list[tuple[ThreadEvent | SkippedEvent, C]]:
        """The next entry; the events ready, in order, each with its ``carry``."""
        return self._namer.add(self._event(stream, entry_id, fields), carry)

    def flush(self) -> list[tuple[ThreadEvent | SkippedEvent, C]]:
        """The events held back: the log ended."""
        return self._namer.flush()

    def _event(self, stream: str, entry_id: str, fields: Pairs) -> ThreadEvent | SkippedEvent:
        named = dict(fields)
        event = decode_event(self.codec, stream, entry_id, named)
        if not isinstance(event, ThreadEvent) or event.kind != "checkpoint":
            return event
        update: dict[str, Any] = {}
        previous = self._latest.get(event.checkpoint_ns)
        update["fork"] = previous is not None and event.parent_checkpoint_id != previous
        self._latest[event.checkpoint_ns] = event.checkpoint_id or ""
        if self.values:
            update["values"], update["appended"] = self._values(named)
        return event.model_copy(update=update)

    def _values(self, named: dict[bytes, bytes]) -> tuple[dict[str, Any], tuple[str, ...]]:
        nv = ormsgpack.unpackb(named[b"nv"])
        values: dict[str, Any] = {}
        appended: list[str] = []
        for i in range(0, len(nv), 3):
            channel, _, base = nv[i : i + 3]
            stored = named.get(f"b{i // 3}".encode(), b"")
            try:
                raw = ormsgpack.unpackb(stored)
                if base:  # an append part: ["append", the new items' bytes, how many]
                    _, tail, count = raw
                    typed = ("msgpack", array_header(count) + tail)
                    appended.append(channel)
                elif raw[0] == "empty":
                    continue
                else:
                    typed = (raw[0], raw[1])
            except (ValueError, TypeError, IndexError) as exc:  # a damaged or hand-written entry
                values[channel] = Undecoded(type="?", size=len(stored), error=type(exc).__name__)
                continue
            values[channel] = self.serde.loads_typed(typed)
        return values, tuple(appended)


def _record(
    thread_id: str, event: ThreadEvent | SkippedEvent, entry_id: str, fields: Pairs
) -> dict[str, Any]:
    if isinstance(event, ThreadEvent):
        view: dict[str, Any] = {"type": "event", **event.model_dump(exclude={"id"})}
    else:
        view = {"type": "unreadable", "thread_id": thread_id, "reason": event.reason}
    view["id"] = entry_id
    view["fields"] = [[name.decode(), base64.b64encode(value).decode()] for name, value in fields]
    # through JSON and back, so a record compares equal to the same line read from a file
    parsed: dict[str, Any] = json.loads(_dumps(view))
    return parsed


def _deletion_record(deletion: ThreadDeletion) -> dict[str, Any]:
    return {"type": "deleted", **deletion.model_dump(mode="json")}


# --- flows: what the savers drive (sync and async alike) --------------------------------------


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


class ExportWriter:
    """Writes an export, one JSON line per record (docs/audit.md): a header, then per thread its
    deletion records, its events and an ``end`` record with their count and last digest."""

    def __init__(self, out: TextIO, prefix: str, serde: SerializerProtocol) -> None:
        self.out = out
        self.serde = serde
        self.events = 0
        now = datetime.now(timezone.utc).isoformat()
        self._write(
            {
                "type": "export",
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "prefix": prefix,
                "exported_at": now,
                "serde": type(serde).__name__,
            }
        )
        self._thread: str | None = None
        self._timeline: Timeline[Entry] = Timeline(serde, values=True)
        self._check = ChainCheck()

    def _write(self, record: dict[str, Any]) -> None:
        self.out.write(_dumps(record) + "\n")

    def begin(self, thread_id: str, deletions: Iterable[ThreadDeletion]) -> None:
        self._thread = thread_id
        self._timeline = Timeline(self.serde, values=True)
        self._check = ChainCheck()
        for deletion in deletions:
            self._write(_deletion_record(deletion))

    def entry(self, entry: Entry) -> None:
        entry_id, fields = entry
        self._check.add(entry_id, fields)
        self._records(self._timeline.add("", entry_id, fields, entry))

    def _records(self, ready: Iterable[tuple[ThreadEvent | SkippedEvent, Entry]]) -> None:
        for event, (entry_id, fields) in ready:
            self._write(_record(self._thread or "", event, entry_id, fields))
            self.events += 1

    def end(self) -> None:
        self._records(self._timeline.flush())
        self._write(
            {
                "type": "end",
                "thread_id": self._thread,
                "events": self._check.events,
                "head": self._check.head,
            }
        )


def read_export(
    lines: Iterable[str], serde: SerializerProtocol
) -> Iterator[ThreadEvent | SkippedEvent | ThreadDeletion]:
    """The records of an export file decoded again from their stored fields (not from their
    readable view), with ``serde``: the same events ``saver.history(values=True)`` gave."""
    timelines: dict[str, Timeline[None]] = {}
    for line in lines:
        record = json.loads(line)
        if record["type"] == "deleted":
            yield ThreadDeletion.model_validate({k: v for k, v in record.items() if k != "type"})
        elif record["type"] in ("event", "unreadable"):
            timeline = timelines.setdefault(record["thread_id"], Timeline(serde, values=True))
            for event, _ in timeline.add("", str(record["id"]), _fields(record), None):
                yield event
        elif record["type"] == "end" and record.get("thread_id") in timelines:
            for event, _ in timelines.pop(record["thread_id"]).flush():
                yield event
    for timeline in timelines.values():
        for event, _ in timeline.flush():
            yield event


@dataclass
class ExportCheck:
    """The verification of one thread in an export file."""

    thread_id: str
    events: int = 0
    head: str = ""
    deletions: int = 0
    problem: str | None = None


class _FileThread:
    def __init__(self, thread_id: str, serde: SerializerProtocol, labels: bool) -> None:
        self.report = ExportCheck(thread_id)
        self.uncompared = frozenset() if labels else _LABELS
        self.chain = ChainCheck()
        # (line number, record, entry id, fields) travel with the event the line renders
        self.timeline: Timeline[_Line] = Timeline(serde, values=True)
        self.ended = False

    def fail(self, problem: str) -> None:
        if self.report.problem is None:
            self.report.problem = problem


def _fields(record: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    pairs = record["fields"]
    return [(name.encode(), base64.b64decode(value, validate=True)) for name, value in pairs]


def verify_export(lines: Iterable[str], serde: SerializerProtocol) -> list[ExportCheck]:
    """Check an export file without Redis: each thread's digest chain, that every record's
    readable view matches its stored fields (decoded with ``serde``, as the export was), and
    that each thread's ``end`` record is there and agrees. One report per thread, in order."""
    threads: dict[str, _FileThread] = {}
    current: _FileThread | None = None
    header_seen = False
    labels_compared = True
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            kind = record["type"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(
                f"line {number} of the export is not an export record ({exc}); give a file "
                f"written by `streamsaver audit export`"
            ) from exc
        if not header_seen:
            if kind != "export" or record.get("format") != FORMAT:
                raise InvalidInputError(
                    f"line 1 is not a {FORMAT} header; give a file written by "
                    f"`streamsaver audit export`"
                )
            if record.get("version", 0) > FORMAT_VERSION:
                raise InvalidInputError(
                    f"the export is format version {record['version']}, newer than "
                    f"{FORMAT_VERSION}: upgrade streamsaver to verify it"
                )
            header_seen = True
            labels_compared = record.get("version", 0) >= 2
            continue
        thread_id = str(record.get("thread_id"))
        if current is None or current.report.thread_id != thread_id or current.ended:
            current = threads.setdefault(thread_id, _FileThread(thread_id, serde, labels_compared))
            if current.ended:
                current.fail(f"line {number}: records after the thread's end record")
        if kind == "deleted":
            current.report.deletions += 1
        elif kind in ("event", "unreadable"):
            _verify_line(current, number, record)
        elif kind == "end":
            _compare(current, current.timeline.flush())
            current.ended = True
            claimed = (record.get("events"), record.get("head"))
            if claimed != (current.chain.events, current.chain.head):
                current.fail(
                    f"line {number}: the end record counts {record.get('events')} events ending "
                    f"at digest {record.get('head')!r}, but the file holds "
                    f"{current.chain.events} ending at {current.chain.head!r}: events were "
                    f"removed or added"
                )
        else:
            current.fail(f"line {number}: unknown record type {kind!r}")
    for thread in threads.values():
        if not thread.ended:
            _compare(thread, thread.timeline.flush())
            thread.fail("no end record: the file was truncated")
        thread.report.events = thread.chain.events
        thread.report.head = thread.chain.head
        if thread.chain.problem is not None and thread.report.problem is None:
            thread.report.problem = str(thread.chain.problem)
    return [thread.report for thread in threads.values()]


def _verify_line(thread: _FileThread, number: int, record: dict[str, Any]) -> None:
    try:
        entry_id, fields = str(record["id"]), _fields(record)
    except (KeyError, TypeError, ValueError) as exc:
        thread.fail(f"line {number}: unreadable fields ({exc!r})")
        return
    intact = thread.chain.ok
    thread.chain.add(entry_id, fields)
    if intact and thread.chain.problem is not None:
        thread.fail(str(thread.chain.problem))  # the chain says more than "edited"
    _compare(thread, thread.timeline.add("", entry_id, fields, (number, record, fields)))


_Line = tuple[int, dict[str, Any], Pairs]
# what a reader works out for people, by rules that change between versions
_LABELS = frozenset({"node", "task", "sends", "sent_to"})


def _compare(
    thread: _FileThread, ready: Iterable[tuple[ThreadEvent | SkippedEvent, _Line]]
) -> None:
    for event, (number, record, fields) in ready:
        entry_id = str(record["id"])
        rendered = _record(thread.report.thread_id, event, entry_id, fields)
        if thread.uncompared:
            rendered, record = (
                {k: v for k, v in r.items() if k not in thread.uncompared}
                for r in (rendered, record)
            )
        if rendered != record:
            thread.fail(
                f"line {number} (event {entry_id}): its readable view does not match its "
                f"stored fields: the line was edited"
            )
