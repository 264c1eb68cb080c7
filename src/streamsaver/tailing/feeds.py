"""Every thread, through the per-slot feeds (``FeedTail``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from pydantic import ValidationError

from ..core.codec import Codec
from ..core.config import bounded_int
from ..core.errors import InvalidInputError
from ..core.feeds import feed_key
from ..core.keys import thread_keys
from ..core.marks import MARK_FIELDS, marked_events
from ..core.slots import SLOTS, slot_of
from ..core.stream_ids import id_key, is_entry_id
from ..events import FeedCursor, SkippedEvent, ThreadEvent
from .decode import (
    Entry,
    _check,
    _in_namespace,
    _pointer,
    _shown,
    decode_event,
    entries,
    streams,
)
from .naming import name_batch
from .steps import (
    DEFAULT_BLOCK_MS,
    DEFAULT_COUNT,
    DEFAULT_DISCOVER_MS,
    DEFAULT_POLL_MS,
    SWEEP_SLICES,
    Batch,
    Block,
    Command,
    Deliver,
    Pause,
    Report,
    Step,
    TailFlow,
    feed_probes,
    sweep_slice,
)
from .thread import _namespace, _Reader

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11


class FeedReadOptions(TypedDict, total=False):
    """What a caller may set of every reader of the feeds (``tail_all``, ``consumer_group``
    pass them on); their defaults are ``_Feeds``'s."""

    block_ms: int
    count: int
    discover_ms: int | None
    poll_ms: int
    on_skip: Report | None


class FeedOptions(FeedReadOptions, total=False):
    """``FeedReadOptions`` and what the saver sets itself: whether it is a cluster, and the
    clock (a test's)."""

    cluster: bool
    clock: Callable[[], float]


class _Feeds(_Reader):
    """What FeedTail and GroupReader share: the feeds of a prefix and their pointers."""

    def __init__(
        self,
        prefix: str,
        codec: Codec,
        *,
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        discover_ms: int | None = None,
        poll_ms: int = DEFAULT_POLL_MS,
        cluster: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_skip: Report | None = None,
    ) -> None:
        super().__init__(codec, on_skip)
        self.prefix = prefix
        self.cluster = cluster
        self.clock = clock
        if discover_ms is None:
            # a cluster probe is one EXISTS per missing slot, so it runs less often
            discover_ms = DEFAULT_DISCOVER_MS * (5 if cluster else 1)
        self.discover_ms = bounded_int(discover_ms, "discover_ms", 1)
        self.poll_ms = bounded_int(poll_ms, "poll_ms", 1)
        self.block_ms = bounded_int(block_ms, "block_ms", 1)
        self.count = bounded_int(count, "count", 1)
        self.known: list[int] = []  # slots whose feed exists, in discovery order
        self._known: set[int] = set()
        self.next_discovery = 0.0
        self._sweep = 0  # the first slot of the next periodic probe's slice
        self._feed_keys: dict[int, str] = {}

    def feed(self, slot: int) -> str:
        key = self._feed_keys.get(slot)
        if key is None:
            key = self._feed_keys[slot] = feed_key(self.prefix, slot)
        return key

    def probe(self, full: bool = True) -> Step:
        """Find feeds that appeared since the last probe; returns their slots.

        A full probe (at the start) names every missing feed: up to 16384 names, tens of ms of
        client and server time. A periodic probe names one slice of the slots, the next slice
        every ``discover_ms / SWEEP_SLICES``: a new feed is still found within ``discover_ms``,
        and no probe holds up the reads (and the events waiting behind them) for long."""
        period = self.discover_ms / 1000
        if full:
            candidates = range(SLOTS)
        else:
            period /= SWEEP_SLICES
            candidates, self._sweep = sweep_slice(self._sweep)
        self.next_discovery = self.clock() + period
        slots = [s for s in candidates if s not in self._known]
        if not slots:
            return []
        keys = [self.feed(s) for s in slots]
        if self.cluster:
            # a command may not span slots: one EXISTS per slot, pipelined per node
            replies = yield Batch(tuple(("EXISTS", k) for k in keys))
            found = [s for s, r in zip(slots, replies, strict=True) if _check(r)]
        else:
            # one command per slice: each reply comes quickly, whatever socket timeout the
            # client has
            replies = yield Batch(feed_probes(keys))
            present = {key for reply in replies for key, _ in streams(_check(reply))}
            found = [s for s, k in zip(slots, keys, strict=True) if k in present]
        self.known += found
        self._known.update(found)
        return found

    def _skipped(
        self, slot: int, feed_id: str, fields: Mapping[bytes, bytes], reason: str
    ) -> SkippedEvent:
        return SkippedEvent(
            stream=self.feed(slot),
            id=feed_id,
            thread_id=_shown(fields, b"t"),
            event_id=_shown(fields, b"e"),
            kind=_shown(fields, b"k"),
            reason=reason,
        )

    def wait_ms(self) -> int:
        """How long the next blocking read may wait and still probe on time."""
        left = int((self.next_discovery - self.clock()) * 1000)
        return max(1, min(self.block_ms, left))

    def resolve(self, pointers: Sequence[tuple[int, str, dict[bytes, bytes]]]) -> Step:
        """Fetch the thread events feed pointers name, in one batch:
        ``[(slot, feed id, ThreadEvent | SkippedEvent)]`` in the pointers' order."""
        calls: list[Command] = []
        logs: list[str | None] = []
        for _, _, fields in pointers:
            target = _pointer(fields)
            if target is None:
                logs.append(None)
                continue
            keys = thread_keys(self.prefix, target[0])
            logs.append(keys.log)
            calls.append(("XRANGE", keys.log, target[1], target[1]))
            if fields.get(b"k") == b"thread_deleted":
                # a deleted thread's log is gone: its mark holds the event (core/marks.py)
                calls.append(("HMGET", keys.ptr, *MARK_FIELDS))
        replies = iter((yield Batch(tuple(calls), own=True)) if calls else ())
        result: list[tuple[int, str, ThreadEvent | SkippedEvent]] = []
        for (slot, feed_id, fields), log in zip(pointers, logs, strict=True):
            item: ThreadEvent | SkippedEvent
            if log is None:
                item = self._skipped(slot, feed_id, fields, "not a feed pointer")
            elif isinstance(reply := next(replies), Exception):
                reason = f"cannot read the thread's log: {reply}"
                item = self._skipped(slot, feed_id, fields, reason)
            else:
                found = entries(reply)
                if fields.get(b"k") == b"thread_deleted":
                    mark = next(replies)
                    wanted = _pointer(fields)
                    if not found and wanted and not isinstance(mark, Exception):
                        found = [e for e in marked_events(mark) if e[0] == wanted[1]]
                if not found or found[0][1] is None:
                    reason = "gone: the thread's log no longer has it (deleted or pruned)"
                    item = self._skipped(slot, feed_id, fields, reason)
                else:
                    item = decode_event(self.codec, log, found[0][0], found[0][1])
            result.append((slot, feed_id, item))
        named = name_batch(self.sends, ((item, (slot, fid)) for slot, fid, item in result))
        return [(slot, fid, item) for item, (slot, fid) in named]


class FeedTail(_Feeds):
    """Every thread's events, through the feeds: in order within a thread (and within a
    slot), with no order across slots. ``cursor`` says where it is, for ``after=``."""

    def __init__(
        self,
        prefix: str,
        codec: Codec,
        *,
        after: object = "$",
        follow: bool = True,
        checkpoint_ns: object = None,
        **options: Unpack[FeedOptions],
    ) -> None:
        super().__init__(prefix, codec, **options)
        self.start, self.positions = self._start(after)
        self.follow = bool(follow)
        self.ns = _namespace(checkpoint_ns)

    def _start(self, after: object) -> tuple[str, dict[int, str]]:
        try:
            if isinstance(after, (str, bytes)) and after not in ("$", "0", b"$", b"0"):
                text = after.decode() if isinstance(after, bytes) else after
                if text.lstrip().startswith("{"):
                    after = FeedCursor.model_validate_json(text)
            if isinstance(after, Mapping):
                after = FeedCursor.model_validate(after)
        except ValidationError as exc:
            raise InvalidInputError(f"after= is not a valid FeedCursor: {exc}") from exc
        if isinstance(after, FeedCursor):
            if after.prefix != self.prefix:
                raise InvalidInputError(
                    f"this cursor is for prefix {after.prefix!r}, not {self.prefix!r}"
                )
            for slot, position in after.positions.items():
                if not 0 <= slot < SLOTS or not is_entry_id(position):
                    raise InvalidInputError(f"cursor position {slot}: {position!r} is not valid")
            return "cursor", dict(after.positions)
        if after in ("$", b"$"):
            return "$", {}
        if after in ("0", 0, b"0"):
            return "0", {}
        raise InvalidInputError(
            f"after={after!r}: give '$' (only new events), '0' (from the beginning of every "
            f"feed) or a FeedCursor (or its JSON) to resume where a tail_all stopped"
        )

    @property
    def cursor(self) -> FeedCursor:
        return FeedCursor(prefix=self.prefix, positions=dict(self.positions))

    def _lasts(self, slots: Sequence[int]) -> Step:
        replies = yield Batch(
            tuple(("XREVRANGE", self.feed(s), "+", "-", "COUNT", 1) for s in slots)
        )
        lasts = {}
        for slot, reply in zip(slots, replies, strict=True):
            last = entries(_check(reply))
            lasts[slot] = last[0][0] if last else "0-0"
        return lasts

    def run(self) -> TailFlow:
        found = yield from self.probe()
        if self.start == "$":
            self.positions.update((yield from self._lasts(found)))
        elif self.start == "cursor":
            yield from self._check_gaps([s for s in found if s in self.positions])
        for slot in found:
            self.positions.setdefault(slot, "0-0")
        if not self.follow:
            yield from self._catch_up()
            return
        while True:
            if self.clock() >= self.next_discovery:
                for slot in (yield from self.probe(full=False)):
                    # a feed that appeared after the start: everything in it is new
                    self.positions.setdefault(slot, "0-0")
            if not self.known:
                yield Pause(self.wait_ms())
                continue
            if self.cluster:
                slots = list(self.known)
                replies = yield Batch(
                    tuple(
                        ("XREAD", "COUNT", self.count, "STREAMS", self.feed(s), self.positions[s])
                        for s in slots
                    )
                )
                got = [
                    (s, es)
                    for s, r in zip(slots, replies, strict=True)
                    for _, es in streams(_check(r))
                ]
                if not any(es for _, es in got):
                    yield Pause(min(self.poll_ms, self.wait_ms()))
                    continue
            else:
                keys = [self.feed(s) for s in self.known]
                wait = self.wait_ms()
                reply = yield Block(
                    (
                        "XREAD", "COUNT", self.count, "BLOCK", wait, "STREAMS",
                        *keys, *(self.positions[s] for s in self.known),
                    ),
                    None,
                    wait,
                )  # fmt: skip
                got = [(slot_of(key), es) for key, es in streams(_check(reply))]
            yield from self._hand_over(got)

    def _check_gaps(self, slots: Sequence[int]) -> Step:
        """Report feeds trimmed past the cursor since it was taken: their first entry is now
        newer than the position (trimming only ever removes the oldest entries)."""
        slots = [s for s in slots if self.positions[s] != "0-0"]
        if not slots:
            return None
        replies = yield Batch(tuple(("XRANGE", self.feed(s), "-", "+", "COUNT", 1) for s in slots))
        for slot, reply in zip(slots, replies, strict=True):
            first = entries(_check(reply))
            if first and id_key(first[0][0]) > id_key(self.positions[slot]):
                self.report(
                    SkippedEvent(
                        stream=self.feed(slot),
                        id=self.positions[slot],
                        reason=f"the feed was trimmed (feed_maxlen) past this position, up to "
                        f"{first[0][0]}: pointers after it may be lost; the thread logs still "
                        f"hold every event",
                    )
                )
        return None

    def _catch_up(self) -> TailFlow:
        ends = yield from self._lasts(self.known)
        pending = [s for s in self.known if id_key(self.positions[s]) < id_key(ends[s])]
        while pending:
            replies = yield Batch(
                tuple(
                    ("XRANGE", self.feed(s), "(" + self.positions[s], ends[s], "COUNT", self.count)
                    for s in pending
                )
            )
            got = [(s, entries(_check(r))) for s, r in zip(pending, replies, strict=True)]
            yield from self._hand_over(got)
            for slot, batch in got:
                if not batch:
                    self.positions[slot] = ends[slot]
            pending = [s for s in pending if id_key(self.positions[s]) < id_key(ends[s])]

    def _hand_over(self, got: Sequence[tuple[int, list[Entry]]]) -> TailFlow:
        # every feed's pointers of one read are resolved in one round trip: a round trip per
        # feed would cost one per event once threads spread over many slots, and a tailer
        # sharing an event loop with busy writers would fall ever further behind
        pointers: list[tuple[int, str, dict[bytes, bytes]]] = []
        skipped_ns: set[tuple[int, str]] = set()
        for slot, batch in got:
            for feed_id, fields in batch:
                fields = fields or {}
                kind, ns = _shown(fields, b"k"), _shown(fields, b"ns")
                if self.ns is not None and kind in ("checkpoint", "writes") and ns != self.ns:
                    skipped_ns.add((slot, feed_id))  # another namespace: no need to fetch it
                pointers.append((slot, feed_id, fields))
        wanted = [p for p in pointers if p[:2] not in skipped_ns]
        resolved = iter((yield from self.resolve(wanted)))
        for slot, feed_id, _ in pointers:
            if (slot, feed_id) in skipped_ns:
                self.positions[slot] = feed_id
                continue
            _, _, item = next(resolved)
            self.positions[slot] = feed_id
            if isinstance(item, SkippedEvent):
                self.report(item)
            elif _in_namespace(item, self.ns):
                yield Deliver(item)
