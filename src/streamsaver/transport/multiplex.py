"""One pooled connection kept for auto-pipelined calls, its replies parsed as they arrive.

redis-py reads each reply with its own ``read_response``: a timeout context (a timer on the
loop, set and cancelled), a stream read, the parser, the response callbacks. At 64 concurrent
agent threads that was ~0.3x ``InMemorySaver``'s whole client CPU per checkpoint. Here the
connection is taken from the client's pool once (so redis-py has done its handshake: TLS, ACL
user, credential provider, database, client name) and its socket's asyncio protocol replaced
by ``Link``: a hiredis ``Reader`` fed as bytes arrive, each reply handed to the group it
answers, a group's future resolved when its last reply is in.

- Order: the server answers a connection's commands in order; groups are queued as they are
  written, so the n-th reply belongs to the group at the head of the queue.
- Cancellation: a cancelled caller's future is done; its replies are still parsed and dropped.
- A lost connection (or no reply for ``socket_timeout``) fails every group not yet answered
  with redis-py's ``ConnectionError`` (``TimeoutError``); the callers resend under the
  connection's retry policy (``transport/pipelining.py``), on a fresh ``Link``.
- Closing the client closes the connection (it stays in the pool's in-use set): the protocol
  learns it and passes it on to redis-py's stream, whose ``wait_closed`` ends.

``Link.of`` returns None where this cannot stand in for redis-py's reading: no hiredis, RESP3
(push messages, client-side caching), a connection class of the user's own, a pool sized tightly
(a ``BlockingConnectionPool``, or fewer than 16 connections: one kept for good would starve
what it was sized for), a ``single_connection_client``. Those keep the pump of
``transport/pipelining.py``, which checks a connection out per write.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio.connection as aconn
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse
from redis.exceptions import TimeoutError as RedisTimeoutError

from .resp import by_bytes, packed

hiredis: Any
try:
    import hiredis
except ImportError:  # pragma: no cover - hiredis is an optional extra
    hiredis = None

__all__ = ["Group", "Link"]

_ROOMY = 16
_STOCK = (aconn.Connection, aconn.SSLConnection, aconn.UnixDomainSocketConnection)
_NOT_ENOUGH = False
_LOW_WATER = 500  # unanswered commands below which a burst's next batch is written


class Group:
    """One caller's commands: their replies, in order, and the future that hands them back."""

    __slots__ = ("commands", "future", "replies")

    def __init__(self, commands: Any, future: asyncio.Future[list[Any]]) -> None:
        self.commands = commands
        self.future = future
        self.replies: list[Any] = []


class Link(asyncio.Protocol):
    """The protocol on a kept connection's socket (see the module's docstring)."""

    def __init__(
        self, conn: Any, callbacks: dict[Any, Any], release: Callable[[Any], Awaitable[Any]]
    ) -> None:
        self.release = release  # gives the connection back to where it came from
        self.callbacks = callbacks
        self.conn = conn
        self.reader = hiredis.Reader(
            protocolError=InvalidResponse,
            replyError=BaseParser.parse_error,
            notEnoughData=_NOT_ENOUGH,
        )
        self.waiting: deque[Group] = deque()
        self.lost: BaseException | None = None
        self.loop = asyncio.get_running_loop()
        self.timeout: float | None = conn.socket_timeout
        self.heard = self.loop.time()
        self.watch: asyncio.TimerHandle | None = None
        # commands written and not answered yet, and who to tell once few are (a burst's
        # writer, transport/pipelining.py): at half a batch, or when the link is lost
        self.unanswered = 0
        self.drained: Callable[[], None] | None = None
        self.giving_back: asyncio.Task[None] | None = None
        writer = conn._writer
        if writer is None or writer.transport.is_closing():
            # closed by another task (the client's aclose) while it was being taken: its
            # connection_lost may have gone to redis-py's protocol already, and a write on it
            # would be dropped without a word, leaving its callers waiting for good
            raise RedisConnectionError("the connection was closed while it was being kept")
        self.transport: Any = writer.transport
        # redis-py's stream protocol: told when the socket closes, so its wait_closed ends
        self.stream: Any = self.transport.get_protocol()
        self.transport.set_protocol(self)

    @classmethod
    async def of(cls, client: Any) -> Link | None:
        """A link on a connection kept out of ``client``'s pool, or None (see above)."""
        pool = client.connection_pool
        kwargs = pool.connection_kwargs
        if (
            hiredis is None
            or client.single_connection_client
            or isinstance(pool, aconn.BlockingConnectionPool)
            or pool.max_connections < _ROOMY
            or pool.connection_class not in _STOCK
            or kwargs.get("protocol") not in (None, 2, "2")
        ):
            return None
        conn = await pool.get_connection()
        try:
            if type(conn) not in _STOCK:
                raise LookupError
            return cls(conn, client.response_callbacks, pool.release)
        except BaseException:
            await pool.release(conn)
            raise

    @classmethod
    async def of_node(cls, node: Any) -> Link | None:
        """A link on a connection kept out of a cluster node's own (redis-py's asyncio
        ``ClusterNode``), or None where ``of`` would give none. Closing the cluster client
        disconnects it with the node's others."""
        if (
            hiredis is None
            or node.max_connections < _ROOMY
            or node.connection_class not in _STOCK
            or node.connection_kwargs.get("protocol") not in (None, 2, "2")
        ):
            return None

        async def release(conn: Any) -> None:
            node.release(conn)

        conn = node.acquire_connection()
        try:
            await conn.connect()
            if type(conn) not in _STOCK:
                raise LookupError
            return cls(conn, node.response_callbacks, release)
        except BaseException:
            node.release(conn)
            raise

    @property
    def usable(self) -> bool:
        return self.lost is None

    def write(self, groups: list[Group], limit: int | None = None) -> list[Group]:
        """Send ``groups`` in one write of about ``limit`` bytes at most (one group at least;
        None: all of them), and return those left out; each future resolves with its group's
        replies."""
        commands = [c for g in groups for c in g.commands]
        data = b"".join(packed(self.conn, commands))
        rest: list[Group] = []
        if limit is not None and len(data) > limit and len(groups) > 1:
            # rare, so sized here rather than for every write
            cut = by_bytes([g.commands for g in groups], limit)
            groups, rest = groups[:cut], groups[cut:]
            commands = [c for g in groups for c in g.commands]
            data = b"".join(packed(self.conn, commands))
        self.transport.write(data)
        self.unanswered += len(commands)
        if not self.waiting:
            self.heard = self.loop.time()
        self.waiting.extend(groups)
        if self.timeout is not None and self.watch is None:
            self.watch = self.loop.call_at(self.heard + self.timeout, self._check)
        return rest

    def data_received(self, data: bytes) -> None:
        reader, waiting = self.reader, self.waiting
        reader.feed(data)
        if self.timeout is not None:
            self.heard = self.loop.time()
        while True:
            try:
                reply = reader.gets()
            except InvalidResponse as exc:
                self._close(RedisConnectionError(f"protocol error: {exc}"))
                return
            if reply is _NOT_ENOUGH:
                if self.drained is not None and self.unanswered <= _LOW_WATER:
                    self._tell_drained()
                return
            self.unanswered -= 1
            if not waiting:  # a reply nobody asked for: the stream is out of step
                self._close(RedisConnectionError("a reply no command asked for"))
                return
            group = waiting[0]
            group.replies.append(reply)
            if len(group.replies) == len(group.commands):
                waiting.popleft()
                if not group.future.done():
                    self._answer(group)

    def _answer(self, group: Group) -> None:
        replies = group.replies
        for i, command in enumerate(group.commands):
            reply = replies[i]
            if isinstance(reply, Exception):
                if isinstance(reply, RedisConnectionError):
                    # a server still loading its data: raised, as redis-py raises it
                    group.future.set_exception(reply)
                    return
            elif command[0] in self.callbacks:
                # what redis-py's parse_response does after reading: its callback, by name
                replies[i] = self.callbacks[command[0]](reply)
        group.future.set_result(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            self.lost = RedisConnectionError(
                f"Connection closed by server or client: {exc}" if exc else "Connection closed"
            )
        self._fail_waiting(self.lost)
        if self.watch is not None:
            self.watch.cancel()
            self.watch = None
        self.stream.connection_lost(exc)
        # kept: a task only the loop knows of may be collected before it ends
        self.giving_back = self.loop.create_task(self._give_back())

    def pause_writing(self) -> None:
        self.stream.pause_writing()

    def resume_writing(self) -> None:
        self.stream.resume_writing()

    def _check(self) -> None:
        self.watch = None
        if not self.waiting or self.timeout is None:
            return
        due = self.heard + self.timeout
        if self.loop.time() >= due:
            self._close(RedisTimeoutError(f"Timeout reading from {self.conn.host}"))
        else:
            self.watch = self.loop.call_at(due, self._check)

    def close(self, exc: BaseException) -> None:
        """Fail what waits with ``exc`` and drop the connection (given back once closed)."""
        self._close(exc)

    def _close(self, exc: BaseException) -> None:
        # replies may still be in flight: nobody may read this socket again
        if self.lost is None:
            self.lost = exc
        self._fail_waiting(self.lost)
        self.transport.abort()

    def _fail_waiting(self, exc: BaseException) -> None:
        while self.waiting:
            future = self.waiting.popleft().future
            if not future.done():
                future.set_exception(exc)
        self.unanswered = 0
        if self.drained is not None:
            # what waits to be written goes out on a new link
            self._tell_drained()

    def _tell_drained(self) -> None:
        drained, self.drained = self.drained, None
        if drained is not None:
            drained()

    async def _give_back(self) -> None:
        try:
            await self.conn.disconnect(nowait=True)
        finally:
            await self.release(self.conn)
