"""Tailing and consumer groups, written once, free of I/O.

As in ``_ops``, each reader is a generator: it yields the Redis work it needs (``Batch`` of
non-blocking commands on the saver's client, ``Block`` for one blocking read on the reader's
own connection, ``Pause``) and is sent the replies; it yields ``Deliver`` for each event the
caller gets. ``tailing.py`` drives these generators with a sync or an asyncio client; they only
send and receive. Decoding events into ``ThreadEvent`` happens here, once.

- ``ThreadTail``: one thread's log, by stream id (``XREAD BLOCK`` on that one key).
- ``FeedTail``: every thread, through the per-slot feeds (``_feed.py``): the pointers say which
  thread event to fetch. Standalone: one ``XREAD BLOCK`` over every known feed. Cluster: a
  command may not span slots, so each round is one pipelined non-blocking ``XREAD`` per known
  feed (one round trip per node), and an idle round waits ``poll_ms``. Feeds that appear later
  are found by probing the 16384 possible feed names, a slice at a time, never by ``SCAN`` or
  ``KEYS``. The events a round's pointers name are fetched in one more round trip.
- ``GroupReader``: a consumer group on the feeds (``XREADGROUP``), with claiming, parking and
  reaping in one script per feed (lua/group_claim.lua).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from importlib.resources import files
from typing import Any

import ormsgpack
from pydantic import ValidationError

from ._codec import SCHEMA_VERSION, Codec, Field
from ._config import thread_id_str
from ._errors import InvalidInputError
from ._feed import SLOTS, feed_key, parked_key, slot_of
from ._keys import thread_keys
from .events import DeletedHistory, Delivery, FeedCursor, Pruned, SkippedEvent, ThreadEvent

__all__ = [
    "DEFAULT_BLOCK_MS",
    "DEFAULT_COUNT",
    "DEFAULT_POLL_MS",
    "SWEEP_SLICES",
    "TAIL_COMMANDS",
    "Batch",
    "Block",
    "Deliver",
    "FeedTail",
    "GroupReader",
    "Pause",
    "Report",
    "ScriptCall",
    "ThreadTail",
    "decode_event",
    "script_source",
]

DEFAULT_BLOCK_MS = 1000
DEFAULT_COUNT = 100
DEFAULT_DISCOVER_MS = 1000
DEFAULT_POLL_MS = 50
SWEEP_SLICES = 16  # periodic probes for new feeds each name 1/16 of the slots

# What a tailing client sends (acl.py's roles include them): read-only tails need the first
# line, consumer groups the rest. No CLIENT command: stop() closes the tail's own connection.
TAIL_COMMANDS: tuple[str, ...] = (
    "xread", "xrange", "xrevrange", "exists",
    "xreadgroup", "xgroup|create", "xgroup|destroy", "xack", "evalsha", "script|load",
    # what lua/group_*.lua call
    "xpending", "xautoclaim", "xinfo|consumers", "xgroup|delconsumer", "xadd",
)  # fmt: skip

Command = tuple[Field | int, ...]


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One of the tail scripts (lua/group_*.lua), by name; in a ``Batch``."""

    name: str
    keys: tuple[str, ...]
    args: tuple[Field | int, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """Non-blocking commands, pipelined on the saver's client (one round trip per node).
    The reply is a list in order, with a server error as an exception value in its place.
    ``own``: reads the reader may send down its own connection instead, when it has one to a
    standalone server (it idles between blocking reads); that skips the pool on the way from
    a blocking read's reply to the events it announced."""

    calls: tuple[Command | ScriptCall, ...]
    own: bool = False


@dataclass(frozen=True, slots=True)
class Block:
    """One blocking read on the reader's own connection (to the node serving ``key`` on a
    cluster). The reply is the raw reply, ``None`` on timeout, or a server error as a value."""

    args: Command
    key: str | None
    block_ms: int


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait before the next round (an idle poll); a stop ends it at once."""

    ms: int


@dataclass(frozen=True, slots=True)
class Deliver:
    item: ThreadEvent | Delivery


TailOp = Batch | Block | Pause
TailFlow = Generator[TailOp | Deliver, Any, None]
Step = Generator[TailOp, Any, Any]
Report = Callable[[SkippedEvent], None]

SCRIPTS = ("group_claim", "group_leave")
_ID = re.compile(r"\d+-\d+")
_KINDS = ("checkpoint", "writes", "delete", "pruned", "thread_deleted")


@cache
def script_source(name: str) -> str:
    if name not in SCRIPTS:
        raise KeyError(name)
    return (files("streamsaver") / "lua" / f"{name}.lua").read_text(encoding="utf-8")


# --- replies ---------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


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
    return [(_text(entry_id), _fields(raw)) for entry_id, raw in reply]


def streams(reply: Any) -> list[tuple[str, list[Entry]]]:
    """XREAD / XREADGROUP, RESP2 or RESP3, raw or parsed by redis-py: ``[(key, entries)]``."""
    if not reply:
        return []
    out = []
    for key, items in reply.items() if isinstance(reply, Mapping) else reply:
        # redis-py's RESP3 parsing wraps each stream's entries in one more list
        if items and isinstance(items[0], list) and items[0] and isinstance(items[0][0], tuple):
            items = items[0]
        out.append((_text(key), entries(items)))
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
    if thread_id is None or event_id is None or not _ID.fullmatch(event_id):
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
        return _validate_event(base)
    channels = tuple(ormsgpack.unpackb(fields[b"wi"])[::2])
    base["task_id"] = _str(fields, b"task")
    base["task_path"] = get(b"path", b"").decode() or None
    base["channels"] = channels
    base["writes"] = tuple(
        (channel, codec.load(fields[b"w%d" % i])) for i, channel in enumerate(channels)
    )
    return _validate_event(base)


def _in_namespace(event: ThreadEvent, ns: str | None) -> bool:
    if ns is None:
        return True
    if event.kind == "delete":
        return any(item_ns == ns for item_ns, _ in event.deleted)
    if event.kind in ("pruned", "thread_deleted"):  # every namespace
        return True
    return event.checkpoint_ns == ns


# --- validation ------------------------------------------------------------------------------


def _positive(value: object, name: str, low: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidInputError(f"{name}={value!r}: give an int >= {low}")
    return value


def _after(after: object) -> str:
    """``"$"``, ``"0"`` or a stream id, as a position: ``"$"`` or an exact id."""
    if after == "$":
        return "$"
    if after in ("0", 0):
        return "0-0"
    if isinstance(after, bytes):
        after = after.decode()
    if isinstance(after, str) and _ID.fullmatch(after):
        return after
    raise InvalidInputError(
        f"after={after!r}: give '$' (only new events), '0' (from the beginning) or a stream id "
        f"'<ms>-<seq>' to resume exactly after it"
    )


def _namespace(checkpoint_ns: object) -> str | None:
    if checkpoint_ns is None or isinstance(checkpoint_ns, str):
        return checkpoint_ns
    raise InvalidInputError(f"checkpoint_ns={checkpoint_ns!r}: give a string or None")


class _Reader:
    def __init__(self, codec: Codec, on_skip: Report | None) -> None:
        self.codec = codec
        self.on_skip = on_skip
        self.skipped = 0

    def report(self, skipped: SkippedEvent) -> None:
        self.skipped += 1
        if self.on_skip is not None:
            self.on_skip(skipped)


# --- one thread ------------------------------------------------------------------------------


class ThreadTail(_Reader):
    """One thread's events in log order. ``position`` is the id of the last entry handed over
    or skipped: ``after=position`` resumes exactly after it."""

    def __init__(
        self,
        prefix: str,
        codec: Codec,
        thread_id: object,
        *,
        after: object = "$",
        follow: bool = True,
        checkpoint_ns: object = None,
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        on_skip: Report | None = None,
    ) -> None:
        super().__init__(codec, on_skip)
        self.thread_id = thread_id_str(thread_id, "thread_id")
        self.log = thread_keys(prefix, self.thread_id).log
        self.after = _after(after)
        self.follow = bool(follow)
        self.ns = _namespace(checkpoint_ns)
        self.block_ms = _positive(block_ms, "block_ms")
        self.count = _positive(count, "count")
        self.position: str | None = None if self.after == "$" else self.after

    def _last(self) -> Step:
        (reply,) = yield Batch((("XREVRANGE", self.log, "+", "-", "COUNT", 1),))
        last = entries(_check(reply))
        return last[0][0] if last else "0-0"

    def run(self) -> TailFlow:
        pos = self.after
        if pos == "$" or not self.follow:
            last = yield from self._last()
            if pos == "$":
                pos = last
            end = last
        self.position = pos
        while True:
            if self.follow:
                reply = yield Block(
                    (
                        "XREAD",
                        "COUNT",
                        self.count,
                        "BLOCK",
                        self.block_ms,
                        "STREAMS",
                        self.log,
                        pos,
                    ),
                    self.log,
                    self.block_ms,
                )
                batch = [e for key, es in streams(_check(reply)) if key == self.log for e in es]
            else:
                if _id_key(pos) >= _id_key(end):
                    return
                (reply,) = yield Batch((("XRANGE", self.log, "(" + pos, end, "COUNT", self.count),))
                batch = entries(_check(reply))
                if not batch:
                    return
            for entry_id, fields in batch:
                item = decode_event(self.codec, self.log, entry_id, fields or {})
                pos = self.position = entry_id
                if isinstance(item, SkippedEvent):
                    self.report(item)
                elif _in_namespace(item, self.ns):
                    yield Deliver(item)


# --- every thread ----------------------------------------------------------------------------


class _Feeds(_Reader):
    """What FeedTail and GroupReader share: the feeds of a prefix and their pointers."""

    def __init__(
        self,
        prefix: str,
        codec: Codec,
        *,
        cluster: bool,
        clock: Callable[[], float],
        discover_ms: int | None,
        poll_ms: int,
        block_ms: int,
        count: int,
        on_skip: Report | None,
    ) -> None:
        super().__init__(codec, on_skip)
        self.prefix = prefix
        self.cluster = cluster
        self.clock = clock
        if discover_ms is None:
            # a cluster probe is one EXISTS per missing slot, so it runs less often
            discover_ms = DEFAULT_DISCOVER_MS * (5 if cluster else 1)
        self.discover_ms = _positive(discover_ms, "discover_ms")
        self.poll_ms = _positive(poll_ms, "poll_ms")
        self.block_ms = _positive(block_ms, "block_ms")
        self.count = _positive(count, "count")
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
            start, period = self._sweep, period / SWEEP_SLICES
            self._sweep = (start + SLOTS // SWEEP_SLICES) % SLOTS
            candidates = range(start, start + SLOTS // SWEEP_SLICES)
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
            # the feeds that have an entry (a feed is created by its first XADD), one command
            # per slice: each reply comes quickly, whatever socket timeout the client has
            size = SLOTS // SWEEP_SLICES
            chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
            replies = yield Batch(
                tuple(("XREAD", "COUNT", 1, "STREAMS", *c, *["0-0"] * len(c)) for c in chunks)
            )
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
            key = thread_keys(self.prefix, target[0]).log
            logs.append(key)
            calls.append(("XRANGE", key, target[1], target[1]))
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
                if not found or found[0][1] is None:
                    reason = "gone: the thread's log no longer has it (deleted or pruned)"
                    item = self._skipped(slot, feed_id, fields, reason)
                else:
                    item = decode_event(self.codec, log, found[0][0], found[0][1])
            result.append((slot, feed_id, item))
        return result


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
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        discover_ms: int | None = None,
        poll_ms: int = DEFAULT_POLL_MS,
        cluster: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_skip: Report | None = None,
    ) -> None:
        super().__init__(
            prefix,
            codec,
            cluster=cluster,
            clock=clock,
            discover_ms=discover_ms,
            poll_ms=poll_ms,
            block_ms=block_ms,
            count=count,
            on_skip=on_skip,
        )
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
                if not 0 <= slot < SLOTS or not _ID.fullmatch(position):
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
            if first and _id_key(first[0][0]) > _id_key(self.positions[slot]):
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
        pending = [s for s in self.known if _id_key(self.positions[s]) < _id_key(ends[s])]
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
            pending = [s for s in pending if _id_key(self.positions[s]) < _id_key(ends[s])]

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


# --- consumer groups -------------------------------------------------------------------------


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
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        discover_ms: int | None = None,
        poll_ms: int = DEFAULT_POLL_MS,
        cluster: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_skip: Report | None = None,
    ) -> None:
        super().__init__(
            prefix,
            codec,
            cluster=cluster,
            clock=clock,
            discover_ms=discover_ms,
            poll_ms=poll_ms,
            block_ms=block_ms,
            count=count,
            on_skip=on_skip,
        )
        for name, value in (("group", group), ("consumer", consumer)):
            if not isinstance(value, str) or not value:
                raise InvalidInputError(f"{name}={value!r}: give a non-empty string")
        self.group: str = group  # type: ignore[assignment]
        self.consumer: str = consumer  # type: ignore[assignment]
        self.start = "$" if start == "$" else _after(start)
        self.min_idle_ms = _positive(min_idle_ms, "min_idle_ms")
        self.max_deliveries = _positive(max_deliveries, "max_deliveries")
        self.claim_ms = _positive(
            claim_ms if claim_ms is not None else max(1, self.min_idle_ms // 2), "claim_ms"
        )
        self.reap_idle_ms = _positive(reap_idle_ms, "reap_idle_ms", 0)
        self.next_claim = 0.0
        self.parked = 0
        self.joined = False

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
                        id=_text(parked[i]),
                        reason=f"parked in {parked_key(self.prefix, slot)} after "
                        f"{int(parked[i + 1])} deliveries (last to {_text(parked[i + 2])!r})",
                    )
                )
            for entry_id in trimmed:
                self.report(
                    SkippedEvent(
                        stream=feed,
                        id=_text(entry_id),
                        reason="trimmed from the feed before the group acknowledged it "
                        "(raise feed_maxlen)",
                    )
                )
            claims += [
                (slot, _text(claimed[i]), _fields(claimed[i + 2]) or {}, int(claimed[i + 1]))
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
