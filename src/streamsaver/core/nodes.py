"""Which graph node a task ran, from what LangGraph gives a checkpointer. No I/O.

A pull task's path names its node (``"~__pregel_pull, agent"``). A Send's task (a tool call of
a ReAct agent, a map step) has the path ``"~__pregel_push, <i>, False"``: ``i`` indexes the
packets in the ``__pregel_tasks`` channel of the checkpoint its writes belong to, and each
packet is a ``Send`` naming its node. So a checkpoint event records those nodes in order (its
``sends`` field), and a writer that holds the checkpoint names the node on its Sends' writes
(their ``node`` field); a reader names the rest from the checkpoint events it reads
(``tailing.naming``). A functional-API task call (``"~__pregel_push, <caller's path>, <i>,
True"``) is the caller's i-th call: its function's name reaches no checkpointer.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "NULL_TASK_ID",
    "RESUME",
    "Origin",
    "SendTargets",
    "origin",
    "send_index",
    "send_target",
    "send_targets",
]

# LangGraph's names (langgraph._internal._constants), fixed by its checkpoint format
PULL = "__pregel_pull"
PUSH = "__pregel_push"
TASKS = "__pregel_tasks"
RESUME = "__resume__"
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
_TRUE = ("0000000001", "True")  # how task_path_str() writes a path's trailing flag
_FALSE = ("0000000000", "False")
_HANDLER = "node_error_handler"


def _path_parts(task_path: str | None) -> list[str]:
    """ "~__pregel_pull, agent" -> ["__pregel_pull", "agent"]; nested paths (a call's caller)
    are flattened; older LangGraph wrote tuples."""
    if not task_path:
        return []
    return [p.strip().strip("'\"()~ ") for p in task_path.split(",")]


@dataclass(frozen=True, slots=True)
class Origin:
    """What a task path says of its task: ``pull`` (``name`` is its node), ``send`` (the
    ``index``-th packet of its checkpoint), ``call`` (the caller's ``index``-th call; ``name``
    is the caller's node when the caller is a pull task), or ``""`` (no path, or unknown).
    ``handler``: the task is the error handler of that task (its own node, the one
    ``add_node(error_handler=...)`` or the graph's default gave, is not in the path)."""

    kind: Literal["pull", "send", "call", ""]
    name: str | None = None
    index: int | None = None
    handler: bool = False


_UNKNOWN = Origin("")


def origin(task_path: str | None) -> Origin:
    parts = _path_parts(task_path)
    # an error handler: (*the failed task's path, "node_error_handler", False)
    handler = len(parts) >= 4 and parts[-2] == _HANDLER and parts[-1] in _FALSE
    if handler:
        parts = parts[:-2]
    if not parts:
        return _UNKNOWN
    if parts[0] != PUSH:
        return Origin("pull", parts[-1] or None, None, handler)
    # a Send: (PUSH, index, False); LangGraph before 0.3 wrote (PUSH, index)
    if len(parts) in (2, 3) and parts[1].isdigit() and (len(parts) == 2 or parts[2] in _FALSE):
        return Origin("send", None, int(parts[1]), handler)
    # a call: (PUSH, the caller's path, index, True)
    if len(parts) >= 4 and parts[-1] in _TRUE and parts[-2].isdigit():
        caller = parts[2] if parts[1] == PULL and len(parts) == 5 else None
        return Origin("call", caller or None, int(parts[-2]), handler)
    return _UNKNOWN


def send_index(task_path: str) -> int | None:
    """The packet index a Send's task path (or its error handler's) holds; None for any other
    task (cheaply: a writer asks on every put_writes)."""
    if PUSH not in task_path:
        return None
    found = origin(task_path)
    return found.index if found.kind == "send" else None


def send_targets(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The node each pending packet of a checkpoint's channel values goes to, in order ("" for
    a packet that is not a ``Send``: LangGraph skips it, its index stays taken)."""
    packets = values.get(TASKS)
    if not isinstance(packets, list) or not packets:
        return ()
    # here, not at the top: langgraph.types costs ~1 s to import (langchain_core's tracers), and
    # the command line reads events without it; a put that reaches this line has it loaded
    from langgraph.types import Send

    return tuple(p.node if isinstance(p, Send) and _storable(p.node) else "" for p in packets)


def _storable(name: object) -> bool:
    """A name UTF-8 can store (a lone surrogate cannot): a node name is a label here, so one
    that is not is left unnamed rather than refusing the put."""
    if not isinstance(name, str):
        return False
    if name.isascii():
        return True
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def send_target(sends: tuple[str, ...], index: int) -> str | None:
    return (sends[index] or None) if 0 <= index < len(sends) else None


Key = tuple[str, str, str]
"""(thread id, namespace, checkpoint id)"""


class SendTargets:
    """The ``send_targets`` of the checkpoints seen last, at most ``size`` of them: writes
    continue a recent checkpoint, so a small memo names them all."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._known: dict[Key, tuple[str, ...]] = {}
        # a sync saver is called from LangGraph's worker threads
        self._lock = threading.Lock()

    def learn(self, key: Key, sends: tuple[str, ...]) -> None:
        with self._lock:
            known = self._known
            known.pop(key, None)
            known[key] = sends
            if len(known) > self.size:
                del known[next(iter(known))]

    def get(self, key: Key) -> tuple[str, ...] | None:
        """The checkpoint's targets; None if it was not seen (or was forgotten)."""
        return self._known.get(key)
