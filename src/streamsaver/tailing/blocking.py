"""What a tail sends down a connection of its own, free of I/O: a blocking read, sent again
where a cluster's slot went, and the reads that follow one pipelined on that connection.

Each is a flow (``transport.core.run``/``arun`` drive it) of the steps below, plus the
transport's ``Pause`` and ``Relearn``; a shell only does the steps. A network error on the
tail's own connection is one retry on a new connection (``own``); a cluster's redirect of a
blocking read is followed here (``blocking``), since redis-py follows none for a connection
that is not its pool's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import AskError, MovedError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import LOST, unavailable
from ..transport.core import Pause, Relearn
from ..transport.moves import Moves, is_demoted
from .steps import Block, Command, ScriptCall

__all__ = [
    "GRACE_S",
    "NETWORK",
    "UNKNOWN",
    "Asking",
    "Dedicated",
    "Drop",
    "Exchange",
    "Read",
    "blocking",
    "bounded",
    "own",
    "within",
]

R = TypeVar("R")
GRACE_S = 5.0  # a blocking read's timeout is its block time plus this
NETWORK = (RedisConnectionError, RedisTimeoutError)
UNKNOWN = object()  # ``Asking``'s reply when the client has not heard of that node yet
_ASKED_NAP_S = 0.05  # between reads of a slot half moved, which cannot block
_LOST = object()  # ``_asked``'s answer when the node was lost: send the read again


class Dedicated:
    """One connection of the tail's own: ``stop()`` ends a blocked read by closing it."""

    def __init__(self, conn: Any, node: Any) -> None:
        self.conn = conn
        self.node = node  # the cluster node it talks to, None on a standalone server
        self.connected = False


@dataclass(frozen=True, slots=True)
class Read:
    """``op`` down the tail's own connection to the node of ``op.key`` (one attempt). The
    reply: the server's, ``None`` on timeout or once stopped, a server error as a value."""

    op: Block


@dataclass(frozen=True, slots=True)
class Exchange:
    """``calls`` pipelined down the tail's own connection to a standalone server (one
    attempt); the replies in order, a server error as a value in its place."""

    calls: tuple[Command | ScriptCall, ...]


@dataclass(frozen=True, slots=True)
class Drop:
    """Close the tail's own connections (a new one is made when next needed)."""


@dataclass(frozen=True, slots=True)
class Asking:
    """``ASKING`` and ``args`` to the node at ``host``:``port``, in one round trip; the reply
    to ``args`` (a server error as a value), or ``UNKNOWN``."""

    host: str
    port: int
    args: Command


def within() -> float:
    """How long a tail waits for anything but a blocking read's reply when its client sets
    no limit: the grace period, so a server that stops answering is reported, not waited on."""
    return GRACE_S


def bounded(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A tail's own connection's keywords, from its client's: a connect, a handshake and a
    read each bounded (the client's timeouts, else ``within()``)."""
    bound = within()
    return {
        **kwargs,
        "socket_timeout": kwargs.get("socket_timeout") or bound,
        "socket_connect_timeout": kwargs.get("socket_connect_timeout") or bound,
    }


def own(step: Read | Exchange, stopped: Callable[[], bool]) -> Generator[Any, Any, Any]:
    """``step`` on the reader's own connection; once more, on a new connection, after a
    network error."""
    for attempt in range(2):
        try:
            return (yield step)
        except NETWORK as exc:
            yield Drop()
            if attempt or stopped():
                raise unavailable(exc) from exc
    raise AssertionError("unreachable")


def blocking(
    op: Block, moves: Moves, cluster: bool, stopped: Callable[[], bool]
) -> Generator[Any, Any, Any]:
    """``op``'s reply, read where its slot is: on a cluster, after a failover or a redirect,
    the read is sent again within ``moves``' deadline. ``None`` once stopped."""
    while not stopped():
        reply = yield from own(Read(op), stopped)
        if cluster and is_demoted(reply):
            # the slot is served by the promoted replica now: learn the layout, read there
            yield Pause(moves.wait(reply, op.key))
            yield Relearn(None)
            continue
        if not (cluster and isinstance(reply, AskError)):  # MovedError is one
            return reply
        pause = moves.wait(reply, op.key)
        if isinstance(reply, MovedError):
            yield Relearn(reply)
            yield Pause(pause)
            continue
        reply = yield from _asked(reply, op, moves, cluster)
        if reply is not _LOST:
            return reply
    return None


def _asked(ask: AskError, op: Block, moves: Moves, cluster: bool) -> Generator[Any, Any, Any]:
    """The read sent where ``ask`` says its key went, mid-migration: once, without blocking
    (ASKING allows one command), and after a nap if it found nothing. ``_LOST`` when that
    node's connection was lost (it failed over mid-migration): the layout is learned again,
    and the read is sent again within ``moves``' deadline."""
    try:
        reply = yield Asking(ask.host, ask.port, _unblocked(op.args))
    except LOST as exc:
        yield Pause(moves.after_lost(exc, cluster))
        # a layout still unknown is learned from the next read's redirect
        with contextlib.suppress(*NETWORK):
            yield Relearn(None)
        return _LOST
    if reply is UNKNOWN:  # a node the client has not heard of yet
        yield Relearn(None)
        return None
    if not reply:
        yield Pause(min(op.block_ms / 1000, _ASKED_NAP_S))
    return reply


def _unblocked(args: Command) -> Command:
    """A blocking read's command without its ``BLOCK <ms>``."""
    at = args.index("BLOCK")
    return (*args[:at], *args[at + 2 :])
