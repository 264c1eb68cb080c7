"""The projector's keyspace and operations: cross-thread projections, kept per cluster slot. No I/O.

Each Redis Cluster slot that holds threads has, beside its feed (``core/feeds.py``), five derived
keys in that same slot, so every projector script is one single-slot script:

- ``<prefix>:{<slot tag>}:projector`` hash: ``cursor``, the last feed entry applied, ``applied``
  and ``at`` (ms);
- ``<prefix>:{<slot tag>}:registry`` hash, thread id -> its row (latest root checkpoint, step,
  last activity, waiting on an interrupt) and ``<prefix>:{<slot tag>}:activity``, the threads
  scored by last activity;
- ``<prefix>:{<slot tag>}:runs`` and ``<prefix>:{<slot tag>}:meta``: which threads hold run X,
  which hold metadata key K = V (candidates for ``delete_for_runs`` and ``list(None, filter)``).

``lua/projector/project.lua`` applies a batch of one feed's entries and moves the cursor in one
script;
``lua/projector/seed.lua`` builds a slot from its threads' logs (first start, ``rebuild --all``).
Readers
never wait on the projector: they take a slot's projections together with the threads its feed
names after the cursor, and scan the logs when a slot has no cursor or its feed was trimmed
past it (``lua/projector/registry.lua``).
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, NamedTuple

import ormsgpack

from ..core.feeds import SEED_KINDS, feed_key, slot_key, threads_key
from ..core.flow import Call, Each, Eval, Flow, Pace
from ..core.keys import thread_keys
from ..core.replies import as_text
from ..core.slicing import DEFAULT_SLICE_MS, round_width
from ..core.slots import SLOTS
from ..events import ProjectorLag, SlotLag, ThreadInfo
from ..tailing.decode import entries, streams
from ..tailing.steps import feed_probes, sweep_slice

__all__ = ["Applied", "Projections", "SlotKeys", "slot_keys", "threads_by_slot"]

# threads named in one seed slice's call: a slot may hold any number
_SEED_THREADS = 100
_LAG_CAP = 100_000


class SlotKeys(NamedTuple):
    feed: str
    state: str
    registry: str
    activity: str
    runs: str
    meta: str


@cache
def slot_keys(prefix: str, slot: int) -> SlotKeys:
    return SlotKeys(
        feed_key(prefix, slot),
        *(
            slot_key(prefix, slot, name)
            for name in ("projector", "registry", "activity", "runs", "meta")
        ),
    )


class _Seed:
    """One slot's seed in slices (lua/projector/seed.lua): where its calls have got to."""

    def __init__(self, slot: int, cursor: str, threads: Sequence[str], unseeded: bool) -> None:
        self.slot, self.cursor, self.threads, self.unseeded = slot, cursor, threads, unseeded
        self.token, self.at, self.place, self.first = secrets.token_hex(8), 0, "", True

    def call(self, prefix: str, budget: str) -> Eval:
        chunk = self.threads[self.at : self.at + _SEED_THREADS]
        last = self.at + len(chunk) >= len(self.threads)
        flags = ("s" if self.first else "") + ("l" if last else "")
        flags += "u" if self.first and self.unseeded else ""
        args = (prefix, self.cursor, self.token, flags, budget, self.place, *chunk)
        return Eval("seed", seed_keys(prefix, self.slot), args, write=True)

    def went_on(self, finished: int, place: str) -> None:
        self.at, self.place, self.first = self.at + finished, place, False


def seed_keys(prefix: str, slot: int) -> tuple[str, ...]:
    """lua/projector/seed.lua's keys: the slot's (``SlotKeys``), then its seed's scratch keys and
    state."""
    return (*slot_keys(prefix, slot), *(slot_key(prefix, slot, kind) for kind in SEED_KINDS))


class Applied(NamedTuple):
    """What one projector/project.lua call did: ``status`` is ``ok``, or ``behind`` (the slot needs
    a
    seed), or ``reseed`` (it needs one to recompute ``thread``, whose long log was rewritten),
    or ``seeding`` (a seed of it is under way: nothing applied);
    ``unknown`` lists "<feed id> <kind>" of kinds this version lacks."""

    status: str
    applied: int = 0
    cursor: str = ""
    more: bool = False
    unknown: tuple[str, ...] = ()
    thread: str = ""


def _ok(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def _info(thread_id: str, row: bytes) -> ThreadInfo:
    checkpoint_id, step, ms, waiting = ormsgpack.unpackb(row)
    return ThreadInfo(
        thread_id=thread_id,
        checkpoint_id=checkpoint_id or None,
        step=int(step) if step else None,
        last_activity_ms=int(ms),
        interrupted=bool(waiting),
    )


def _usable(replies: Sequence[Any]) -> builtins.list[Any] | None:
    """The slots' answers (each less its status), or None when the readers must scan: a slot
    is unusable, or no slot was ever seeded (no projector ever ran)."""
    statuses = [as_text(_ok(r)[0]) for r in replies]
    if "fallback" in statuses or "ok" not in statuses:
        return None
    return [r[1:] for r in replies]


def _order(info: ThreadInfo) -> tuple[int, bytes]:
    return -info.last_activity_ms, info.thread_id.encode()


class Projections:
    """The projector's operations and the readers' use of its projections, as flows of
    ``checkpoint.ops`` operations (driven by the sync and async savers)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        # a cluster probes its feeds one EXISTS per slot (a command may not span slots)
        self.cluster = False
        # ignore the projections: cross-thread reads scan the logs (tests compare both paths)
        self.scan_only = False
        self._known: set[int] = set()
        self._probed = False  # every slot probed once
        self._sweep = 0  # the first slot of the next slice a periodic probe names

    def keys(self, slot: int) -> SlotKeys:
        return slot_keys(self.prefix, slot)

    def feed_slots(self, fresh: bool = True) -> Flow[builtins.list[int]]:
        """The slots whose feed exists, found by probing their names, never by SCAN. Feeds
        are not deleted, so only the slots not seen yet are probed again: all of them when
        ``fresh`` (a listing must see a thread another process just started in a slot new to
        it), else one slice of ``SLOTS / SWEEP_SLICES``, the next one each call (the
        projector's periodic work: its group wakes it for a new feed anyway). The first call
        probes every slot either way.

        On a cluster a probe is one EXISTS per slot (a command may not span slots), through
        the client's cluster pipeline: a third of a second for 16384 names, more after a
        failover, while each name that met a moved slot is sent again on its own. Probing all
        of them on every periodic call kept a projector doing little else."""
        if fresh or not self._probed:
            candidates: Iterable[int] = range(SLOTS)
        else:
            candidates, self._sweep = sweep_slice(self._sweep)
        unknown = [s for s in candidates if s not in self._known]
        names = [feed_key(self.prefix, s) for s in unknown]
        if not names:
            found: builtins.list[int] = []
        elif self.cluster:
            replies = yield Each(tuple(Call(("EXISTS", k)) for k in names))
            found = [s for s, r in zip(unknown, replies, strict=True) if _ok(r)]
        else:
            replies = yield Each(tuple(Call(probe) for probe in feed_probes(names)))
            present = {key for reply in replies for key, _ in streams(_ok(reply))}
            found = [s for s, k in zip(unknown, names, strict=True) if k in present]
        self._known.update(found)
        self._probed = True
        return sorted(self._known)

    def seeded(self) -> Flow[bool]:
        """Whether a projector (or a rebuild) ever seeded this prefix's projections."""
        slots = yield from self.feed_slots()
        replies = yield Each(tuple(Call(("EXISTS", self.keys(s).state)) for s in slots))
        return any(_ok(r) for r in replies)

    def _threads_by_slot(self) -> Flow[dict[int, builtins.list[str]]]:
        # on a cluster, only slots with a feed: appends write a slot's feed and index together
        slots = (yield from self.feed_slots()) if self.cluster else None
        return (yield from threads_by_slot(self.prefix, self.cluster, slots))

    def seed(
        self,
        slots: Iterable[int] | None = None,
        slice_ms: float = DEFAULT_SLICE_MS,
        slice_pause: float = 0.0,
        unseeded_only: bool = False,
    ) -> Flow[int]:
        """(Re)build the projections of ``slots`` (default: every slot with a feed or a
        thread) from the logs, and set their cursors; returns the number of threads
        registered. In slices of ``slice_ms``, paced by ``slice_pause`` (Operations'); safe
        while graphs write and projectors run: see lua/projector/seed.lua. ``unseeded_only``: leave
        the slots that have a cursor."""
        feeds = yield from self.feed_slots()
        replies = yield Each(
            tuple(
                Call(("XREVRANGE", feed_key(self.prefix, s), "+", "-", "COUNT", 1)) for s in feeds
            )
        )
        last = {}
        for slot, reply in zip(feeds, replies, strict=True):
            found = entries(_ok(reply))
            if found:
                last[slot] = found[0][0]
        # read the feeds' ends before listing the threads: a thread the listing misses is
        # newer than its feed's end, so the projector applies it
        by_slot = yield from self._threads_by_slot()
        targets = sorted({*feeds, *by_slot} if slots is None else slots)
        seeds = [_Seed(s, last.get(s, "0-0"), by_slot.get(s, []), unseeded_only) for s in targets]
        pace = Pace(slice_pause)
        width = round_width(slice_ms)
        registered = 0
        while seeds:
            round_ = seeds[:width]
            budget = f"{slice_ms / len(round_):g}"
            replies = yield Each(tuple(seed.call(self.prefix, budget) for seed in round_))
            yield from pace.rest()
            for seed, reply in zip(round_, replies, strict=True):
                status = as_text(_ok(reply)[0])
                if status == "done":
                    registered += int(reply[1])
                if status in ("done", "lost"):  # lost: another seed of it began since
                    seeds.remove(seed)
                else:
                    seed.went_on(int(reply[1]), as_text(reply[2]))
        return registered

    def apply(
        self,
        slot: int,
        *,
        count: int = 1000,
        stop: str = "+",
        group: str = "",
        acks: Sequence[str] = (),
        slice_ms: float = DEFAULT_SLICE_MS,
    ) -> Flow[Applied]:
        """Apply up to ``count`` entries of a slot's feed after its cursor (up to ``stop``),
        as many as ``slice_ms`` of server time lets (one at least; ``more`` says the rest)."""
        reply = yield Eval(
            "project",
            self.keys(slot),
            (self.prefix, count, stop, group, f"{slice_ms:g}", *acks),
            write=True,
        )
        status = as_text(reply[0])
        if status == "reseed":
            return Applied(status, thread=as_text(reply[1]))
        if status != "ok":
            return Applied(status)
        return Applied(
            status,
            int(reply[1]),
            as_text(reply[2]),
            bool(int(reply[3])),
            tuple(as_text(u) for u in reply[4:]),
        )

    def sweep(self) -> Flow[int]:
        """Forget threads whose log is gone (deleted, expired); returns how many."""
        slots = yield from self.feed_slots(fresh=False)
        replies = yield Each(
            tuple(Eval("sweep", self.keys(s), (self.prefix,), write=True) for s in slots)
        )
        return sum(int(_ok(r)) for r in replies)

    def lag(self, fresh: bool = True) -> Flow[ProjectorLag]:
        slots = yield from self.feed_slots(fresh)
        now = yield Call(("TIME",))
        replies = yield Each(tuple(Eval("lag", self.keys(s)[:2], (_LAG_CAP,)) for s in slots))
        out = []
        for slot, reply in zip(slots, replies, strict=True):
            usable, cursor, pending, oldest = _ok(reply)
            oldest_id = as_text(oldest)
            out.append(
                SlotLag(
                    slot=slot,
                    usable=bool(usable),
                    cursor=as_text(cursor),
                    pending=int(pending),
                    oldest_ms=int(oldest_id.split("-")[0]) if oldest_id else None,
                )
            )
        now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
        return ProjectorLag(slots=tuple(out), now_ms=now_ms)

    def threads(
        self, limit: int | None, after: ThreadInfo | None
    ) -> Flow[builtins.list[ThreadInfo]]:
        """A page of threads, newest activity first (ties by thread id), after ``after``."""
        slots = [] if self.scan_only else (yield from self.feed_slots())
        args = (
            self.prefix,
            limit or 0,
            "" if after is None else after.last_activity_ms,
            "" if after is None else after.thread_id,
        )
        replies = yield Each(tuple(Eval("threads_page", self.keys(s)[:4], args) for s in slots))
        pages = _usable(replies)
        if pages is None:
            infos = yield from self._scan_threads(after)
        else:
            infos = [
                _info(as_text(t), row)
                for page in pages
                for t, row in zip(page[::2], page[1::2], strict=True)
            ]
        infos.sort(key=_order)
        return infos if limit is None else infos[:limit]

    def candidates(self, query: tuple[str | bytes, ...]) -> Flow[builtins.list[str] | None]:
        """Sorted thread ids a cross-thread read must look at (see lua/projector/candidates.lua), or
        None when some slot's projections are unusable (or absent): then the caller scans."""
        if self.scan_only:
            return None
        slots = yield from self.feed_slots()
        replies = yield Each(tuple(Eval("candidates", self.keys(s), query) for s in slots))
        found = _usable(replies)
        if found is None:
            return None
        return sorted({as_text(t) for page in found for t in page})

    def _scan_threads(self, after: ThreadInfo | None) -> Flow[builtins.list[ThreadInfo]]:
        """The fallback: every log, each row computed by the projector's own code."""
        ids = [t for ts in (yield from self._threads_by_slot()).values() for t in ts]
        keys = [thread_keys(self.prefix, t) for t in ids]
        replies = yield Each(tuple(Eval("thread_row", k, ()) for k in keys))
        infos = [_info(t, row) for t, row in zip(ids, map(_ok, replies), strict=True) if row]
        if after is not None:
            infos = [i for i in infos if _order(i) > _order(after)]
        return infos


# slot indexes one slot_threads call reads on a standalone server (~0.1 ms of server time; 1,024
# held it ~0.6 ms, more than a slice of a long operation)
_SLOTS_A_CALL = 128


def threads_by_slot(
    prefix: str, cluster: bool, slots: Sequence[int] | None = None
) -> Flow[dict[int, builtins.list[str]]]:
    """Every thread under ``prefix`` whose log exists, per slot, from the slots' thread
    indexes, never SCAN, which needs a permission that shows every tenant's key names (a
    tenant's ACL user has none). A standalone server reads the 16384 indexes in calls of
    ``_SLOTS_A_CALL`` slots, pipelined (one script over all of them held the server ~10 ms); a
    cluster, one pipelined call per slot of ``slots`` (a script may not span slots)."""
    if cluster:
        which = list(range(SLOTS) if slots is None else slots)
        replies = yield Each(
            tuple(
                Eval("slot_threads", (threads_key(prefix, s),), (prefix, "members")) for s in which
            )
        )
        groups = [(which[i], reply) for i, reply in enumerate(replies)]
        for _, reply in groups:
            if isinstance(reply, Exception):
                raise reply
        # which logs exist (or deleted threads' marks, in ptr), each asked where its slot is
        # now (a migration may have split them)
        named = [
            (as_text(t), g) for g, (_, reply) in enumerate(groups) for _, *ts in reply for t in ts
        ]
        alive = yield Each(tuple(Call(("EXISTS", *thread_keys(prefix, t)[::2])) for t, _ in named))
        kept: dict[int, builtins.list[Any]] = {}
        for (t, g), exists in zip(named, alive, strict=True):
            if isinstance(exists, Exception):
                raise exists
            if exists:
                kept.setdefault(g, [1]).append(t)
        groups = [(slot, [kept[g]] if g in kept else []) for g, (slot, _) in enumerate(groups)]
    else:
        starts = range(0, SLOTS, _SLOTS_A_CALL)
        replies = yield Each(
            tuple(
                Eval(
                    "slot_threads",
                    [threads_key(prefix, s) for s in range(start, start + _SLOTS_A_CALL)],
                    (prefix,),
                )
                for start in starts
            )
        )
        groups = list(zip(starts, replies, strict=True))
    by_slot: dict[int, builtins.list[str]] = {}
    for first, reply in groups:
        if isinstance(reply, Exception):
            raise reply
        for position, *threads in reply:
            by_slot[first + int(position) - 1] = [as_text(t) for t in threads]
    return by_slot
