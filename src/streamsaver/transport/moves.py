"""Slot moves on a Redis Cluster: what a command that meets one does next. No I/O.

While a slot migrates between primaries (resharding) or a primary fails over, a command can
get ``MOVED`` (the slot lives elsewhere now), ``ASK`` (this key already went to the importing
node: send ``ASKING`` and the command there) or ``TRYAGAIN`` (a multi-key script whose keys are
split between the two nodes, or name one that is absent on both, until the slot is settled).
redis-py follows ``MOVED`` and ``ASK`` for commands it routes itself, but gives ``TRYAGAIN`` up
after about 0.4 s (``ClusterError: TTL exhausted``), and nothing of it for a connection of our
own (durable writes, blocking reads). Each shell sends through ``Moves``: the same command
again, after a short backoff, until the slot settles or ``timeout_s`` is over. Resending is safe:
a redirected or refused command did not run, and every streamsaver write is idempotent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from redis.crc import key_slot
from redis.exceptions import AskError, ClusterError, ResponseError, TryAgainError

from ..core.errors import InvalidInputError, SlotMovingError, lost_connection, unavailable

__all__ = [
    "DEFAULT_SLOT_MOVE_TIMEOUT_S",
    "Moves",
    "check_timeout",
    "is_demoted",
    "is_moving",
    "scan_plan",
]

DEFAULT_SLOT_MOVE_TIMEOUT_S = 5.0
_FIRST_S = 0.01
_MAX_S = 0.2


def is_moving(error: object) -> bool:
    """Whether ``error`` says the command met a slot in motion, and did not run."""
    if isinstance(error, (TryAgainError, AskError)):  # MovedError is an AskError
        return True
    # what redis-py raises once its own TRYAGAIN (or MOVED ping-pong) retries run out
    return isinstance(error, ClusterError) and "TTL exhausted" in str(error)


def is_demoted(error: object) -> bool:
    """Whether ``error`` ended a blocking command (``WAIT``, ``XREAD BLOCK``) because its node
    stopped being a primary: a failover. The command is sent again where the slot is now."""
    return isinstance(error, ResponseError) and "instance state changed" in str(error)


def check_timeout(value: object) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise InvalidInputError(
            f"slot_move_timeout_s={value!r}: give the seconds (>= 0) a command keeps retrying "
            f"while its cluster slot migrates or fails over"
        )
    return float(value)


class Moves:
    """The retries of one command across a slot move: a growing pause, within a deadline."""

    def __init__(
        self, timeout_s: float, what: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_s = timeout_s
        self.what = what
        self.clock = clock
        self.deadline: float | None = None
        self.pause = _FIRST_S
        self.redirects = 0

    def wait(self, error: BaseException, key: str | None = None) -> float:
        """Seconds to wait before sending again after ``error`` (0 after ``MOVED``/``ASK``:
        the next node is known); ``SlotMovingError`` once the deadline is past."""
        now = self.clock()
        if self.deadline is None:
            self.deadline = now + self.timeout_s
        if now >= self.deadline:
            raise SlotMovingError(_message(self.what, key, self.timeout_s, error)) from error
        if isinstance(error, AskError) and self.redirects < 2:  # MovedError is an AskError
            self.redirects += 1
            return 0.0
        pause = min(self.pause, self.deadline - now)
        self.pause = min(self.pause * 2, _MAX_S)
        return pause

    def after_lost(self, exc: BaseException, cluster: bool) -> float:
        """Seconds to wait before sending again after a cluster command's connection was lost
        (its primary failing over, or the client closing every connection on another task's
        error, ``lost_connection``): the shell then learns the layout again and resends,
        which is safe since every streamsaver write is idempotent. ``exc`` itself if it is no
        lost connection; ``ServerUnavailableError`` (or the timeout's) on a standalone server,
        whose client has resent under its own retry policy already, or once the deadline is
        past: not a slot in motion, a server gone."""
        gone = lost_connection(exc)
        if gone is None:
            raise exc
        if not cluster:
            raise unavailable(gone) from exc
        try:
            return self.wait(gone)
        except SlotMovingError:
            raise unavailable(gone) from exc


def _message(what: str, key: str | None, timeout_s: float, error: BaseException) -> str:
    where = ""
    if key is not None:
        where = f" on slot {key_slot(key.encode())} (key {key!r})"
    return (
        f"{what}{where} kept meeting a slot in motion for {timeout_s:g} s ({error}): a "
        f"resharding or failover did not settle. Finish or fix it (redis-cli --cluster fix "
        f"<host:port>; CLUSTER SETSLOT <slot> STABLE on a slot left MIGRATING/IMPORTING), or "
        f"raise slot_move_timeout_s"
    )


def scan_plan(views: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], Hashable]:
    """Which primaries a SCAN of every key visits, in what order, and the layout it assumes.

    ``views``: each primary's ``CLUSTER NODES`` as redis-py parses it. SCAN is per node, and
    MIGRATE takes keys from a slot's source to its target only: visiting every source before
    its target finds each key once at least, wherever it is when visited. A layout that differs
    after the scan (a slot moved or began to, a failover) means keys may have gone past it,
    and the scan is run again."""
    me: dict[str, Mapping[str, Any]] = {}
    ids: dict[str, str] = {}
    masters: set[str] = set()
    for asked, view in views.items():
        for listed, node in view.items():
            flags = node["flags"].split(",")
            # a node may list itself without its host (":port"): the name it was asked by is
            # the one the client knows it by
            address = asked if "myself" in flags else listed
            ids[node["node_id"]] = address
            if "myself" in flags:
                me[address] = node
            # what any node calls a primary: after a failover the client may still ask the
            # demoted one (a replica now answers SCAN with the same keys), not the promoted
            if "master" in flags and "fail" not in flags:
                masters.add(address)
    primaries = sorted(masters)
    before: dict[str, set[str]] = {a: set() for a in primaries}  # target: its sources
    for address, node in me.items():
        for move in node["migrations"]:
            target = ids.get(move["node_id"])
            if move["state"] == "migrating" and target in before and address in before:
                before[target].add(address)
    order: list[str] = []
    while len(order) < len(primaries):
        ready = [a for a in primaries if a not in order and before[a] <= set(order)]
        if not ready:
            # slots moving both ways between nodes at once: visiting every node twice puts
            # each source before each target
            order = primaries + primaries
            break
        order.append(ready[0])
    layout = frozenset(
        (
            address,
            node["flags"],
            tuple(map(tuple, node["slots"])),
            tuple((m["slot"], m["node_id"], m["state"]) for m in node["migrations"]),
        )
        for address, node in me.items()
    )
    return order, layout
