"""A thread's log entries as a person reads them: ``Timeline`` turns them, in order, into
``ThreadEvent``s with what only their order tells, and ``event_record`` gives an event's line
of an export. I/O-free, entry by entry."""

from __future__ import annotations

import base64
import json
from typing import Any, Generic, TypeVar

import ormsgpack
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core.chain import Pairs
from ..core.codec import Codec
from ..core.delta import array_header
from ..core.replies import json_line
from ..events import SkippedEvent, ThreadDeletion, ThreadEvent, Undecoded
from ..tailing.decode import decode_event
from ..tailing.naming import Namer

__all__ = ["Timeline"]

C = TypeVar("C")


def dumps(record: dict[str, Any]) -> str:
    # strict JSON: a value's NaN or Infinity as null (earlier exports wrote NaN there)
    return json_line(record, ensure_ascii=False)


class Lenient(SerializerProtocol):
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
        self.serde = Lenient(serde)
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


def event_record(
    thread_id: str, event: ThreadEvent | SkippedEvent, entry_id: str, fields: Pairs
) -> dict[str, Any]:
    if isinstance(event, ThreadEvent):
        view: dict[str, Any] = {"type": "event", **event.model_dump(exclude={"id"})}
    else:
        view = {"type": "unreadable", "thread_id": thread_id, "reason": event.reason}
    view["id"] = entry_id
    view["fields"] = [[name.decode(), base64.b64encode(value).decode()] for name, value in fields]
    # through JSON and back, so a record compares equal to the same line read from a file
    parsed: dict[str, Any] = json.loads(dumps(view))
    return parsed


def deletion_record(deletion: ThreadDeletion) -> dict[str, Any]:
    return {"type": "deleted", **deletion.model_dump(mode="json")}
