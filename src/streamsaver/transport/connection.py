"""A pooled connection the sync saver keeps between calls.

redis-py's sync client checks a connection out of its pool for every call and back in after
it: a lock, observability counters, a reconnect check. Measured here that is about a third of
a ``GET`` (~110 µs pooled against ~75 µs on a connection kept). ``HeldConnection`` keeps one
connection checked out and sends on it directly.

Thread-safe without queueing: its lock is tried, never waited for. A thread that finds the
connection busy gets ``None`` and sends through the pool as before, so concurrent threads never
line up behind one socket. The connection stays the pool's (closing the client closes it too;
the next call reconnects), and a process forked since it was taken takes another, as the pool
does. Replies are parsed by the client (``parse_response``), so callbacks apply as for its own
calls, and a network error is retried by the connection's own policy, as redis-py retries.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from redis import BlockingConnectionPool
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .resp import packed

__all__ = ["HeldConnection", "NodeConnections"]

_ROOMY = 16
_BY_CLIENT: weakref.WeakKeyDictionary[Any, HeldConnection] = weakref.WeakKeyDictionary()
_CREATING = threading.Lock()


class HeldConnection:
    @classmethod
    def of(cls, client: Any) -> HeldConnection | None:
        """One for ``client``, or None where keeping a connection does not fit: a cluster
        client routes each command itself, a ``single_connection_client`` keeps one already,
        and a pool the user sized tightly (a ``BlockingConnectionPool``, or fewer than
        ``_ROOMY`` connections) keeps every connection for what it was sized for (the
        tails' pipelines share it); redis-py's default pool holds 100."""
        if isinstance(client, RedisCluster) or client.connection is not None:
            return None
        pool = client.connection_pool
        if isinstance(pool, BlockingConnectionPool) or pool.max_connections < _ROOMY:
            return None
        # one per client, whatever number of savers share it (a saver per request, per test
        # example...): each keeping its own would drain the pool
        with _CREATING:
            held = _BY_CLIENT.get(client)
            if held is None:
                held = _BY_CLIENT[client] = cls(pool)
        return held

    def __init__(self, pool: Any) -> None:
        # the pool, not the client: the client is the key this is kept under, weakly
        self.pool = pool
        self.lock = threading.Lock()
        self.conn: Any = None
        self.pid = os.getpid()

    def send(self, client: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any] | None:
        """The replies of ``commands`` in order (parsed by ``client``, as its own calls are), a
        server error as a value in its place; None when another thread holds the connection
        (send through the pool instead)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            conn = self._connection()

            def attempt() -> list[Any]:
                conn.send_packed_command(packed(conn, commands))
                replies: list[Any] = []
                for command in commands:
                    try:
                        replies.append(client.parse_response(conn, command[0]))
                    except ResponseError as exc:
                        replies.append(exc)
                return replies

            try:
                return conn.retry.call_with_retry(attempt, lambda _: conn.disconnect())  # type: ignore[no-any-return]
            except BaseException:
                # replies may still be in flight: the next call must not read them
                conn.disconnect()
                raise
        finally:
            self.lock.release()

    def _connection(self) -> Any:
        if self.conn is None or self.pid != os.getpid():
            self.conn = self.pool.get_connection()
            self.pid = os.getpid()
            return self.conn
        # the pool's own check: data nobody asked for, or the server closed the socket (an
        # idle timeout, a CLIENT KILL); then a fresh connection instead
        try:
            stale = self.conn.can_read()
        except (RedisConnectionError, RedisTimeoutError, OSError):
            stale = True
        if stale:
            self.conn.disconnect()
        return self.conn


class NodeConnections:
    """A ``HeldConnection`` per primary of a sync cluster client, for the saver's hot path: a
    script goes to the node the client's slot map names for its key, on that node's own client
    (redis-py's cluster client spends far more per command than the command costs). A stale map
    is answered ``MOVED`` or ``ASK`` as the script's reply, which the core acts on
    (``transport.core.rounds``); a node the map replaced is simply no longer asked."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def send(self, commands: Sequence[tuple[Any, ...]], key: str) -> list[Any] | None:
        """As ``HeldConnection.send``, on the connection of ``key``'s primary; None when there
        is none to use (the client's own path then)."""
        try:
            node = self.client.get_node_from_key(key)
        except Exception:
            return None
        node_client = getattr(node, "redis_connection", None)
        if node_client is None:
            return None
        held = HeldConnection.of(node_client)
        return None if held is None else held.send(node_client, commands)
