"""What every saver operation shares (``State``, the base of ``checkpoint.ops.Operations``):
the options the savers set, a thread's keys, the arguments of every script that appends, a long
operation's slice and pause, and the threads a cross-thread operation looks at.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.chain import written_digest
from ..core.codec import Codec, Field
from ..core.delta import DeltaCache
from ..core.durability import Durability
from ..core.feeds import DEFAULT_FEED_MAXLEN, feed_of_log
from ..core.flow import Call, Each, Eval, Flow, Pace
from ..core.keys import ThreadKeys, thread_keys
from ..core.nodes import SendTargets
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE
from .projections import threads_by_slot

if TYPE_CHECKING:
    from .projections import Projections

__all__ = ["SLICE_RESTARTS", "TAIL_BUDGET_MOST", "TAIL_CALLS_MOST", "State"]

# slices of a long operation that found its log rewritten under it before it gives up slicing
SLICE_RESTARTS = 3
# A compaction's last phase copies what writers appended since its first slice (its tail), and
# swaps the new log in once it has caught up. Paced slices copy a few events each (~40 us an
# event here), so a writer appending a few thousand events a second stays ahead for good. A
# tail call that did not gain on the writers is followed by the next at once, without the pause,
# with twice the last one's budget, up to TAIL_BUDGET_MOST times slice_ms: while a script runs
# no writer appends, so each call gains more than the writers add in the round trip between.
# After TAIL_CALLS_MOST such calls still behind, the compaction gives up slicing and finishes in
# one script (lua/checkpoint/compact.lua), as after SLICE_RESTARTS rewrites (docs/retention.md).
TAIL_BUDGET_MOST = 4
TAIL_CALLS_MOST = 200


class State:
    """The options and helpers every operation reads; the mixins of ``Operations`` extend it."""

    def __init__(
        self,
        prefix: str,
        codec: Codec,
        cache: DeltaCache | None = None,
        durability: Durability | None = None,
    ) -> None:
        self.prefix = prefix
        self.codec = codec
        self.durability = durability or Durability("none", 1, 1)
        # None stores every value whole
        self.cache = cache
        # the Send targets of the checkpoints this process put or read, to name the node on
        # their Sends' writes (core/nodes.py)
        self.sends = SendTargets()

    # pointers kept per feed (approximate MAXLEN); 0 announces nothing (see core/feeds.py)
    feed_maxlen: int = DEFAULT_FEED_MAXLEN
    # refuse a loop/input checkpoint whose parent is not its namespace's latest (opt-in)
    fencing: bool = False
    # a thread expires this long after its last write; 0: never (see checkpoint/base.py)
    ttl_ms: int = 0
    # how long a deleted thread's record (its deletion's audit record, and what refuses its
    # deleted history) stays, if the id is not used again; 0: until it is (docs/retention.md)
    audit_retention_ms: int = 7 * 24 * 3600 * 1000
    # checkpoints kept per namespace, compacted as puts go (lua/checkpoint/append.lua); 0: all
    keep_last: int = 0
    # give every appended event its digests (lua/shared/common.lua, docs/audit.md)
    chain: bool = True
    # where list(None) and delete_for_runs find candidate threads; None: every indexed thread
    projections: Projections | None = None
    # a long operation's slice (lua/checkpoint/replay_slice.lua): at most this many events, and
    # it stops once this many ms of server time have gone, so other tenants wait no longer
    # than that
    slice_events: int = 20000
    slice_ms: float = DEFAULT_SLICE_MS
    # after each slice the operation waits this many times as long as it was busy since its
    # last pause, its own Python included (core.flow.Pace): it then holds the server, and on a
    # small machine a core, at most 1 / (1 + slice_pause) of the time
    slice_pause: float = DEFAULT_SLICE_PAUSE
    # neither was given (the saver's slice_ms and slice_pause left None): the pace adapts to
    # whether other clients are being served (core.flow.Pace)
    pace_adapts: bool = True
    # accept a server whose maxmemory-policy may evict the saver's keys (see setup)
    allow_eviction: bool = False
    # ask CONFIG GET for RDB save points (the shells say no for a named ACL user:
    # checkpoint/base.py)
    read_config: bool = True

    def appending(self, keys: ThreadKeys) -> tuple[str, ...]:
        """Keys of a script that appends to a thread: its three and its slot's feed. Only keys
        that exist while the thread does: a script naming a key absent from a slot being
        migrated is refused (TRYAGAIN) on Redis Cluster."""
        return (*keys, feed_of_log(self.prefix, keys.log))

    @property
    def _append(self) -> str:
        return "append_compacting" if self.keep_last else "append"

    def _appending_args(self) -> tuple[int, str]:
        """The first two arguments of every script that appends (lua/shared/common.lua)."""
        return self.feed_maxlen, "chain" if self.chain else ""

    def _append_args(self, bases: Field, fields: Sequence[Field]) -> tuple[Field | int, ...]:
        fence = "fence" if self.fencing else ""
        # sent as the bytes digested, whatever encoding a user's client would give a str
        raw = [f.encode() if isinstance(f, str) else f for f in fields]
        # the event's ch, so the server only links it (lua/shared/common.lua's append_event())
        chain = f"chain {written_digest(raw)}" if self.chain else ""
        return (self.feed_maxlen, chain, bases, fence, self.ttl_ms, self.keep_last, *raw)

    def keys(self, thread_id: str) -> ThreadKeys:
        return thread_keys(self.prefix, thread_id)

    def _pace(self) -> Pace:
        """A long operation's pace: adaptive unless slice_ms or slice_pause was given (or set
        since), or on a cluster, where no one server's INFO speaks for every slice's node."""
        cluster = self.projections is not None and self.projections.cluster
        given = (self.slice_ms, self.slice_pause) != (DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE)
        adapts = self.pace_adapts and not given and not cluster
        return Pace(self.slice_pause, self.slice_ms, adapts=adapts)

    def _slice(self, op: Eval | Each, pace: Pace) -> Flow[Any]:
        """One slice of a long operation, then ``pace``'s pause."""
        return (yield from pace.run(op))

    def _threads_for(self, query: tuple[Field, ...]) -> Flow[list[str]]:
        """The threads a cross-thread read looks at, sorted: the projector's candidates
        (checkpoint/projections.py), or every log when they cannot be used. A saver that announces
        nothing (feed_maxlen 0) cannot trust feeds to name every thread: it reads the slots'
        thread indexes."""
        if self.projections is not None and self.feed_maxlen > 0:
            found = yield from self.projections.candidates(query)
            if found is not None:
                return found
        return (yield from self.threads())

    def threads(self, deleted: bool = False) -> Flow[list[str]]:
        """Every thread with a log, from the slots' thread indexes; ``deleted``: also those
        whose log holds only their deletion (lua/checkpoint/delete_thread.lua) until it expires
        or the id is used again."""
        slots = None
        if self.projections is not None and self.projections.cluster and self.feed_maxlen > 0:
            # every append writes the feed and the index of its slot together: on a cluster,
            # where each slot costs a call, only slots with a feed can hold indexed threads
            slots = yield from self.projections.feed_slots()
        cluster = self.projections is not None and self.projections.cluster
        by_slot = yield from threads_by_slot(self.prefix, cluster, slots)
        ids = sorted({t for ts in by_slot.values() for t in ts})
        if deleted or not ids:
            return ids
        marks = yield Each(tuple(Call(("HEXISTS", self.keys(t).ptr, "d")) for t in ids))
        return [t for t, d in zip(ids, marks, strict=True) if d != 1]
