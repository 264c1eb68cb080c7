"""Connections closed under a command. redis-py's asyncio cluster client answers a
ConnectionError of any task by closing every node's connections (``RedisCluster.aclose``),
those other tasks are writing or reading on included; their commands then fail with what the
closed connection's code raises ("'NoneType' object has no attribute 'writelines'"), no
RedisError, so no retry of redis-py's sees it. A tailer died so during a failover in CI. On a
cluster the savers and tails send such a command again (every write is idempotent), after
learning the layout, within ``slot_move_timeout_s``; a bug of ours raising the same types
still surfaces as it is."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
import traceback
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver, ServerUnavailableError
from streamsaver.core.errors import lost_connection
from streamsaver.embedded import EmbeddedCluster
from streamsaver.events import ThreadEvent


def _checkpoint(n: int) -> dict[str, Any]:
    return {
        "v": 1, "id": f"{n:032d}", "ts": "", "channel_values": {"n": n},
        "channel_versions": {"n": n + 1}, "versions_seen": {}, "updated_channels": None,
    }  # fmt: skip


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _traces(errors: list[BaseException]) -> str:
    return "".join(line for e in errors for line in traceback.format_exception(e))


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def test_a_write_on_a_connection_closed_meanwhile_is_a_lost_connection(
    redis_url: str,
) -> None:
    client = aredis.Redis.from_url(redis_url)
    conn = client.connection_pool.make_connection()
    await conn.connect()
    writer = conn._writer
    await conn.disconnect()
    # what redis-py's send does once connected, on a connection another task closed since
    with pytest.raises(AttributeError) as torn:
        await conn._send_packed_command([b"PING\r\n"])
    gone = lost_connection(torn.value)
    assert isinstance(gone, redis.ConnectionError)
    assert "writelines" in str(gone) and gone.__cause__ is torn.value
    assert writer is not None
    await client.aclose()


def test_our_own_attribute_errors_are_not_lost_connections() -> None:
    try:
        None.writelines  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert lost_connection(exc) is None
    assert lost_connection(TypeError("'NoneType' object is not callable")) is None
    assert lost_connection(ValueError("NoneType")) is None
    timeout = redis.TimeoutError("slow")
    assert lost_connection(timeout) is timeout


async def test_async_writers_and_tails_outlive_their_client_closing_every_connection(
    cluster: EmbeddedCluster, prefix: str
) -> None:
    client = AsyncRedisCluster.from_url(cluster.url)
    saver = AsyncRedisStreamSaver(client, prefix=prefix)
    threads = [f"t{i}" for i in range(4)]
    stop = asyncio.Event()
    acked: list[tuple[str, str]] = []
    seen: list[ThreadEvent] = []
    alone: list[ThreadEvent] = []

    async def write(thread: str) -> None:
        config, n = _config(thread), 0
        while not stop.is_set():
            config = await saver.aput(config, _checkpoint(n), {"step": n}, {"n": n + 1})
            acked.append((thread, config["configurable"]["checkpoint_id"]))
            n += 1

    # a call after every connection closed learns the layout and connects again: closed more
    # often than that takes, no write could ever get through (13-18 ms on a slow machine, so
    # 5 ms starved the writers of two primaries and the test measured the machine)
    cold = []
    for thread in threads:
        await client.aclose()
        started = time.monotonic()
        assert await saver.aget_tuple(_config(thread)) is None  # the same path, no event
        cold.append(time.monotonic() - started)
    every_s = max(0.005, 2 * max(cold))

    async def close_every_connection() -> None:
        # what redis-py's cluster client does on a ConnectionError of any of its tasks
        while not stop.is_set():
            await asyncio.sleep(every_s)
            await client.aclose()

    async def follow(tail: Any, into: list[ThreadEvent]) -> None:
        async for event in tail:
            into.append(event)

    every = saver.atail_all(after="0", discover_ms=20, poll_ms=5)
    one = saver.atail(threads[0], after="0", block_ms=100)
    readers = [asyncio.create_task(follow(every, seen)), asyncio.create_task(follow(one, alone))]
    work = [asyncio.create_task(write(t)) for t in threads]
    work.append(asyncio.create_task(close_every_connection()))
    # 3 s of connections closed every `every_s`, and on until the writers have made their 51
    # writes: how many get through in 3 s is this machine's speed (23-50 on a busy one)
    await asyncio.sleep(3.0)
    deadline = time.monotonic() + 30
    while len(acked) <= 50 and time.monotonic() < deadline and not any(w.done() for w in work):
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*work)  # a writer's error surfaces here
    assert len(acked) > 50, "the writers made no progress"
    # every entry of every log, once; a write resent after its connection was lost may have
    # run before, its event is then in the log twice (and read once: test_integrity), so the
    # tails are waited for until they hold as many events as the logs, not as were acked
    logs = {t: [_text(i) for i, _ in await client.xrange(saver._ops.keys(t).log)] for t in threads}
    entries = sum(map(len, logs.values()))
    for _ in range(200):
        caught_up = len(seen) >= entries and len(alone) >= len(logs[threads[0]])
        if caught_up or any(r.done() for r in readers):
            break
        await asyncio.sleep(0.05)
    await every.stop()
    await one.stop()
    await asyncio.gather(*readers)  # a tail's error surfaces here
    assert sorted((e.thread_id, e.id) for e in seen) == sorted(
        (t, i) for t, ids in logs.items() for i in ids
    )
    assert [e.id for e in alone] == logs[threads[0]]
    assert set(acked) <= {(e.thread_id, e.checkpoint_id) for e in seen}
    for thread in threads:  # and what a reader gets is the last acknowledged checkpoint
        latest = await saver.aget_tuple(_config(thread))
        assert latest is not None
        assert latest.config["configurable"]["checkpoint_id"] == max(
            c for t, c in acked if t == thread
        )
    await client.aclose()


def test_a_lost_connection_on_a_standalone_server_is_not_retried(redis_url: str) -> None:
    """A standalone client's own retry policy has resent already: one error, at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    saver = RedisStreamSaver(redis.Redis(port=port), prefix="gone")
    with pytest.raises(ServerUnavailableError):
        saver.get_tuple(_config("t"))


def test_a_cluster_gone_for_good_is_unavailable_after_the_move_timeout() -> None:
    with EmbeddedCluster(3) as own:
        client = RedisCluster.from_url(own.url)
        saver = RedisStreamSaver(client, prefix="gone", slot_move_timeout_s=0.5)
        saver.put(_config("t"), _checkpoint(1), {}, {"n": 2})
        for node in own.nodes:
            node.kill()
        started = time.monotonic()
        with pytest.raises(ServerUnavailableError, match="unavailable"):
            saver.get_tuple(_config("t"))
        # the move timeout, and redis-py's own retries of each attempt: bounded, not forever
        assert 0.5 <= time.monotonic() - started < 30


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_tail_reading_a_half_moved_slot_outlives_its_new_owner_pausing(
    asynchronous: bool,
) -> None:
    """Mid-migration a tail's read is answered ASK, and sent to the slot's new owner; that
    node stops answering for a while (a stall, a failover): the tail waits it out and goes
    on, every event once, where it used to raise ServerUnavailableError at the first
    timeout."""
    with EmbeddedCluster(3) as own:
        client = RedisCluster.from_url(own.url, socket_timeout=0.3)
        saver = RedisStreamSaver(client, prefix="asked", slot_move_timeout_s=30)
        saver.put(_config("t"), _checkpoint(1), {}, {"n": 2})
        log = saver._ops.keys("t").log
        slot = client.keyslot(log)
        source = own.owner(slot)
        target = next(p for p in own.primaries if p.port != source.port)
        with redis.Redis(port=source.port) as src, redis.Redis(port=target.port) as dst:
            ids = [r.execute_command("CLUSTER", "MYID").decode() for r in (src, dst)]
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[0])
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[1])
            # the log on its new owner: the source answers the tail's reads with ASK
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", log)
        seen: list[ThreadEvent] = []
        errors: list[BaseException] = []

        async def follow_async() -> None:
            aclient = AsyncRedisCluster.from_url(own.url, socket_timeout=0.3)
            asaver = AsyncRedisStreamSaver(aclient, prefix="asked", slot_move_timeout_s=30)
            try:
                async with asaver.atail("t", after="0", block_ms=100) as tail:
                    async for event in tail:
                        seen.append(event)
                        if len(seen) == 2:
                            break
            finally:
                await aclient.aclose()

        def follow() -> None:
            try:
                if asynchronous:
                    asyncio.run(follow_async())
                    return
                with saver.tail("t", after="0", block_ms=100) as tail:
                    for event in tail:
                        seen.append(event)
                        if len(seen) == 2:
                            break
            except BaseException as exc:  # reported below
                errors.append(exc)

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(seen) == 1, errors
        # the new owner stops answering for 1.5 s: five timeouts of the tail's reads there
        os.kill(target.process.pid, signal.SIGSTOP)
        time.sleep(1.5)
        os.kill(target.process.pid, signal.SIGCONT)
        assert reader.is_alive(), _traces(errors)
        own.move_slot(slot, target)
        saver.put(_config("t"), _checkpoint(2), {}, {"n": 3})
        reader.join(20)
        assert not errors and not reader.is_alive(), _traces(errors)
        assert [e.id for e in seen] == [_text(i) for i, _ in client.xrange(log)]
        client.close()
