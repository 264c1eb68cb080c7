"""The digest chain of a thread's log, for verifying it (docs/audit.md). No I/O.

``append_event()`` in lua/shared/common.lua writes the chain; this is the same definition, for
checking a
log read from Redis or from an export file, and the writer's: a ``put``/``put_writes`` sends its
event's ``ch`` (``content_digest``), the server only links it (``dg``). Every chained event
carries, as its last two fields:

- ``ch``: sha1 hex of its other fields in stored order, each name and value length-prefixed
  (``<byte length>:<bytes>``), so no two field lists encode alike;
- ``dg``: sha1 hex of the previous entry's ``dg`` (``""`` for the first entry of a log) followed
  by ``ch``.

Altering an event breaks its ``ch``; removing or moving one breaks the ``dg`` of the event after
it. A prune leaves a ``pruned`` event first in the log, which names the ``dg`` of the last entry
it removed (field ``last``): only there may the predecessor be absent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CHAIN_FIELDS",
    "Break",
    "ChainCheck",
    "Pairs",
    "chain_digest",
    "content_digest",
    "written_digest",
]

CHAIN_FIELDS = (b"ch", b"dg")
Pairs = Sequence[tuple[bytes, bytes]]
"""An entry's fields in stored order."""


def content_digest(fields: Pairs) -> str:
    # one buffer and one update: every put computes this, on ~20 fields
    content = b"".join(
        [
            b"%d:%s%d:%s" % (len(name), name, len(value), value)
            for name, value in fields
            if name not in CHAIN_FIELDS
        ]
    )
    return hashlib.sha1(content, usedforsecurity=False).hexdigest()


def written_digest(flat: Sequence[bytes]) -> str:
    """``content_digest`` of an event about to be written: its fields flat, names and values
    alternating, without ``ch``/``dg`` yet (every put and put_writes computes it)."""
    content = b"".join(
        [
            b"%d:%s%d:%s" % (len(name), name, len(value), value)
            for name, value in zip(flat[::2], flat[1::2], strict=True)
        ]
    )
    return hashlib.sha1(content, usedforsecurity=False).hexdigest()


def chain_digest(previous: str, content: str) -> str:
    return hashlib.sha1((previous + content).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Break:
    """The first event at which a log's chain does not hold."""

    event_id: str
    position: int  # 1 for the log's first entry
    kind: str | None
    reason: str

    def __str__(self) -> str:
        kind = self.kind or "?"
        return f"event {self.event_id} (#{self.position}, {kind}): {self.reason}"


class ChainCheck:
    """Fed a log's entries in order (``add``), tells whether its chain holds: ``problem`` is
    None, or the first ``Break``. Holds O(1) state, so any number of entries can stream past."""

    def __init__(self) -> None:
        self.events = 0
        self.head = ""  # dg of the last entry: compare it with one recorded elsewhere
        self.problem: Break | None = None
        # the events' references that do not resolve ("ref <event id> ...", see
        # checkpoint/verify.lua);
        # set by the saver's verify_chain, which checks them in Redis; an export has none
        self.references: list[str] = []
        # why the references were not checked (a read-only user cannot run the check, which
        # replays into scratch keys), or None
        self.unchecked: str | None = None
        self._previous_id: str | None = None
        # a broken link (ch, dg, the id it follows) whose predecessor may turn up later: moved
        self._wanted: tuple[str, str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None and not self.references

    def add(self, entry_id: str, fields: Pairs) -> None:
        self.events += 1
        named = dict(fields)
        ch, dg = named.get(b"ch"), named.get(b"dg")
        if self.problem is not None:
            self._look_for_moved(entry_id, dg)
        else:
            self._check(entry_id, fields, named, ch, dg)
        self.head = dg.decode(errors="replace") if dg is not None else ""
        self._previous_id = entry_id

    def _fail(self, entry_id: str, kind: bytes | None, reason: str) -> None:
        kind_text = kind.decode(errors="replace") if kind is not None else None
        self.problem = Break(entry_id, self.events, kind_text, reason)

    def _check(
        self,
        entry_id: str,
        fields: Pairs,
        named: dict[bytes, bytes],
        ch: bytes | None,
        dg: bytes | None,
    ) -> None:
        kind = named.get(b"k")
        if ch is None or dg is None:
            self._fail(
                entry_id,
                kind,
                "has no digest: it was written with chaining off, or its ch/dg fields were removed",
            )
            return
        content = ch.decode(errors="replace")
        if content_digest(fields) != content:
            self._fail(entry_id, kind, "was altered: its fields do not match its digest (ch)")
            return
        first = self._previous_id is None
        # a log starts the chain, or, once pruned, at the tombstone naming what it removed
        previous = [""] if first else [self.head]
        if first and kind == b"pruned":
            previous.append(named.get(b"last", b"").decode(errors="replace"))
        if any(chain_digest(p, content) == dg.decode(errors="replace") for p in previous):
            return
        if first:
            reason = "does not start the chain: the events before it were removed"
        else:
            reason = (
                f"does not follow event {self._previous_id}: an event between them was "
                f"removed or moved, or this one was re-chained"
            )
        self._fail(entry_id, kind, reason)
        self._wanted = (content, dg.decode(errors="replace"), self._previous_id or "")

    def _look_for_moved(self, entry_id: str, dg: bytes | None) -> None:
        if self._wanted is None or dg is None or self.problem is None:
            return
        content, wanted, after = self._wanted
        if chain_digest(dg.decode(errors="replace"), content) == wanted:
            problem = self.problem
            self.problem = Break(
                problem.event_id,
                problem.position,
                problem.kind,
                f"does not follow event {after}: event {entry_id} (#{self.events}) was moved; "
                f"it belongs right before it",
            )
            self._wanted = None
