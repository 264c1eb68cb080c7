"""Consumer groups over every thread's events: at least once, claims after a crash, parking,
and no pending entries or consumers left behind (checked with XINFO), on a real Redis."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from streamsaver import AsyncRedisStreamSaver, InvalidInputError, RedisStreamSaver
from streamsaver.core.feeds import feed_of_log, feed_pattern, parked_key
from streamsaver.core.keys import thread_keys
from streamsaver.core.slots import slot_of
from streamsaver.events import Delivery, SkippedEvent
from streamsaver.lua import LIBRARY_NAME
from tests.test_tail import in_thread, log_ids, python, step, steps

# A member in its own process: acknowledges its first ACK deliveries, then takes HOLD more
# without acknowledging them, says so on stdout and waits, mid-batch, to be killed.
MEMBER = r"""
import json
import sys

import redis
from streamsaver import RedisStreamSaver

url, prefix, ack, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
saver = RedisStreamSaver(redis.Redis.from_url(url), prefix=prefix)
group = saver.consumer_group("workers", "doomed", start="0", count=10)
acked, held = [], []
for delivery in group:
    key = [delivery.event.thread_id, delivery.event.id]
    if len(acked) < ack:
        group.ack(delivery)
        acked.append(key)
        continue
    held.append(key)
    if len(held) == hold:
        print(json.dumps({"acked": acked, "held": held}), flush=True)
        sys.stdin.read()
"""


def stepped(saver: RedisStreamSaver, threads: list[str], count: int) -> list[str]:
    """*threads*, after ``count`` steps on each in turn."""
    for thread in threads:
        steps(saver, thread, count)
    return threads


def ack_until(
    group: Any, expected: set[tuple[str, str]], take: Callable[[Delivery], bool] = lambda _: True
) -> None:
    """Acknowledge, from another thread, each delivery *take* accepts, until those handled are
    *expected*: all within 15 seconds, and without an error."""
    handled: set[tuple[str, str]] = set()
    done = threading.Event()

    def work() -> None:
        for delivery in group:
            if not take(delivery):
                continue
            handled.add((delivery.event.thread_id, delivery.event.id))
            group.ack(delivery)
            if handled == expected:
                done.set()
                return

    reader, errors = in_thread(work)
    assert done.wait(15), "the group did not deliver every event expected"
    reader.join(5)
    assert not errors


def everything(client: redis.Redis, prefix: str, threads: list[str]) -> set[tuple[str, str]]:
    return {(t, eid) for t in threads for eid in log_ids(client, prefix, t)}


def group_state(client: redis.Redis, prefix: str, group: str) -> tuple[int, list[str]]:
    """(pending entries, consumers) of ``group`` over every feed of ``prefix``, from XINFO."""
    pending, consumers = 0, []
    for feed in client.scan_iter(match=feed_pattern(prefix)):
        for info in client.xinfo_groups(feed):
            if info["name"].decode() == group:
                pending += info["pending"]
                consumers += [c["name"].decode() for c in client.xinfo_consumers(feed, group)]
    return pending, consumers


def test_bad_group_options_raise_before_anything_is_sent(sync_saver: RedisStreamSaver) -> None:
    for bad in (
        {"group": ""},
        {"group": "g", "consumer": ""},
        {"group": "g", "max_deliveries": 0},
        {"group": "g", "start": "soon"},
    ):
        with pytest.raises(InvalidInputError):
            sync_saver.consumer_group(**bad)


def test_a_killed_member_s_events_are_claimed_by_the_rest_and_nothing_leaks(
    sync_saver: RedisStreamSaver, redis_url: str, redis_client: redis.Redis
) -> None:
    prefix = sync_saver.prefix
    threads = stepped(sync_saver, [f"job:{i}" for i in range(12)], 5)
    expected = everything(redis_client, prefix, threads)
    assert len(expected) == 120

    doomed = python(MEMBER, redis_url, prefix, "20", "10", stdin=True)
    try:
        report = json.loads(doomed.line())
    finally:
        doomed.kill()  # kill -9, mid-batch: 10 handed over and not acknowledged, more read
    acked = {tuple(k) for k in report["acked"]}
    held = {tuple(k) for k in report["held"]}
    pending, consumers = group_state(redis_client, prefix, "workers")
    assert pending >= 10 and consumers.count("doomed") >= 1

    handled: dict[tuple[str, str], int] = {}
    survivor = sync_saver.consumer_group(
        "workers", "survivor", min_idle_ms=200, claim_ms=50, reap_idle_ms=200, block_ms=100
    )
    for delivery in survivor:
        handled[(delivery.event.thread_id, delivery.event.id)] = delivery.deliveries
        survivor.ack(delivery)
        if acked | set(handled) == expected:
            break
    survivor.close()

    # every event the dead member did not acknowledge was claimed and finished by the survivor
    assert set(handled) == expected - acked
    assert all(handled[k] == 2 for k in held)  # delivered to the dead member, then once more
    # nothing left pending, the dead member reaped, the survivor gone with close()
    assert group_state(redis_client, prefix, "workers") == (0, [])
    assert survivor.kept_on == 0


def test_an_event_that_keeps_failing_is_parked_after_n_deliveries(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    prefix = sync_saver.prefix
    steps(sync_saver, "fine", 3)
    stored = step(sync_saver, "bad", 0)
    sync_saver.put_writes(stored, [("poison", 1)], "task-x")
    poison_id = log_ids(redis_client, prefix, "bad")[-1]

    parked = threading.Event()
    reports: list[SkippedEvent] = []

    def report(item: SkippedEvent) -> None:
        reports.append(item)
        if "parked" in item.reason:
            parked.set()

    group = sync_saver.consumer_group(
        "g", "only", start="0", min_idle_ms=100, claim_ms=50, max_deliveries=3,
        block_ms=100, on_skip=report,
    )  # fmt: skip
    poison: list[int] = []
    fine: list[Delivery] = []

    def work() -> None:
        for delivery in group:
            if ("poison", 1) in delivery.event.writes:
                poison.append(delivery.deliveries)  # the handler fails: no ack
                continue
            group.ack(delivery)
            fine.append(delivery)

    reader, errors = in_thread(work)
    assert parked.wait(15), "the poison event was not parked"
    group.stop()
    reader.join(5)
    group.close()
    assert not errors and not reader.is_alive()

    assert poison == [1, 2, 3]  # delivered exactly max_deliveries times, then parked
    assert len(fine) == 8 and group.parked == 1
    slot = slot_of(thread_keys(prefix, "bad").log)
    ((_, entry),) = redis_client.xrange(parked_key(prefix, slot))
    assert entry[b"t"] == b"bad" and entry[b"e"].decode() == poison_id
    assert entry[b"deliveries"] == b"3" and entry[b"group"] == b"g"
    assert entry[b"source"].decode() == feed_of_log(prefix, thread_keys(prefix, "bad").log)
    assert group_state(redis_client, prefix, "g") == (0, [])
    assert [r.id for r in reports if "parked" in r.reason] == [entry[b"source_id"].decode()]


def test_live_members_share_the_work_each_event_once(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    prefix = sync_saver.prefix
    threads = [f"t{i}" for i in range(8)]
    members = [
        sync_saver.consumer_group("share", name, block_ms=100, discover_ms=20) for name in "ab"
    ]
    handled: dict[str, list[tuple[str, str]]] = {"a": [], "b": []}
    lock = threading.Lock()
    done = threading.Event()
    took = {"a": threading.Event(), "b": threading.Event()}

    def work(member: Any, name: str) -> None:
        for delivery in member:
            with lock:
                handled[name].append((delivery.event.thread_id, delivery.event.id))
                if sum(map(len, handled.values())) == 64:
                    done.set()
            took[name].set()
            # a busy member leaves new events to the other live one: hold the first delivery
            # until the other takes one, or a loaded machine lets one member read them all
            took["b" if name == "a" else "a"].wait(10)
            member.ack(delivery)

    readers = [in_thread(lambda m=m, n=n: work(m, n)) for m, n in zip(members, "ab", strict=True)]  # type: ignore[misc]
    for thread in threads:  # produced while the members run ("$": only these)
        steps(sync_saver, thread, 4)
    assert done.wait(15)
    for member in members:
        member.stop()
    for reader, errors in readers:
        reader.join(5)
        assert not errors
    for member in members:
        member.close()
    every = handled["a"] + handled["b"]
    assert sorted(every) == sorted(everything(redis_client, prefix, threads))  # each once
    assert handled["a"] and handled["b"]  # both took a share
    assert group_state(redis_client, prefix, "share") == (0, [])


async def test_an_async_member_handles_acks_and_leaves(
    async_saver: AsyncRedisStreamSaver, redis_url: str, redis_client: redis.Redis
) -> None:
    prefix = async_saver.prefix
    sync = RedisStreamSaver(redis.Redis.from_url(redis_url), prefix=prefix)
    for thread in ("x", "y"):
        steps(sync, thread, 3)
    expected = everything(redis_client, prefix, ["x", "y"])
    handled = set()
    async with async_saver.aconsumer_group("async", "m1", start="0", block_ms=100) as group:
        async for delivery in group:
            handled.add((delivery.event.thread_id, delivery.event.id))
            await group.ack(delivery)
            if handled == expected:
                break
    assert group.kept_on == 0
    assert group_state(redis_client, prefix, "async") == (0, [])
    assert await group.destroy() == 2  # the group is gone from both feeds
    assert group_state(redis_client, prefix, "async") == (0, [])
    sync.client.close()  # type: ignore[no-untyped-call]


def test_pointers_trimmed_while_pending_are_reported_and_acknowledged(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    prefix = sync_saver.prefix
    steps(sync_saver, "t", 3)
    feed = feed_of_log(prefix, thread_keys(prefix, "t").log)
    trimmed = threading.Event()
    reports: list[SkippedEvent] = []

    def report(item: SkippedEvent) -> None:
        reports.append(item)
        if sum("trimmed" in r.reason for r in reports) == 6:
            trimmed.set()

    group = sync_saver.consumer_group(
        "trim", "m", start="0", min_idle_ms=50, claim_ms=20, block_ms=50, on_skip=report
    )
    first = [next(group) for _ in range(6)]  # handed over, never acknowledged
    assert group_state(redis_client, prefix, "trim")[0] == 6
    redis_client.xtrim(feed, maxlen=0)  # a lagging group lost its pointers (feed_maxlen)
    reader, errors = in_thread(lambda: list(group))
    assert trimmed.wait(15), reports
    group.stop()
    reader.join(5)
    assert not errors and len(first) == 6
    assert {r.id for r in reports} == {d.entry_id for d in first}
    assert group_state(redis_client, prefix, "trim") == (0, [])


class _CountingClient(redis.Redis):
    """Counts the commands sent one round trip each (pipelines do not go through here)."""

    sent: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]))
        return super().execute_command(*args, **options)


def test_scripts_missing_on_the_server_are_reloaded_for_a_whole_batch_at_once(
    sync_saver: RedisStreamSaver, redis_url: str, redis_client: redis.Redis
) -> None:
    prefix = sync_saver.prefix
    threads = stepped(sync_saver, [f"s{n}" for n in range(8)], 1)
    feeds = {feed_of_log(prefix, thread_keys(prefix, t).log) for t in threads}
    assert len(feeds) > 1  # the first claim is one script call per feed, in one batch
    expected = everything(redis_client, prefix, threads)
    # as on a server without the library (functions, unlike scripts, outlive a restart)
    redis_client.execute_command("FUNCTION", "DELETE", LIBRARY_NAME)
    client = _CountingClient.from_url(redis_url)
    client.sent = []
    saver = RedisStreamSaver(client, prefix=prefix)
    group = saver.consumer_group("reload", "m", start="0", min_idle_ms=50, claim_ms=50, block_ms=50)
    # the first delivery is not acknowledged: the next claims deliver it again
    ack_until(group, expected, take=lambda delivery: delivery.deliveries > 1)
    # one FUNCTION LOAD, then the batch again in one pipeline: no script call on its own
    assert [c for c in client.sent if c != "INFO"] == ["FUNCTION"]
    group.close()
    assert group_state(redis_client, prefix, "reload") == (0, [])
    client.close()
