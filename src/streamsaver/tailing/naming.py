"""A reader names the node of a Send's writes its writer could not name (core/nodes.py).

The writer names it from the checkpoint it put or read, but LangGraph saves a step's writes
concurrently with the step's checkpoint: a Send's writes may be saved before the checkpoint
whose packets say where it was sent, and come before it in the log. A reader that meets the
checkpoint event (before the writes, or after them in the same read) names them from its
``sends``. Events written before checkpoints recorded their sends stay unnamed (``Send #i``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

from ..core.nodes import Key, SendTargets, send_index, send_target
from ..events import SkippedEvent, ThreadEvent

__all__ = ["Namer", "name_batch"]

C = TypeVar("C")
Item = ThreadEvent | SkippedEvent

# checkpoints a reader remembers: a Send's writes belong to one of the latest few of a thread
SEEN = 4096


def _key(event: ThreadEvent) -> Key:
    return event.thread_id, event.checkpoint_ns, event.checkpoint_id or ""


def _learn(targets: SendTargets, item: Item) -> None:
    if isinstance(item, ThreadEvent) and item.kind == "checkpoint" and item.checkpoint_id:
        targets.learn(_key(item), item.sends)


def _named(targets: SendTargets, item: Item) -> Item | None:
    """``item``, named if it is a Send's writes whose checkpoint was seen; None if it is one
    whose checkpoint was not seen (yet)."""
    if not (isinstance(item, ThreadEvent) and item.kind == "writes" and item.sent_to is None):
        return item
    index = send_index(item.task_path or "")
    if index is None:
        return item
    sends = targets.get(_key(item))
    if sends is None:
        return None
    node = send_target(sends, index)
    return item.model_copy(update={"sent_to": node}) if node else item


def name_batch(targets: SendTargets, items: Iterable[tuple[Item, C]]) -> list[tuple[Item, C]]:
    """One read's events, in order, named from ``targets`` and the read's own checkpoints: a
    live reader hands an event over with what it knows once it has it."""
    batch = list(items)
    for item, _ in batch:
        _learn(targets, item)
    return [(_named(targets, item) or item, carry) for item, carry in batch]


class Namer(Generic[C]):
    """For a reader of a whole log in order (history, an audit export): holds back, in order,
    the events from the first Send's writes whose checkpoint it has not read yet until it
    reads it, or ``hold`` events later (a checkpoint that never came), or ``flush()``."""

    def __init__(self, hold: int = 256) -> None:
        self.hold = hold
        self.targets = SendTargets(SEEN)
        self._held: deque[tuple[Item, C]] = deque()

    def add(self, item: Item, carry: C) -> list[tuple[Item, C]]:
        """Take the next event; give back those ready, in order."""
        _learn(self.targets, item)
        self._held.append((item, carry))
        return self._release(everything=False)

    def flush(self) -> list[tuple[Item, C]]:
        """The events held, named where their checkpoint was read: the log ended."""
        return self._release(everything=True)

    def _release(self, everything: bool) -> list[tuple[Item, C]]:
        held, out = self._held, []
        while held:
            item, carry = held[0]
            named = _named(self.targets, item)
            if named is None:
                if not everything and len(held) <= self.hold:
                    break
                named = item
            held.popleft()
            out.append((named, carry))
        return out
