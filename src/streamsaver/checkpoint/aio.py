"""``AsyncRedisStreamSaver``: the asyncio shell. It only sends what ``checkpoint.ops`` yields."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

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
from redis.exceptions import ClusterError, ResponseError

from ..audit import trail as audit
from ..core.chain import ChainCheck
from ..core.errors import LOST
from ..core.flow import Call, Eval, Flow, Pause, Step, T, adrive, aiterate
from ..core.slicing import Replay
from ..events import ProjectorLag, SkippedEvent, ThreadDeletion, ThreadEvent, ThreadInfo
from ..tailing import AsyncConsumerGroup, AsyncTail, AsyncTailAll
from ..transport.clients import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RETRIES,
    DEFAULT_SOCKET_TIMEOUT_S,
)
from ..transport.core import (
    Durably,
    LoadScripts,
    LoadThere,
    Pipeline,
    Relearn,
    Verbs,
    arun,
    loaded,
    only,
    what,
)
from ..transport.exchange import ScanNode, Views, exchange
from ..transport.moves import Moves
from ..transport.opening import aopen_client
from ..transport.pipelining import AutoPipeline, NodePipelines
from ..transport.sending import aload_scripts, arelearn, asend_pipeline, routed
from .base import StreamSaverBase, from_conn_string_options, page_limit
from .bridges import OnLoop
from .calls import acall_through, node_views, scan_node
from .history import delta_channel_history
from .options import GroupOptions, SaverOptions, TailAllOptions, TailOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AsyncRedisStreamSaver"]

AsyncClient = aredis.Redis | AsyncRedisCluster


class AsyncRedisStreamSaver(OnLoop, StreamSaverBase[AsyncClient]):
    """The asyncio twin of ``RedisStreamSaver``, over a ``redis.asyncio`` client.

    Its sync methods (``get_tuple``, ``list``, ...) work from other threads while the saver's
    event loop runs, as LangGraph's ``graph.get_state`` needs; on the loop's own thread they
    raise ``InvalidUsageError``, because blocking there would deadlock.
    """

    _client_types = (aredis.Redis, AsyncRedisCluster)
    _client_text = (
        "AsyncRedisStreamSaver",
        "a redis.asyncio.Redis or RedisCluster",
        "for synchronous clients use RedisStreamSaver",
    )

    def _attach(self, client: AsyncClient) -> None:
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
            ScanNode: lambda step: acall_through(scan_node(client, step)),
            Views: lambda step: acall_through(node_views(client)),
        }
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
        cluster: bool | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT_S,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        **options: Unpack[SaverOptions],
    ) -> AsyncIterator[AsyncRedisStreamSaver]:
        """``RedisStreamSaver.from_conn_string`` over a ``redis.asyncio`` client: a saver on a
        client it creates from ``url``, checked on entry as ``asetup()`` does, closed on exit."""
        kwargs, probing = from_conn_string_options(
            options, connect_timeout, socket_timeout, retries, sync=False
        )
        client = await aopen_client(url, cluster, kwargs, probing)
        try:
            saver = cls(client, **options)
            # the server is checked here, so a server that cannot keep threads is refused
            # before the caller uses the saver
            await saver.asetup()
            yield saver
        finally:
            await client.aclose()

    async def asetup(self) -> None:
        """``RedisStreamSaver.setup``, awaited; the saver's sync methods run on this loop."""
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
        for command in step.commands:
            # on the shared connection too: calls that all met a fresh server must not each
            # take a connection of their own to load the library
            try:
                only(await self._autopipe.send([command]))
            except ResponseError as exc:
                loaded(exc)

    async def _send(self, step: Pipeline) -> builtins.list[Any]:
        commands = step.commands
        if self._autopipe is not None:
            return await self._autopipe.send(commands)
        if len(commands) == 1:
            # one command skips the pipeline object: the common case of a graph's calls
            try:
                send: Any = self.client.execute_command
                return [await send(*commands[0], **routed(self.client, commands[0]))]
            except (ResponseError, ClusterError) as exc:
                return [exc]
        return await asend_pipeline(self.client, step)

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
            await client.execute_command(*step.command)
            return
        node, _ = await self._target(step.key, step.asked)
        await client.execute_command(*step.command, target_nodes=node)

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
        """``RedisStreamSaver.list``, as an async iterator: the same checkpoints in the same
        order, one round trip per page of 100."""
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
        """``RedisStreamSaver.get_delta_channel_history``, awaited: one round trip."""
        return await self._run(delta_channel_history(self._ops, config, channels))

    async def arebuild(self, thread_id: str) -> Replay:
        """``RedisStreamSaver.rebuild``, awaited."""
        return await self._run(self._ops.rebuild(thread_id))

    async def averify(self, thread_id: str) -> tuple[int, int, builtins.list[str]]:
        """``RedisStreamSaver.verify``, awaited: (applied, skipped, problems)."""
        return await self._run(self._ops.verify(thread_id))

    async def athread_ids(self, *, deleted: bool = False) -> builtins.list[str]:
        """``RedisStreamSaver.thread_ids``, awaited."""
        return await self._run(self._ops.threads(deleted))

    # --- the audit trail (streamsaver.audit, docs/audit.md) --------------------------------------

    async def ahistory(
        self, thread_id: str, *, values: bool = False
    ) -> AsyncIterator[ThreadEvent | SkippedEvent]:
        """``RedisStreamSaver.history``, as an async iterator."""
        if self.server_version is None:
            await self.asetup()
        flow = audit.history(self._ops, thread_id, self.serde, values)
        async for event in aiterate(flow, self._execute):
            yield event

    async def ahistory_page(
        self, thread_id: str, *, before: str | None = None, limit: int = 200
    ) -> tuple[builtins.list[ThreadEvent | SkippedEvent], bool]:
        """``RedisStreamSaver.history_page``, awaited."""
        if self.server_version is None:
            await self.asetup()
        return await self._run(audit.page(self._ops, thread_id, self.serde, before, limit))

    async def averify_chain(self, thread_id: str) -> ChainCheck:
        """``RedisStreamSaver.verify_chain``, awaited."""
        return await self._run(audit.verify_chain(self._ops, thread_id))

    async def alatest_events(
        self, thread_ids: Sequence[str], *, count: int = 1
    ) -> dict[str, builtins.list[ThreadEvent | SkippedEvent]]:
        """``RedisStreamSaver.latest_events``, awaited."""
        return await self._run(audit.latest(self._ops, thread_ids, self.serde, count))

    async def adeletions(self, thread_id: str) -> builtins.list[ThreadDeletion]:
        """``RedisStreamSaver.deletions``, awaited."""
        return await self._run(audit.deletions(self._ops, thread_id))

    async def aexport_audit(
        self, thread_ids: Sequence[str], out: TextIO, *, serde: SerializerProtocol | None = None
    ) -> int:
        """``RedisStreamSaver.export_audit``, awaited."""
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
        """``RedisStreamSaver.projector_lag`` (``fresh=True``), awaited."""
        return await self._run(self._projections.lag())

    async def aseed_projections(
        self, slots: Iterable[int] | None = None, *, unseeded_only: bool = False
    ) -> int:
        """``RedisStreamSaver.seed_projections``, awaited."""
        return await self._run(
            self._projections.seed(slots, self.slice_ms, self.slice_pause, unseeded_only)
        )

    def setup(self) -> None:
        self._sync(self.asetup())

    # Live tailing (docs/tailing.md), as async iterators (``async for e in saver.atail(t)``).
    # Each reader has a connection of its own for its blocking reads, closed when it ends:
    # aclose() (or cancel the task; stop() from another task).
    def atail(self, thread_id: str, **options: Unpack[TailOptions]) -> AsyncTail:
        """``RedisStreamSaver.tail``, as an async iterator: one thread's events, in order."""
        return AsyncTail(self, self._thread_tail("atail", thread_id, options))

    def atail_all(self, **options: Unpack[TailAllOptions]) -> AsyncTailAll:
        """``RedisStreamSaver.tail_all``, as an async iterator: every thread's events."""
        return AsyncTailAll(self, self._feed_tail("atail_all", options))

    def aconsumer_group(
        self, group: str, consumer: str | None = None, **options: Unpack[GroupOptions]
    ) -> AsyncConsumerGroup:
        """``RedisStreamSaver.consumer_group``, as an async iterator of ``Delivery`` values:
        ``await group.ack(delivery)`` each one handled; ``aclose()`` deletes this member
        unless entries are still pending for it."""
        return AsyncConsumerGroup(
            self, self._group_reader("aconsumer_group", group, consumer, options)
        )
