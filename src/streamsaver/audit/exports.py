"""The export file (docs/audit.md): writing it as a thread's log pages stream through, reading
its events back, and verifying it without Redis. I/O-free apart from the text streams given."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, BinaryIO, TextIO

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core.chain import ChainCheck, Pairs
from ..core.errors import InvalidInputError
from ..core.flow import Entry
from ..core.replies import finite
from ..events import SkippedEvent, ThreadDeletion, ThreadEvent
from .timeline import Timeline, deletion_record, dumps, event_record

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ExportCheck",
    "ExportWriter",
    "export_lines",
    "read_export",
    "verify_export",
]

_REMEDY = "give a file written by `streamsaver audit export`"

FORMAT = "streamsaver.audit"
# 2: the node and task labels name a Send's node (``sends``, ``sent_to``). A version 1 file's
# labels were worked out by the rules of its day, so they are not compared (the digest chain
# still covers the fields they were worked out from)
FORMAT_VERSION = 2


class ExportWriter:
    """Writes an export, one JSON line per record (docs/audit.md): a header, then per thread its
    deletion records, its events and an ``end`` record with their count and last digest."""

    def __init__(self, out: TextIO, prefix: str, serde: SerializerProtocol) -> None:
        self.out = out
        self.serde = serde
        self.events = 0
        now = datetime.now(timezone.utc).isoformat()
        # written by header(), once what is exported is known to be exportable: bad input
        # writes nothing
        self._header: dict[str, Any] | None = {
            "type": "export",
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "prefix": prefix,
            "exported_at": now,
            "serde": type(serde).__name__,
        }
        self._thread: str | None = None
        self._timeline: Timeline[Entry] = Timeline(serde, values=True)
        self._check = ChainCheck()

    def _write(self, record: dict[str, Any]) -> None:
        self.out.write(dumps(record) + "\n")

    def header(self) -> None:
        """The export's first line, once."""
        if self._header is not None:
            self._write(self._header)
            self._header = None

    def begin(self, thread_id: str, deletions: Iterable[ThreadDeletion]) -> None:
        self._thread = thread_id
        self._timeline = Timeline(self.serde, values=True)
        self._check = ChainCheck()
        for deletion in deletions:
            self._write(deletion_record(deletion))

    def entry(self, entry: Entry) -> None:
        entry_id, fields = entry
        self._check.add(entry_id, fields)
        self._records(self._timeline.add("", entry_id, fields, entry))

    def _records(self, ready: Iterable[tuple[ThreadEvent | SkippedEvent, Entry]]) -> None:
        for event, (entry_id, fields) in ready:
            self._write(event_record(self._thread or "", event, entry_id, fields))
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


def export_lines(file: BinaryIO) -> Iterator[str]:
    """The lines of an export file opened in binary mode, each decoded as the UTF-8 it was
    written in: a line that is not raises ``InvalidInputError`` naming it."""
    for number, raw in enumerate(file, 1):
        try:
            yield raw.decode()
        except UnicodeDecodeError as exc:
            raise InvalidInputError(
                f"line {number} of the export is not UTF-8 text (byte {raw[exc.start]:#04x} at "
                f"column {exc.start + 1}); {_REMEDY}"
            ) from None


def _record(line: str, number: int) -> dict[str, Any]:
    """Line ``number`` of an export as its record: a JSON object with a ``type``."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        # RecursionError: nesting deeper than the parser goes, which no export holds
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidInputError(
            f"line {number} of the export is not an export record (not JSON: {why}); {_REMEDY}"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise InvalidInputError(
            f"line {number} of the export is not an export record (a JSON object with a "
            f"'type'); {_REMEDY}"
        )
    return record


def _check_header(record: dict[str, Any]) -> int:
    """The format version of an export whose first record is ``record``."""
    if record["type"] != "export" or record.get("format") != FORMAT:
        raise InvalidInputError(f"line 1 is not a {FORMAT} header; {_REMEDY}")
    version = record.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidInputError(
            f"line 1: the export's format version is {version!r}, not a version number; {_REMEDY}"
        )
    if version > FORMAT_VERSION:
        raise InvalidInputError(
            f"the export is format version {version}, newer than {FORMAT_VERSION}: upgrade "
            f"streamsaver to verify it"
        )
    return version


def read_export(
    lines: Iterable[str], serde: SerializerProtocol
) -> Iterator[ThreadEvent | SkippedEvent | ThreadDeletion]:
    """The records of an export file decoded again from their stored fields (not from their
    readable view), with ``serde``: the same events ``saver.history(values=True)`` gave. A
    file that is not an export raises ``InvalidInputError``."""
    timelines: dict[str, Timeline[None]] = {}
    header_seen = False
    for number, line in enumerate(lines, 1):
        record = _record(line, number)
        if not header_seen:
            _check_header(record)
            header_seen = True
            continue
        try:
            yield from _read(record, timelines, serde)
        except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError too
            raise InvalidInputError(
                f"line {number} of the export is not a readable {record['type']!r} record "
                f"({exc}); {_REMEDY}"
            ) from None
    if not header_seen:
        raise InvalidInputError(f"the export is empty: it has no {FORMAT} header; {_REMEDY}")
    for timeline in timelines.values():
        for event, _ in timeline.flush():
            yield event


def _read(
    record: dict[str, Any], timelines: dict[str, Timeline[None]], serde: SerializerProtocol
) -> list[ThreadEvent | SkippedEvent | ThreadDeletion]:
    """What one record of an export adds to ``read_export``'s events."""
    if record["type"] == "deleted":
        return [ThreadDeletion.model_validate({k: v for k, v in record.items() if k != "type"})]
    if record["type"] in ("event", "unreadable"):
        timeline = timelines.setdefault(str(record["thread_id"]), Timeline(serde, values=True))
        return [e for e, _ in timeline.add("", str(record["id"]), _fields(record), None)]
    if record["type"] == "end" and record.get("thread_id") in timelines:
        return [e for e, _ in timelines.pop(record["thread_id"]).flush()]
    return []


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
    """A record's stored fields; ValueError when they are not [name, base64] pairs of text."""
    pairs = record["fields"]
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):
        raise ValueError("fields are not [name, base64 value] pairs of strings")
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
        record = _record(line, number)
        kind = record["type"]
        if not header_seen:
            labels_compared = _check_header(record) >= 2
            header_seen = True
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
    if not header_seen:
        # a file cut before its first line (an export that never ran) is no proof of anything
        raise InvalidInputError(f"the export is empty: it has no {FORMAT} header; {_REMEDY}")
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
        rendered = event_record(thread.report.thread_id, event, entry_id, fields)
        if thread.uncompared:
            rendered, record = (
                {k: v for k, v in r.items() if k not in thread.uncompared}
                for r in (rendered, record)
            )
        # finite(): an export written before non-finite floats became null holds NaN there
        if rendered != finite(record):
            thread.fail(
                f"line {number} (event {entry_id}): its readable view does not match its "
                f"stored fields: the line was edited"
            )
