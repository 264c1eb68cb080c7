"""The console's event streams against a console process of its own: a client that
reconnects with ``Last-Event-ID`` after the server was killed mid-stream misses nothing and
gets nothing twice; many clients held open do not grow the server's memory."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.web import create_app
from tests.web_support import Served, build, sse

START: dict[str, Any] = {"items": [], "note": ""}


class Writer(threading.Thread):
    """Runs the graph on ``threads`` in turn, ``runs`` times, while a test reads."""

    def __init__(self, saver: RedisStreamSaver, threads: list[str], runs: int, pause: float):
        super().__init__(daemon=True)
        self.saver, self.threads, self.runs, self.pause = saver, threads, runs, pause
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            graph = build(self.saver)
            i = 0
            while i < self.runs:  # a test may lower runs to stop it early
                thread_id = self.threads[i % len(self.threads)]
                graph.invoke(START, {"configurable": {"thread_id": thread_id}})
                time.sleep(self.pause)
                i += 1
        except BaseException as exc:  # reported by the test
            self.error = exc


def log_ids(saver: RedisStreamSaver, thread_id: str) -> list[str]:
    return [e.id for e in saver.history(thread_id)]


def read_until(
    served: Served,
    path: str,
    done: Callable[[list[tuple[str, dict[str, Any]]]], bool],
    last_id: str | None = None,
) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """Messages of one connection until ``done`` says so or the server goes away."""
    got: list[tuple[str, dict[str, Any]]] = []
    headers = {**served.headers, **({"last-event-id": last_id} if last_id else {})}
    try:
        with httpx.stream(
            "GET", served.base + path, headers=headers, timeout=httpx.Timeout(15, read=15)
        ) as response:
            assert response.status_code == 200
            for event_id, _, data in sse(response):
                got.append((event_id, data))
                if done(got):
                    return got, True
    except (httpx.RemoteProtocolError, httpx.ReadError):
        pass  # killed mid-stream
    return got, False


@pytest.mark.parametrize("path", ["/threads/w0/events?after=0", "/events?after=0"])
def test_resume_after_a_server_kill_misses_nothing_and_repeats_nothing(
    redis_url: str, prefix: str, sync_saver: RedisStreamSaver, path: str
) -> None:
    threads = ["w0"] if path.startswith("/threads") else ["w0", "w1", "w2"]
    writer = Writer(sync_saver, threads, runs=24, pause=0.05)
    with Served(redis_url, prefix) as served:
        writer.start()
        killer = threading.Timer(0.8, served.kill)
        killer.start()
        first, finished = read_until(served, path, lambda got: False)
        killer.join()
        assert not finished and first, "the kill came before any event"
        served.start()  # a new process at the same address
        writer.join(60)
        assert writer.error is None and not writer.is_alive()
        expected = [(t, i) for t in threads for i in log_ids(sync_saver, t)]
        total = len(expected)
        second, finished = read_until(
            served, path, lambda got: len(first) + len(got) >= total, last_id=first[-1][0]
        )
    assert finished
    seen = [(data["thread_id"], data["id"]) for _, data in first + second]
    assert len(seen) == len(set(seen)), "an event came twice"
    assert sorted(seen) == sorted(expected)
    for t in threads:  # each thread's events in log order
        assert [i for tt, i in seen if tt == t] == log_ids(sync_saver, t)
    if path.startswith("/threads"):
        assert [event_id for event_id, _ in first + second] == [i for _, i in seen]


async def test_bad_resume_position_is_a_400(async_saver: AsyncRedisStreamSaver) -> None:
    app = create_app(async_saver)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as h:
        for path, bad in (("/threads/t/events", "12x"), ("/events", "1-0"), ("/events", "c1")):
            reply = await h.get(path, headers={"last-event-id": bad})
            assert reply.status_code == 400 and repr(bad) in reply.json()["error"]


async def test_many_clients_held_open_do_not_grow_memory(
    redis_url: str, prefix: str, sync_saver: RedisStreamSaver
) -> None:
    clients, held_s = 200, 12.0
    with Served(redis_url, prefix) as served:
        writer = Writer(sync_saver, ["m0", "m1"], runs=10_000, pause=0.2)
        received = [0] * clients

        async def hold(i: int, http: httpx.AsyncClient, until: float) -> None:
            async with http.stream("GET", served.base + "/events") as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    received[i] += line.startswith("id:")
                    if time.monotonic() > until:
                        return

        limits = httpx.Limits(max_connections=clients + 10)
        async with httpx.AsyncClient(limits=limits, timeout=30) as http:
            until = time.monotonic() + held_s
            tasks = [asyncio.create_task(hold(i, http, until)) for i in range(clients)]
            writer.start()
            await asyncio.sleep(4)  # every client connected and warmed up
            early = served.rss_kb()
            await asyncio.sleep(held_s - 5)
            late = served.rss_kb()
            writer.runs = 0  # stops after its current run
            await asyncio.gather(*tasks)
        writer.join(30)
    assert writer.error is None
    print(f"server RSS {early} KiB after 4 s, {late} KiB after {held_s - 1:.0f} s")
    print(sorted(received)[:20])
    assert min(received) > 10, "every client got the events"
    growth = late - early
    assert growth < early * 0.1, f"RSS grew {growth} KiB (from {early} KiB)"


async def test_a_client_that_falls_behind_the_hub_catches_up_exactly(
    async_saver: AsyncRedisStreamSaver,
) -> None:
    from streamsaver.web._hub import FeedHub, feed_stream

    hub = FeedHub(async_saver, size=2)  # holds two events: a slow client falls out at once
    graph = build(async_saver)
    stream = feed_stream(async_saver, hub, "$")
    try:
        waiting = asyncio.create_task(anext(stream))
        await asyncio.sleep(0.5)  # subscribed at "$", before any event
        for thread_id in ("a", "b", "c", "a"):
            await graph.ainvoke(START, {"configurable": {"thread_id": thread_id}})
        first = await asyncio.wait_for(waiting, 10)
        expected = {(t, e.id) for t in "abc" async for e in async_saver.ahistory(t) if e.id}
        got = [json.loads(first["data"])]
        while len(got) < len(expected):
            got.append(json.loads((await asyncio.wait_for(anext(stream), 10))["data"]))
    finally:
        await stream.aclose()
        await hub.close()
    seen = [(e["thread_id"], e["id"]) for e in got]
    assert len(seen) == len(set(seen)) and set(seen) == expected
