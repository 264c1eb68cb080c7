"""The steps an operation yields and the loops that drive it (``checkpoint.ops``' vocabulary).

An operation is a generator: it yields ``Eval`` / ``Call`` / ``ScanLogs`` / ``Each`` values, is
sent back their replies, and may yield ``Pause`` (wait, sending nothing) or, if it lists,
``Emit`` items for its caller. The sync and async shells only run these loops against their
transport.
"""

from __future__ import annotations

import math
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from langgraph.checkpoint.base import CheckpointTuple

from .fields import Field
from .slicing import DEFAULT_SLICE_MS, MOST_SLICE_MS, QUIET_S

T = TypeVar("T")
E = TypeVar("E")
F = TypeVar("F")
S = TypeVar("S")
X = TypeVar("X")


@dataclass(frozen=True, slots=True)
class Eval:
    """Run one of the scripts in ``lua.SOURCES``."""

    script: str
    keys: Sequence[str]
    args: Sequence[Field | int]
    write: bool = False  # a durability mode waits after it


@dataclass(frozen=True, slots=True)
class Call:
    """Run one plain command."""

    args: tuple[Field | int, ...]
    write: bool = False


@dataclass(frozen=True, slots=True)
class ScanLogs:
    """Every key matching ``pattern`` on every primary (SCAN: only ``migrate_keys``, an admin's
    job; no tenant's operation scans)."""

    pattern: str


@dataclass(frozen=True, slots=True)
class Each:
    """Several ``Eval``/``Call`` pipelined (one round trip per node, off the hot path). The
    reply is a list in order, with a server error as an exception value in its place."""

    ops: tuple[Eval | Call, ...]


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``seconds`` before the next operation, sending nothing (``Operations.slice_pause``:
    the pace of a long operation's slices)."""

    seconds: float


# the most of a stretch a pause answers for: past it the operation was waiting (on its caller, the
# network), not busy
_BUSY_MOST_S = 0.05

# An adaptive pace's probe: INFO's count of the commands the server has run (every role may run
# INFO: acl.py). It is read right after each slice, in the slice's own pipeline (Redis runs one
# client's pipeline through before it reads another's), and again just before the next: the
# operation sends nothing in between, so whatever the count gained there, but the first read
# itself, other clients ran. It says that someone was served, never who, which tenant or what:
# nothing past a tenant's wall (DESIGN.md, principle 13), and no command a role lacks. Its name
# in bytes: redis-py finds its reply parsers by the str name, so the reply stays the server's
# text, of which ``commands_run`` reads one field (redis-py's INFO parser cost ~110 us a call,
# twice a slice, as much as the probe's round trip).
PROBE = Call((b"INFO", b"stats"))
_COUNT = "total_commands_processed"


def commands_run(reply: object) -> int | None:
    """The server's count of commands run, from a ``PROBE``'s reply (redis-py's dict, or the
    raw text); None for an error (INFO refused or renamed) or a reply without it."""
    if isinstance(reply, dict):
        found = reply.get(_COUNT)
        return found if isinstance(found, int) else None
    if isinstance(reply, bytes | str):
        text = reply.decode(errors="replace") if isinstance(reply, bytes) else reply
        at = text.find(_COUNT + ":")
        if at >= 0:
            digits = text[at + len(_COUNT) + 1 :].split("\r", 1)[0].split("\n", 1)[0]
            return int(digits) if digits.strip().isdigit() else None
    return None


class Pace:
    """A long operation's pace (``Operations.slice_ms``, ``slice_pause``), one per run of an
    operation: it is that run's clock.

    Fixed (``adapts`` False: the caller gave ``slice_ms`` or ``slice_pause``, or a cluster,
    where no one INFO speaks for every slice's node): slices of ``ms``, each followed by a
    pause ``ratio`` times as long as the operation was busy since the last pause ended, its
    round trips and its own Python alike. So it holds the server, and on a small machine a
    core, at most 1 / (1 + ratio) of the time: a copy's client decodes and encodes every event
    between its slices, and on two cores that work, not the server's, kept another tenant
    waiting.

    Adaptive (the default): the same pace while other clients are being served, and none while
    nobody else is. After each slice the server is asked (``PROBE``) whether it ran any other
    client's command since the slice ended. Nobody: no pause, and the next slice's budget
    doubles, up to ``MOST_SLICE_MS`` (a client that arrives during a slice waits for it at
    most). Someone: back to slices of ``ms`` at once, paused by ``ratio``, and kept so until
    nobody has been seen for ``QUIET_S``, so a tenant calling every few hundred milliseconds
    is not met by a grown slice at each call. A probe that fails (INFO refused) makes the pace
    fixed for the rest of the run."""

    def __init__(
        self,
        ratio: float,
        ms: float = DEFAULT_SLICE_MS,
        *,
        adapts: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.ratio, self.floor_ms, self.adapts, self.clock = ratio, ms, adapts, clock
        self.since = clock()
        # the next slice's budget (ms); whether slices are paused now; when another client was
        # last seen; the command count read after the last slice (None: not read)
        self.ms, self.pausing = ms, not adapts
        self.seen = -math.inf
        self.after: int | None = None
        # what the run did, for a caller or a test to look at: slices, and those the server
        # was found shared in
        self.slices = self.shared = 0

    def observe(self, others: int) -> None:
        """Set the next slice's budget and pause from ``others``, the commands other clients
        ran since the last slice ended (I/O-free: the decision alone)."""
        now = self.clock()
        if others > 0:
            self.shared += 1
            self.seen, self.ms, self.pausing = now, self.floor_ms, True
        elif now - self.seen >= QUIET_S:
            self.ms, self.pausing = min(self.ms * 2, max(MOST_SLICE_MS, self.floor_ms)), False

    def fix(self) -> None:
        """The fixed pace from now on (the probe failed)."""
        self.adapts, self.ms, self.pausing, self.after = False, self.floor_ms, True, None

    def run(self, op: Eval | Call | Each, *, rest: bool = True) -> Flow[Any]:
        """``op``'s reply (an ``Each``'s replies, errors as values; a lone command's error
        raised), then the pace's rest (``rest``; without it, a read between slices). Adaptive,
        the command count is read after it, in its pipeline; and while others are being served,
        before it too (so the rest needs no round trip of its own). A write is sent alone, so a
        durability mode waits after it: its counts are read in round trips of their own."""
        self.slices += rest
        if not self.adapts:
            reply = yield op
        else:
            lead = self.pausing and self.after is not None
            if not isinstance(op, Each) and op.write:
                if lead:
                    (probe,) = yield Each((PROBE,))
                    self._between(probe)
                reply = yield op
                (probe,) = yield Each((PROBE,))
                self._read(probe)
            else:
                ops = op.ops if isinstance(op, Each) else (op,)
                *got, probe = yield Each(((PROBE,) if lead else ()) + tuple(ops) + (PROBE,))
                if lead:
                    self._between(got.pop(0))
                self._read(probe)
                reply = got if isinstance(op, Each) else got[0]
                if isinstance(reply, Exception):
                    raise reply
        if rest:
            yield from self.rest()
        return reply

    def _between(self, probe: object) -> None:
        """What a probe sent just before a slice says of the time since the last one."""
        count = commands_run(probe)
        if count is None or self.after is None:
            self.fix()
        else:
            self.observe(count - self.after - 1)

    def _read(self, probe: object) -> None:
        count = commands_run(probe)
        if count is None:
            self.fix()
        elif self.adapts:
            self.after = count

    def rest(self) -> Generator[Step, Any, None]:
        """The pause after a slice; adaptive, the probe that decides it and the next budget."""
        busy = min(self.clock() - self.since, _BUSY_MOST_S)
        if self.adapts and self.after is not None and not self.pausing:
            # alone so far: ask before the next slice, which may be a grown one
            asked = self.clock()
            (probe,) = yield Each((PROBE,))
            self._between(probe)
            # the probe's round trip held nothing: it is part of the pause
            left = busy * self.ratio - (self.clock() - asked)
            if self.pausing and left > 0:
                yield Pause(left)
        elif self.ratio and self.pausing:
            yield Pause(busy * self.ratio)
        self.since = self.clock()


@dataclass(frozen=True, slots=True)
class Emit(Generic[E]):
    item: E


Op = Eval | Call | ScanLogs | Each
Step = Op | Pause
Flow = Generator[Step, Any, T]
Items = Generator[Step | Emit[E], Any, None]
ListFlow = Items[CheckpointTuple]
Entry = tuple[str, list[tuple[bytes, bytes]]]
"""A log entry: its id and its fields in stored order."""


class Done(Generic[T]):
    """What a flow returned (``advance``)."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


def advance(
    flow: Generator[S, Any, T], reply: Any = None, error: BaseException | None = None
) -> S | Done[T]:
    """``flow``'s next step once sent ``reply`` (or thrown ``error``), or ``Done`` with what it
    returned."""
    try:
        return flow.send(reply) if error is None else flow.throw(error)
    except StopIteration as done:
        return Done(done.value)


def drive(flow: Generator[S, Any, T], execute: Callable[[S], Any]) -> T:
    reply: Any = None
    try:
        while True:
            reply = execute(flow.send(reply))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(flow: Generator[S, Any, T], execute: Callable[[S], Awaitable[Any]]) -> T:
    reply: Any = None
    try:
        while True:
            reply = await execute(flow.send(reply))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def iterate(flow: Items[E], execute: Callable[[Step], Any]) -> Iterator[E]:
    step = advance(flow)
    while not isinstance(step, Done):
        if not isinstance(step, Emit):
            step = advance(flow, execute(step))
        else:
            yield step.item
            step = advance(flow)


async def aiterate(flow: Items[E], execute: Callable[[Step], Awaitable[Any]]) -> AsyncIterator[E]:
    step = advance(flow)
    while not isinstance(step, Done):
        if not isinstance(step, Emit):
            step = advance(flow, await execute(step))
        else:
            yield step.item
            step = advance(flow)


def _relay(flow: Items[E], convert: Callable[[E], Iterable[X]]) -> Generator[Step | X, Any, None]:
    """``flow``'s steps, passed on with their replies, and in place of each item it emits
    what ``convert`` makes of it."""
    step = advance(flow)
    while not isinstance(step, Done):
        if isinstance(step, Emit):
            yield from convert(step.item)
            step = advance(flow)
        else:
            step = advance(flow, (yield step))


def expand_items(
    flow: Items[E], convert: Callable[[E], Iterable[F]], finish: Callable[[], Iterable[F]]
) -> Items[F]:
    """``flow`` with every item it emits turned into any number of items, then ``finish()``'s:
    for a converter that may hold items back until later ones come."""
    yield from _relay(flow, lambda item: map(Emit, convert(item)))
    yield from map(Emit, finish())


def consume(flow: Items[E], take: Callable[[E], None]) -> Flow[None]:
    """Run ``flow``, handing every item it emits to ``take``."""

    def took(item: E) -> tuple[()]:
        take(item)
        return ()

    yield from _relay(flow, took)
