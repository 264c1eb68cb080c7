"""The projector's own connections: made from its saver client's settings, every wait on them
bounded, and cut by ``stop()``; and which errors it outlives.

The projector runs for months through failovers, restarts and dropped connections. A request in
flight to a primary that stops answering (a stalled process, a black-holed path) is not ended by
the failover that replaces it: without a socket timeout it is waited on for good, and the
projector's lag grows until a restart. So, as a tail's own connection does
(``tailing.blocking.bounded``), the projector's client connects, does its handshake and reads
within the saver client's timeouts, or the tails' grace period where that client sets none; its
retries stop once the projector is stopped (``tailing.sync._Stoppable``); and ``stop()`` shuts
its sockets down, which wakes a wait in any thread. The user's client, which other code may
share, is never touched.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from typing import TYPE_CHECKING, Any

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import (
    AuthenticationError,
    ClusterDownError,
    ClusterError,
    MasterDownError,
    ReadOnlyError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from ..core.errors import AuthenticationFailedError, SlotMovingError, TLSError, lost_connection
from ..tailing.blocking import bounded
from ..tailing.sync import _Stoppable

if TYPE_CHECKING:
    from ..checkpoint.saver import RedisStreamSaver

__all__ = ["cut", "own_saver", "passing"]

_CLUSTER: Any = redis.cluster  # redis-py leaves its cluster client's helpers untyped

# what a failover, a restart or a migration answers for a while: wait, reconnect, try again
_PASSING = (
    ClusterDownError,
    ClusterError,
    MasterDownError,
    ReadOnlyError,  # a standalone primary demoted to a replica
    TryAgainError,
    SlotMovingError,
)


def passing(exc: BaseException) -> bool:
    """Whether ``exc`` is the network or the cluster's layout failing for a while, which the
    projector waits out, rather than something waiting cannot mend (a refused password, a
    missing permission, a bug), which ends it."""
    if isinstance(exc, (AuthenticationError, AuthenticationFailedError, TLSError)):
        return False  # a wrong password stays wrong
    return isinstance(exc, _PASSING) or lost_connection(exc) is not None


def own_saver(
    saver: RedisStreamSaver, stopped: threading.Event, cut: threading.Event
) -> tuple[RedisStreamSaver, Any | None]:
    """``saver`` on a client of the projector's own (see the module's docstring), and that
    client: it retries nothing once ``stopped`` is set, and sends nothing once ``cut`` is. Else
    ``saver`` itself and None, for a client whose connections cannot be remade from their
    settings (a Sentinel's pool, say): its own timeouts bound the projector then."""
    client = _own_client(saver.client, stopped, cut)
    if client is None:
        return saver, None
    own = copy.copy(saver)
    own.client = client
    own._attach(client)
    return own, client


def _own_client(client: Any, stopped: threading.Event, cut: threading.Event) -> Any | None:
    if isinstance(client, RedisCluster):
        cluster: Any = client
        manager = cluster.nodes_manager
        options = _CLUSTER.cleanup_kwargs(**bounded(manager.connection_kwargs))
        # the cluster client's own: its callback, bound to it, and the database it refuses
        options.pop("redis_connect_func", None)
        options.pop("db", None)
        if cluster.user_on_connect_func is not None:
            options["redis_connect_func"] = cluster.user_on_connect_func
        return _CLUSTER.RedisCluster(
            startup_nodes=[_CLUSTER.ClusterNode(n.host, n.port) for n in cluster.get_nodes()],
            require_full_coverage=manager._require_full_coverage,
            address_remap=manager.address_remap,
            retry=_Stopping(copy.deepcopy(cluster.retry), stopped, cut),
            **options,
        )
    pool = client.connection_pool
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return None
    options = bounded(pool.connection_kwargs)
    # none given: what redis-py's connection would have (no retry)
    retry = options.get("retry") or client.get_retry() or Retry(NoBackoff(), 0)
    options["retry"] = _Stopping(retry, stopped, cut)
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **options)
    )


class _Stopping(_Stoppable):
    """The tails' retry policy that retries nothing once stopped, for a client's options, and
    that sends nothing at all once the client was cut: a connection copies the policy it is
    given, and each copy keeps the same two events."""

    def __init__(self, retry: Any, stopped: threading.Event, cut: threading.Event) -> None:
        super().__init__(retry, stopped)
        self.cut = cut

    def call_with_retry(
        self, do: Any, fail: Any, is_retryable: Any = None, with_failure_count: bool = False
    ) -> Any:
        if self.cut.is_set():
            # a new connection to a server that stopped answering would wait its bound again
            raise RedisConnectionError("the projector stopped: its connections are shut down")
        return super().call_with_retry(do, fail, is_retryable, with_failure_count)

    def __copy__(self) -> _Stopping:
        # explicit: copy's own way finds no attributes yet, and the forwarding loops
        return _Stopping(copy.copy(self.retry), self.stopped, self.cut)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Stopping:
        return _Stopping(copy.deepcopy(self.retry, memo), self.stopped, self.cut)


def cut(client: Any) -> None:
    """Shut every connection of ``client`` down, those in use by other threads included: a
    thread waiting on one wakes with a connection error. Safe from any thread."""
    if isinstance(client, RedisCluster):
        cluster: Any = client
        nodes = [n.redis_connection for n in cluster.get_nodes() if n.redis_connection]
        pools = [n.connection_pool for n in nodes]
    else:
        pools = [client.connection_pool]
    for pool in pools:
        with contextlib.suppress(Exception):
            pool.disconnect(inuse_connections=True)
