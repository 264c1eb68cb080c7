"""What deleting threads frees and leaves, measured on a private server of each test's own.

- On a ``noeviction`` server filled to its ``maxmemory``, deleting k threads (``delete_thread``,
  ``prune(strategy="delete")``, or their ``ttl_seconds`` running out) frees what they took but
  for at most 1 KB each, and lets k - 1 new threads of the same size be written at least (k
  unless where the fill stopped says otherwise: see the test); ``delete_for_runs`` of their
  runs frees memory there too.
- What a deleted thread leaves (its deletion's mark, the pointer announcing it, anything
  per slot) is at most 1 KB, by ``MEMORY USAGE`` of every key left, amortized over many
  threads, standalone and on a 3-primary cluster.

The threads of the first test live in a few cluster slots: a deployment of many threads has
every slot's feed (a stream, 4.7 KB however short: Redis 7 allocates its node at
``stream-node-max-bytes``) already, and a new thread in a slot of its own would pay for one.
Those feeds are a cost of live threads (docs/cost.md), here and in the second test, which
counts what they grow by, not what they held before the deletions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import RedisStreamSaver
from streamsaver.core.keys import thread_keys
from streamsaver.core.slots import slot_of
from streamsaver.embedded import EmbeddedCluster, EmbeddedRedis
from tests.conftest import _embedded_binary
from tests.test_deletion import history
from tests.test_saver import generate_config

# the threads of the test at OOM share these slots (see above)
SLOTS = frozenset(range(7, 16384, 256))
VALUE = "v" * 4000
DELETED = 10


def ids_in_slots(prefix: str, count: int, start: int = 0) -> list[str]:
    """``count`` thread ids whose keys fall in SLOTS, the i-th from ``start`` on."""
    found, i = [], start
    while len(found) < count:
        thread_id = f"thread-{i}"
        if slot_of(thread_keys(prefix, thread_id).log) in SLOTS:
            found.append(thread_id)
        i += 1
    return found


def put_one(saver: RedisStreamSaver, thread_id: str) -> None:
    """A one-checkpoint thread holding a 4 KB value, of its own run."""
    cp = generate_checkpoint(channel_values={"v": VALUE}, channel_versions={"v": 1})
    meta = generate_metadata(step=0, source="input", run_id=f"run-{thread_id}")
    saver.put(generate_config(thread_id), cp, meta, {"v": 1})


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def puts_until_full(saver: RedisStreamSaver, ids: Iterator[str]) -> int:
    done = 0
    while True:
        try:
            put_one(saver, next(ids))
        except redis.exceptions.ResponseError as exc:
            assert "maxmemory" in str(exc) or "OOM" in str(exc), exc
            return done
        done += 1


@pytest.fixture
def full() -> Iterator[tuple[RedisStreamSaver, redis.Redis, float]]:
    """An 8 MB ``noeviction`` server (an empty one with the functions library loaded uses 3.8
    MB) filled with one-checkpoint threads until a put is refused; and what a thread took, on
    average."""
    args = ["--maxmemory", "8mb", "--maxmemory-policy", "noeviction"]
    with EmbeddedRedis(args, binary=_embedded_binary()) as server:
        client = redis.Redis.from_url(server.url)
        saver = RedisStreamSaver(client, prefix="p")
        # every script the test runs, loaded before the server is full
        warm = ids_in_slots("p", 2, 10**6)
        for thread_id in warm:
            put_one(saver, thread_id)
        saver.delete_for_runs([f"run-{warm[0]}"])
        saver.delete_thread(warm[1])
        client.set("slack", "x" * 20_000)
        # the threads the tests delete first: their keys expire in an hour (the ttl test
        # makes that hour pass)
        ids = ids_in_slots("p", 2_000)
        expiring = RedisStreamSaver(client, prefix="p", ttl_seconds=3600)
        for thread_id in ids[:DELETED]:
            put_one(expiring, thread_id)
        client.delete("slack")
        start = used(client)
        rest = iter(ids[DELETED:])
        filled = DELETED + puts_until_full(saver, rest)
        assert filled > 100
        thread = (used(client) - start) / filled
        # what each way of deleting allocates once on a full server, as many threads at once
        # as the tests (the buffers of its client, which stay) is spent before they measure
        warm = [next(rest) for _ in range(2 * DELETED)]
        saver.prune(warm[:DELETED], strategy="delete")
        saver.delete_for_runs([f"run-{t}" for t in warm[DELETED:]])
        puts_until_full(saver, rest)
        yield saver, client, thread
        client.close()


@pytest.mark.parametrize("how", ["delete_thread", "prune_delete", "delete_for_runs", "ttl"])
def test_deleting_k_threads_at_oom_lets_k_threads_be_written(
    full: tuple[RedisStreamSaver, redis.Redis, float], how: str
) -> None:
    """A put is refused when the memory used and its own request's buffers pass maxmemory:
    where the fill's last put ended, anywhere within a thread of the limit, decides whether k
    deletions that each leave b bytes make room for k threads or k - 1, k if k * b is within
    that slack. So: each deletion frees what a thread took, but for at most 1 KB, and room
    for k - 1 threads at least whatever the slack."""
    # the first threads put expire in an hour (the ttl test makes that hour pass); the
    # others, the next ones, never
    saver, client, thread = full
    doomed = ids_in_slots("p", 2 * DELETED)[: DELETED if how == "ttl" else None][-DELETED:]
    before = used(client)
    if how == "delete_thread":
        for thread_id in doomed:
            saver.delete_thread(thread_id)
    elif how == "prune_delete":
        saver.prune(doomed, strategy="delete")
    elif how == "delete_for_runs":
        saver.delete_for_runs([f"run-{t}" for t in doomed])
    else:
        # the hour passes; expired keys go when touched, or when the expiry cycle samples them
        for thread_id in doomed:
            for key in thread_keys("p", thread_id):
                client.pexpire(key, 1)
        time.sleep(0.05)
        for thread_id in doomed:
            assert not any(client.exists(k) for k in thread_keys("p", thread_id))
    after = used(client)
    fresh = puts_until_full(saver, iter(ids_in_slots("p", 100, 10**7)))
    freed = (before - after) / DELETED
    print(
        f"\n{how}: a thread took {thread:.0f} B; used_memory {before} B at OOM, {after} B "
        f"after deleting {DELETED} threads ({freed:.0f} B each); then {fresh} new threads put"
    )
    if how == "delete_for_runs":
        # it keeps each thread, with the record of what it deleted: it frees, and makes
        # room for new threads, but not yet for as many as it emptied
        assert after < before and fresh > 0
    else:
        assert freed >= thread - 1024
        assert fresh >= DELETED - 1


def left_per_thread(client: redis.Redis | redis.RedisCluster, threads: int) -> float:
    """What a deletion of each of ``threads`` deleted threads left: every key of the prefix
    (MEMORY USAGE) beyond what its slots' feeds held before the deletions."""
    total = 0
    for key in client.scan_iter("p:*", count=1000):
        total += client.memory_usage(key, samples=0) or 0
    return total / threads


def feeds(client: redis.Redis | redis.RedisCluster) -> int:
    return sum(client.memory_usage(k, samples=0) or 0 for k in client.scan_iter("p:*:feed"))


def _deleted_leave_little(client: redis.Redis | redis.RedisCluster, threads: int) -> None:
    saver = RedisStreamSaver(client, prefix="p")
    ids = [f"chat-{i}" for i in range(threads)]
    for thread_id in ids:
        history(saver, 2, thread_id)
    live = left_per_thread(client, threads)
    before = feeds(client)
    saver.prune(ids, strategy="delete")
    left = left_per_thread(client, threads) - before / threads
    kinds = {k.decode().rsplit(":", 1)[-1] for k in client.scan_iter("p:*")}
    print(
        f"\n{threads} threads: {live:.0f} B each live (feeds included), {left:.0f} B each left "
        f"once deleted (the feeds' {before / threads:.0f} B a thread not counted); "
        f"kinds of keys left: {sorted(kinds)}"
    )
    assert left <= 1024
    # the slots' thread indexes keep a deleted id until the projector's sweep (thread_ids(
    # deleted=True) lists it meanwhile)
    assert kinds <= {"ptr", "feed", "threads"}
    # each deletion is still recorded, and refuses its deleted history
    assert [d.events for d in saver.deletions(ids[0])] == [3]


def test_a_deleted_thread_leaves_at_most_a_kilobyte() -> None:
    with EmbeddedRedis(binary=_embedded_binary()) as server:
        client = redis.Redis.from_url(server.url)
        _deleted_leave_little(client, 3_000)
        client.close()


def test_a_deleted_thread_leaves_at_most_a_kilobyte_on_a_cluster(
    cluster: EmbeddedCluster,
) -> None:
    client = redis.RedisCluster.from_url(cluster.url)
    try:
        _deleted_leave_little(client, 600)
    finally:
        for key in client.scan_iter("p:*"):
            client.delete(key)
        client.close()
