"""Opening the client ``from_conn_string`` makes from a URL, for the savers and the stores,
sync and async: a first connection that fails typed and fast (``probe_options``), which asks
the server whether it is a cluster, then the client of that kind with the bounded options."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import connect_error

__all__ = ["aopen_client", "connecting", "open_client"]


@contextmanager
def connecting(url: str) -> Iterator[None]:
    """A connection or timeout error while first reaching ``url``, raised as the typed error
    it means (``ConnectionFailedError``, ``AuthenticationFailedError``, ``TLSError``)."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise connect_error(exc, url) from exc


def open_client(
    url: str, cluster: bool | None, kwargs: dict[str, Any], probing: dict[str, Any]
) -> redis.Redis | RedisCluster:
    """A client for ``url`` with ``kwargs``; ``cluster`` None: of the kind the server is. The
    server is reached first in any case, so one that cannot be raises typed, within one
    connect timeout, before anything else is tried."""
    with connecting(url), redis.Redis.from_url(url, **probing) as probe:
        enabled = bool(probe.info("cluster").get("cluster_enabled"))
    return (RedisCluster if (enabled if cluster is None else cluster) else redis.Redis).from_url(
        url, **kwargs
    )


async def aopen_client(
    url: str, cluster: bool | None, kwargs: dict[str, Any], probing: dict[str, Any]
) -> aredis.Redis | AsyncRedisCluster:
    """``open_client`` for ``redis.asyncio``."""
    probe = aredis.Redis.from_url(url, **probing)
    try:
        with connecting(url):
            enabled = bool((await probe.info("cluster")).get("cluster_enabled"))
    finally:
        await probe.aclose()
    kind = AsyncRedisCluster if (enabled if cluster is None else cluster) else aredis.Redis
    return kind.from_url(url, **kwargs)
