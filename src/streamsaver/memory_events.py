"""The Store's events as consumers read them: pydantic models with a schema version.

``MemoryEvent`` is one entry of a bucket's memory log (docs/store.md#events), decoded;
``StoreCursor`` is where a reader of every bucket (``store.changes`` / ``store.tail``) stopped.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from langgraph.checkpoint.serde.base import SerializerProtocol
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MemoryEvent", "StoreCursor", "memory_event"]

MemoryKind = Literal["put", "delete", "touch"]
_KINDS: dict[bytes, MemoryKind] = {b"mput": "put", b"mdel": "delete", b"mtouch": "touch"}
STORE_SCHEMA = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class MemoryEvent(BaseModel):
    """One put, delete or TTL refresh of a Store item. ``schema_version`` is the event's ``sv``."""

    model_config = ConfigDict(frozen=True)

    schema_version: int
    id: str = Field(description="stream entry id in the bucket's log, '<unix ms>-<seq>'")
    bucket: int
    kind: MemoryKind
    namespace: tuple[str, ...]
    key: str
    at: datetime = Field(description="when, by the server's clock (UTC, microseconds)")
    value: dict[str, Any] | None = Field(
        default=None, description="a put's value, decoded through the store's serde"
    )
    value_digest: str = Field("", description="sha1 of a put's value (lp(type) .. bytes)")
    old_digest: str = Field("", description="the digest of the value replaced or deleted")
    ttl_ms: int | None = None
    thread_id: str | None = Field(None, description="the LangGraph thread that wrote it")
    run_id: str | None = None
    node: str | None = None
    why: str | None = Field(None, description="'expired' for a TTL sweep's delete")


class StoreCursor(BaseModel):
    """The last event read of each bucket; buckets absent were read from their start."""

    model_config = ConfigDict(frozen=True)

    positions: dict[int, str] = Field(default_factory=dict)


def _text(fields: dict[bytes, bytes], name: bytes) -> str | None:
    raw = fields.get(name)
    return None if raw is None or raw == b"" else raw.decode(errors="replace")


def memory_event(
    bucket: int, entry_id: str, fields: dict[bytes, bytes], serde: SerializerProtocol | None
) -> MemoryEvent | None:
    """The event an entry holds; None for one this version cannot read (unknown kind, newer
    schema, malformed): a reader skips it rather than stop."""
    kind = _KINDS.get(fields.get(b"k", b""))
    try:
        if kind is None or int(fields.get(b"sv", b"")) != STORE_SCHEMA:
            return None
        value = None
        if serde is not None and kind == "put":
            value = serde.loads_typed((fields[b"vt"].decode(), fields[b"v"]))
        ttl = _text(fields, b"ttl")
        return MemoryEvent(
            schema_version=STORE_SCHEMA,
            id=entry_id,
            bucket=bucket,
            kind=kind,
            namespace=tuple(fields[b"ns"].decode().split(".")),
            key=fields[b"key"].decode(),
            at=_EPOCH + timedelta(microseconds=int(fields[b"at"])),
            value=value,
            value_digest=_text(fields, b"vd") or "",
            old_digest=_text(fields, b"od") or "",
            ttl_ms=int(ttl) if ttl else None,
            thread_id=_text(fields, b"thread"),
            run_id=_text(fields, b"run"),
            node=_text(fields, b"node"),
            why=_text(fields, b"why"),
        )
    except (KeyError, ValueError, TypeError):
        return None
