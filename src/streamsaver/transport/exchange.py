"""One operation's exchange with the server, free of I/O: the core that the savers' sync and
asyncio shells and the tails' both drive (``transport.core.run``/``arun``), so what a lost
connection, a slot in motion or a missing script means is decided here, once.

- ``resending`` runs a flow again after its connection was lost (on a cluster: a failover, or
  the client closing every connection on another task's error), the layout learned again
  first; every streamsaver write is idempotent, so sending again one that may have run is
  safe. On a standalone server a lost connection is final: its client has resent under its
  own retry policy already (``Moves.after_lost``).
- ``exchange`` is one saver operation: a pipeline of ``Each``, a ``SCAN`` of every primary, a
  write and its ``WAIT`` on one connection (``durable_rounds``), or one command's rounds.

A shell sends an operation's first command itself on its hot path (no flow, no step objects:
a graph's calls end there) and hands what it got as ``first``: its replies, or the error its
send raised.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import ClusterError, ResponseError, TryAgainError

from ..core.durability import Durability
from ..core.errors import LOST
from ..core.flow import Call, Each, Eval, Pause, ScanLogs
from .core import (
    Durably,
    LoadScripts,
    LoadThere,
    Pipeline,
    Relearn,
    Scripts,
    durable_rounds,
    key_of,
    only,
    raise_translated,
    rounds,
)
from .moves import Moves, is_moving, scan_plan

__all__ = ["CoreStep", "ScanNode", "Views", "exchange", "resending"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ScanNode:
    """One ``SCAN <cursor> MATCH <pattern> COUNT 1000 TYPE stream`` on the primary named
    ``node`` (None: the standalone server). Reply: (next cursor, keys)."""

    node: str | None
    pattern: str
    cursor: int


@dataclass(frozen=True, slots=True)
class Views:
    """Each primary's ``CLUSTER NODES`` as redis-py parses it, by node name (``scan_plan``)."""


CoreStep = Pipeline | LoadScripts | Relearn | Pause | Durably | LoadThere | ScanNode | Views


def resending(
    attempt: Callable[[], Generator[Any, Any, R]],
    moves: Moves,
    cluster: bool,
    key: str | None,
    *,
    translate_errors: bool = True,
) -> Generator[Any, Any, R]:
    """``attempt()``'s flow, made again and run after a lost connection (the layout learned
    again first) or a slot in motion that the client raised rather than replied, until
    ``moves``' deadline. Anything else is raised: a server error in streamsaver's typed form
    with ``translate_errors``."""
    stale = False
    while True:
        try:
            if stale:
                yield Relearn(None)
                stale = False
            return (yield from attempt())
        except (ResponseError, ClusterError) as exc:
            if not is_moving(exc):
                if translate_errors:
                    raise_translated(exc)
                raise
            yield Pause(moves.wait(exc, key))
        except LOST as exc:
            yield Pause(moves.after_lost(exc, cluster))
            stale = True


def exchange(
    op: Eval | Call | Each | ScanLogs,
    scripts: Scripts,
    durability: Durability,
    moves: Moves,
    cluster: bool,
    first: list[Any] | Exception | None = None,
) -> Generator[CoreStep, Any, Any]:
    """``op``'s reply (an ``Each``'s replies, errors as values in their places); ``first``:
    what the shell's own first send of ``op`` got (module docstring)."""
    pending = first

    def attempt() -> Generator[CoreStep, Any, Any]:
        nonlocal pending
        got, pending = pending, None
        if isinstance(got, Exception):
            raise got
        if isinstance(op, Each):
            return (yield from rounds(op.ops, scripts, moves))
        if isinstance(op, ScanLogs):
            return (yield from _scan(op.pattern, moves, cluster))
        wait = durability.command() if op.write else None
        if wait is not None:
            return (yield from durable_rounds(op, scripts, durability, wait, moves, cluster))
        return only((yield from rounds((op,), scripts, moves, first=got)))

    return (yield from resending(attempt, moves, cluster, key_of(op)))


def _scan(pattern: str, moves: Moves, cluster: bool) -> Generator[CoreStep, Any, list[Any]]:
    """Every key matching ``pattern``: on a cluster node by node, in the order ``scan_plan``
    gives, and again if the layout changed meanwhile."""
    found: set[Any] = set()
    while True:
        layout = None
        order: list[str | None] = [None]
        if cluster:
            nodes, layout = scan_plan((yield Views()))
            order = list(nodes)
        for node in order:
            cursor: int | None = None
            while cursor != 0:
                cursor, keys = yield ScanNode(node, pattern, cursor or 0)
                found.update(keys)
        if not cluster or scan_plan((yield Views()))[1] == layout:
            return list(found)
        yield Relearn(None)
        yield Pause(
            moves.wait(TryAgainError(f"the cluster layout changed during a SCAN for {pattern!r}"))
        )
