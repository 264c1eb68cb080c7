"""How long operations (rebuild, verify, compaction, a seed, the Store's scans) share the server:
each holds it for about one slice, then pauses. The defaults and the arithmetic, once. No I/O."""

from __future__ import annotations

import builtins
from typing import NamedTuple

__all__ = [
    "DEFAULT_SLICE_MS",
    "DEFAULT_SLICE_PAUSE",
    "MOST_SLICE_MS",
    "QUIET_S",
    "Replay",
    "round_width",
]


# the least budget one thread's replay_slice gets when a round's slice is shared: below it a
# call's fixed cost (its entry, its state read and saved) is most of the call (benchmarks.rebuild,
# 500 threads of 100 events: 5 threads sharing 0.25 ms rebuilt 2,457 events/s, one thread with
# all of it 5,696); at the default slice_ms a round is one thread
_ROUND_SHARE_MS = 0.25


# a long operation's slices by default (Operations.slice_ms, slice_pause; docs/benchmarks.md,
# "Other tenants while one runs long operations", has the measurements behind them)
DEFAULT_SLICE_MS = 0.25


DEFAULT_SLICE_PAUSE = 1.0


# Unless the caller gives slice_ms or slice_pause, the pace adapts (core.flow.Pace): those
# defaults while other clients are being served, no pause and budgets doubling up to this many ms
# while nobody else is (a client arriving meanwhile waits one such slice at most). 2 ms was the
# fixed default once: a slice's fixed cost (a call, a round trip, its state read and saved) is
# then a few percent of it, so a check on an idle server runs near one script's speed
MOST_SLICE_MS = 2.0
# and back to the defaults from the moment another client is seen until nobody has been for
# this long, so a tenant that calls a few times a second meets the short slices every time
QUIET_S = 0.5


class Replay(NamedTuple):
    """What a rebuild did: events re-projected, events skipped, and why (first 100)."""

    applied: int
    skipped: int
    problems: builtins.list[str]


def round_width(slice_ms: float) -> int:
    """How many calls one round of a sliced operation (rebuild_many's threads, a seed's slots)
    shares its slice among: Redis runs a pipeline's calls back to back, as one, so a round gets
    one slice's budget, split among as many calls as it can pay _ROUND_SHARE_MS each for."""
    return max(1, int(slice_ms / _ROUND_SHARE_MS))
