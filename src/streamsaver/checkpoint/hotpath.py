"""The hot path (``HotPath``): what a graph runs every step, ``put``, ``put_writes``,
``get_tuple`` and ``list``, and ``setup``, which checks the server once before them.
"""

from __future__ import annotations

import builtins
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)

from ..core.codec import CheckpointEvent, Field, Held, metadata_form
from ..core.config import _configurable, before_id, make_config, target_of
from ..core.delta import Known, Written
from ..core.errors import (
    CorruptIndexError,
    InvalidConfigError,
    InvalidInputError,
    NoPersistenceWarning,
    UnsupportedServerError,
)
from ..core.flow import Call, Each, Emit, Eval, Flow, ListFlow
from ..core.keys import lp
from ..core.metadata import check_metadata
from ..core.nodes import send_index, send_target, send_targets
from ..core.server import (
    MIN_SERVER,
    aof_everywhere,
    check_eviction,
    clustered,
    save_points,
    server_version,
)
from .compaction import Compaction

__all__ = ["HotPath"]

# checkpoints per list page (lua/checkpoint/list.lua)
_PAGE = 100


class HotPath(Compaction):
    """A graph's every step; a put past ``keep_last`` compacts (``Compaction``)."""

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

        # channels LangGraph renamed, stored with this checkpoint (see send)
        renamed: ChannelVersions = {}

        def event(known: Callable[[str], Known | None], written: Written | None) -> CheckpointEvent:
            return self.codec.checkpoint_event(
                target.thread_id,
                target.checkpoint_ns,
                checkpoint,
                serializable,
                {**new_versions, **renamed} if renamed else new_versions,
                target.checkpoint_id,
                known,
                written,
                sends,
            )

        keys = self.keys(target.thread_id)

        def send(
            known: Callable[[str], Known | None], written: Written | None
        ) -> Flow[tuple[CheckpointEvent, Any]]:
            # A checkpoint continuing a live parent may name a channel at a version the thread
            # holds under another name only: LangGraph's migration of an older checkpoint
            # renames channels and keeps their versions. The script names them, writing
            # nothing (lua/checkpoint/projection.lua's dangling()); they go again as values of
            # this checkpoint. Each round adds channels the last one did not send, so it ends.
            while True:
                sent = event(known, written)
                args = self._append_args(_bases(sent), sent.fields)
                reply = yield Eval(self._append, self.appending(keys), args, write=True)
                if not (isinstance(reply, list) and reply[0] == b"unstored"):
                    return sent, reply
                versions = checkpoint["channel_versions"]
                named = [r.decode() for r in reply[1:]]
                if not named or any(c in renamed or c not in versions for c in named):
                    # a script that names nothing new would be answered the same for ever
                    raise CorruptIndexError(
                        f"thread {target.thread_id!r}: the append script asked again for "
                        f"channels {named!r} this put already sent; nothing was written. "
                        f"Run `streamsaver verify` on the thread"
                    )
                renamed.update((c, versions[c]) for c in named)

        cache = self.cache
        if cache is None:
            _, reply = yield from send(_nothing_known, None)
            if isinstance(reply, list) and int(reply[1]) < 0:
                yield from self.compact(target.thread_id, self.keep_last)
            return make_config(target.thread_id, target.checkpoint_ns, checkpoint_id)
        scope = (target.thread_id, target.checkpoint_ns)
        written = cache.written(scope, target.checkpoint_id)
        sent, reply = yield from send(lambda channel: cache.get((*scope, channel)), written)
        if reply == b"stale":
            # another writer, a prune or a re-put changed what a base or a shared write was:
            # send whole values
            for channel, _, _ in sent.learned:
                cache.drop((*scope, channel))
            sent, reply = yield from send(_nothing_known, None)
        if isinstance(reply, list):
            # a compaction moved every stored value: what this process holds for the thread
            # no longer names where it is, except what this put just stored; one that trimmed
            # nothing (deferred, lua/checkpoint/compact.lua) moved nothing
            reply, trimmed = reply
            if trimmed:
                cache.drop_thread(target.thread_id)
            if int(trimmed) < 0:
                # the log was too long to compact in the put's script
                # (lua/checkpoint/append.lua): in slices now, which moves this put's values too
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
        extending what the previous one held, per namespace."""
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


def _bases(event: CheckpointEvent) -> bytes | str:
    return ormsgpack.packb(event.bases) if event.bases else ""


def _filter_args(filter: object) -> tuple[bytes | str, bytes | str]:
    """(metadata that must equal, as [key, form, ...]; keys that must be absent or None) as
    script arguments."""
    if not filter:
        return "", ""
    if not isinstance(filter, dict) or not all(isinstance(k, str) for k in filter):
        raise InvalidInputError(f"filter must be a dict of metadata key to value, got {filter!r}")
    check_metadata(filter, "filter", stored=False)
    # values as their forms (lua/shared/meta.lua): cmsgpack would turn them into Lua values, which
    # lose integers beyond 2^53 and [] vs {}
    match = [x for k, v in filter.items() if v is not None for x in (k, metadata_form(v))]
    # None means absent or None (as in InMemorySaver), so those keys travel apart
    nulls = [k for k, v in filter.items() if v is None]
    return (ormsgpack.packb(match) if match else ""), (ormsgpack.packb(nulls) if nulls else "")
