"""Replies to events: stream entries, feed pointers and ``ThreadEvent`` decoding, once."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import ormsgpack

from ..core.codec import SCHEMA_VERSION, Codec
from ..core.replies import as_text
from ..core.stream_ids import is_entry_id
from ..events import DeletedHistory, Pruned, SkippedEvent, ThreadEvent

_KINDS = ("checkpoint", "writes", "delete", "pruned", "thread_deleted")


def _fields(raw: Any) -> dict[bytes, bytes] | None:
    """An entry's fields from a parsed (dict) or raw (flat list) reply; None if deleted. The
    saver refuses ``decode_responses=True``, so names and values are bytes as they come."""
    if raw is None or raw is False:
        return None
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, Mapping):
        return dict(raw)
    pairs = iter(raw)
    return dict(zip(pairs, pairs, strict=True))


Entry = tuple[str, dict[bytes, bytes] | None]


def entries(reply: Any) -> list[Entry]:
    """XRANGE / XREVRANGE / one stream of XREAD: ``[(id, fields), ...]``."""
    if not reply:
        return []
    return [(as_text(entry_id), _fields(raw)) for entry_id, raw in reply]


def streams(reply: Any) -> list[tuple[str, list[Entry]]]:
    """XREAD / XREADGROUP, RESP2 or RESP3, raw or parsed by redis-py: ``[(key, entries)]``."""
    if not reply:
        return []
    out = []
    for key, items in reply.items() if isinstance(reply, Mapping) else reply:
        # redis-py's RESP3 parsing wraps each stream's entries in one more list
        if items and isinstance(items[0], list) and items[0] and isinstance(items[0][0], tuple):
            items = items[0]
        out.append((as_text(key), entries(items)))
    return out


def _check(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def _is_error(reply: Any, code: str) -> bool:
    return isinstance(reply, Exception) and str(reply).startswith(code)


# --- events ----------------------------------------------------------------------------------


def _str(fields: Mapping[bytes, bytes], name: bytes) -> str | None:
    raw = fields.get(name)
    return raw.decode() if raw is not None else None


def _shown(fields: Mapping[bytes, bytes], name: bytes) -> str | None:
    """A field as text for a report or a comparison: bytes that are not UTF-8 (written by
    hand, never by streamsaver) are replaced instead of raising."""
    raw = fields.get(name)
    return raw.decode(errors="replace") if raw is not None else None


def _pointer(fields: Mapping[bytes, bytes]) -> tuple[str, str] | None:
    """(thread id, event id) a feed entry points at, or None if it is not a pointer."""
    try:
        thread_id, event_id = _str(fields, b"t"), _str(fields, b"e")
    except UnicodeDecodeError:
        return None
    if thread_id is None or event_id is None or not is_entry_id(event_id):
        return None
    return thread_id, event_id


_KIND_NAMES = {kind.encode(): kind for kind in _KINDS}
_UTC = timezone.utc
_validate_event = ThreadEvent.model_validate


def decode_event(
    codec: Codec, stream: str, entry_id: str, fields: Mapping[bytes, bytes]
) -> ThreadEvent | SkippedEvent:
    """A thread log entry as a ``ThreadEvent``, or the reason it cannot be one. It runs between
    a reply arriving and the event reaching a tailer, so it reads each field once. Fields
    written by hand may hold anything: what is not UTF-8 is reported, never raised."""
    get = fields.get
    sv, kind, thread = get(b"sv"), get(b"k"), get(b"thread")
    if sv is None or not (sv.isascii() and sv.isdigit()):
        reason = f"no readable schema version ({_shown(fields, b'sv')!r})"
    elif int(sv) > SCHEMA_VERSION:
        reason = f"schema version {sv.decode()} is newer than {SCHEMA_VERSION}: upgrade streamsaver"
    elif kind not in _KIND_NAMES:
        reason = f"unknown kind {_shown(fields, b'k')!r} (from a newer streamsaver?)"
    elif thread is None:
        reason = "no thread field"
    elif not _is_utf8(thread):
        reason = "the thread field is not UTF-8"
    else:
        try:
            return _decode(codec, entry_id, _KIND_NAMES[kind], int(sv), thread.decode(), fields)
        except Exception as exc:  # a tailer reports what it cannot decode, and goes on
            reason = f"cannot decode: {exc!r}"
    return SkippedEvent(
        stream=stream,
        id=entry_id,
        thread_id=_shown(fields, b"thread"),
        event_id=entry_id,
        kind=_shown(fields, b"k"),
        schema_version=_shown(fields, b"sv"),
        reason=reason,
    )


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _decode(
    codec: Codec,
    entry_id: str,
    kind: str,
    sv: int,
    thread_id: str,
    fields: Mapping[bytes, bytes],
) -> ThreadEvent:
    get = fields.get
    base: dict[str, Any] = {
        "schema_version": sv,
        "id": entry_id,
        "kind": kind,
        "thread_id": thread_id,
        "timestamp": datetime.fromtimestamp(int(entry_id.partition("-")[0]) / 1000, tz=_UTC),
        "origin": _str(fields, b"origin"),
        "digest": _str(fields, b"dg"),
    }
    if (origin := get(b"origin")) is not None:
        base["origin"] = origin.decode()
    if (copy_of := get(b"copy_of")) is not None:
        source, source_id = ormsgpack.unpackb(copy_of)
        base["copy_of"] = (str(source), str(source_id))
    if kind == "pruned":
        base["pruned"] = Pruned(
            count=int(fields[b"n"]),
            first_id=fields[b"from"].decode(),
            last_id=fields[b"to"].decode(),
            last_digest=fields[b"last"].decode(),
        )
        return ThreadEvent(**base)
    if kind == "thread_deleted":
        base["thread_deleted"] = DeletedHistory(
            count=int(fields[b"n"]),
            last_id=fields[b"last"].decode() or None,
            last_digest=fields[b"head"].decode(),
            upto=fields[b"upto"].decode(),
        )
        return ThreadEvent(**base)
    if kind == "delete":
        items = ormsgpack.unpackb(fields[b"items"])
        base["deleted"] = tuple(zip(items[::2], items[1::2], strict=True))
        base["runs"] = tuple(ormsgpack.unpackb(get(b"runs") or b"\x90"))
        return _validate_event(base)
    base["checkpoint_ns"] = get(b"ns", b"").decode()
    base["checkpoint_id"] = _str(fields, b"id")
    base["run_id"] = get(b"run", b"").decode() or None
    if kind == "checkpoint":
        base["parent_checkpoint_id"] = get(b"parent", b"").decode() or None
        base["metadata"] = ormsgpack.unpackb(fields[b"meta"])
        base["channels"] = tuple(ormsgpack.unpackb(fields[b"nv"])[::3])
        base["sends"] = _sends(get(b"sends"))
        return _validate_event(base)
    channels = tuple(ormsgpack.unpackb(fields[b"wi"])[::2])
    base["task_id"] = _str(fields, b"task")
    base["task_path"] = get(b"path", b"").decode() or None
    base["sent_to"] = _label(get(b"node"))
    base["channels"] = channels
    base["writes"] = tuple(
        (channel, codec.load(fields[b"w%d" % i])) for i, channel in enumerate(channels)
    )
    return _validate_event(base)


def _sends(raw: bytes | None) -> tuple[str, ...]:
    """A checkpoint's Send targets: labels, so a malformed field (written by hand) is shown as
    none rather than costing the event."""
    if not raw:
        return ()
    try:
        sends = ormsgpack.unpackb(raw)
    except ValueError:
        return ()
    if not isinstance(sends, list) or not all(isinstance(s, str) for s in sends):
        return ()
    return tuple(sends)


def _label(raw: bytes | None) -> str | None:
    try:
        return raw.decode() or None if raw is not None else None
    except UnicodeDecodeError:
        return None


def _in_namespace(event: ThreadEvent, ns: str | None) -> bool:
    if ns is None:
        return True
    if event.kind == "delete":
        return any(item_ns == ns for item_ns, _ in event.deleted)
    if event.kind in ("pruned", "thread_deleted"):  # every namespace
        return True
    return event.checkpoint_ns == ns
