"""The steps an operation yields and the loops that drive it (``checkpoint.ops``' vocabulary).

An operation is a generator: it yields ``Eval`` / ``Call`` / ``ScanLogs`` / ``Each`` values, is
sent back their replies, and may yield ``Pause`` (wait, sending nothing) or, if it lists,
``Emit`` items for its caller. The sync and async shells only run these loops against their
transport.
"""

from __future__ import annotations

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


class Pace:
    """A long operation's pace (``Operations.slice_pause``): after each slice, a pause
    ``ratio`` times as long as the operation was busy since the last pause ended, its round
    trips and its own Python alike. So it holds the server, and on a small machine a core, at
    most 1 / (1 + ratio) of the time: a copy's client decodes and encodes every event between
    its slices, and on two cores that work, not the server's, kept another tenant waiting.
    One per run of an operation: it is that run's clock."""

    def __init__(self, ratio: float) -> None:
        self.ratio, self.since = ratio, time.perf_counter()

    def rest(self) -> Generator[Pause, Any, None]:
        if self.ratio:
            yield Pause(min(time.perf_counter() - self.since, _BUSY_MOST_S) * self.ratio)
        self.since = time.perf_counter()


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
