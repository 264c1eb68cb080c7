"""Every saver operation, written once, as a generator of Redis operations.

An operation yields ``Eval`` / ``Call`` / ``ScanLogs`` values and is sent back their replies; list
operations also yield ``Emit`` items for the caller (the steps and the loops that drive them:
``core.flow``). The sync and async savers only drive these generators, so key building,
encoding, validation and decoding live here, free of I/O. A generator runs nothing until first
driven, and validates before its first yield: bad input raises before anything reaches Redis.
"""

from __future__ import annotations

import builtins
import re
import secrets
import warnings
from collections.abc import (
    Callable,
    Iterator,
    Sequence,
)
from typing import TYPE_CHECKING, Any

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from redis.exceptions import NoPermissionError, OutOfMemoryError

from ..core.chain import CHAIN_FIELDS, written_digest
from ..core.codec import (
    _SHARED,
    CheckpointEvent,
    Codec,
    Field,
    Held,
    _check_metadata,
    metadata_form,
)
from ..core.config import _configurable, before_id, make_config, target_of, thread_id_str
from ..core.delta import DeltaCache, Known, Written
from ..core.durability import Durability
from ..core.errors import (
    CorruptIndexError,
    InvalidConfigError,
    InvalidInputError,
    NoPersistenceWarning,
    UnsupportedServerError,
)
from ..core.feeds import DEFAULT_FEED_MAXLEN, audit_of_log, feed_of_log, threads_key
from ..core.flow import Call, Each, Emit, Entry, Eval, Flow, Items, ListFlow, Pace
from ..core.server import (
    MIN_SERVER,
    aof_everywhere,
    check_eviction,
    clustered,
    save_points,
    server_version,
)
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE, Replay, round_width
from ..core.slots import slot_of
from ..core.stream_ids import is_entry_id
from .projections import threads_by_slot

if TYPE_CHECKING:
    from .projections import Projections
from ..core.keys import (
    ThreadKeys,
    compact_keys,
    lp,
    rebuild_keys,
    scratch_keys,
    thread_keys,
    verify_keys,
)
from ..core.nodes import SendTargets, send_index, send_target, send_targets
from ..core.pages import LogPages
from ..core.replies import as_text

__all__ = [
    "Operations",
]

_PAGE = 100
# the writes events copy_thread keeps at hand for the checkpoints after them to name
_WRITES_KEPT = 200
# one import script's most events and bytes (copy_thread)
_IMPORT_EVENTS = 50
_IMPORT_BYTES = 256 * 1024
# slices of a rebuild that found its log rewritten under it before it gives up slicing
_REBUILD_RESTARTS = 3
# how long the keys of a deleted thread, never used again, keep refusing writes that continue
# its deleted history (lua/checkpoint/delete_thread.lua); a thread that uses the id again keeps that
# for good
TOMBSTONE_MS = 7 * 24 * 3600 * 1000


class Operations:
    """The I/O-free core shared by ``RedisStreamSaver`` and ``AsyncRedisStreamSaver``."""

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
    # checkpoints kept per namespace, compacted as puts go (lua/checkpoint/append.lua); 0: all
    keep_last: int = 0
    # give every appended event its digests (lua/shared/common.lua, docs/audit.md)
    chain: bool = True
    # where list(None) and delete_for_runs find candidate threads; None: every indexed thread
    projections: Projections | None = None
    # a long operation's slice (lua/checkpoint/replay_slice.lua): at most this many events, and it
    # stops
    # once this many ms of server time have gone, so other tenants wait no longer than that
    slice_events: int = 20000
    slice_ms: float = DEFAULT_SLICE_MS
    # after each slice the operation waits this many times as long as it was busy since its
    # last pause, its own Python included (core.flow.Pace): it then holds the server, and on a
    # small machine a core, at most 1 / (1 + slice_pause) of the time
    slice_pause: float = DEFAULT_SLICE_PAUSE
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

    def setup(self) -> Flow[tuple[int, ...]]:
        info = yield Call(("INFO",))
        version = server_version(info)
        if version < MIN_SERVER:
            raise UnsupportedServerError(
                f"Redis {'.'.join(map(str, version))} is too old: streamsaver needs Redis "
                f">= {'.'.join(map(str, MIN_SERVER))} (XADD/XTRIM MINID, exclusive XRANGE); "
                f"upgrade the server"
            )
        self.durability.check_server(version, info)
        if not self.allow_eviction:
            check_eviction(info, self.ttl_ms > 0)
        if self.read_config and not aof_everywhere(info) and not clustered(info):
            # RDB save points are only in CONFIG; pipelined (Each), a refusal is a value. A
            # cluster client cannot route a keyless CONFIG GET: there, nothing is said
            (reply,) = yield Each((Call(("CONFIG", "GET", "save")),))
            if save_points(reply) == "":
                warnings.warn(
                    "this Redis server has neither AOF (appendonly no) nor RDB snapshots (save "
                    "''): a restart loses every thread. Turn on `CONFIG SET appendonly yes` (or "
                    "save points), or filter NoPersistenceWarning if the data is throwaway",
                    NoPersistenceWarning,
                    stacklevel=2,
                )
        return version

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Flow[RunnableConfig]:
        target = target_of(config)
        checkpoint_id = checkpoint.get("id") if isinstance(checkpoint, dict) else None
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise InvalidInputError(
                f"checkpoint must be a Checkpoint dict with a non-empty string 'id', "
                f"got {type(checkpoint).__name__} with id {checkpoint_id!r}"
            )
        serializable = get_serializable_checkpoint_metadata(config, metadata)
        sends = send_targets(checkpoint.get("channel_values") or {})
        if sends:
            # before any I/O: LangGraph may run the Sends, and save their writes, meanwhile
            self.sends.learn((target.thread_id, target.checkpoint_ns, checkpoint_id), sends)

        def event(known: Callable[[str], Known | None], written: Written | None) -> CheckpointEvent:
            return self.codec.checkpoint_event(
                target.thread_id,
                target.checkpoint_ns,
                checkpoint,
                serializable,
                new_versions,
                target.checkpoint_id,
                known,
                written,
                sends,
            )

        cache = self.cache
        keys = self.keys(target.thread_id)
        if cache is None:
            fields = event(_nothing_known, None).fields
            reply = yield Eval(
                self._append, self.appending(keys), self._append_args("", fields), write=True
            )
            if isinstance(reply, list) and int(reply[1]) < 0:
                yield from self.compact(target.thread_id, self.keep_last)
            return make_config(target.thread_id, target.checkpoint_ns, checkpoint_id)
        scope = (target.thread_id, target.checkpoint_ns)
        written = cache.written(scope, target.checkpoint_id)
        sent = event(lambda channel: cache.get((*scope, channel)), written)
        args = self._append_args(_bases(sent), sent.fields)
        reply = yield Eval(self._append, self.appending(keys), args, write=True)
        if reply == b"stale":
            # another writer, a prune or a re-put changed what a base or a shared write was:
            # send whole values
            for channel, _, _ in sent.learned:
                cache.drop((*scope, channel))
            sent = event(_nothing_known, None)
            args = self._append_args("", sent.fields)
            reply = yield Eval(self._append, self.appending(keys), args, write=True)
        if isinstance(reply, list):
            # a compaction moved every stored value: what this process holds for the thread
            # no longer names where it is, except what this put just stored; one that trimmed
            # nothing (deferred, lua/checkpoint/compact.lua) moved nothing
            reply, trimmed = reply
            if trimmed:
                cache.drop_thread(target.thread_id)
            if int(trimmed) < 0:
                # the log was too long to compact in the put's script (lua/checkpoint/append.lua):
                # in
                # slices now, which moves this put's values too
                yield from self.compact(target.thread_id, self.keep_last)
                return make_config(target.thread_id, target.checkpoint_ns, checkpoint_id)
        event_id = reply.decode()
        for channel, field_name, known in sent.learned:
            known.head = f"{event_id} {field_name}"
            cache.put((*scope, channel), known)
        return make_config(target.thread_id, target.checkpoint_ns, checkpoint_id)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Flow[None]:
        target = target_of(config)
        if target.checkpoint_id is None:
            raise InvalidConfigError(
                "put_writes needs config['configurable']['checkpoint_id']: writes belong to a "
                "checkpoint, so put a checkpoint first and pass the config put() returned"
            )
        if not isinstance(task_id, str) or not isinstance(task_path, str):
            raise InvalidInputError(
                f"task_id and task_path must be strings, got {task_id!r} and {task_path!r}"
            )
        run_id = (config.get("metadata") or {}).get("run_id")
        node = None
        if (index := send_index(task_path)) is not None:
            sends = self.sends.get((target.thread_id, target.checkpoint_ns, target.checkpoint_id))
            node = send_target(sends, index) if sends else None
        fields = self.codec.writes_event(
            target.thread_id,
            target.checkpoint_ns,
            target.checkpoint_id,
            writes,
            task_id,
            task_path,
            str(run_id) if run_id is not None else "",
            node,
        )
        keys = self.appending(self.keys(target.thread_id))
        reply = yield Eval("append", keys, self._append_args("", fields), write=True)
        if self.cache is not None:
            event_id = reply.decode()
            self.cache.wrote(
                (target.thread_id, target.checkpoint_ns),
                target.checkpoint_id,
                [(f"{event_id} {name}", raw) for name, raw in _write_fields(fields)],
            )

    def get_tuple(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        target = target_of(config)
        # what the client holds needs no transfer: the script checks it is still current
        held, holds = self._held(target.thread_id, target.checkpoint_ns)
        reply = yield Eval(
            "get",
            self.keys(target.thread_id),
            (lp(target.checkpoint_ns), target.checkpoint_id or "", holds),
        )
        if not reply:
            return None
        checkpoint_tuple, seen = self.codec.checkpoint_tuple(target.thread_id, reply, held)
        self._remember(target.thread_id, target.checkpoint_ns, seen)
        sends = send_targets(checkpoint_tuple.checkpoint["channel_values"])
        if sends:
            key = (target.thread_id, target.checkpoint_ns, checkpoint_tuple.checkpoint["id"])
            self.sends.learn(key, sends)
        return checkpoint_tuple

    def _remember(self, thread_id: str, checkpoint_ns: str, seen: dict[str, Held]) -> None:
        if self.cache is not None:
            for channel, value in seen.items():
                if isinstance(value, Known):
                    self.cache.put((thread_id, checkpoint_ns, channel), value)

    def _held(self, thread_id: str, checkpoint_ns: str | None) -> tuple[dict[str, Known], Field]:
        """The list values held for a thread and namespace, and how a script is told of them."""
        if self.cache is None or checkpoint_ns is None:
            return {}, ""
        held = self.cache.held(thread_id, checkpoint_ns)
        holds = [x for ch, known in held.items() for x in (ch, known.version, known.head)]
        return held, ormsgpack.packb(holds) if holds else ""

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> ListFlow:
        """``list`` (see ``RedisStreamSaver.list`` for the order): each thread in turn, one
        checkpoint/list.lua page at a time, each page going on from the previous page's cursor."""
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise InvalidInputError(f"limit must be an int or None, got {limit!r}")
        match, nulls = _filter_args(filter)
        bound = before_id(before)
        if config is None:
            threads = yield from self._threads_for(("meta", match))
            ns: str | None = None
            exact = None
        else:
            target = target_of(config)
            threads = [target.thread_id]
            ns = _configurable(config).get("checkpoint_ns")
            exact = target.checkpoint_id
        remaining = limit
        for thread_id in threads:
            cursor = ""
            while remaining is None or remaining > 0:
                page = _PAGE if remaining is None else min(_PAGE, remaining)
                held, holds = self._held(thread_id, ns)
                reply = yield Eval(
                    "list",
                    self.keys(thread_id),
                    (
                        "" if ns is None else lp(ns),
                        exact or "",
                        bound or "",
                        page,
                        cursor,
                        match,
                        nulls,
                        holds,
                    ),
                )
                for item in self._page(thread_id, reply[1:], held):
                    yield Emit(item)
                if remaining is not None:
                    remaining -= len(reply) - 1
                cursor = reply[0].decode()
                if not cursor:
                    break

    def _page(
        self, thread_id: str, items: Sequence[Any], held: dict[str, Known]
    ) -> builtins.list[CheckpointTuple]:
        """Decode a list page as checkpoint/list.lua built it: oldest first, each item's values
        extending
        what the previous one held, per namespace."""
        holding: dict[str, dict[str, Held]] = {}
        decoded: builtins.list[CheckpointTuple] = []
        for item in reversed(items):
            header = dict(zip(item[1][::2], item[1][1::2], strict=True))
            ns = header[b"ns"].decode()
            now = holding.setdefault(ns, dict(held))
            checkpoint_tuple, seen = self.codec.checkpoint_tuple(thread_id, item, now)
            now.update(seen)
            decoded.append(checkpoint_tuple)
        decoded.reverse()
        return decoded

    def delete_thread(self, thread_id: str) -> Flow[None]:
        thread_id = thread_id_str(thread_id, "thread_id")
        keys = self.keys(thread_id)
        audit = audit_of_log(self.prefix, keys.log)
        yield Eval(
            "delete_thread",
            (*self.appending(keys), audit),
            (*self._appending_args(), thread_id, TOMBSTONE_MS, self.ttl_ms),
            write=True,
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> Flow[int]:
        runs = _str_list(run_ids, "run_ids")
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
            if isinstance(reply, builtins.list) and reply[0] == b"delta":
                raise _delta_dependency(thread_id, runs, [as_text(x) for x in reply[1:]])
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
        """lua/checkpoint/delete_runs.lua's DeltaChannel check, in slices of ``slice_ms``: the log's
        last
        id when it began, or None when the thread has none of the runs' checkpoints."""
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
        source = thread_id_str(source_thread_id, "source_thread_id")
        target = thread_id_str(target_thread_id, "target_thread_id")
        if source == target:
            raise InvalidInputError(
                f"copy_thread({source!r}, {target!r}) names one thread twice; give a new target"
            )
        src, dst = self.keys(source), self.keys(target)
        target_b = target.encode()
        copied, fit = 0, 8
        # the latest writes events seen: the parts of the checkpoints after them name their bytes
        writes: dict[str, dict[bytes, bytes]] = {}
        # one page at a time: the threads live in different slots, so no single script can see
        # both; every page appended is consistent on its own
        pace = Pace(self.slice_pause)
        pages = LogPages(src.log, self.slice_ms, pace)
        while True:
            entries = yield from pages.next()
            if not entries:
                return copied
            page: list[list[Field | int]] = []
            size = 0
            for entry_id, fields in entries:
                eid = as_text(entry_id)
                kind = fields.get(b"k")
                if kind == b"checkpoint":
                    fields = yield from self._unshared(source, eid, fields, writes)
                elif kind == b"writes":
                    writes[eid] = fields
                    if len(writes) > _WRITES_KEPT:
                        del writes[next(iter(writes))]
                # the event's fields flat, as checkpoint/import.lua takes them: every field but the
                # chain's (the copies are chained anew), whose thread and what it copies in
                # place of the source's own, if it has them (a copy of a copy), else last
                own = {b"thread": target_b, b"copy_of": _copy_of(source, eid)}
                flat: builtins.list[Field | int] = [0]
                for k, v in fields.items():
                    if k not in CHAIN_FIELDS:
                        flat += (k, own.pop(k, v))
                for k, v in own.items():
                    flat += (k, v)
                flat[0] = len(flat) - 1
                weight = sum(map(len, flat[1:]))  # type: ignore[arg-type]
                if page and (len(page) >= _IMPORT_EVENTS or size + weight > _IMPORT_BYTES):
                    # each import is one script: bounded in events and bytes, and it stops
                    # after slice_ms, whatever the log holds (issue 13)
                    took, fit = yield from self._import(dst, page, fit, pace)
                    copied += took
                    page, size = [], 0
                page.append(flat)
                size += weight
            took, fit = yield from self._import(dst, page, fit, pace)
            copied += took

    def _import(
        self,
        dst: ThreadKeys,
        page: builtins.list[builtins.list[Field | int]],
        fit: int,
        pace: Pace,
    ) -> Flow[tuple[int, int]]:
        """Append ``page``'s events to ``dst`` in slices: each call takes what fits its budget.
        A call is sent ``fit`` events, one more than the last one took, not the page's rest:
        the server converts every argument before the script starts, outside its budget, and
        the client would encode the rest again for each call. Returns (appended, next fit)."""
        done = 0
        while done < len(page):
            args: builtins.list[Field | int] = [
                *self._appending_args(),
                self.ttl_ms,
                f"{self.slice_ms:g}",
            ]
            sent = page[done : done + fit]
            for event in sent:
                args += event
            op = Eval("import", self.appending(dst), args, write=True)
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
    ) -> Flow[dict[bytes, bytes]]:
        """A checkpoint event's fields with every part that names a write of its own log
        replaced by the bytes it names: a copy lives in another log, with other event ids.
        A part naming nothing valid (a hand-edited or damaged log) raises, naming the event,
        before anything of its page is copied."""
        shared = [n for n, raw in fields.items() if raw.startswith(_SHARED) and _is_value(n)]
        if not shared:
            # the usual case: nothing to replace (unshared() passes other values as they are)
            return fields
        log = self.keys(thread_id).log
        for name in shared:
            eid = _shared_event(fields[name])
            if eid is None:
                raise CorruptIndexError(
                    f"event {entry_id} of thread {thread_id!r} has a malformed shared part "
                    f"in field {name.decode()}; inspect it with XRANGE and repair or remove "
                    f"it (`streamsaver verify` lists every such reference)"
                )
            if eid not in writes:
                found = yield Call(("XRANGE", log, eid, eid))
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
        for thread_id in _str_list(thread_ids, "thread_ids"):
            if strategy == "delete":
                yield from self.delete_thread(thread_id)
            else:
                yield from self.compact(thread_id, 1)

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
        (lua/checkpoint/compact_slice.lua).
        Returns (entries removed, checkpoints deleted), a refusal, or None when the server is
        out of memory or others kept rewriting the log under the slices: the caller then runs
        one script (which frees first)."""
        keys = self.keys(thread_id)
        scratch = compact_keys(keys)
        token, pace = secrets.token_hex(8), Pace(self.slice_pause)
        start, restarts = True, 0
        while restarts <= _REBUILD_RESTARTS:
            args = (*self._appending_args(), keep, token, "start" if start else "")
            op = Eval(
                "compact_slice",
                (*self.appending(keys), *scratch),
                (*args, self.slice_events, f"{self.slice_ms:g}", *deleting),
                write=True,
            )
            if start:
                # pipelined, so a refusal is a value: the first slice, one unit of work, is the
                # first to write, and never the last (lua/checkpoint/compact_slice.lua)
                (reply,) = yield from self._slice(Each((op,)), pace)
            else:
                # alone, so a durability mode waits after it: the swap is acknowledged as any
                # write is
                reply = yield from self._slice(op, pace)
            if _out_of_memory(reply):
                break
            if isinstance(reply, Exception):
                raise reply
            if reply[0] == b"oom":
                break
            if reply[0] == b"delta":
                return reply
            state, fresh, removed, deleted = reply
            if int(fresh) and not start:
                # another compaction or a deletion rewrote the log under the slices
                restarts += 1
            start = False
            if as_text(state) == "done":
                return int(removed), int(deleted)
        # as before slices existed, rather than never finishing
        yield Call(("UNLINK", *scratch), write=True)
        return None

    def _slice(self, op: Eval | Each, pace: Pace) -> Flow[Any]:
        """One slice of a long operation, then ``pace``'s pause."""
        reply = yield op
        yield from pace.rest()
        return reply

    def rebuild(self, thread_id: str) -> Flow[Replay]:
        (replay,) = yield from self.rebuild_many([thread_id])
        return replay

    def rebuild_many(self, thread_ids: Sequence[str]) -> Flow[builtins.list[Replay]]:
        """Rebuild several threads in slices (lua/checkpoint/replay_slice.lua): each call replays at
        most
        ``slice_events`` events or ``slice_ms`` of server time, so no tenant's long log holds
        the server; a round's pipeline (Redis runs it as one block) shares one slice's budget
        among threads (round_width: one thread at the default slice_ms).
        Each thread's indexes are swapped in whole, by its last slice: readers never see a
        half-rebuilt index, and writes made meanwhile are kept."""
        ids = [thread_id_str(t, "thread_id") for t in thread_ids]
        keys = [self.keys(t) for t in ids]
        done: dict[int, Replay] = {}
        cursors = [""] * len(keys)
        totals = [Replay(0, 0, []) for _ in keys]
        restarts, pace = [0] * len(keys), Pace(self.slice_pause)
        width = round_width(self.slice_ms)
        while len(done) < len(keys):
            pending = [i for i in range(len(keys)) if i not in done][:width]
            budget = f"{self.slice_ms / len(pending):g}"
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
                    if restarts[i] > _REBUILD_RESTARTS:
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

    def verify(self, thread_id: str) -> Flow[tuple[int, int, builtins.list[str]]]:
        """Check every reference the log's events make, then replay into scratch keys and diff
        with the live indexes: (applied, skipped, problems), each problem a line
        (checkpoint/verify.lua):
        ``ref <event id> ...`` or ``<ix|ptr> <missing|differs|extra> <member>``. In slices
        (lua/checkpoint/verify_slice.lua), safe while graphs write."""
        keys = self.keys(thread_id_str(thread_id, "thread_id"))
        found = yield from self._verify(keys, "")
        if isinstance(found, Exception):
            raise found
        return found

    def references(self, thread_id: str) -> Flow[builtins.list[str] | None]:
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

    def _verify(
        self, keys: ThreadKeys, mode: str
    ) -> Flow[tuple[int, int, builtins.list[str]] | Exception]:
        """verify.lua's work in slices, each at most ``slice_events`` units of work or
        ``slice_ms`` of server time; a refusal comes back as a value."""
        token, start, restarts = secrets.token_hex(8), True, 0
        pace = Pace(self.slice_pause)
        applied = skipped = 0
        refs: builtins.list[str] = []
        diffs: set[str] = set()
        while restarts <= _REBUILD_RESTARTS:
            args = (mode, token, "start" if start else "", self.slice_events, f"{self.slice_ms:g}")
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
        constant memory."""
        log = self.keys(thread_id_str(thread_id, "thread_id")).log
        pages = LogPages(log, self.slice_ms, Pace(self.slice_pause))
        while page := (yield from pages.next()):
            for entry_id, fields in page:
                yield Emit((as_text(entry_id), [(_b(k), _b(v)) for k, v in fields.items()]))

    def deletion_entries(self, thread_id: str) -> Items[Entry]:
        """The records of this thread's deletions, from the audit stream of its slot."""
        thread = thread_id_str(thread_id, "thread_id").encode()
        key = audit_of_log(self.prefix, self.keys(thread_id).log)
        pages = LogPages(key, self.slice_ms, Pace(self.slice_pause))
        while page := (yield from pages.next()):
            for entry_id, fields in page:
                if _b(fields.get(b"thread", b"")) == thread:
                    yield Emit((as_text(entry_id), [(_b(k), _b(v)) for k, v in fields.items()]))

    def _threads_for(self, query: tuple[Field, ...]) -> Flow[builtins.list[str]]:
        """The threads a cross-thread read looks at, sorted: the projector's candidates
        (checkpoint/projections.py), or every log when they cannot be used. A saver that announces
        nothing (feed_maxlen 0) cannot trust feeds to name every thread: it reads the slots'
        thread indexes."""
        if self.projections is not None and self.feed_maxlen > 0:
            found = yield from self.projections.candidates(query)
            if found is not None:
                return found
        return (yield from self.threads())

    def threads(self, deleted: bool = False) -> Flow[builtins.list[str]]:
        """Every thread with a log, from the slots' thread indexes; ``deleted``: also those
        whose log holds only their deletion (lua/checkpoint/delete_thread.lua) until it expires or
        the
        id is used again."""
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


def _out_of_memory(reply: object) -> bool:
    # Redis 6.2 reports a script's OOM as a plain error
    return isinstance(reply, OutOfMemoryError) or (
        isinstance(reply, Exception) and "maxmemory" in str(reply)
    )


def _b(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _nothing_known(channel: str) -> Known | None:
    return None


def _write_fields(fields: Sequence[Field]) -> Iterator[tuple[str, bytes]]:
    """The ``w<i>`` fields of a writes event (see core.codec.writes_event)."""
    for name, raw in zip(fields[::2], fields[1::2], strict=True):
        if (
            isinstance(name, str)
            and name[:1] == "w"
            and name[1:].isdigit()
            and isinstance(raw, bytes)
        ):
            yield name, raw


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


def _bases(event: CheckpointEvent) -> bytes | str:
    return ormsgpack.packb(event.bases) if event.bases else ""


def _copy_of(source: str, entry_id: bytes | str) -> bytes:
    eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return ormsgpack.packb([source, eid])


def _str_list(values: object, name: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidInputError(f"{name} must be a list of strings, got {values!r}")
    return [thread_id_str(v, f"{name}[{i}]") for i, v in enumerate(values)]


def _filter_args(filter: object) -> tuple[bytes | str, bytes | str]:
    """(metadata that must equal, as [key, form, ...]; keys that must be absent or None) as
    script arguments."""
    if not filter:
        return "", ""
    if not isinstance(filter, dict) or not all(isinstance(k, str) for k in filter):
        raise InvalidInputError(f"filter must be a dict of metadata key to value, got {filter!r}")
    _check_metadata(filter, "filter", stored=False)
    # values as their forms (lua/shared/meta.lua): cmsgpack would turn them into Lua values, which
    # lose integers beyond 2^53 and [] vs {}
    match = [x for k, v in filter.items() if v is not None for x in (k, metadata_form(v))]
    # None means absent or None (as in InMemorySaver), so those keys travel apart
    nulls = [k for k, v in filter.items() if v is None]
    return (ormsgpack.packb(match) if match else ""), (ormsgpack.packb(nulls) if nulls else "")
