"""No call waits unboundedly on the network: tails on a server that stops answering (SIGSTOP,
as a black-holed path) report it or stop when told; the asyncio auto-pipeline answers every
queued caller across a reconnect, with and without hiredis, and paces a burst.

Each test starts its own server (``stoppable_server``), to stop or kill it; the asyncio ones
run with redis-py's hiredis parser and with its pure-Python one (what a plain install gets),
forced per connection with ``parser_class``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser

from streamsaver import (
    AsyncRedisStreamSaver,
    RedisStreamSaver,
    ServerUnavailableError,
)
from streamsaver.embedded import EmbeddedRedis
from streamsaver.tailing import aio as tail_aio
from streamsaver.tailing import blocking as tail_blocking
from streamsaver.tailing import sync as tail_sync
from streamsaver.transport import multiplex, pipelining, resp

PARSERS = {"hiredis": _AsyncHiredisParser, "python": _AsyncRESP2Parser}
BOUND_S = 10.0  # generous: the point is that the call returns, not how fast
# a client made without timeouts (from_conn_string sets them; redis-py's own default is 5 s)
UNBOUNDED: dict[str, Any] = {"socket_timeout": None, "socket_connect_timeout": None}


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> float:
    """A blocking read's grace period cut from 5 s, so a silent server shows within ~1 s."""
    for module in (tail_blocking, tail_sync, tail_aio):
        if hasattr(module, "GRACE_S"):
            monkeypatch.setattr(module, "GRACE_S", 0.3)
    return 0.3


@pytest.fixture(params=sorted(PARSERS))
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """redis-py's parser for the asyncio clients a test makes: with ``python``, streamsaver
    runs as without hiredis too (the auto-pipeline's pump, its own packing)."""
    if request.param == "python":
        monkeypatch.setattr(multiplex, "hiredis", None)
        monkeypatch.setattr(resp, "pack", resp.pack_python)
    return PARSERS[request.param]


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _put(saver: RedisStreamSaver, thread: str = "t", n: int = 1) -> None:
    cp = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
    saver.put(_config(thread), cp, generate_metadata(step=n), {"n": n + 1})


class Outcome:
    """What a call run in a thread of its own did: its error, if any, and whether it ended."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            call()
        except BaseException as exc:  # judged by the test
            self.error = exc

    def ended_within(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return not self.thread.is_alive()


def _following(reader: Any) -> Outcome:
    """``reader`` iterated in a thread of its own, once it has handed over its first event."""
    first = threading.Event()

    def follow() -> None:
        for _ in reader:
            first.set()

    outcome = Outcome(follow)
    assert first.wait(5)
    return outcome


def _freeze(server: EmbeddedRedis) -> None:
    os.kill(server.process.pid, signal.SIGSTOP)


def _thaw(server: EmbeddedRedis) -> None:
    os.kill(server.process.pid, signal.SIGCONT)


# --- tails on a server that stops answering ---------------------------------------------------


def _sync_reader(saver: RedisStreamSaver, kind: str) -> Any:
    if kind == "tail":
        return saver.tail("t", after="0", block_ms=100)
    return saver.tail_all(after="0", block_ms=100, discover_ms=200)


def _async_reader(saver: AsyncRedisStreamSaver, kind: str) -> Any:
    if kind == "tail":
        return saver.atail("t", after="0", block_ms=100)
    return saver.atail_all(after="0", block_ms=100, discover_ms=200)


@pytest.mark.parametrize("kind", ["tail", "tail_all"])
def test_a_sync_tail_on_a_silent_server_raises_in_bounded_time(
    stoppable_server: EmbeddedRedis, short_grace: float, kind: str
) -> None:
    """No socket timeout (a client made without one): the blocking read times out after its
    grace, and the reconnect's handshake must not then wait for good."""
    client = redis.Redis.from_url(stoppable_server.url, **UNBOUNDED)
    saver = RedisStreamSaver(client, prefix="b")
    _put(saver)
    reader = _sync_reader(saver, kind)
    outcome = _following(reader)
    _freeze(stoppable_server)
    try:
        ended = outcome.ended_within(BOUND_S)
    finally:
        _thaw(stoppable_server)
    assert ended, f"the {kind} still waits {BOUND_S} s after its server stopped answering"
    assert isinstance(outcome.error, ServerUnavailableError), repr(outcome.error)
    reader.close()
    client.close()


@pytest.mark.parametrize("kind", ["tail", "tail_all"])
def test_stop_ends_a_sync_tail_waiting_on_a_silent_server(
    stoppable_server: EmbeddedRedis, short_grace: float, kind: str
) -> None:
    """A long socket timeout the user chose: the tail may wait that long on its own, but
    ``stop()`` from another thread ends the wait, wherever it is (a read, a reconnect)."""
    client = redis.Redis.from_url(stoppable_server.url, socket_timeout=60)
    saver = RedisStreamSaver(client, prefix="b")
    _put(saver)
    reader = _sync_reader(saver, kind)
    outcome = _following(reader)
    _freeze(stoppable_server)
    try:
        # past the blocking read's timeout (block 0.1 s + grace 0.3 s): reconnecting
        time.sleep(1.5)
        reader.stop()
        ended = outcome.ended_within(BOUND_S)
    finally:
        _thaw(stoppable_server)
    assert ended, f"stop() did not end the {kind} waiting on a silent server"
    assert outcome.error is None, repr(outcome.error)
    reader.close()
    client.close()


async def _follow_async(reader: Any, first: asyncio.Event) -> None:
    async with reader:
        async for _ in reader:
            first.set()


@pytest.mark.parametrize("kind", ["tail", "tail_all"])
async def test_an_async_tail_on_a_silent_server_raises_in_bounded_time(
    stoppable_server: EmbeddedRedis, short_grace: float, kind: str, parser: Any
) -> None:
    client = aredis.Redis.from_url(stoppable_server.url, parser_class=parser, **UNBOUNDED)
    saver = AsyncRedisStreamSaver(client, prefix="b")
    _put(RedisStreamSaver(redis.Redis.from_url(stoppable_server.url), prefix="b"))
    first = asyncio.Event()
    task = asyncio.ensure_future(_follow_async(_async_reader(saver, kind), first))
    await asyncio.wait_for(first.wait(), 5)
    _freeze(stoppable_server)
    try:
        done, _ = await asyncio.wait({task}, timeout=BOUND_S)
    finally:
        _thaw(stoppable_server)
    if not done:
        task.cancel()
    assert done, f"the async {kind} still waits {BOUND_S} s after its server stopped answering"
    assert isinstance(task.exception(), ServerUnavailableError), repr(task.exception())
    await client.aclose()


@pytest.mark.parametrize("how", ["stop", "cancel"])
@pytest.mark.parametrize("kind", ["tail", "tail_all"])
async def test_stop_or_cancel_ends_an_async_tail_waiting_on_a_silent_server(
    stoppable_server: EmbeddedRedis, short_grace: float, kind: str, how: str, parser: Any
) -> None:
    client = aredis.Redis.from_url(stoppable_server.url, socket_timeout=60, parser_class=parser)
    saver = AsyncRedisStreamSaver(client, prefix="b")
    _put(RedisStreamSaver(redis.Redis.from_url(stoppable_server.url), prefix="b"))
    first = asyncio.Event()
    reader = _async_reader(saver, kind)
    task = asyncio.ensure_future(_follow_async(reader, first))
    await asyncio.wait_for(first.wait(), 5)
    _freeze(stoppable_server)
    try:
        await asyncio.sleep(1.5)  # past the blocking read's timeout: reconnecting
        if how == "stop":
            await reader.stop()
        else:
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=BOUND_S)
    finally:
        _thaw(stoppable_server)
    if not done:
        task.cancel()
    assert done, f"{how} did not end the async {kind} waiting on a silent server"
    if how == "stop":
        assert task.exception() is None, repr(task.exception())
    else:
        assert task.cancelled()
    await client.aclose()


# --- the asyncio auto-pipeline: every queued caller answered, a burst paced -------------------


async def test_calls_queued_while_the_server_is_down_all_return(
    stoppable_server: EmbeddedRedis, parser: Any
) -> None:
    """Calls queued while the server is down each get a typed error or their reply, in bounded
    time, whether the server comes back meanwhile or not; none stays pending."""
    client = aredis.Redis.from_url(
        stoppable_server.url, socket_connect_timeout=1, parser_class=parser
    )
    saver = AsyncRedisStreamSaver(client, prefix="b")
    _put(RedisStreamSaver(redis.Redis.from_url(stoppable_server.url), prefix="b"))
    assert await saver.aget_tuple(_config("t")) is not None
    stoppable_server.kill()
    # the first call meets the pooled connection closed; those after it need a new one
    with pytest.raises(ServerUnavailableError):
        await asyncio.wait_for(saver.aget_tuple(_config("t")), BOUND_S)
    calls = [asyncio.ensure_future(saver.aget_tuple(_config("t"))) for _ in range(20)]
    await asyncio.sleep(0.3)
    stoppable_server.restart()
    done, pending = await asyncio.wait(calls, timeout=BOUND_S)
    for call in pending:
        call.cancel()
    assert not pending, f"{len(pending)} of {len(calls)} calls still wait {BOUND_S} s on"
    for call in done:
        error = call.exception()
        assert error is None or isinstance(error, ServerUnavailableError), repr(error)
    # and the saver works on: the thread is gone with the restarted server's data
    assert await saver.aget_tuple(_config("t")) is None
    await client.aclose()


async def test_a_burst_of_store_calls_is_paced_not_one_giant_write(
    stoppable_server: EmbeddedRedis, parser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of concurrent Store puts, each ~1 KB: one write of all of them keeps the
    connection draining for longer than the socket timeout; written in bounded batches, every
    call is answered within it. A caller that got an error was told whether its write may
    have landed, and nothing lands after the calls returned."""
    from streamsaver import AsyncRedisStreamStore

    # the most commands one write carried (the pump's exchange, or the kept link's write)
    largest = [0]
    link_write, exchange = multiplex.Link.write, pipelining.AutoPipeline._exchange

    def write(link: Any, groups: list[Any], limit: int | None = None) -> list[Any]:
        rest = link_write(link, groups, limit)
        largest[0] = max(largest[0], sum(len(g.commands) for g in groups if g not in rest))
        return rest

    async def exchanged(pipe: Any, groups: list[Any]) -> None:
        largest[0] = max(largest[0], sum(len(commands) for commands, _ in groups))
        await exchange(pipe, groups)

    monkeypatch.setattr(multiplex.Link, "write", write)
    monkeypatch.setattr(pipelining.AutoPipeline, "_exchange", exchanged)
    client = aredis.Redis.from_url(stoppable_server.url, socket_timeout=1, parser_class=parser)
    store = AsyncRedisStreamStore(client, prefix="burst")
    await store.aput(("warm",), "up", {"v": 0})
    blob = "x" * 1000
    # 20,000 took one write of the pump past the 1 s timeout here; the kept connection of
    # hiredis is checked with fewer
    n = 20_000 if parser is _AsyncRESP2Parser else 5_000
    started = time.monotonic()
    results = await asyncio.gather(
        *(store.aput(("burst",), f"k{i}", {"v": blob}) for i in range(n)), return_exceptions=True
    )
    took = time.monotonic() - started
    errors = [r for r in results if isinstance(r, BaseException)]
    for error in errors:
        assert isinstance(error, ServerUnavailableError), repr(error)
        assert "may or may not have been applied" in str(error), str(error)
    assert not errors, f"{len(errors)} of {n} calls failed in {took:.1f} s: {errors[0]!r}"
    assert largest[0] <= 1000, f"one write carried {largest[0]} commands"
    admin = redis.Redis.from_url(stoppable_server.url)
    before = admin.info("stats")["total_commands_processed"]
    await asyncio.sleep(0.5)
    # nothing ran after every caller had its answer (but this INFO and the one before)
    assert admin.info("stats")["total_commands_processed"] - before <= 2
    admin.close()
    await client.aclose()


async def test_the_console_hub_reports_a_silent_server(
    stoppable_server: EmbeddedRedis, short_grace: float, parser: Any
) -> None:
    """The console's one ``atail_all``: its clients are told (and reconnect) rather than
    waiting on a hub that went quiet for good."""
    from streamsaver.web._hub import FeedHub

    client = aredis.Redis.from_url(stoppable_server.url, parser_class=parser, **UNBOUNDED)
    hub = FeedHub(AsyncRedisStreamSaver(client, prefix="b"))
    await hub.start()
    _freeze(stoppable_server)
    try:
        waiting = asyncio.ensure_future(hub.after(hub.next_seq))
        done, _ = await asyncio.wait({waiting}, timeout=BOUND_S)
    finally:
        _thaw(stoppable_server)
    if not done:
        waiting.cancel()
    assert done, f"the hub's clients still wait {BOUND_S} s after the server stopped answering"
    assert isinstance(waiting.exception(), ServerUnavailableError), repr(waiting.exception())
    await hub.close()
    await client.aclose()


async def test_calls_on_a_silent_server_each_get_a_typed_error_in_bounded_time(
    stoppable_server: EmbeddedRedis, parser: Any
) -> None:
    """The kept connection (hiredis) and the pump (without): with a socket timeout, every
    queued call on a stalled server fails typed, saying its write may have landed, and the
    saver works on once the server answers again."""
    client = aredis.Redis.from_url(
        stoppable_server.url, socket_timeout=0.5, socket_connect_timeout=0.5, parser_class=parser
    )
    saver = AsyncRedisStreamSaver(client, prefix="b")
    _put(RedisStreamSaver(redis.Redis.from_url(stoppable_server.url), prefix="b"))
    assert await saver.aget_tuple(_config("t")) is not None
    _freeze(stoppable_server)
    try:
        calls = [asyncio.ensure_future(saver.aget_tuple(_config("t"))) for _ in range(20)]
        done, pending = await asyncio.wait(calls, timeout=BOUND_S)
    finally:
        _thaw(stoppable_server)
    for call in pending:
        call.cancel()
    assert not pending, f"{len(pending)} of {len(calls)} calls still wait {BOUND_S} s on"
    for call in done:
        error = call.exception()
        assert isinstance(error, ServerUnavailableError), repr(error)
        assert "may or may not have been applied" in str(error), str(error)
    assert await saver.aget_tuple(_config("t")) is not None
    await client.aclose()


async def test_a_burst_whose_connection_is_killed_midway_answers_every_caller(
    stoppable_server: EmbeddedRedis, parser: Any
) -> None:
    """The connection a burst is being written on is killed: the calls already written fail
    or are sent again, and those still waiting to be written go out on a new connection;
    every caller gets its reply or a typed error."""
    client = aredis.Redis.from_url(stoppable_server.url, socket_timeout=2, parser_class=parser)
    saver = AsyncRedisStreamSaver(client, prefix="b")
    _put(RedisStreamSaver(redis.Redis.from_url(stoppable_server.url), prefix="b"))
    assert await saver.aget_tuple(_config("t")) is not None
    admin = redis.Redis.from_url(stoppable_server.url)

    async def kill_soon() -> None:
        await asyncio.sleep(0.01)
        admin.client_kill_filter(_type="normal", skipme=True)

    calls = [asyncio.ensure_future(saver.aget_tuple(_config("t"))) for _ in range(5000)]
    killer = asyncio.ensure_future(kill_soon())
    done, pending = await asyncio.wait(calls, timeout=BOUND_S)
    await killer
    for call in pending:
        call.cancel()
    assert not pending, f"{len(pending)} of {len(calls)} calls still wait {BOUND_S} s on"
    for call in done:
        error = call.exception()
        assert error is None or isinstance(error, ServerUnavailableError), repr(error)
    assert await saver.aget_tuple(_config("t")) is not None
    admin.close()
    await client.aclose()


def _size(commands: Any) -> int:
    return sum(len(a) for c in commands for a in c if isinstance(a, (bytes, str)))


async def test_a_burst_of_large_calls_is_written_about_a_megabyte_at_a_time(
    stoppable_server: EmbeddedRedis, parser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamsaver import AsyncRedisStreamStore

    largest = [0]
    link_write, exchange = multiplex.Link.write, pipelining.AutoPipeline._exchange

    def write(link: Any, groups: list[Any], limit: int | None = None) -> list[Any]:
        rest = link_write(link, groups, limit)
        written = [g for g in groups if g not in rest]
        largest[0] = max(largest[0], sum(_size(g.commands) for g in written))
        return rest

    async def exchanged(pipe: Any, groups: list[Any]) -> None:
        largest[0] = max(largest[0], sum(_size(commands) for commands, _ in groups))
        await exchange(pipe, groups)

    monkeypatch.setattr(multiplex.Link, "write", write)
    monkeypatch.setattr(pipelining.AutoPipeline, "_exchange", exchanged)
    client = aredis.Redis.from_url(stoppable_server.url, socket_timeout=5, parser_class=parser)
    store = AsyncRedisStreamStore(client, prefix="large")
    await store.aput(("warm",), "up", {"v": 0})
    blob = "x" * 200_000
    await asyncio.gather(*(store.aput(("large",), f"k{i}", {"v": blob}) for i in range(40)))
    # 40 calls of ~200 KB: about a megabyte a write (the call that crosses it goes too)
    assert 0 < largest[0] <= (1 << 20) + 2 * 210_000, largest[0]
    assert len(await store.asearch(("large",), limit=100)) == 40
    await client.aclose()
