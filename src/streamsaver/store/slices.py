"""The Store's rebuild and verify in slices (lua/store/store_slice.lua): one script over a bucket's
whole log held the server for as long as the log was long, and Redis runs one script at a
time, so one tenant's big store stalled every other tenant. Each call here does at
most ``slice_ms`` of server time on one bucket's work, then pauses (``Pace``); the buckets go
in rounds that share a slice, as a thread rebuild's threads do."""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Sequence

from ..core.errors import InvalidUsageError
from ..core.flow import Each, Eval, Flow, Pace
from ..core.keys import StoreKeys, store_slice_keys
from ..core.replies import as_text
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE, Replay, round_width

__all__ = ["store_slices"]

# times another run of the same operation on a bucket may take it over before this one gives up
_RESTARTS = 3
# the lines kept per bucket of each kind a replay gives (an event skipped, a reference broken)
_REPLAY_LINES = 100
_COMPARED = ("mix ", "mitem ", "mns ", "mexp ", "mvec ", "mnsz ", "mv ")


def store_slices(
    buckets: Sequence[int],
    keys: Sequence[StoreKeys],
    mode: str,
    dims: str = "",
    slice_ms: float = DEFAULT_SLICE_MS,
    slice_pause: float = DEFAULT_SLICE_PAUSE,
) -> Flow[dict[int, Replay]]:
    """Run ``mode`` ('rebuild' or 'verify') over each bucket of ``buckets`` (``keys`` holds
    every bucket's keys) to its end: per bucket, the events applied and skipped and the lines
    (store/store_slice.lua's), each once. ``dims``: a rebuild that starts keeping the vector index's
    documents (the store's setup)."""
    token, pace = secrets.token_hex(8), Pace(slice_pause)
    width = round_width(slice_ms)
    todo = builtins.list(buckets)
    started: set[int] = set()
    restarts = dict.fromkeys(todo, 0)
    counts = {b: [0, 0] for b in todo}
    lines = {b: _Lines() for b in todo}
    while todo:
        pending = todo[:width]
        budget = f"{slice_ms / len(pending):g}"
        replies = yield Each(
            tuple(
                Eval(
                    "store_slice",
                    store_slice_keys(keys[b], mode),
                    (mode, token, "" if b in started else "start", budget, dims),
                    write=True,
                )
                for b in pending
            )
        )
        yield from pace.rest()
        for b, reply in zip(pending, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            state, fresh, applied, skipped, *found = reply
            if int(fresh) and b in started:
                # another run of this operation took the bucket over (or its state expired):
                # what this one gathered is void
                restarts[b] += 1
                if restarts[b] > _RESTARTS:
                    raise InvalidUsageError(
                        f"the store's {mode} of bucket {b} was taken over {_RESTARTS} times by "
                        f"another {mode} of the same store; run one at a time"
                    )
                counts[b], lines[b] = [0, 0], _Lines()
            started.add(b)
            counts[b][0] += int(applied)
            counts[b][1] += int(skipped)
            lines[b].add([as_text(x) for x in found])
            if as_text(state) == "done":
                todo.remove(b)
    return {b: Replay(counts[b][0], counts[b][1], builtins.list(lines[b].kept)) for b in buckets}


class _Lines:
    """A bucket's lines, each once, in order: every comparison's, and at most _REPLAY_LINES of
    the events skipped and of the references broken."""

    def __init__(self) -> None:
        self.kept: dict[str, None] = {}
        self.room = {"ref": _REPLAY_LINES, "skipped": _REPLAY_LINES, "compared": -1}

    def add(self, found: builtins.list[str]) -> None:
        for line in found:
            if line.startswith(_COMPARED):
                kind = "compared"
            else:
                kind = "ref" if line.startswith("ref ") else "skipped"
            if line not in self.kept and self.room[kind] != 0:
                self.kept[line] = None
                self.room[kind] -= 1
