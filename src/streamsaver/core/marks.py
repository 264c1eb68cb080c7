"""A deleted thread's mark: what ``delete_thread`` leaves of a thread whose id is not used again.
No I/O.

The thread's log and indexes are gone; its ``ptr`` hash holds its ``thread_deleted`` event's
fields, each a short field of its own (lua/checkpoint/projection.lua's ``restore_deleted()``):
``d`` its id, ``g`` its upto, ``Dt`` its thread, ``Dn`` its count, ``Dl`` its last id, ``Dh``
its head, and ``DP`` the events of the id's earlier deletions (msgpack). The first write that
uses the id again appends them to the new log; until then readers (history, an audit export,
``tail_all``) read them from here, as the log would hold them.
"""

from __future__ import annotations

from collections.abc import Sequence

import ormsgpack

from .chain import chain_digest, content_digest
from .fields import SCHEMA_VERSION

__all__ = ["MARK_FIELDS", "marked_events"]

MARK_FIELDS = ("d", "g", "Dt", "Dn", "Dl", "Dh", "DP")
"""The ptr fields ``marked_events`` reads (HMGET), in order."""


def _b(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


def marked_events(mark: Sequence[bytes | str | None]) -> list[tuple[str, dict[bytes, bytes]]]:
    """The events a mark holds, oldest first, as the log that uses the id again will start:
    chained from its start. None when ``mark`` (the HMGET of ``MARK_FIELDS``) is no mark."""
    entry_id, upto, thread, count, last, head, earlier = mark
    if entry_id is None or thread is None:
        return []
    events: list[tuple[str, list[tuple[bytes, bytes]]]] = []
    if earlier is not None:
        flat = ormsgpack.unpackb(_b(earlier))
        for eid, fields in zip(flat[::2], flat[1::2], strict=True):
            flat_fields = [_b(x) for x in fields]
            named = zip(flat_fields[::2], flat_fields[1::2], strict=True)
            events.append((_b(eid).decode(), list(named)))
    own = [
        (b"k", b"thread_deleted"),
        (b"sv", str(SCHEMA_VERSION).encode()),
        (b"thread", _b(thread)),
        (b"n", _b(count or b"0")),
        (b"last", _b(last or b"")),
        (b"head", _b(head or b"")),
        (b"upto", _b(upto or b"")),
    ]
    events.append((_b(entry_id).decode(), own))
    out: list[tuple[str, dict[bytes, bytes]]] = []
    previous = ""
    for eid, pairs in events:
        ch = content_digest(pairs)
        previous = chain_digest(previous, ch)
        out.append((eid, {**dict(pairs), b"ch": ch.encode(), b"dg": previous.encode()}))
    return out
