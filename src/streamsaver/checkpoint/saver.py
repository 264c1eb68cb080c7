"""``RedisStreamSaver``: the synchronous shell. It only sends what ``checkpoint.ops`` yields."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.cluster import RedisCluster
from redis.exceptions import ClusterError, ResponseError

from ..audit import trail as audit
from ..core.chain import ChainCheck
from ..core.errors import LOST
from ..core.flow import Call, Eval, Flow, Pause, Step, T, drive, iterate
from ..core.slicing import Replay
from ..events import ProjectorLag, SkippedEvent, ThreadDeletion, ThreadEvent, ThreadInfo
from ..lua import SOURCES
from ..tailing import ConsumerGroup, Tail, TailAll
from ..transport.clients import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RETRIES,
    DEFAULT_SOCKET_TIMEOUT_S,
)
from ..transport.connection import HeldConnection, NodeConnections
from ..transport.core import Durably, LoadScripts, LoadThere, Pipeline, Relearn, Verbs, run, what
from ..transport.exchange import ScanNode, Views, exchange
from ..transport.moves import Moves
from ..transport.opening import open_client
from ..transport.sending import load_scripts, relearn, routed, send_pipeline
from .base import StreamSaverBase, from_conn_string_options, page_limit
from .bridges import InThread
from .calls import call_through, node_views, scan_node
from .history import delta_channel_history
from .migrate import Migrated, migrate_keys, reindex_threads
from .options import GroupOptions, SaverOptions, TailAllOptions, TailOptions
from .projections import Applied

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RedisStreamSaver"]

SyncClient = redis.Redis | RedisCluster


class RedisStreamSaver(InThread, StreamSaverBase[SyncClient]):
    """A LangGraph checkpointer that appends every ``put`` and ``put_writes`` to a per-thread
    Redis Stream and answers reads from indexes projected in the same atomic script.

    ``client`` is a ``redis.Redis`` (or ``RedisCluster``) created with the default
    ``decode_responses=False``. Keys live under ``prefix``; two savers with different prefixes
    never see each other's threads. The async methods run the sync ones in a worker thread; in
    async code prefer ``AsyncRedisStreamSaver``.
    """

    _client_types = (redis.Redis, RedisCluster)
    _client_text = (
        "RedisStreamSaver",
        "a redis.Redis or RedisCluster",
        "for redis.asyncio clients use AsyncRedisStreamSaver",
    )

    def _attach(self, client: SyncClient) -> None:
        # redis-py's Script objects, for a caller that pipelines scripts itself (a benchmark's
        # bulk fill); the saver sends through transport.core's Scripts
        self._scripts = {name: client.register_script(src) for name, src in SOURCES.items()}
        self._cluster = self._projections.cluster = isinstance(client, RedisCluster)
        self._durable = self.durability.command() is not None
        self._held = HeldConnection.of(client)
        # a cluster client routes each command itself; the hot path sends a script to its
        # key's primary on a connection kept for it instead
        self._nodes = NodeConnections(client) if self._cluster else None
        self._verbs: Verbs = {
            Pipeline: self._send,
            LoadScripts: partial(load_scripts, client),
            Relearn: partial(relearn, client),
            Pause: lambda step: time.sleep(step.seconds),
            Durably: self._durably,
            LoadThere: self._load_there,
            ScanNode: lambda step: call_through(scan_node(client, step)),
            Views: lambda step: call_through(node_views(client)),
        }

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        url: str,
        *,
        cluster: bool | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT_S,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        **options: Unpack[SaverOptions],
    ) -> Iterator[RedisStreamSaver]:
        """A saver on a client it creates from ``url`` and closes on exit; ``options`` are the
        constructor's (``prefix``, ``serde``, ``durability``, ``ttl_seconds``, ...). ``cluster``:
        use a ``RedisCluster`` client; ``None`` asks the server (``INFO cluster``) and follows
        it. The server is checked on entry, as ``setup()`` does: a ``maxmemory-policy`` that
        may evict the saver's keys is refused unless ``allow_eviction=True``.

        ``connect_timeout`` bounds each connection attempt (``None``: no limit), ``socket_timeout``
        each reply (10 s by default, raised past ``durability_timeout_ms`` for a durability
        mode's wait; tails bound their blocking reads themselves; ``None``: no limit, a server
        that stops answering is waited on for ever); ``retries`` is how often a connection or
        timeout error is retried, with exponential backoff, before ``ServerUnavailableError``
        (a wrong password is never retried): a call on a silent server raises within about
        ``(retries + 1) * socket_timeout``. A server
        that cannot be reached raises ``ConnectionFailedError``, ``AuthenticationFailedError``
        or ``TLSError`` on entry."""
        kwargs, probing = from_conn_string_options(
            options, connect_timeout, socket_timeout, retries, sync=True
        )
        client = open_client(url, cluster, kwargs, probing)
        try:
            saver = cls(client, **options)
            # the server is checked here, so a server that cannot keep threads is refused
            # before the caller uses the saver
            saver.setup()
            yield saver
        finally:
            client.close()

    def setup(self) -> None:
        """Check the server once: its version, what the options need, a maxmemory-policy that
        could evict the saver's keys (refused unless ``allow_eviction``), and persistence
        (``NoPersistenceWarning`` without AOF or RDB). Idempotent; every call does it itself
        when needed."""
        self.server_version = drive(self._ops.setup(), self._execute)

    def _execute(self, op: Step) -> Any:
        if isinstance(op, Pause):
            return time.sleep(op.seconds)
        first: builtins.list[Any] | Exception | None = None
        if (type(op) is Eval or type(op) is Call) and not (op.write and self._durable):
            # the hot path: the command sent as the core's first round would send it, and
            # done when nothing came back that the core must act on
            commands = (self._seam.command(op),)
            try:
                got = None
                if self._nodes is not None and type(op) is Eval and op.keys:
                    got = self._nodes.send(commands, op.keys[0])
                first = self._send(Pipeline(commands)) if got is None else got
            except LOST as exc:
                first = exc
            else:
                if not isinstance(first[0], Exception):
                    return first[0]
        moves = Moves(self.slot_move_timeout_s, what(op))
        flow = exchange(op, self._seam, self.durability, moves, self._cluster, first)
        return run(flow, self._verbs)

    def _send(self, step: Pipeline) -> builtins.list[Any]:
        commands = step.commands
        if self._held is not None:
            replies = self._held.send(self.client, commands)
            if replies is not None:
                return replies
        if len(commands) == 1:
            # one command skips the pipeline object: the common case of a graph's calls
            try:
                send: Any = self.client.execute_command
                return [send(*commands[0], **routed(self.client, commands[0]))]
            except (ResponseError, ClusterError) as exc:
                return [exc]
        return send_pipeline(self.client, step)

    def _node(self, key: str, asked: tuple[str, int] | None) -> tuple[Any, bool]:
        """The client to send a durable write to, and whether it is the node ``asked`` names
        (an ``ASK``: ``ASKING`` first); else ``key``'s primary, or the client itself on a
        standalone server."""
        # redis-py leaves these untyped; Any keeps mypy from flagging every call
        client: Any = self.client
        if not self._cluster:
            return client, False
        node = asked and client.get_node(host=asked[0], port=asked[1])
        if asked and node is None:  # a node the client has not heard of yet
            client.nodes_manager.initialize()
        return client.get_redis_connection(node or client.get_node_from_key(key)), bool(node)

    def _durably(self, step: Durably) -> builtins.list[Any]:
        # a WAIT counts its own connection's writes: both in one pipeline, to one node
        node, asked = self._node(step.key, step.asked)
        pipe = node.pipeline(transaction=False)
        if asked:
            pipe.execute_command("ASKING")
        for command in step.commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=False)[-2:]  # type: ignore[no-any-return]

    def _load_there(self, step: LoadThere) -> None:
        self._node(step.key, step.asked)[0].execute_command(*step.command)

    def _run(self, flow: Flow[T]) -> T:
        if self.server_version is None:
            self.setup()
        return drive(flow, self._execute)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._ops.get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints matching ``config``, ``filter`` and ``before``, at most ``limit``.

        Order: with ``checkpoint_ns``, that namespace newest first; without, the root
        namespace first, then each subgraph namespace, newest first within each, as
        InMemorySaver lists them (it orders subgraph namespaces by first use, no index keeps
        that: here they follow their length-prefixed bytes); with ``config=None``, threads by
        id, each in that order.
        ``before`` is only an id bound, ``{"configurable": {"checkpoint_id": X}}``: ids below X
        in every namespace listed, wherever X came from (LangGraph's subgraph replay passes a
        parent checkpoint's id with no thread_id). One round trip per page of 100.
        """
        if self.server_version is None:
            self.setup()
        flow = self._ops.list(config, filter=filter, before=before, limit=limit)
        return iterate(flow, self._execute)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._ops.put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(self._ops.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._ops.delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._ops.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._ops.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._ops.prune(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """What a ``DeltaChannel`` needs to rebuild itself at a checkpoint, in one round trip:
        the same result as ``BaseCheckpointSaver``'s walk of one ``get_tuple`` per ancestor."""
        return self._run(delta_channel_history(self._ops, config, channels))

    def rebuild(self, thread_id: str) -> Replay:
        """Re-project the thread's indexes from its log: events applied, events skipped
        (unknown kind, newer schema, malformed) and why."""
        return self._run(self._ops.rebuild(thread_id))

    def rebuild_many(self, thread_ids: Sequence[str]) -> builtins.list[Replay]:
        """``rebuild`` for several threads, pipelined: one round trip per node."""
        return self._run(self._ops.rebuild_many(thread_ids))

    def verify(self, thread_id: str) -> tuple[int, int, builtins.list[str]]:
        """Check that every reference the thread's events make resolves (values, parts,
        parents, writes' checkpoints), then replay its log into scratch keys and compare with
        its live indexes, in slices of a few milliseconds of server time, each caught up with
        the writes made since the last: (applied, skipped, problems), each a line naming the
        event or index entry; no problems means consistent."""
        return self._run(self._ops.verify(thread_id))

    def migrate_keys(self) -> Migrated:
        """Move this prefix's keys from the layout before 0.x (docs/keyspace.md). An admin's
        one-shot job, with the prefix's writers stopped: it needs SCAN and RENAME."""
        return self._run(migrate_keys(self.prefix))

    def reindex_threads(self) -> int:
        """Index every thread log under the prefix (after derived keys were lost); returns how
        many were missing. Needs SCAN: an admin's job, which ``rebuild --all`` runs."""
        return self._run(reindex_threads(self.prefix))

    def thread_ids(self, *, deleted: bool = False) -> builtins.list[str]:
        """Every thread id under this prefix, sorted (from the per-slot thread indexes, one
        script per slot, never SCAN; not for hot paths); with ``deleted``, also the threads
        whose log holds only their deletion."""
        return self._run(self._ops.threads(deleted))

    # --- the audit trail (streamsaver.audit, docs/audit.md) -----------------------------------

    def history(
        self, thread_id: str, *, values: bool = False
    ) -> Iterator[ThreadEvent | SkippedEvent]:
        """The thread's events, oldest first, as a person reads them: forks marked and, with
        ``values``, the checkpoint values each event stores, decoded through the serde.
        Pages through the log, so any length streams in constant memory."""
        if self.server_version is None:
            self.setup()
        return iterate(audit.history(self._ops, thread_id, self.serde, values), self._execute)

    def history_page(
        self, thread_id: str, *, before: str | None = None, limit: int = 200
    ) -> tuple[builtins.list[ThreadEvent | SkippedEvent], bool]:
        """A page of the thread's events for a person: the ``limit`` before event id
        ``before`` (the newest without it), oldest first, forks marked within the page, and
        whether older events exist (pass the page's first id as ``before`` for them)."""
        if self.server_version is None:
            self.setup()
        return self._run(audit.page(self._ops, thread_id, self.serde, before, limit))

    def verify_chain(self, thread_id: str) -> ChainCheck:
        """Walk the thread's digest chain and check its events' references: ``.ok``, or
        ``.problem``, the first event altered, removed or moved, and ``.references``, those that
        do not resolve (as ``verify`` names them); ``.head`` is the last digest."""
        return self._run(audit.verify_chain(self._ops, thread_id))

    def latest_events(
        self, thread_ids: Sequence[str], *, count: int = 1
    ) -> dict[str, builtins.list[ThreadEvent | SkippedEvent]]:
        """Each thread's last ``count`` events, newest first, in one round trip per node."""
        return self._run(audit.latest(self._ops, thread_ids, self.serde, count))

    def deletions(self, thread_id: str) -> builtins.list[ThreadDeletion]:
        """What ``delete_thread`` recorded each time this thread was deleted, oldest first."""
        return self._run(audit.deletions(self._ops, thread_id))

    def export_audit(
        self, thread_ids: Sequence[str], out: TextIO, *, serde: SerializerProtocol | None = None
    ) -> int:
        """Write the threads' audit export (JSON lines, docs/audit.md) to ``out``, decoding
        values with ``serde`` (default: the saver's). Returns the number of events written."""
        writer = audit.ExportWriter(out, self.prefix, serde or self.serde)
        return self._run(audit.export(self._ops, writer, thread_ids))

    def threads(
        self, *, limit: int | None = None, after: ThreadInfo | None = None
    ) -> builtins.list[ThreadInfo]:
        """Threads newest activity first (ties by thread id): a page of ``limit`` after
        ``after`` (the last of the previous page). From the projector's registry plus the
        events it has not applied yet; without a projector, from the thread indexes
        (docs/projector.md)."""
        return self._run(self._projections.threads(page_limit(limit), after))

    def projector_lag(self, *, fresh: bool = True) -> ProjectorLag:
        """Feed entries the projector has not applied yet, per slot, and the oldest's age.
        ``fresh=False`` (the projector's periodic calls) looks for feeds new since this
        saver's first call in one slice of the slots per call rather than in all of them."""
        return self._run(self._projections.lag(fresh))

    def seed_projections(
        self, slots: Iterable[int] | None = None, *, unseeded_only: bool = False
    ) -> int:
        """Rebuild the projector's keys of ``slots`` (default: all) from the logs, as
        ``rebuild --all`` does; returns the number of threads registered. ``unseeded_only``:
        leave the slots that have a cursor (what a projector's first start seeds: another
        replica starting with it may have seeded and moved on)."""
        return self._run(
            self._projections.seed(slots, self.slice_ms, self.slice_pause, unseeded_only)
        )

    def sweep_projections(self) -> int:
        """Forget registry rows and index entries of threads whose log is gone (deleted or
        expired; readers already leave them out); returns how many threads."""
        return self._run(self._projections.sweep())

    def projector_seeded(self) -> bool:
        """Whether a projector or ``rebuild --all`` ever seeded the projections."""
        return self._run(self._projections.seeded())

    def project(self, slot: int, **options: Any) -> Applied:
        """Apply the next entries of one slot's feed (what ``python -m projector run`` does),
        in a slice of the saver's ``slice_ms``."""
        return self._run(self._projections.apply(slot, **{"slice_ms": self.slice_ms, **options}))

    # Live tailing (docs/tailing.md). Each reader has a connection of its own for its blocking
    # reads, closed when it ends: leave the loop, or call close() (stop() from another thread).
    def tail(self, thread_id: str, **options: Unpack[TailOptions]) -> Tail:
        """One thread's events, in order, as ``ThreadEvent`` values.

        ``after``: ``"$"`` (the default: only events appended from now), ``"0"`` (from the
        beginning) or an event id (resume exactly after it; ``tail.position`` is the last one
        handed over). ``follow=False`` ends once caught up with the log's end as of the call;
        ``follow=True`` (the default) waits for new events, in blocking reads of at most
        ``block_ms`` (1 s) and ``count`` (100) events each, until stopped. ``checkpoint_ns``
        keeps one namespace. Events of an unknown kind or a newer schema, or that cannot be decoded,
        go to ``on_skip`` and ``tail.skipped``; they never raise."""
        return Tail(self, self._thread_tail("tail", thread_id, options))

    def tail_all(self, **options: Unpack[TailAllOptions]) -> TailAll:
        """Every thread's events under this prefix, through the per-slot feeds: in order within
        each thread, with no order across threads of different cluster slots. ``after``:
        ``"$"``, ``"0"`` (as far back as the feeds go) or a ``FeedCursor`` (or its JSON):
        ``tail.cursor`` after the last event handled resumes exactly after it. New feeds are
        found every ``discover_ms`` (default 1 s; 5 s on a cluster, where an idle round of
        reads waits ``poll_ms``, default 50). Other options as for ``tail``."""
        return TailAll(self, self._feed_tail("tail_all", options))

    def consumer_group(
        self, group: str, consumer: str | None = None, **options: Unpack[GroupOptions]
    ) -> ConsumerGroup:
        """Join consumer group ``group`` over every thread's events, as ``consumer`` (default:
        host-pid-random), to process each event at least once: iterate for ``Delivery`` values
        and ``group.ack(delivery)`` each one handled. An event not acknowledged within
        ``min_idle_ms`` (default 30 s; a crashed or stuck member) is delivered again, to
        whichever member claims it (every ``claim_ms``, default ``min_idle_ms / 2``); one
        delivered ``max_deliveries`` (5) times is parked in ``<prefix>:{<slot>}:parked``
        instead. Members idle ``reap_idle_ms`` (5 min) with nothing pending are deleted;
        ``close()`` deletes this one unless entries are still pending for it. ``start``
        (``"$"``, ``"0"`` or an id) is where a group created now begins on the feeds that
        exist. Other options as for ``tail_all``."""
        return ConsumerGroup(self, self._group_reader("consumer_group", group, consumer, options))
