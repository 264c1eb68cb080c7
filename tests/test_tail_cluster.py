"""Tailing on a real 3-primary Redis Cluster: one thread, every thread (feeds on every primary,
read by pipelined polls since no command may span slots), and consumer groups."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from itertools import islice
from uuid import uuid4

import pytest
import redis.asyncio.cluster as acluster
from redis.cluster import RedisCluster

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.core.feeds import feed_of_log
from streamsaver.core.keys import thread_keys
from streamsaver.embedded import EmbeddedCluster
from streamsaver.events import ThreadEvent
from tests.test_cluster import threads_on_every_primary
from tests.test_tail import in_thread, steps
from tests.test_tail_groups import ack_until, stepped


@pytest.fixture
def saver(cluster: EmbeddedCluster) -> Iterator[RedisStreamSaver]:
    client = RedisCluster.from_url(cluster.url)
    yield RedisStreamSaver(client, prefix=f"c{uuid4().hex[:8]}")
    client.close()


@pytest.fixture
async def asaver(cluster: EmbeddedCluster) -> AsyncIterator[AsyncRedisStreamSaver]:
    client = acluster.RedisCluster.from_url(cluster.url)
    yield AsyncRedisStreamSaver(client, prefix=f"c{uuid4().hex[:8]}")
    await client.aclose()


def _spread(saver: RedisStreamSaver, count: int = 9) -> list[str]:
    threads = threads_on_every_primary(saver, count)
    client = saver.client
    assert isinstance(client, RedisCluster)
    for t in threads:  # each feed lives with its thread
        log = thread_keys(saver.prefix, t).log
        assert client.keyslot(feed_of_log(saver.prefix, log)) == client.keyslot(log)
    return threads


def _ids(saver: RedisStreamSaver, thread: str) -> list[str]:
    entries = saver.client.xrange(thread_keys(saver.prefix, thread).log)
    return [eid.decode() for eid, _ in entries]


def test_tail_and_tail_all_follow_threads_on_every_primary(saver: RedisStreamSaver) -> None:
    threads = _spread(saver)
    steps(saver, threads[0], 1)
    one: list[str] = []
    every: list[ThreadEvent] = []
    tail = saver.tail(threads[-1], block_ms=200)
    tail_all = saver.tail_all(after="0", discover_ms=50, poll_ms=10)
    want = 2 + 2 * 2 * len(threads)
    readers = [
        in_thread(lambda: one.extend(e.id for e in islice(tail, 4))),
        in_thread(lambda: every.extend(islice(tail_all, want))),
    ]
    for thread in threads:
        steps(saver, thread, 2, start=10)
    for reader, errors in readers:
        reader.join(15)
        assert not errors and not reader.is_alive()
    tail.close()
    cursor = tail_all.cursor
    tail_all.close()
    assert one == _ids(saver, threads[-1])
    by_thread: dict[str, list[str]] = {}
    for event in every:
        by_thread.setdefault(event.thread_id, []).append(event.id)
    assert by_thread == {t: _ids(saver, t) for t in threads}
    # resume on a cluster too: nothing new yet, then exactly what comes next
    steps(saver, threads[1], 1, start=20)
    again = [(e.thread_id, e.id) for e in saver.tail_all(after=cursor, follow=False)]
    assert again == [(threads[1], i) for i in _ids(saver, threads[1])[-2:]]


def test_a_group_on_a_cluster_delivers_everything_once_and_leaves_nothing(
    saver: RedisStreamSaver,
) -> None:
    threads = stepped(saver, _spread(saver), 2)
    expected = {(t, i) for t in threads for i in _ids(saver, t)}
    with saver.consumer_group("cg", "m", start="0", poll_ms=10, block_ms=100) as group:
        ack_until(group, expected)
    client = saver.client
    feeds = {feed_of_log(saver.prefix, thread_keys(saver.prefix, t).log) for t in threads}
    for feed in feeds:
        (info,) = client.xinfo_groups(feed)
        assert info["pending"] == 0 and client.xinfo_consumers(feed, "cg") == []


async def test_async_tail_all_on_a_cluster(
    asaver: AsyncRedisStreamSaver, cluster: EmbeddedCluster
) -> None:
    sync = RedisStreamSaver(RedisCluster.from_url(cluster.url), prefix=asaver.prefix)
    threads = _spread(sync, 6)
    got: list[str] = []
    async with asaver.atail_all(after="0", poll_ms=10, discover_ms=50) as tail:
        for thread in threads:
            steps(sync, thread, 1)
        async for event in tail:
            got.append(event.thread_id)
            if len(got) == 12:
                break
    assert sorted(got) == sorted(threads * 2)
    sync.client.close()  # type: ignore[no-untyped-call]
