"""What "step" means wherever an event is shown (the command line's lines and ``--json``, the
console's pages and live streams): a checkpoint's metadata step; for a writes event, the step
of the checkpoint it belongs to, the one its task ran from, as LangGraph's ``StateSnapshot``
lists a step's tasks with their writes. A writes event holds no step of its own, so a reader
knows it once it has seen that checkpoint, and shows none (``-``, ``null``) before. I/O-free."""

from __future__ import annotations

from cachetools import LRUCache

from ..events import ThreadEvent

__all__ = ["StepMemory"]

# checkpoints remembered by a long-running reader (the console's hub follows every thread): a
# writes event comes right after its checkpoint, so the newest few thousand are plenty
_REMEMBERED = 10_000


class StepMemory:
    """The step of each event a reader shows, in the order it reads them."""

    def __init__(self, most: int = _REMEMBERED) -> None:
        self._steps: LRUCache[tuple[str, str, str], int] = LRUCache(most)

    def step(self, event: ThreadEvent) -> int | None:
        key = (event.thread_id, event.checkpoint_ns, event.checkpoint_id or "")
        if event.kind == "checkpoint":
            step = event.step
            if step is not None:
                self._steps[key] = step
            return step
        if event.kind == "writes":
            return self._steps.get(key)
        return None

    def missing(self, event: ThreadEvent) -> bool:
        """A writes event whose checkpoint this reader has not seen (it came before the reader
        started): a reader that can look the checkpoint up then ``learn``s its step."""
        key = (event.thread_id, event.checkpoint_ns, event.checkpoint_id or "")
        return event.kind == "writes" and bool(event.checkpoint_id) and key not in self._steps

    def learn(self, event: ThreadEvent, metadata: object) -> None:
        """The step of ``event``'s checkpoint, from that checkpoint's metadata."""
        step = metadata.get("step") if isinstance(metadata, dict) else None
        if isinstance(step, int) and not isinstance(step, bool):
            self._steps[(event.thread_id, event.checkpoint_ns, event.checkpoint_id or "")] = step
