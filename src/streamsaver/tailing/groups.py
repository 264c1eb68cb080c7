"""A consumer group on the feeds (``GroupReader``): claiming, parking and reaping."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.codec import Codec
from ..core.config import bounded_int, check_text
from ..core.errors import InvalidInputError
from ..core.feeds import parked_key
from ..core.replies import as_text
from ..core.slots import slot_of
from ..events import Delivery, SkippedEvent, ThreadEvent
from .decode import Entry, _check, _fields, _is_error, streams
from .feeds import FeedOptions, _Feeds
from .steps import (
    Batch,
    Block,
    Command,
    Deliver,
    Pause,
    ScriptCall,
    Step,
    TailFlow,
    TailOp,
)
from .thread import _after

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11


class GroupReader(_Feeds):
    """One member of a consumer group on every feed of a prefix.

    Each feed has its own group state (a Redis group lives on one stream); members create it
    on the feeds they find (``start`` for feeds present at the first join, ``0`` for feeds that
    appear later: everything in them is new). Every ``claim_ms``, one script per feed parks
    entries delivered ``max_deliveries`` times, claims entries idle for ``min_idle_ms`` and
    reaps members that have been idle for ``reap_idle_ms`` with nothing pending.
    """

    def __init__(
        self,
        prefix: str,
        codec: Codec,
        *,
        group: object,
        consumer: object,
        start: object = "$",
        min_idle_ms: int = 30_000,
        max_deliveries: int = 5,
        claim_ms: int | None = None,
        reap_idle_ms: int = 300_000,
        **options: Unpack[FeedOptions],
    ) -> None:
        super().__init__(prefix, codec, **options)
        for name, value in (("group", group), ("consumer", consumer)):
            if not isinstance(value, str) or not value:
                raise InvalidInputError(f"{name}={value!r}: give a non-empty string")
            check_text(value, name)
        self.group: str = group  # type: ignore[assignment]
        self.consumer: str = consumer  # type: ignore[assignment]
        self.start = "$" if start == "$" else _after(start)
        self.min_idle_ms = bounded_int(min_idle_ms, "min_idle_ms", 1)
        self.max_deliveries = bounded_int(max_deliveries, "max_deliveries", 1)
        self.claim_ms = bounded_int(
            claim_ms if claim_ms is not None else max(1, self.min_idle_ms // 2), "claim_ms", 1
        )
        self.reap_idle_ms = bounded_int(reap_idle_ms, "reap_idle_ms", 0)
        self.next_claim = 0.0
        self.parked = 0
        self.joined = False
        self.kept_on = 0  # after leaving: on how many feeds the member stays (-1: unknown)

    def _create(self, slots: Sequence[int], start: str) -> Step:
        if not slots:
            return None
        calls = tuple(
            ("XGROUP", "CREATE", self.feed(s), self.group, start, "MKSTREAM") for s in slots
        )
        for reply in (yield Batch(calls)):
            if isinstance(reply, Exception) and not _is_error(reply, "BUSYGROUP"):
                raise reply
        return None

    def _discover(self) -> Step:
        first = not self.joined
        found = yield from self.probe(full=first)
        # at the first join, feeds take ``start``; a feed found later is new: all of it counts
        yield from self._create(found, self.start if first else "0-0")
        self.joined = True

    def run(self) -> TailFlow:
        yield from self._discover()
        while True:
            now = self.clock()
            if now >= self.next_discovery:
                yield from self._discover()
            if now >= self.next_claim:
                self.next_claim = now + self.claim_ms / 1000
                yield from self._claim()
            if not self.known:
                yield Pause(self.wait_ms())
                continue
            got: list[tuple[int, list[Entry]]]
            if self.cluster:
                slots = list(self.known)
                replies = yield Batch(tuple(self._read_args(self.count, None, [s]) for s in slots))
                got = []
                for slot, reply in zip(slots, replies, strict=True):
                    if _is_error(reply, "NOGROUP"):
                        yield from self._create([slot], "0-0")
                        continue
                    got += [(slot, es) for _, es in streams(_check(reply))]
                if not any(es for _, es in got):
                    yield Pause(min(self.poll_ms, self.wait_ms(), self._claim_wait()))
                    continue
            else:
                wait = min(self.wait_ms(), self._claim_wait())
                reply = yield Block(self._read_args(self.count, wait, self.known), None, wait)
                if _is_error(reply, "NOGROUP"):
                    # a feed was deleted (FLUSHDB, an operator): join it again
                    yield from self._create(self.known, "0-0")
                    continue
                got = [(slot_of(key), es) for key, es in streams(_check(reply))]
            yield from self._hand_over(
                [(slot, fid, f or {}, 1) for slot, batch in got for fid, f in batch]
            )

    def _claim_wait(self) -> int:
        return max(1, int((self.next_claim - self.clock()) * 1000))

    def _read_args(self, count: int, block: int | None, slots: Sequence[int]) -> Command:
        blocking: Command = ("BLOCK", block) if block is not None else ()
        return (
            "XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count, *blocking,
            "STREAMS", *(self.feed(s) for s in slots), *([">"] * len(slots)),
        )  # fmt: skip

    def _claim(self) -> TailFlow:
        slots = list(self.known)
        if not slots:
            return
        calls = tuple(
            ScriptCall(
                "group_claim",
                (self.feed(s), parked_key(self.prefix, s)),
                (
                    self.group,
                    self.consumer,
                    self.min_idle_ms,
                    self.count,
                    self.max_deliveries,
                    self.reap_idle_ms,
                ),
            )
            for s in slots
        )
        replies = yield Batch(calls)
        claims: list[tuple[int, str, dict[bytes, bytes], int]] = []
        for slot, reply in zip(slots, replies, strict=True):
            if reply == b"NOGROUP":
                yield from self._create([slot], "0-0")
                continue
            parked, claimed, trimmed, _reaped = _check(reply)
            feed = self.feed(slot)
            for i in range(0, len(parked), 3):
                self.parked += 1
                self.report(
                    SkippedEvent(
                        stream=feed,
                        id=as_text(parked[i]),
                        reason=f"parked in {parked_key(self.prefix, slot)} after "
                        f"{int(parked[i + 1])} deliveries (last to {as_text(parked[i + 2])!r})",
                    )
                )
            for entry_id in trimmed:
                self.report(
                    SkippedEvent(
                        stream=feed,
                        id=as_text(entry_id),
                        reason="trimmed from the feed before the group acknowledged it "
                        "(raise feed_maxlen)",
                    )
                )
            claims += [
                (slot, as_text(claimed[i]), _fields(claimed[i + 2]) or {}, int(claimed[i + 1]))
                for i in range(0, len(claimed), 3)
            ]
        if claims:
            yield from self._hand_over(claims)

    def _hand_over(self, batch: Sequence[tuple[int, str, dict[bytes, bytes], int]]) -> TailFlow:
        """Deliver ``(slot, feed id, pointer fields, deliveries)`` entries of any feeds,
        resolved in one round trip (see FeedTail._hand_over)."""
        resolved = yield from self.resolve([(slot, fid, f) for slot, fid, f, _ in batch])
        unusable: dict[int, list[str]] = {}
        for slot, fid, item in resolved:
            if isinstance(item, SkippedEvent):
                unusable.setdefault(slot, []).append(fid)
        if unusable:
            # nothing can ever process these: acknowledge them (first, so that a member that
            # stops early cannot leave them pending) and report them
            calls = tuple(("XACK", self.feed(s), self.group, *ids) for s, ids in unusable.items())
            for reply in (yield Batch(calls)):
                _check(reply)
            for _, _, item in resolved:
                if isinstance(item, SkippedEvent):
                    self.report(item)
        for (slot, feed_id, item), (_, _, _, deliveries) in zip(resolved, batch, strict=True):
            if isinstance(item, ThreadEvent):
                yield Deliver(
                    Delivery(
                        event=item, stream=self.feed(slot), entry_id=feed_id, deliveries=deliveries
                    )
                )

    def ack_call(self, deliveries: Iterable[Delivery]) -> Batch:
        by_stream: dict[str, list[str]] = {}
        for d in deliveries:
            by_stream.setdefault(d.stream, []).append(d.entry_id)
        return Batch(tuple(("XACK", s, self.group, *ids) for s, ids in by_stream.items()))

    def leave(self) -> Generator[TailOp, Any, int]:
        """Delete this member on every feed where nothing is pending for it; returns on how
        many feeds it stays (with pending entries, for the others to claim)."""
        slots = list(self.known)
        if not slots:
            return 0
        replies = yield Batch(
            tuple(
                ScriptCall("group_leave", (self.feed(s),), (self.group, self.consumer))
                for s in slots
            )
        )
        return sum(1 for r in replies if _check(r) == 0)

    def destroy(self) -> Generator[TailOp, Any, int]:
        """Remove the group from every feed (its pending entries with it)."""
        found = yield from self.probe()
        del found
        slots = list(self.known)
        if not slots:
            return 0
        replies = yield Batch(tuple(("XGROUP", "DESTROY", self.feed(s), self.group) for s in slots))
        return sum(int(_check(r)) for r in replies)
