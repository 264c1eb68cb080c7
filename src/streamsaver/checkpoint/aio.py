"""``AsyncRedisStreamSaver``: the asyncio shell. It only sends what ``checkpoint.ops`` yields."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TextIO

import redis.asyncio as aredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import (
    ClusterError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..audit import trail as audit
from ..core.chain import ChainCheck
from ..core.durability import DurabilityMode
from ..core.errors import LOST, InvalidInputError, InvalidUsageError, connect_error
from ..core.flow import Call, Eval, Flow, Pause, Step, T, adrive, aiterate
from ..core.slicing import DEFAULT_SLICE_MS, DEFAULT_SLICE_PAUSE, Replay
from ..events import FeedCursor, ProjectorLag, SkippedEvent, ThreadDeletion, ThreadEvent, ThreadInfo
from ..tailing.feeds import FeedTail
from ..tailing.groups import GroupReader
from ..tailing.shells import AsyncConsumerGroup, AsyncTail, AsyncTailAll, default_consumer_name
from ..tailing.steps import DEFAULT_BLOCK_MS, DEFAULT_COUNT, DEFAULT_POLL_MS, Report
from ..tailing.thread import ThreadTail
from ..transport.clients import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RETRIES,
    client_options,
    probe_options,
)
from ..transport.core import (
    Durably,
    LoadScripts,
    LoadThere,
    Pipeline,
    Relearn,
    Verbs,
    arun,
    only,
    what,
)
from ..transport.exchange import ScanNode, Views, exchange
from ..transport.moves import DEFAULT_SLOT_MOVE_TIMEOUT_S, Moves
from ..transport.pipelining import AutoPipeline, NodePipelines
from ..transport.sending import aload_scripts, arelearn, asend_pipeline
from .base import (
    DEFAULT_DELTA_CACHE_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PREFIX,
    StreamSaverBase,
    check_client,
    config_readable,
    page_limit,
)
from .history import delta_channel_history

__all__ = ["AsyncRedisStreamSaver"]

AsyncClient = aredis.Redis | AsyncRedisCluster


class AsyncRedisStreamSaver(StreamSaverBase):
    """The asyncio twin of ``RedisStreamSaver``, over a ``redis.asyncio`` client.

    Its sync methods (``get_tuple``, ``list``, ...) work from other threads while the saver's
    event loop runs, as LangGraph's ``graph.get_state`` needs; on the loop's own thread they
    raise ``InvalidUsageError``, because blocking there would deadlock.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        delta_cache_bytes: int = DEFAULT_DELTA_CACHE_BYTES,
        durability: DurabilityMode = "none",
        replicas: int = 1,
        durability_timeout_ms: int = 1000,
        fencing: bool = False,
        ttl_seconds: float | None = None,
        keep_last: int | None = None,
        chain: bool = True,
        allow_eviction: bool = False,
        reuse_items: bool = False,
        slot_move_timeout_s: float = DEFAULT_SLOT_MOVE_TIMEOUT_S,
        slice_ms: float = DEFAULT_SLICE_MS,
        slice_pause: float = DEFAULT_SLICE_PAUSE,
    ) -> None:
        if not isinstance(client, (aredis.Redis, AsyncRedisCluster)):
            raise InvalidInputError(
                f"AsyncRedisStreamSaver needs a redis.asyncio.Redis or RedisCluster client, got "
                f"{type(client).__name__}; for synchronous clients use RedisStreamSaver"
            )
        check_client(client, "AsyncRedisStreamSaver")
        super().__init__(
            prefix=prefix,
            serde=serde,
            max_payload_bytes=max_payload_bytes,
            delta_cache_bytes=delta_cache_bytes,
            durability=durability,
            replicas=replicas,
            durability_timeout_ms=durability_timeout_ms,
            fencing=fencing,
            ttl_seconds=ttl_seconds,
            keep_last=keep_last,
            chain=chain,
            allow_eviction=allow_eviction,
            reuse_items=reuse_items,
            slot_move_timeout_s=slot_move_timeout_s,
            slice_ms=slice_ms,
            slice_pause=slice_pause,
        )
        self.client = client
        self._ops.read_config = config_readable(client)
        # concurrent calls share one connection's writes (transport/pipelining.py); a cluster client
        # routes each command to its slot's node itself, but the hot path sends a script
        # straight to its key's primary, on a connection kept for it
        self._cluster = self._projections.cluster = isinstance(client, AsyncRedisCluster)
        self._autopipe = None if self._cluster else AutoPipeline.of(client)
        self._nodes = NodePipelines.of(client) if self._cluster else None
        self._durable = self.durability.command() is not None
        self._verbs: Verbs = {
            Pipeline: self._send,
            LoadScripts: self._load,
            Relearn: partial(arelearn, client),
            Pause: lambda step: asyncio.sleep(step.seconds),
            Durably: self._durably,
            LoadThere: self._load_there,
            ScanNode: self._scan_node,
            Views: self._views,
        }
        self.server_version: tuple[int, ...] | None = None
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        delta_cache_bytes: int = DEFAULT_DELTA_CACHE_BYTES,
        durability: DurabilityMode = "none",
        replicas: int = 1,
        durability_timeout_ms: int = 1000,
        fencing: bool = False,
        ttl_seconds: float | None = None,
        keep_last: int | None = None,
        chain: bool = True,
        allow_eviction: bool = False,
        reuse_items: bool = False,
        slice_ms: float = DEFAULT_SLICE_MS,
        slice_pause: float = DEFAULT_SLICE_PAUSE,
        cluster: bool | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT_S,
        socket_timeout: float | None = None,
        retries: int = DEFAULT_RETRIES,
    ) -> AsyncIterator[AsyncRedisStreamSaver]:
        """A saver on a client it creates from ``url`` and closes on exit. ``cluster``: use a
        ``RedisCluster`` client; ``None`` asks the server (``INFO cluster``) and follows it.
        The server is checked on entry, as ``setup()`` does: a ``maxmemory-policy`` that may
        evict the saver's keys is refused unless ``allow_eviction=True``. ``connect_timeout``,
        ``socket_timeout`` and ``retries`` as in ``RedisStreamSaver.from_conn_string``."""
        client: AsyncClient
        options = client_options(connect_timeout, socket_timeout, retries, sync=False)
        probe = aredis.Redis.from_url(url, **probe_options(options, sync=False))
        try:
            enabled = bool((await probe.info("cluster")).get("cluster_enabled"))
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise connect_error(exc, url) from exc
        finally:
            await probe.aclose()
        cluster = enabled if cluster is None else cluster
        if cluster:
            client = AsyncRedisCluster.from_url(url, **options)
        else:
            client = aredis.Redis.from_url(url, **options)
        try:
            saver = cls(
                client,
                prefix=prefix,
                serde=serde,
                max_payload_bytes=max_payload_bytes,
                delta_cache_bytes=delta_cache_bytes,
                durability=durability,
                replicas=replicas,
                durability_timeout_ms=durability_timeout_ms,
                fencing=fencing,
                ttl_seconds=ttl_seconds,
                keep_last=keep_last,
                chain=chain,
                allow_eviction=allow_eviction,
                reuse_items=reuse_items,
                slice_ms=slice_ms,
                slice_pause=slice_pause,
            )
            # the server is checked here, so a server that cannot keep threads is refused
            # before the caller uses the saver
            await saver.asetup()
            yield saver
        finally:
            await client.aclose()

    async def asetup(self) -> None:
        """Check the server once: its version, what the options need, a maxmemory-policy that
        could evict the saver's keys (refused unless ``allow_eviction``), and persistence
        (``NoPersistenceWarning`` without AOF or RDB). Idempotent; every call does it itself
        when needed."""
        self.loop = asyncio.get_running_loop()
        self.server_version = await adrive(self._ops.setup(), self._execute)

    async def _execute(self, op: Step) -> Any:
        if isinstance(op, Pause):
            return await asyncio.sleep(op.seconds)
        first: builtins.list[Any] | Exception | None = None
        if (type(op) is Eval or type(op) is Call) and not (op.write and self._durable):
            # the hot path: the command sent as the core's first round would send it, and
            # done when nothing came back that the core must act on
            commands = (self._seam.command(op),)
            kept = None
            if self._autopipe is not None:
                kept = self._autopipe.submit(commands)
            elif self._nodes is not None and type(op) is Eval and op.keys:
                kept = self._nodes.submit(commands, op.keys[0])
            try:
                first = await (self._send(Pipeline(commands)) if kept is None else kept)
            except LOST as exc:
                # a kept connection lost: the core sends again under the client's retry
                # policy; anything else has had that policy already
                first = None if kept is not None else exc
            else:
                if not isinstance(first[0], Exception):
                    return first[0]
        moves = Moves(self.slot_move_timeout_s, what(op))
        flow = exchange(op, self._seam, self.durability, moves, self._cluster, first)
        return await arun(flow, self._verbs)

    async def _load(self, step: LoadScripts) -> None:
        if self._autopipe is None:
            await aload_scripts(self.client, step)
            return
        for source in step.sources:
            # on the shared connection too: calls that all met a fresh server must not each
            # take a connection of their own to load the script
            only(await self._autopipe.send([("SCRIPT", "LOAD", source)]))

    async def _send(self, step: Pipeline) -> builtins.list[Any]:
        commands = step.commands
        if self._autopipe is not None:
            return await self._autopipe.send(commands)
        if len(commands) == 1:
            # one command skips the pipeline object: the common case of a graph's calls
            try:
                return [await self.client.execute_command(*commands[0])]
            except (ResponseError, ClusterError) as exc:
                return [exc]
        return await asend_pipeline(self.client, step)

    async def _scan_node(self, step: ScanNode) -> tuple[int, builtins.list[Any]]:
        # redis-py leaves these untyped; Any keeps mypy from flagging every call
        client: Any = self.client
        if step.node is None:
            return await client.scan(step.cursor, match=step.pattern, count=1000, _type="STREAM")  # type: ignore[no-any-return]
        node = client.get_node(node_name=step.node)
        if node is None:  # a node the client has not heard of yet
            await client.nodes_manager.initialize()
            node = client.get_node(node_name=step.node)
        cursors, keys = await client.scan(
            step.cursor, match=step.pattern, count=1000, _type="STREAM", target_nodes=node
        )
        return next(iter(cursors.values())), keys

    async def _views(self, step: Views) -> dict[str, Any]:
        client: Any = self.client
        return {
            node.name: await client.execute_command("CLUSTER NODES", target_nodes=node)
            for node in client.get_primaries()
        }

    async def _target(self, key: str, asked: tuple[str, int] | None) -> tuple[Any, bool]:
        """The cluster node a durable write goes to, and whether it is the node ``asked``
        names (an ``ASK``: ``ASKING`` first); else ``key``'s primary."""
        # redis-py leaves these untyped; Any keeps mypy from flagging every call
        client: Any = self.client
        await client.initialize()
        node = asked and client.get_node(*asked)
        if asked and node is None:  # a node the client has not heard of yet
            await client.nodes_manager.initialize()
        return node or client.get_node_from_key(key), bool(node)

    async def _durably(self, step: Durably) -> builtins.list[Any]:
        # a WAIT counts its own connection's writes: on a cluster both commands name the
        # key's primary as their target, and the pipeline sends a node's commands together,
        # in order, on one of its connections
        client: Any = self.client
        if not self._cluster:
            pipe = client.pipeline(transaction=False)
            for command in step.commands:
                pipe.execute_command(*command)
            return (await pipe.execute(raise_on_error=False))[-2:]  # type: ignore[no-any-return]
        node, asking = await self._target(step.key, step.asked)
        pipe = client.pipeline()
        if asking:
            pipe.execute_command("ASKING", target_nodes=node)
        for command in step.commands:
            pipe.execute_command(*command, target_nodes=node)
        replies = await pipe.execute(raise_on_error=False, allow_redirections=False)
        return replies[-2:]  # type: ignore[no-any-return]

    async def _load_there(self, step: LoadThere) -> None:
        client: Any = self.client
        if not self._cluster:
            await client.script_load(step.source)
            return
        node, _ = await self._target(step.key, step.asked)
        await client.execute_command("SCRIPT", "LOAD", step.source, target_nodes=node)

    async def _run(self, flow: Flow[T]) -> T:
        if self.server_version is None:
            await self.asetup()
        return await adrive(flow, self._execute)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(self._ops.get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
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
            await self.asetup()
        flow = self._ops.list(config, filter=filter, before=before, limit=limit)
        async for item in aiterate(flow, self._execute):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._run(self._ops.put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._run(self._ops.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(self._ops.delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(self._ops.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(self._ops.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._run(self._ops.prune(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """What a ``DeltaChannel`` needs to rebuild itself at a checkpoint, in one round trip:
        the same result as ``BaseCheckpointSaver``'s walk of one ``get_tuple`` per ancestor."""
        return await self._run(delta_channel_history(self._ops, config, channels))

    async def arebuild(self, thread_id: str) -> Replay:
        """Re-project the thread's indexes from its log: events applied, events skipped
        (unknown kind, newer schema, malformed) and why."""
        return await self._run(self._ops.rebuild(thread_id))

    async def averify(self, thread_id: str) -> tuple[int, int, builtins.list[str]]:
        """``verify``: the thread's references, then its indexes against a replay, in one
        atomic script: (applied, skipped, problems); no problems means consistent."""
        return await self._run(self._ops.verify(thread_id))

    async def athread_ids(self, *, deleted: bool = False) -> builtins.list[str]:
        """Every thread id under this prefix, sorted (from the per-slot thread indexes, one
        script per slot, never SCAN; not for hot paths); with ``deleted``, also the threads
        whose log holds only their deletion."""
        return await self._run(self._ops.threads(deleted))

    # --- the audit trail (streamsaver.audit, docs/audit.md); see RedisStreamSaver -------------

    async def ahistory(
        self, thread_id: str, *, values: bool = False
    ) -> AsyncIterator[ThreadEvent | SkippedEvent]:
        if self.server_version is None:
            await self.asetup()
        flow = audit.history(self._ops, thread_id, self.serde, values)
        async for event in aiterate(flow, self._execute):
            yield event

    async def ahistory_page(
        self, thread_id: str, *, before: str | None = None, limit: int = 200
    ) -> tuple[builtins.list[ThreadEvent | SkippedEvent], bool]:
        if self.server_version is None:
            await self.asetup()
        return await self._run(audit.page(self._ops, thread_id, self.serde, before, limit))

    async def averify_chain(self, thread_id: str) -> ChainCheck:
        return await self._run(audit.verify_chain(self._ops, thread_id))

    async def alatest_events(
        self, thread_ids: Sequence[str], *, count: int = 1
    ) -> dict[str, builtins.list[ThreadEvent | SkippedEvent]]:
        return await self._run(audit.latest(self._ops, thread_ids, self.serde, count))

    async def adeletions(self, thread_id: str) -> builtins.list[ThreadDeletion]:
        return await self._run(audit.deletions(self._ops, thread_id))

    async def aexport_audit(
        self, thread_ids: Sequence[str], out: TextIO, *, serde: SerializerProtocol | None = None
    ) -> int:
        writer = audit.ExportWriter(out, self.prefix, serde or self.serde)
        return await self._run(audit.export(self._ops, writer, thread_ids))

    async def athreads(
        self, *, limit: int | None = None, after: ThreadInfo | None = None
    ) -> AsyncIterator[ThreadInfo]:
        """``RedisStreamSaver.threads``: threads newest activity first, a page at a time;
        an async iterator, as ``alist`` is."""
        for info in await self._run(self._projections.threads(page_limit(limit), after)):
            yield info

    async def aprojector_lag(self) -> ProjectorLag:
        return await self._run(self._projections.lag())

    async def aseed_projections(
        self, slots: Iterable[int] | None = None, *, unseeded_only: bool = False
    ) -> int:
        """RedisStreamSaver.seed_projections, awaited."""
        return await self._run(
            self._projections.seed(slots, self.slice_ms, self.slice_pause, unseeded_only)
        )

    # The sync interface, for callers on other threads (LangGraph's sync get_state & co).
    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self.loop is None or running is self.loop:
            coro.close()
            raise InvalidUsageError(
                "Synchronous calls to AsyncRedisStreamSaver are only allowed from a thread other "
                "than its event loop's, once that loop runs; on the loop use the async interface "
                "(e.g. `await checkpointer.aget_tuple(...)`, `await graph.ainvoke(...)`), and in "
                "synchronous code use RedisStreamSaver"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def setup(self) -> None:
        self._sync(self.asetup())

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(self._sync(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self.aprune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        return self._sync(self.aget_delta_channel_history(config=config, channels=channels))

    # Live tailing (docs/tailing.md), as async iterators (``async for e in saver.atail(t)``).
    # Each reader has a connection of its own for its blocking reads, closed when it ends:
    # aclose() (or cancel the task; stop() from another task).
    def atail(
        self,
        thread_id: str,
        *,
        after: str = "$",
        follow: bool = True,
        checkpoint_ns: str | None = None,
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        on_skip: Report | None = None,
    ) -> AsyncTail:
        """One thread's events, in order, as ``ThreadEvent`` values.

        ``after``: ``"$"`` (only events appended from now), ``"0"`` (from the beginning) or an
        event id (resume exactly after it; ``tail.position`` is the last one handed over).
        ``follow=False`` ends once caught up with the log's end as of the call; ``follow=True``
        waits for new events, in blocking reads of at most ``block_ms``, until stopped.
        ``checkpoint_ns`` keeps one namespace. Events of an unknown kind or a newer schema, or
        that cannot be decoded, go to ``on_skip`` and ``tail.skipped``; they never raise."""
        core = ThreadTail(
            self.prefix,
            self._ops.codec,
            thread_id,
            after=after,
            follow=follow,
            checkpoint_ns=checkpoint_ns,
            block_ms=block_ms,
            count=count,
            on_skip=on_skip,
        )
        return AsyncTail(self, core)

    def atail_all(
        self,
        *,
        after: str | FeedCursor = "$",
        follow: bool = True,
        checkpoint_ns: str | None = None,
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        discover_ms: int | None = None,
        poll_ms: int = DEFAULT_POLL_MS,
        on_skip: Report | None = None,
    ) -> AsyncTailAll:
        """Every thread's events under this prefix, through the per-slot feeds: in order within
        each thread, with no order across threads of different cluster slots. ``after``:
        ``"$"``, ``"0"`` (as far back as the feeds go) or a ``FeedCursor`` (or its JSON):
        ``tail.cursor`` after the last event handled resumes exactly after it. New feeds are
        found every ``discover_ms`` (default 1 s; 5 s on a cluster, where an idle round of
        reads waits ``poll_ms``). Other options as for ``tail``."""
        core = FeedTail(
            self.prefix,
            self._ops.codec,
            after=after,
            follow=follow,
            checkpoint_ns=checkpoint_ns,
            block_ms=block_ms,
            count=count,
            discover_ms=discover_ms,
            poll_ms=poll_ms,
            cluster=isinstance(self.client, AsyncRedisCluster),
            on_skip=on_skip,
        )
        return AsyncTailAll(self, core)

    def aconsumer_group(
        self,
        group: str,
        consumer: str | None = None,
        *,
        start: str = "$",
        min_idle_ms: int = 30_000,
        max_deliveries: int = 5,
        claim_ms: int | None = None,
        reap_idle_ms: int = 300_000,
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        discover_ms: int | None = None,
        poll_ms: int = DEFAULT_POLL_MS,
        on_skip: Report | None = None,
    ) -> AsyncConsumerGroup:
        """Join consumer group ``group`` over every thread's events, as ``consumer`` (default:
        host-pid-random), to process each event at least once: iterate for ``Delivery`` values
        and ``await group.ack(delivery)`` each one handled. An event not acknowledged within
        ``min_idle_ms`` (a crashed or stuck member) is delivered again, to whichever member
        claims it (every ``claim_ms``, default ``min_idle_ms / 2``); one delivered
        ``max_deliveries`` times is parked in ``<prefix>:{<slot>}:parked`` instead. Members
        idle ``reap_idle_ms`` with nothing pending are deleted; ``aclose()`` deletes this one
        unless entries are still pending for it. ``start`` (``"$"``, ``"0"`` or an id) is
        where a group created now begins on the feeds that exist."""
        core = GroupReader(
            self.prefix,
            self._ops.codec,
            group=group,
            consumer=default_consumer_name() if consumer is None else consumer,
            start=start,
            min_idle_ms=min_idle_ms,
            max_deliveries=max_deliveries,
            claim_ms=claim_ms,
            reap_idle_ms=reap_idle_ms,
            block_ms=block_ms,
            count=count,
            discover_ms=discover_ms,
            poll_ms=poll_ms,
            cluster=isinstance(self.client, AsyncRedisCluster),
            on_skip=on_skip,
        )
        return AsyncConsumerGroup(self, core)
