"""Reading a thread's log back (``Replaying``): ``rebuild`` and ``rebuild_many`` derive its
indexes again, ``verify`` and ``references`` check them and the log's references, and
``log_entries`` and ``deletion_entries`` stream the log and its deletion records.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from redis.exceptions import NoPermissionError

from ..core.config import thread_id_str
from ..core.feeds import audit_of_log, threads_key
from ..core.flow import Call, Each, Emit, Entry, Eval, Flow, Items
from ..core.keys import ThreadKeys, rebuild_keys, scratch_keys, verify_keys
from ..core.marks import MARK_FIELDS, marked_events
from ..core.pages import LogPages
from ..core.replies import as_text
from ..core.slicing import Replay, round_width
from ..core.slots import slot_of
from ..core.stream_ids import id_key
from .state import SLICE_RESTARTS, State

__all__ = ["Replaying"]


class Replaying(State):
    """Replays of a thread's log, in slices, and its entries as they are stored."""

    def rebuild(self, thread_id: str) -> Flow[Replay]:
        (replay,) = yield from self.rebuild_many([thread_id])
        return replay

    def rebuild_many(self, thread_ids: Sequence[str]) -> Flow[list[Replay]]:
        """Rebuild several threads in slices (lua/checkpoint/replay_slice.lua): each call replays
        at most ``slice_events`` events or ``slice_ms`` of server time, so no tenant's long log
        holds the server; a round's pipeline (Redis runs it as one block) shares one slice's
        budget among threads (round_width: one thread at the default slice_ms). Each thread's
        indexes are swapped in whole, by its last slice: readers never see a half-rebuilt
        index, and writes made meanwhile are kept."""
        ids = [thread_id_str(t, "thread_id") for t in thread_ids]
        keys = [self.keys(t) for t in ids]
        done: dict[int, Replay] = {}
        cursors = [""] * len(keys)
        totals = [Replay(0, 0, []) for _ in keys]
        restarts, pace = [0] * len(keys), self._pace()
        width = round_width(self.slice_ms)
        while len(done) < len(keys):
            pending = [i for i in range(len(keys)) if i not in done][:width]
            budget = f"{pace.ms / len(pending):g}"
            replies = yield from self._slice(
                Each(
                    tuple(
                        Eval(
                            "replay_slice",
                            (*keys[i], *rebuild_keys(keys[i])),
                            (cursors[i], self.slice_events, budget),
                        )
                        for i in pending
                    )
                ),
                pace,
            )
            slow: list[int] = []
            for i, reply in zip(pending, replies, strict=True):
                if isinstance(reply, Exception):
                    raise reply
                state, cursor, fresh, applied, skipped, *problems = reply
                total = totals[i]
                if int(fresh) and cursors[i]:
                    # the log was rewritten under the slices: what they built is void
                    restarts[i] += 1
                    total = Replay(0, 0, [])
                    if restarts[i] > SLICE_RESTARTS:
                        slow.append(i)
                        continue
                lines = [p.decode(errors="replace") for p in problems]
                totals[i] = Replay(
                    total.applied + int(applied),
                    total.skipped + int(skipped),
                    (total.problems + lines)[:100],
                )
                cursors[i] = as_text(cursor)
                if as_text(state) == "done":
                    done[i] = totals[i]
            if slow:
                # compactions keep rewriting these logs faster than slices go: one script
                # each, as before slices existed, rather than never finishing
                replies = yield Each(
                    tuple(Eval("replay", self._replay_keys(keys[i]), (ids[i],)) for i in slow)
                )
                for i, reply in zip(slow, replies, strict=True):
                    if isinstance(reply, Exception):
                        raise reply
                    applied, skipped, *problems = reply
                    lines = [p.decode(errors="replace") for p in problems]
                    done[i] = Replay(int(applied), int(skipped), lines)
        # the slot's thread index is derived from the logs too: a rebuilt thread is in it (a
        # member whose log is gone meanwhile is left out by listings and swept)
        rebuilt = [i for i in range(len(keys)) if done[i].applied or done[i].skipped]
        if rebuilt:
            yield Each(
                tuple(Call(("SADD", self._replay_keys(keys[i])[3], ids[i])) for i in rebuilt)
            )
        return [done[i] for i in range(len(keys))]

    def _replay_keys(self, keys: ThreadKeys) -> tuple[str, str, str, str]:
        """replay.lua's keys: the thread's three and its slot's thread index."""
        return (*keys, threads_key(self.prefix, slot_of(keys.log)))

    def verify(self, thread_id: str) -> Flow[tuple[int, int, list[str]]]:
        """Check every reference the log's events make, then replay into scratch keys and diff
        with the live indexes: (applied, skipped, problems), each problem a line
        (lua/checkpoint/verify.lua): ``ref <event id> ...`` or
        ``<ix|ptr> <missing|differs|extra> <member>``. In slices
        (lua/checkpoint/verify_slice.lua), safe while graphs write."""
        keys = self.keys(thread_id_str(thread_id, "thread_id"))
        found = yield from self._verify(keys, "")
        if isinstance(found, Exception):
            raise found
        return found

    def references(self, thread_id: str) -> Flow[list[str] | None]:
        """The references of the log's events that do not resolve, as ``verify`` reports them,
        without comparing indexes: what an audit of the log itself checks. None when this
        user may not write the scratch keys the check replays into (a read-only role)."""
        keys = self.keys(thread_id_str(thread_id, "thread_id"))
        found = yield from self._verify(keys, "refs")
        if isinstance(found, NoPermissionError):
            return None
        if isinstance(found, Exception):
            raise found
        return found[2]

    def _verify(self, keys: ThreadKeys, mode: str) -> Flow[tuple[int, int, list[str]] | Exception]:
        """verify.lua's work in slices, each at most ``slice_events`` units of work or
        ``slice_ms`` of server time; a refusal comes back as a value."""
        token, start, restarts = secrets.token_hex(8), True, 0
        pace = self._pace()
        applied = skipped = 0
        refs: list[str] = []
        diffs: set[str] = set()
        while restarts <= SLICE_RESTARTS:
            args = (mode, token, "start" if start else "", self.slice_events, f"{pace.ms:g}")
            op = Eval("verify_slice", (*keys, *verify_keys(keys)), args)
            (reply,) = yield from self._slice(Each((op,)), pace)
            if isinstance(reply, Exception):
                return reply
            state, fresh, a, k, *lines = reply
            if int(fresh) and not start:
                # the log was rewritten under the slices: what they found is void
                restarts += 1
                applied, skipped, refs, diffs = 0, 0, [], set()
            start = False
            applied, skipped = applied + int(a), skipped + int(k)
            for line in lines:
                text = line.decode(errors="replace")
                # a page of HSCAN may name a field twice: an index line counts once
                (refs.append if text.startswith("ref ") else diffs.add)(text)
            if as_text(state) == "done":
                return applied, skipped, sorted([*refs, *diffs])
        # compactions keep rewriting the log faster than slices go: one script, as before
        (reply,) = yield Each((Eval("verify", (*keys, *scratch_keys(keys)), (mode,)),))
        if isinstance(reply, Exception):
            return reply
        a, k, *lines = reply
        return int(a), int(k), sorted(d.decode(errors="replace") for d in lines)

    def log_entries(self, thread_id: str) -> Items[Entry]:
        """A thread's whole log, one page of XRANGE at a time: any length streams through in
        constant memory. A log rewritten between pages raises ``LogRewrittenError``. A deleted
        thread's is the events its mark holds (core/marks.py)."""
        keys = self.keys(thread_id_str(thread_id, "thread_id"))
        pages = LogPages(keys.log, self.slice_ms, self._pace(), one_version=True)
        read = False
        while page := (yield from pages.next()):
            read = True
            for entry_id, fields in page:
                yield Emit((as_text(entry_id), [(_b(k), _b(v)) for k, v in fields.items()]))
        if not read:
            # a deleted thread's log is gone: its mark holds the events that will start it
            # again (core/marks.py)
            for entry_id, fields in marked_events((yield Call(("HMGET", keys.ptr, *MARK_FIELDS)))):
                yield Emit((entry_id, list(fields.items())))

    def deletion_entries(self, thread_id: str) -> Items[Entry]:
        """The records of this thread's deletions, oldest first: the ``thread_deleted`` events
        of its deletion's mark, if it is deleted (lua/checkpoint/delete_thread.lua), and of its
        log, if the id was used again, found through its index's records; and those earlier
        versions wrote to the audit stream of its slot, unless its log holds them too."""
        thread = thread_id_str(thread_id, "thread_id").encode()
        keys = self.keys(thread_id)
        found: dict[str, Entry] = {}
        seen: set[tuple[bytes, bytes, bytes]] = set()
        for entry_id, fields in marked_events((yield Call(("HMGET", keys.ptr, *MARK_FIELDS)))):
            seen.add(_record(fields))
            found[entry_id] = (entry_id, list(fields.items()))
        members = yield Call(("ZRANGEBYLEX", keys.ix, "[e", "[e\xff"))
        ids = [as_text(m)[1:] for m in members or ()]
        replies = (yield Each(tuple(Call(("XRANGE", keys.log, i, i)) for i in ids))) if ids else ()
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            for entry_id, raw in reply or ():
                fields = _fields(raw)
                if fields.get(b"k") == b"thread_deleted":
                    seen.add(_record(fields))
                    found[as_text(entry_id)] = (as_text(entry_id), list(fields.items()))
        key = audit_of_log(self.prefix, keys.log)
        pages = LogPages(key, self.slice_ms, self._pace())
        while page := (yield from pages.next()):
            for entry_id, raw in page:
                fields = {_b(k): _b(v) for k, v in raw.items()}
                if fields.get(b"thread", b"") == thread and _record(fields) not in seen:
                    found[as_text(entry_id)] = (as_text(entry_id), list(fields.items()))
        for entry_id in sorted(found, key=id_key):
            yield Emit(found[entry_id])


def _fields(raw: object) -> dict[bytes, bytes]:
    """An XRANGE entry's fields, parsed (a dict) or flat, as bytes."""
    if isinstance(raw, dict):
        return {_b(k): _b(v) for k, v in raw.items()}
    flat = [_b(x) for x in raw]  # type: ignore[attr-defined]
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _record(fields: dict[bytes, bytes]) -> tuple[bytes, bytes, bytes]:
    """What one deletion's records have in common wherever they are kept."""
    return fields.get(b"n", b""), fields.get(b"last", b""), fields.get(b"head", b"")


def _b(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
