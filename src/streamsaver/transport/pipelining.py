"""Auto-pipelining for asyncio: concurrent calls share one connection and one write.

redis-py's asyncio client checks a connection out of its pool for every call (a lock, a health
probe, observability counters) and waits a round trip on it alone: 64 tasks make ~5,800
calls/s where one connection could carry over ten times that. As ioredis's ``autoPipelining``
and valkey-glide's multiplexer do, the calls issued while the event loop runs other tasks are
queued, written together on one connection, and their replies handed back in order.

- Atomicity: each caller's commands are one group, written and answered contiguously; a
  script is one command, so it runs whole whatever else shares the write.
- Error isolation: a server error is the reply of its own command only (a value in its place);
  a network error fails the groups not yet answered, once the connection's retry policy (as
  redis-py's own calls use it) has resent them on a new connection (every streamsaver write
  is idempotent, so resending one that may have run is safe).
- Cancellation: a caller waits on a future, never on the socket. Cancelled, its future is
  dropped; the pump still reads that caller's replies, so no later reply is matched to the
  wrong caller. Cancelling the pump itself (loop shutdown) disconnects the connection before
  it goes back to the pool, so unread replies cannot reach its next user.
- Pacing: a write carries at most ~1,000 commands and ~1 MB; a burst's next write goes once
  at most 500 commands wait for replies on a kept link, once the last is answered through the
  pump. So no wait is longer than one batch's, and a burst cannot outlast the socket timeout
  in one write while the server goes on running what it was sent.
- Every caller is answered: its replies, or the error that failed its write (a connection
  that could not be made included); nothing is sent again once its caller was told.
- Users' clients keep working: the connection comes from the client's own pool, for one
  write and its replies, and goes back; closing the client closes it as before.

Durable writes (``WAIT``/``WAITAOF`` after the write, on the same connection) do not come here:
a ``WAIT`` holds its connection up to the durability timeout, which would stall every call
queued behind it. On a cluster client, ``NodePipelines`` keeps one ``AutoPipeline`` per primary
for the savers' hot path (one script, sent to its key's primary); everything else goes through
redis-py's cluster client, which routes each command to its slot's node and follows a slot in
motion (``transport/moves.py``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .multiplex import Group, Link
from .resp import by_bytes, packed

__all__ = ["AutoPipeline", "NodePipelines"]

Command = tuple[Any, ...]

# one write's bound (``_batch``): ~1 MB drains in milliseconds, and a thousand scripts run in
# well under any socket timeout
_WRITE_COMMANDS = 1000
_WRITE_BYTES = 1 << 20
_BY_CLIENT: weakref.WeakKeyDictionary[Any, AutoPipeline] = weakref.WeakKeyDictionary()
_NODES_BY_CLIENT: weakref.WeakKeyDictionary[Any, NodePipelines] = weakref.WeakKeyDictionary()


@dataclass(slots=True)
class _Lane:
    """One event loop's queue, and its link or pump: futures belong to the loop that made
    them."""

    queued: list[Group] = field(default_factory=list)
    pump: asyncio.Task[None] | None = None
    # the kept connection (transport/multiplex.py); False once the client turned out not to allow
    # one
    link: Link | bool | None = None
    flushing: bool = False
    linking: asyncio.Task[None] | None = None


class AutoPipeline:
    """Groups of commands from concurrent tasks, written together on one pooled connection."""

    def __init__(
        self, client: Any, link_of: Callable[[], Awaitable[Link | None]] | None = None
    ) -> None:
        self.client = client
        # where the kept connection comes from: the client's pool, or a cluster node's own
        self._link_of = link_of or (lambda: Link.of(client))
        self._lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lane] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def of(cls, client: Any) -> AutoPipeline:
        """The one of ``client``, whatever number of savers share it (a saver per request...):
        each keeping a connection of its own would drain the pool."""
        pipe = _BY_CLIENT.get(client)
        if pipe is None:
            pipe = _BY_CLIENT[client] = cls(client)
        return pipe

    async def send(self, commands: Sequence[Command]) -> list[Any]:
        """The replies of ``commands``, in order, a server error as a value in its place."""
        if not commands:
            # nothing to write, so no reply would ever complete the group (an Each over no
            # slots, say): it waited out the socket timeout
            return []
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(loop)
        if lane is None:
            lane = self._lanes[loop] = _Lane()
        link = lane.link
        if link is False:
            return await self._pumped(lane, loop, commands)
        if link is None:  # the first calls: the link is being made
            return await self._linked(lane, loop, commands)
        # the connection's retry policy, as redis-py's own execute_command uses it: a lost
        # link fails what it had not answered, and each caller sends again on a new one
        retry = link.conn.retry  # type: ignore[union-attr]
        return await retry.call_with_retry(  # type: ignore[no-any-return]
            lambda: self._linked(lane, loop, commands), _again
        )

    def submit(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]] | None:
        """The future of ``commands``' replies (as ``send``'s) when this loop's connection is
        kept and up: the hot path, with no coroutine of its own and no resending (a caller
        meeting a lost connection sends again through the core, which decides). None
        otherwise, and the connection is made meanwhile for the calls after this one."""
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(loop)
        if lane is None:
            lane = self._lanes[loop] = _Lane()
        link = lane.link
        if isinstance(link, Link) and link.usable and commands:
            return self._queue(lane, loop, commands)
        if link is not False and lane.linking is None:  # none yet, or lost
            lane.linking = loop.create_task(self._link(lane))
        return None

    def close(self) -> None:
        """Drop this loop's kept connection (its node left the layout)."""
        lane = self._lanes.get(asyncio.get_running_loop())
        if lane is not None and isinstance(lane.link, Link):
            lane.link.close(RedisConnectionError("the cluster node it reached was replaced"))

    async def _linked(
        self, lane: _Lane, loop: asyncio.AbstractEventLoop, commands: Sequence[Command]
    ) -> list[Any]:
        return await self._queue(lane, loop, commands)

    def _queue(
        self, lane: _Lane, loop: asyncio.AbstractEventLoop, commands: Sequence[Command]
    ) -> asyncio.Future[list[Any]]:
        group = Group(commands, loop.create_future())
        lane.queued.append(group)
        if not lane.flushing:
            # the write goes out on the loop's next turn: every call issued before then
            # shares it
            lane.flushing = True
            loop.call_soon(self._flush, lane)
        return group.future

    def _flush(self, lane: _Lane) -> None:
        lane.flushing = False
        link = lane.link
        if isinstance(link, Link) and link.usable:
            # a caller cancelled before its group went out costs nothing
            groups = [group for group in lane.queued if not group.future.done()]
            lane.queued = []
            if groups and link.unanswered < _WRITE_COMMANDS:
                # bytes are bounded by the link, on what it packed: sizing every argument
                # here cost a tenth of a small call
                groups, lane.queued = _batch(groups, None)
                lane.queued[:0] = link.write(groups, _WRITE_BYTES)
            else:
                lane.queued = groups
            if lane.queued:
                # a burst: the rest goes out as replies come in (or the link is lost), so a
                # write never holds more than about one batch unanswered
                link.drained = partial(self._again_soon, lane)
        elif lane.linking is None:
            lane.linking = asyncio.get_running_loop().create_task(self._link(lane))

    def _again_soon(self, lane: _Lane) -> None:
        if not lane.flushing:
            lane.flushing = True
            asyncio.get_running_loop().call_soon(self._flush, lane)

    async def _link(self, lane: _Lane) -> None:
        try:
            link = await self._link_of()
        except BaseException as exc:
            groups, lane.queued = lane.queued, []
            for group in groups:
                _fail(group.future, exc)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            lane.linking = None
        if link is None:
            lane.link = False  # this client keeps the pump (transport/multiplex.py says why)
            if lane.queued and lane.pump is None:
                lane.pump = asyncio.get_running_loop().create_task(self._pump(lane))
            return
        lane.link = link
        self._flush(lane)

    async def _pumped(
        self, lane: _Lane, loop: asyncio.AbstractEventLoop, commands: Sequence[Command]
    ) -> list[Any]:
        future: asyncio.Future[list[Any]] = loop.create_future()
        lane.queued.append(Group(commands, future))
        if lane.pump is None:
            # the pump starts on the loop's next turn: every call issued before then shares
            # its first write
            lane.pump = loop.create_task(self._pump(lane))
        return await future

    async def _pump(self, lane: _Lane) -> None:
        # every caller is answered from here, its error included: nothing is raised out of
        # the task (nobody would retrieve it), but a cancel of the task itself
        try:
            while lane.queued:
                groups, lane.queued = _batch(lane.queued, _WRITE_BYTES)
                await self._exchange([(group.commands, group.future) for group in groups])
        except BaseException as exc:
            for group in lane.queued:
                _fail(group.future, exc)
            lane.queued = []
            if not isinstance(exc, Exception):
                raise
        finally:
            lane.pump = None

    async def _exchange(self, groups: list[tuple[Sequence[Command], asyncio.Future[Any]]]) -> None:
        pool = self.client.connection_pool
        conn = None
        try:
            # inside: a connection that cannot be made fails this batch's callers too
            conn = await pool.get_connection()

            async def attempt() -> None:
                # a caller cancelled before its group went out costs nothing; one cancelled
                # later still has its replies read (and dropped) below
                todo = [(group, future) for group, future in groups if not future.done()]
                if not todo:
                    return
                commands = [command for group, _ in todo for command in group]
                await conn.send_packed_command(packed(conn, commands))
                for group, future in todo:
                    replies: list[Any] = []
                    for command in group:
                        try:
                            replies.append(await self.client.parse_response(conn, command[0]))
                        except ResponseError as exc:
                            replies.append(exc)
                    if not future.done():
                        future.set_result(replies)

            async def reconnect(_: BaseException) -> None:
                await conn.disconnect()

            # the connection's retry policy, as redis-py's own execute_command uses it
            await conn.retry.call_with_retry(attempt, reconnect)
        except BaseException as exc:
            for _, future in groups:
                _fail(future, exc)
            if conn is not None:
                # replies may still be in flight on this connection: nobody else may read them
                await conn.disconnect(nowait=True)
            if not isinstance(exc, Exception):
                raise
        finally:
            if conn is not None:
                await pool.release(conn)


def _batch(queued: list[Group], limit: int | None) -> tuple[list[Group], list[Group]]:
    """The groups of one write, and those left for the next: at most ``_WRITE_COMMANDS``
    commands and, unless ``limit`` is None, about ``limit`` bytes of arguments (one group at
    least). One write of a burst of tens of thousands of calls kept the connection draining
    for longer than the socket timeout, which then failed every call, while the server went
    on running what it had been sent; in bounded writes every wait is one batch's."""
    commands = 0
    for i, group in enumerate(queued):
        commands += len(group.commands)
        if i and commands > _WRITE_COMMANDS:
            queued, rest = queued[:i], queued[i:]
            break
    else:
        rest = []
    if limit is None or len(queued) == 1:
        return queued, rest
    cut = by_bytes([group.commands for group in queued], limit)
    return queued[:cut], queued[cut:] + rest


async def _again(_: BaseException) -> None:
    """Nothing to undo before sending again: the lost link is replaced at the next write."""


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if future.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        future.cancel()
    else:
        future.set_exception(exc)


class NodePipelines:
    """Auto-pipelining on a cluster client: one ``AutoPipeline`` per primary, on a connection
    kept out of that node's own (``Link.of_node``), for the savers' hot path only. A command
    goes to the node the client's slot map names for its key; if that is stale, the node
    answers ``MOVED`` or ``ASK`` as the command's reply and the core learns the layout and sends
    it through the client (``transport.core.rounds``). A node the map replaced (a failover, a new
    layout) has its connection dropped."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._pipes: dict[str, tuple[Any, AutoPipeline]] = {}

    @classmethod
    def of(cls, client: Any) -> NodePipelines:
        pipes = _NODES_BY_CLIENT.get(client)
        if pipes is None:
            pipes = _NODES_BY_CLIENT[client] = cls(client)
        return pipes

    def submit(self, commands: Sequence[Command], key: str) -> asyncio.Future[list[Any]] | None:
        """As ``AutoPipeline.submit``, on the connection of ``key``'s primary."""
        try:
            node = self.client.get_node_from_key(key)
        except Exception:
            return None
        if node is None:
            return None
        held = self._pipes.get(node.name)
        if held is None or held[0] is not node:
            if held is not None:
                held[1].close()
            held = self._pipes[node.name] = (node, AutoPipeline(None, partial(Link.of_node, node)))
        return held[1].submit(commands)
