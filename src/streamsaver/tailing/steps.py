"""What a reader core yields and is sent: the steps of tailing, its scripts and defaults."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..core.codec import Field
from ..core.slots import SLOTS
from ..events import Delivery, SkippedEvent, ThreadEvent
from ..lua import source

DEFAULT_BLOCK_MS = 1000
DEFAULT_COUNT = 100
DEFAULT_DISCOVER_MS = 1000
DEFAULT_POLL_MS = 50
SWEEP_SLICES = 16  # periodic probes for new feeds each name 1/16 of the slots


def sweep_slice(start: int) -> tuple[range, int]:
    """The slots a periodic probe names from ``start``, and where the next one starts."""
    size = SLOTS // SWEEP_SLICES
    return range(start, start + size), (start + size) % SLOTS


def feed_probes(keys: Sequence[str]) -> tuple[tuple[str | int, ...], ...]:
    """Which of the feeds ``keys`` exist (a feed is created by its first XADD) on a standalone
    server: an XREAD per slice of the slots, pipelined. One XREAD of all 16,384 names held the
    server 1.3-1.5 ms (Redis 7.0); a slice's ~0.1 ms lets other clients in between."""
    size = SLOTS // SWEEP_SLICES
    return tuple(
        ("XREAD", "COUNT", 1, "STREAMS", *keys[i : i + size], *["0-0"] * len(keys[i : i + size]))
        for i in range(0, len(keys), size)
    )


# What a tailing client sends (acl.py's roles include them): read-only tails need the first
# line, consumer groups the rest. No CLIENT command: stop() closes the tail's own connection.
TAIL_COMMANDS: tuple[str, ...] = (
    "xread", "xrange", "xrevrange", "exists",
    "xreadgroup", "xgroup|create", "xgroup|destroy", "xack", "fcall",
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


@cache
def script_source(name: str) -> str:
    if name not in SCRIPTS:
        raise KeyError(name)
    return source(f"{name}.lua")
