"""Compaction (``Compaction``): a thread's log rewritten to the checkpoints it keeps, in slices
beside the live log and swapped in whole. ``compact`` is what ``prune(keep_latest)`` and a put
past ``keep_last`` run; ``delete_for_runs`` runs the same slices without the runs' checkpoints.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from redis.exceptions import OutOfMemoryError

from ..core.flow import Call, Each, Eval, Flow, Pace
from ..core.keys import compact_keys
from ..core.replies import as_text
from .state import SLICE_RESTARTS, TAIL_BUDGET_MOST, TAIL_CALLS_MOST, State

__all__ = ["Compaction"]


class Compaction(State):
    """``compact`` and the slices it and ``delete_for_runs`` run."""

    def compact(self, thread_id: str, keep: int) -> Flow[int]:
        """Compact a thread to its last ``keep`` checkpoints per namespace (0: every live one)
        in slices (lua/checkpoint/compact_slice.lua), each at most ``slice_events`` units of work or
        ``slice_ms`` of server time: the new log is built beside the live one while writers go
        on, and swapped in whole by the last slice. Returns the entries removed."""
        reply = yield from self._compaction(thread_id, keep)
        if reply is None:
            # the copies take memory before the old log is freed: on a full server, one
            # script, which frees first (lua/checkpoint/compact.lua)
            whole = (*self._appending_args(), keep)
            return int(
                (yield Eval("prune", self.appending(self.keys(thread_id)), whole, write=True))
            )
        return int(reply[0])

    def _compaction(self, thread_id: str, keep: int, deleting: tuple[str, ...] = ()) -> Flow[Any]:
        """compact()'s slices; ``deleting``: delete_for_runs' arguments
        (lua/checkpoint/compact_slice.lua). Returns (entries removed, checkpoints deleted), a
        refusal, or None when the server is out of memory or others kept rewriting the log
        under the slices: the caller then runs one script (which frees first)."""
        keys = self.keys(thread_id)
        scratch = compact_keys(keys)
        token, pace = secrets.token_hex(8), Pace(self.slice_pause)
        start, restarts = True, 0
        # the tail's catching up (state.py's TAIL_BUDGET_MOST): this call's budget, the calls
        # that did not gain on the writers, and how far behind the last tail call ended (ms)
        budget, behind, lag = self.slice_ms, 0, -1
        while restarts <= SLICE_RESTARTS and behind <= TAIL_CALLS_MOST:
            args = (*self._appending_args(), keep, token, "start" if start else "")
            op = Eval(
                "compact_slice",
                (*self.appending(keys), *scratch),
                (*args, self.slice_events, f"{budget:g}", *deleting),
                write=True,
            )
            if start:
                # pipelined, so a refusal is a value: the first slice, one unit of work, is the
                # first to write, and never the last (lua/checkpoint/compact_slice.lua)
                (reply,) = yield from self._slice(Each((op,)), pace)
            elif budget > self.slice_ms:
                # behind a writer: at once, as every pause lets it append more
                reply = yield op
                pace.since = time.perf_counter()
            else:
                # alone, so a durability mode waits after it: the swap is acknowledged as any write
                # is
                reply = yield from self._slice(op, pace)
            if _out_of_memory(reply):
                break
            if isinstance(reply, Exception):
                raise reply
            if reply[0] == b"oom":
                break
            if reply[0] == b"delta":
                return reply
            state, fresh, removed, deleted, *more = reply
            if int(fresh) and not start:
                # another compaction or a deletion rewrote the log under the slices
                restarts += 1
            start = False
            if as_text(state) == "done":
                return int(removed), int(deleted)
            if len(more) == 2 and more[0] == b"tail" and int(fresh) == 0:
                now = int(more[1])
                if lag >= 0 and now >= lag:
                    behind += 1
                    budget = min(budget * 2, self.slice_ms * TAIL_BUDGET_MOST)
                lag = now
            else:
                budget, lag = self.slice_ms, -1
        # as before slices existed, rather than never finishing
        yield Call(("UNLINK", *scratch), write=True)
        return None


def _out_of_memory(reply: object) -> bool:
    # Redis 6.2 reports a script's OOM as a plain error
    return isinstance(reply, OutOfMemoryError) or (
        isinstance(reply, Exception) and "maxmemory" in str(reply)
    )
