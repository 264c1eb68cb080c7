"""Resharding and failover under load, on a real Redis Cluster with a replica per primary:
slots of live threads move between primaries (IMPORTING / MIGRATING / MIGRATE / NODE) and a
primary fails over while graphs run and tailers follow. Nothing surfaces to the caller,
nothing acknowledged is lost, and tailers see every event once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis.cluster import RedisCluster

from streamsaver import RedisStreamSaver
from streamsaver.embedded import EmbeddedCluster


@pytest.fixture(scope="module")
def replicated() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(3, replicas=1) as cluster:
        yield cluster


def _checkpoint(thread_id: str, n: int) -> tuple[Any, Any, Any, Any]:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
    return config, cp, generate_metadata(step=n), {"n": n + 1}


def _other_primary(cluster: EmbeddedCluster, slot: int) -> Any:
    owner = cluster.owner(slot)
    return next(p for p in cluster.primaries if p.port != owner.port)


@pytest.mark.parametrize("durability", ["none", "replicated"])
def test_sync_saver_follows_a_moved_slot(replicated: EmbeddedCluster, durability: Any) -> None:
    client = RedisCluster.from_url(replicated.url)
    saver = RedisStreamSaver(client, prefix=f"m{durability}", durability=durability)
    stored = saver.put(*_checkpoint("t", 1))
    slot = client.keyslot(saver._ops.keys("t").log)
    # the client's slot cache still names the old owner: its next write meets MOVED
    replicated.move_slot(slot, _other_primary(replicated, slot))
    again = saver.put(*_checkpoint("t", 2))
    saver.put_writes(again, [("n", 3)], "task")
    latest = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert latest is not None
    assert latest.config == again
    assert latest.parent_config is None or latest.parent_config != stored
    assert latest.pending_writes == [("task", "n", 3)]
    client.close()
