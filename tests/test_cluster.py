"""streamsaver on a real 3-primary Redis Cluster started for this module: the official
conformance suite, LangGraph graphs against InMemorySaver, and the cross-shard operations."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import uuid4

import pytest
import redis.asyncio.cluster as acluster
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from redis.cluster import RedisCluster

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.core.keys import thread_keys
from streamsaver.embedded import EmbeddedCluster
from tests import graphs
from tests.test_conformance import SyncDriven, _assert_all_passed
from tests.test_graphs import assert_same


@pytest.fixture
def saver(cluster: EmbeddedCluster) -> Iterator[RedisStreamSaver]:
    client = RedisCluster.from_url(cluster.url)
    yield RedisStreamSaver(client, prefix=f"c{uuid4().hex[:8]}")
    client.close()


def _config(thread_id: str, **configurable: Any) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **configurable}}


def _put(saver: RedisStreamSaver, thread_id: str, run_id: str, parent: Any = None) -> Any:
    config = _config(thread_id, **({"checkpoint_id": parent} if parent else {}))
    checkpoint: Any = {
        "v": 1, "id": str(uuid4()), "ts": "", "channel_values": {"log": [run_id]},
        "channel_versions": {"log": saver.get_next_version(None, None)}, "versions_seen": {},
        "updated_channels": None,
    }  # fmt: skip
    versions = checkpoint["channel_versions"]
    stored = saver.put(config, checkpoint, {"run_id": run_id, "step": 0}, versions)
    saver.put_writes(stored, [("log", run_id)], "task")
    return stored


def threads_on_every_primary(saver: RedisStreamSaver, count: int = 12) -> list[str]:
    client = saver.client
    assert isinstance(client, RedisCluster)
    threads = [f"thread:{n}" for n in range(count)]
    owners = {client.get_node_from_key(thread_keys(saver.prefix, t).log).name for t in threads}
    assert len(owners) == 3, "the test threads must spread over all three primaries"
    return threads


async def test_async_saver_conformance_on_cluster(cluster: EmbeddedCluster) -> None:
    async def factory() -> AsyncIterator[AsyncRedisStreamSaver]:
        client = acluster.RedisCluster.from_url(cluster.url)
        yield AsyncRedisStreamSaver(client, prefix=f"c{uuid4().hex[:8]}")
        await client.aclose()

    _assert_all_passed(await validate(checkpointer_test(name="async@cluster")(factory)))


async def test_sync_saver_conformance_on_cluster(cluster: EmbeddedCluster) -> None:
    async def factory() -> AsyncIterator[SyncDriven]:
        client = RedisCluster.from_url(cluster.url)
        yield SyncDriven(RedisStreamSaver(client, prefix=f"c{uuid4().hex[:8]}"))
        client.close()

    _assert_all_passed(await validate(checkpointer_test(name="sync@cluster")(factory)))


@pytest.mark.parametrize(
    "scenario",
    [graphs.linear, graphs.hitl, graphs.time_travel, graphs.subgraph, graphs.send_fanout],
    ids=lambda f: f.__name__,
)
def test_graphs_match_inmemory_on_cluster(saver: RedisStreamSaver, scenario: Any) -> None:
    reference = scenario(InMemorySaver())
    assert reference["history"], "the scenario must produce a history to compare"
    assert_same(scenario(saver), reference)


async def test_async_graphs_match_inmemory_on_cluster(cluster: EmbeddedCluster) -> None:
    async with AsyncRedisStreamSaver.from_conn_string(cluster.url, prefix="ca") as asaver:
        assert isinstance(asaver.client, acluster.RedisCluster)  # detected from the server
        reference = await graphs.astreamed_review(InMemorySaver())
        assert_same(await graphs.astreamed_review(asaver), reference)


def _two_runs_per_thread(saver: RedisStreamSaver) -> list[str]:
    """Threads on every primary, each with a checkpoint of run shared-run and one of its own."""
    threads = threads_on_every_primary(saver)
    for n, thread_id in enumerate(threads):
        first = _put(saver, thread_id, run_id="shared-run")
        _put(saver, thread_id, run_id=f"own-{n}", parent=first["configurable"]["checkpoint_id"])
    return threads


def test_cross_shard_list_delete_for_runs_and_copy(saver: RedisStreamSaver) -> None:
    threads = _two_runs_per_thread(saver)
    assert saver.thread_ids() == sorted(threads)
    listed = list(saver.list(None))
    assert len(listed) == 2 * len(threads)
    assert {t.config["configurable"]["thread_id"] for t in listed} == set(threads)
    assert len(list(saver.list(None, filter={"run_id": "shared-run"}))) == len(threads)
    assert len(list(saver.list(None, limit=5))) == 5

    saver.delete_for_runs(["shared-run", "own-3"])
    remaining = list(saver.list(None))
    assert {t.metadata["run_id"] for t in remaining} == {
        f"own-{n}" for n in range(len(threads)) if n != 3
    }

    saver.copy_thread(threads[0], "copy:elsewhere")
    assert [t.checkpoint for t in saver.list(_config("copy:elsewhere"))] == [
        t.checkpoint for t in saver.list(_config(threads[0]))
    ]
    for thread_id in [*threads, "copy:elsewhere"]:
        assert saver.verify(thread_id)[2] == []
        assert saver.verify_chain(thread_id).ok
    heads = {t: saver.verify_chain(t) for t in threads[:6]}
    saver.prune(threads[:6], strategy="delete")
    assert saver.thread_ids() == sorted([*threads[6:], "copy:elsewhere"])
    # each deletion is recorded in the audit stream of the thread's own slot
    for thread_id, check in heads.items():
        [record] = saver.deletions(thread_id)
        assert (record.events, record.head) == (check.events, check.head)
    saver.prune(threads[6:], strategy="keep_latest")
    assert all(saver.verify_chain(t).ok for t in threads[6:])


def test_command_line_detects_the_cluster(
    cluster: EmbeddedCluster, saver: RedisStreamSaver
) -> None:
    threads = threads_on_every_primary(saver)
    for thread_id in threads:
        _put(saver, thread_id, run_id="r")
    env = {**os.environ, "REDIS_URL": cluster.url}
    out = subprocess.run(
        [sys.executable, "-m", "projector", "verify", "--all", "--prefix", saver.prefix],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (
        f"verified {len(threads)} threads ({2 * len(threads)} events): 0 with differences"
        in out.stdout
    )


def test_durability_waits_on_the_node_that_took_the_write(cluster: EmbeddedCluster) -> None:
    from streamsaver import DurabilityError

    client = RedisCluster.from_url(cluster.url)
    saver = RedisStreamSaver(
        client, prefix="dur", durability="replicated", replicas=1, durability_timeout_ms=50
    )
    # the embedded cluster has no replicas: every node answers WAIT with 0
    for thread_id in threads_on_every_primary(saver, 6):
        with pytest.raises(DurabilityError, match="only 0 of 1 replica"):
            _put(saver, thread_id, run_id="r")
        assert saver.get_tuple(_config(thread_id)) is not None
    client.close()


def test_keep_last_ttl_and_delete_for_runs_on_every_primary(cluster: EmbeddedCluster) -> None:
    from tests.test_retention import History, assert_reads_match, thread_key_names, wait_for

    client = RedisCluster.from_url(cluster.url)
    prefix = f"c{uuid4().hex[:8]}"
    saver = RedisStreamSaver(client, prefix=prefix, keep_last=2, ttl_seconds=600)
    reference = RedisStreamSaver(client, prefix=prefix + "-ref")
    threads = threads_on_every_primary(saver)
    for thread_id in threads:
        History(saver, reference, thread_id=thread_id).run(9)
    saver.delete_for_runs(["run-2"])
    reference.delete_for_runs(["run-2"])
    for thread_id in threads:
        assert assert_reads_match(saver, reference, thread_id) >= 2
        assert saver.verify(thread_id)[2] == []
    short = RedisStreamSaver(client, prefix=prefix, ttl_seconds=1)
    for thread_id in threads:
        short.put_writes(_config(thread_id, checkpoint_id="last"), [("x", 1)], "late")
    wait_for(lambda: not thread_key_names(client, prefix))
    client.close()


def test_projector_on_the_cluster_reads_like_the_scan(saver: RedisStreamSaver) -> None:
    from tests.test_projector import wait_caught_up
    from tests.test_rebuild_invariant import apply_all, cross_thread_reads, scanning

    threads = _two_runs_per_thread(saver)
    assert saver.seed_projections() == len(threads)
    _put(saver, "late", run_id="shared-run")  # in the feed, not applied yet
    assert saver.projector_lag().pending == 2
    assert cross_thread_reads(saver) == cross_thread_reads(scanning(saver))
    assert saver.threads(limit=1)[0].thread_id == "late"
    apply_all(saver)
    wait_caught_up(saver)
    saver.delete_for_runs(["shared-run"])
    assert cross_thread_reads(saver) == cross_thread_reads(scanning(saver))
    assert list(saver.list(None, filter={"run_id": "shared-run"})) == []


async def test_async_calls_go_straight_to_each_primary_and_follow_a_moved_slot(
    cluster: EmbeddedCluster,
) -> None:
    """The async hot path on a cluster: a script goes to its key's primary on a connection
    kept for it (one per primary, not a pool checkout per call); after its slot moved, the
    old primary's MOVED is the call's reply, the core learns the layout and the call lands,
    and the next ones go to the new primary."""
    client = acluster.RedisCluster.from_url(cluster.url)
    saver = AsyncRedisStreamSaver(client, prefix=f"c{uuid4().hex[:8]}")
    threads = [f"thread:{n}" for n in range(12)]
    stored = {}
    for step in range(3):
        for thread in threads:
            config = stored.get(thread, _config(thread))
            checkpoint: Any = {
                "v": 1, "id": str(uuid6()), "ts": "", "channel_values": {"n": step},
                "channel_versions": {"n": saver.get_next_version(None, None)},
                "versions_seen": {}, "updated_channels": None,
            }  # fmt: skip
            versions = checkpoint["channel_versions"]
            stored[thread] = await saver.aput(config, checkpoint, {"step": step}, versions)
    kept = {name for name, (_, pipe) in saver._nodes._pipes.items() if pipe._lanes}
    assert len(kept) == 3, "a kept connection for each primary the threads live on"
    moved = threads[0]
    log = thread_keys(saver.prefix, moved).log
    slot = acluster.key_slot(log.encode())
    source = cluster.owner(slot)
    cluster.move_slot(slot, next(n for n in cluster.nodes if n.port != source.port))
    for step in range(3, 6):
        checkpoint = {
            "v": 1, "id": str(uuid6()), "ts": "", "channel_values": {"n": step},
            "channel_versions": {"n": saver.get_next_version(None, None)},
            "versions_seen": {}, "updated_channels": None,
        }  # fmt: skip
        versions = checkpoint["channel_versions"]
        stored[moved] = await saver.aput(stored[moved], checkpoint, {"step": step}, versions)
        got = await saver.aget_tuple(_config(moved))
        assert got is not None and got.checkpoint["channel_values"] == {"n": step}
    assert cluster.owner(slot).port != source.port
    for thread in threads[1:]:
        got = await saver.aget_tuple(_config(thread))
        assert got is not None and got.checkpoint["channel_values"] == {"n": 2}
    await client.aclose()


def test_sync_calls_go_straight_to_each_primary_and_follow_a_moved_slot(
    cluster: EmbeddedCluster,
) -> None:
    """The sync hot path on a cluster: a script goes to its key's primary on a connection the
    saver keeps out of that node's own client; after its slot moved, the old primary's MOVED
    is the call's reply, the core learns the layout and the call lands."""
    client = RedisCluster.from_url(cluster.url)
    saver = RedisStreamSaver(client, prefix=f"c{uuid4().hex[:8]}")
    threads = [f"thread:{n}" for n in range(12)]

    def put(config: Any, step: int) -> Any:
        checkpoint: Any = {
            "v": 1, "id": str(uuid6()), "ts": "", "channel_values": {"n": step},
            "channel_versions": {"n": saver.get_next_version(None, None)},
            "versions_seen": {}, "updated_channels": None,
        }  # fmt: skip
        return saver.put(config, checkpoint, {"step": step}, checkpoint["channel_versions"])

    stored = {t: put(_config(t), 0) for t in threads}
    held = {
        node.name
        for node in client.get_primaries()
        if node.redis_connection.connection_pool._in_use_connections
    }
    assert len(held) == 3, "a connection kept out of each primary's own pool"
    moved = threads[0]
    slot = client.keyslot(thread_keys(saver.prefix, moved).log)  # type: ignore[no-untyped-call]
    source = cluster.owner(slot)
    cluster.move_slot(slot, next(n for n in cluster.nodes if n.port != source.port))
    for step in range(1, 4):
        stored[moved] = put(stored[moved], step)
        got = saver.get_tuple(_config(moved))
        assert got is not None and got.checkpoint["channel_values"] == {"n": step}
    for thread in threads[1:]:
        got = saver.get_tuple(_config(thread))
        assert got is not None and got.checkpoint["channel_values"] == {"n": 0}
    client.close()
