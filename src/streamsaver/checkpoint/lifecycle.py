"""A thread's lifecycle past its steps (``Lifecycle``): ``delete_thread``, ``delete_for_runs``,
``prune`` and ``copy_thread``, which imports another thread's log page by page.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence

import ormsgpack

from ..core.chain import CHAIN_FIELDS
from ..core.codec import Field
from ..core.config import id_list, thread_id_str
from ..core.errors import (
    CorruptIndexError,
    InvalidInputError,
    LogRewrittenError,
    StreamSaverError,
)
from ..core.feeds import audit_of_log
from ..core.fields import SHARED
from ..core.flow import Call, Eval, Flow, Pace
from ..core.keys import ThreadKeys
from ..core.pages import REWRITE_RESTARTS, LogPages
from ..core.replies import as_text
from ..core.stream_ids import is_entry_id
from .compaction import Compaction

__all__ = ["TOMBSTONE_MS", "Lifecycle"]

# the writes events copy_thread keeps at hand for the checkpoints after them to name
_WRITES_KEPT = 200
# one import script's most events and bytes (copy_thread)
_IMPORT_EVENTS = 50
_IMPORT_BYTES = 256 * 1024
# how long an abandoned copy's scratch keys stay after its last import (a copy that lands
# renames or deletes them)
_SCRATCH_MS = 3600 * 1000
# the audit retention's default: how long the keys of a deleted thread, never used again, keep its
# deletion's record and refuse writes that continue its deleted history
# (lua/checkpoint/delete_thread.lua); a thread that uses the id again keeps that for good
TOMBSTONE_MS = 7 * 24 * 3600 * 1000


class Lifecycle(Compaction):
    """Deleting, pruning and copying threads; ``delete_for_runs`` and ``prune`` compact."""

    def delete_thread(self, thread_id: str) -> Flow[None]:
        thread_id = thread_id_str(thread_id, "thread_id")
        keys = self.keys(thread_id)
        audit = audit_of_log(self.prefix, keys.log)
        yield Eval(
            "delete_thread",
            (*self.appending(keys), audit),
            (*self._appending_args(), thread_id, self.audit_retention_ms),
            write=True,
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> Flow[int]:
        runs = id_list(run_ids, "run_ids")
        if not runs:
            return 0
        deleted = 0
        for thread_id in (yield from self._threads_for(("runs", *runs))):
            keys = self.appending(self.keys(thread_id))
            found = yield from self._delta_check(keys, thread_id, runs)
            if found is None:
                continue
            # a compaction without their checkpoints, in slices: they are gone, for readers,
            # writers and replays alike, when it swaps the new log in
            # (lua/checkpoint/compact_slice.lua)
            reply = yield from self._compaction(thread_id, 0, (found, thread_id, *runs))
            if reply is None:
                # a full server: one script, which frees before it appends
                reply = yield self._delete_runs(keys, "", thread_id, "", runs)
                if isinstance(reply, Exception):
                    raise reply
            if isinstance(reply, list) and reply[0] == b"delta":
                raise _delta_dependency(thread_id, runs, [as_text(x) for x in reply[1:]])
            if isinstance(reply, tuple):
                # a thread left with its records alone takes what they do
                # (lua/checkpoint/delete_runs.lua's shrink())
                yield self._delete_runs(keys, "shrink", thread_id, "", runs)
            deleted += reply[1] if isinstance(reply, tuple) else int(reply)
        return deleted

    def _delete_runs(
        self, keys: Sequence[str], mode: str, thread_id: str, at: str, runs: Sequence[str]
    ) -> Eval:
        args: tuple[Field | int, ...] = (
            *self._appending_args(),
            mode,
            thread_id,
            at,
            f"{self.slice_ms:g}",
            *runs,
        )
        return Eval("delete_runs", keys, args, write=mode != "check")

    def _delta_check(
        self, keys: Sequence[str], thread_id: str, runs: Sequence[str]
    ) -> Flow[str | None]:
        """lua/checkpoint/delete_runs.lua's DeltaChannel check, in slices of ``slice_ms``: the
        log's last id when it began, or None when the thread has none of the runs' checkpoints."""
        cursor, upto, pace = "", None, Pace(self.slice_pause)
        while True:
            reply = yield from self._slice(
                self._delete_runs(keys, "check", thread_id, cursor, runs), pace
            )
            if not reply:
                return None
            if reply[0] == b"delta":
                raise _delta_dependency(thread_id, runs, [as_text(x) for x in reply[1:]])
            state, cursor, last = (as_text(x) for x in reply)
            upto = upto or last
            if state == "checked":
                return upto

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Flow[int]:
        """Copy the source's log to the target: all of one version of it, or nothing. The
        source is read in pages, each checked to come from the log the first came from
        (``core.pages.LogPages``), and imported into scratch keys in the target's slot; a
        source compacted or deleted under the pages starts the copy again on its new log
        (REWRITE_RESTARTS times at most, then ``LogRewrittenError``, nothing written). The
        whole copy then becomes the target in one call (lua/checkpoint/copy_land.lua), or, if
        the target has a log, is appended to it. Returns the events copied."""
        source = thread_id_str(source_thread_id, "source_thread_id")
        target = thread_id_str(target_thread_id, "target_thread_id")
        if source == target:
            raise InvalidInputError(
                f"copy_thread({source!r}, {target!r}) names one thread twice; give a new target"
            )
        src, dst = self.keys(source), self.keys(target)
        pace = Pace(self.slice_pause)
        for restart in range(REWRITE_RESTARTS + 1):
            scratch = _copy_keys(dst, secrets.token_hex(8))
            try:
                copied = yield from self._copy_pages(src, source, target, scratch, pace)
            except LogRewrittenError as exc:
                yield Call(("UNLINK", *scratch), write=True)
                if restart == REWRITE_RESTARTS:
                    raise LogRewrittenError(
                        f"copy_thread({source!r}, {target!r}): the source's log was rewritten "
                        f"(compacted or deleted) {restart + 1} times while it was copied; "
                        f"nothing was written to {target!r}. Copy it again when it is compacted "
                        f"less often (a keep_last saver compacts it every few puts)",
                        exc.key,
                    ) from exc
                continue
            except StreamSaverError:
                # nothing of a refused copy reaches the target
                yield Call(("UNLINK", *scratch), write=True)
                raise
            return (yield from self._land(dst, scratch, copied, pace))
        raise AssertionError("unreachable")

    def _copy_pages(
        self, src: ThreadKeys, source: str, target: str, scratch: ThreadKeys, pace: Pace
    ) -> Flow[int]:
        """The source's log, one version of it, imported into ``scratch``."""
        target_b = target.encode()
        copied, fit = 0, 8
        # the latest writes events seen: the parts of the checkpoints after them name their bytes
        writes: dict[str, dict[bytes, bytes]] = {}
        # one page at a time: the threads live in different slots, so no single script can see
        # both; every page imported is consistent on its own, and of the same log as the others
        pages = LogPages(src.log, self.slice_ms, pace, one_version=True)
        while True:
            entries = yield from pages.next()
            if not entries:
                return copied
            page: list[list[Field | int]] = []
            size = 0
            for entry_id, fields in entries:
                eid = as_text(entry_id)
                kind = fields.get(b"k")
                if kind == b"thread_deleted":
                    # the source's own deletion, first in its log: what a deleted and reused
                    # source holds is the history after it (lua/checkpoint/import.lua)
                    continue
                if kind == b"checkpoint":
                    fields = yield from self._unshared(source, eid, fields, writes, pages)
                elif kind == b"writes":
                    writes[eid] = fields
                    if len(writes) > _WRITES_KEPT:
                        del writes[next(iter(writes))]
                # every field but the chain's (the copies are chained anew), whose thread and
                # what it copies in place of the source's own, if it has them (a copy of a
                # copy), else last
                flat = _flat(fields, {b"thread": target_b, b"copy_of": _copy_of(source, eid)})
                weight = sum(map(len, flat[1:]))  # type: ignore[arg-type]
                if page and (len(page) >= _IMPORT_EVENTS or size + weight > _IMPORT_BYTES):
                    # each import is one script: bounded in events and bytes, and it stops
                    # after slice_ms, whatever the log holds
                    took, fit = yield from self._import(scratch, page, fit, pace)
                    copied += took
                    page, size = [], 0
                page.append(flat)
                size += weight
            took, fit = yield from self._import(scratch, page, fit, pace)
            copied += took

    def _land(self, dst: ThreadKeys, scratch: ThreadKeys, copied: int, pace: Pace) -> Flow[int]:
        """The copy in ``scratch`` made the target's: swapped in whole when the target has no
        log, else appended to it, a page at a time."""
        keys = (*self.appending(dst), *scratch)
        mode, at, upto = "swap", "", ""
        while True:
            args = (*self._appending_args(), self.ttl_ms, f"{self.slice_ms:g}", mode, at, upto)
            op = Eval("copy_land", keys, args, write=True)
            reply = yield from self._slice(op, pace)
            state = as_text(reply[0])
            if state == "done":
                return copied
            if state == "exists":
                break
            mode, at, upto = "announce", as_text(reply[1]), as_text(reply[2])
        # a live target (or a deleted one's record): the copy's events follow its own, as
        # imports (each one checked against the target as a write would be)
        merged, fit = 0, 8
        pages = LogPages(scratch.log, self.slice_ms, pace)
        while entries := (yield from pages.next()):
            page = [_flat(fields) for _, fields in entries]
            took, fit = yield from self._import(dst, page, fit, pace, scratch=False)
            merged += took
        yield Call(("UNLINK", *scratch), write=True)
        return merged

    def _import(
        self,
        keys: ThreadKeys,
        page: list[list[Field | int]],
        fit: int,
        pace: Pace,
        scratch: bool = True,
    ) -> Flow[tuple[int, int]]:
        """Append ``page``'s events to ``keys``' thread in slices: each call takes what fits its
        budget. A call is sent ``fit`` events, one more than the last one took, not the page's
        rest: the server converts every argument before the script starts, outside its budget,
        and the client would encode the rest again for each call. ``scratch``: keys of no
        thread yet, announced nowhere, that expire unless the copy lands. Returns (appended,
        next fit)."""
        done = 0
        if scratch:
            at: tuple[str, ...] = tuple(keys)
            head: list[Field | int] = [0, self._appending_args()[1], _SCRATCH_MS]
        else:
            at = self.appending(keys)
            head = [*self._appending_args(), self.ttl_ms]
        while done < len(page):
            args: list[Field | int] = [*head, f"{self.slice_ms:g}"]
            sent = page[done : done + fit]
            for event in sent:
                args += event
            op = Eval("import", at, args, write=True)
            took = int((yield from self._slice(op, pace)))
            done += took
            # one more than it took, or twice as many once a call takes all it was sent
            fit = 2 * took if took == len(sent) else took + 1
        return done, fit

    def _unshared(
        self,
        thread_id: str,
        entry_id: str,
        fields: dict[bytes, bytes],
        writes: dict[str, dict[bytes, bytes]],
        pages: LogPages,
    ) -> Flow[dict[bytes, bytes]]:
        """A checkpoint event's fields with every part that names a write of its own log
        replaced by the bytes it names: a copy lives in another log, with other event ids.
        A part naming nothing valid (a hand-edited or damaged log) raises, naming the event,
        before anything of its page is copied."""
        shared = [n for n, raw in fields.items() if raw.startswith(SHARED) and _is_value(n)]
        if not shared:
            # the usual case: nothing to replace (unshared() passes other values as they are)
            return fields
        for name in shared:
            eid = _shared_event(fields[name])
            if eid is None:
                raise CorruptIndexError(
                    f"event {entry_id} of thread {thread_id!r} has a malformed shared part "
                    f"in field {name.decode()}; inspect it with XRANGE and repair or remove "
                    f"it (`streamsaver verify` lists every such reference)"
                )
            if eid not in writes:
                # from the same version of the log as the pages, or LogRewrittenError
                found = yield from pages.entry(eid)
                # only a writes event's bytes can be named
                writes[eid] = found[0][1] if found and found[0][1].get(b"k") == b"writes" else {}
        try:
            return {**fields, **{n: self.codec.unshared(fields[n], writes.get) for n in shared}}
        except CorruptIndexError as exc:
            raise CorruptIndexError(
                f"event {entry_id} of thread {thread_id!r}: {exc}; nothing of it was copied "
                f"(`streamsaver verify` lists every such reference)"
            ) from exc

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Flow[None]:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"prune strategy {strategy!r} is unknown; use 'keep_latest' or 'delete'"
            )
        for thread_id in id_list(thread_ids, "thread_ids"):
            if strategy == "delete":
                yield from self.delete_thread(thread_id)
            else:
                yield from self.compact(thread_id, 1)


def _delta_dependency(thread_id: str, runs: Sequence[str], found: Sequence[str]) -> Exception:
    ns, survivor, survivor_run, ancestor, ancestor_run = found
    return InvalidInputError(
        f"delete_for_runs({list(runs)!r}) would delete checkpoint {ancestor!r} (run "
        f"{ancestor_run!r}) of thread {thread_id!r}, namespace {ns!r}, whose writes the "
        f"DeltaChannels of the kept checkpoint {survivor!r} (run {survivor_run!r}) rebuild "
        f"from; nothing of this thread was deleted. Delete run {survivor_run!r} too, or the "
        f"whole thread (delete_thread)"
    )


def _shared_event(raw: bytes) -> str | None:
    """The event id a shared part (``["shared", "<event id> w<i>", offset, n]``) names, or
    None when it is malformed or names an id no stream can hold."""
    try:
        _, ref, offset, count = ormsgpack.unpackb(raw)
    except (ValueError, TypeError):
        return None
    if not (isinstance(ref, str) and isinstance(offset, int) and isinstance(count, int)):
        return None
    eid, _, name = ref.partition(" ")
    if not is_entry_id(eid) or not re.fullmatch(r"w\d+", name) or offset < 0:
        return None
    return eid


def _is_value(name: bytes) -> bool:
    return name[:1] == b"b" and name[1:].isdigit()


def _flat(fields: dict[bytes, bytes], own: dict[bytes, bytes] | None = None) -> list[Field | int]:
    """An event's fields flat, as lua/checkpoint/import.lua takes them: its field count, then
    every field but the chain's, those in ``own`` in place of its own (or after them)."""
    own = dict(own or {})
    flat: list[Field | int] = [0]
    for k, v in fields.items():
        if k not in CHAIN_FIELDS:
            flat += (k, own.pop(k, v))
    for k, v in own.items():
        flat += (k, v)
    flat[0] = len(flat) - 1
    return flat


def _copy_keys(dst: ThreadKeys, token: str) -> ThreadKeys:
    """Where a copy is built before it becomes the target's (lua/checkpoint/copy_land.lua): the
    target's slot, a name of its own per copy, none ending in ``:log`` (no SCAN for logs finds
    them)."""
    return ThreadKeys(*(f"{key}:copy:{token}" for key in dst))


def _copy_of(source: str, entry_id: bytes | str) -> bytes:
    eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return ormsgpack.packb([source, eid])
