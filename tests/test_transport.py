"""The transport: auto-pipelined asyncio calls (transport/pipelining.py) against a real server, and
the
I/O-free rounds core (transport/core.py) that every shell drives."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, ResponseError

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver, ServerUnavailableError
from streamsaver.core.durability import Durability, DurabilityError
from streamsaver.core.flow import Call, Each, Eval, ScanLogs
from streamsaver.lua import LIBRARY
from streamsaver.transport.core import (
    Durably,
    LoadScripts,
    LoadThere,
    Pause,
    Pipeline,
    Relearn,
    Scripts,
    durable_rounds,
    rounds,
    run,
)
from streamsaver.transport.exchange import ScanNode, Views, exchange
from streamsaver.transport.moves import Moves
from streamsaver.transport.multiplex import Group, Link
from streamsaver.transport.pipelining import AutoPipeline


def _checkpoint(saver: Any, n: int) -> Checkpoint:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"n": n}
    checkpoint["channel_versions"] = {"n": saver.get_next_version(None)}
    return checkpoint


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aredis.Redis]:
    client = aredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _connections(client: aredis.Redis) -> int:
    pool: Any = client.connection_pool
    return len(pool._available_connections) + len(pool._in_use_connections)


async def test_concurrent_calls_share_one_connection_and_get_their_own_replies(
    client: aredis.Redis, prefix: str
) -> None:
    pipe = AutoPipeline(client)
    key = f"{prefix}:counter"
    replies = await asyncio.gather(*(pipe.send([("INCR", key), ("ECHO", i)]) for i in range(200)))
    counts = [r[0] for r in replies]
    assert sorted(counts) == list(range(1, 201))  # each INCR answered once
    assert [r[1] for r in replies] == [str(i).encode() for i in range(200)]  # in order
    assert _connections(client) == 1  # one write, one pooled connection


async def test_an_empty_batch_is_answered_at_once_beside_others(
    client: aredis.Redis, prefix: str
) -> None:
    """A call with no commands (an Each over no slots) got no reply to complete it and waited
    out the socket timeout, failing as ServerTimeoutError (the console's search for 'busy')."""
    pipe = AutoPipeline(client)
    await pipe.send([("PING",)])  # the kept connection is made
    empty, full = await asyncio.wait_for(
        asyncio.gather(pipe.send([]), pipe.send([("ECHO", "x")])), timeout=2
    )
    assert empty == [] and full == [b"x"]


async def test_a_server_error_is_the_reply_of_its_own_command_only(
    client: aredis.Redis, prefix: str
) -> None:
    pipe = AutoPipeline(client)
    key = f"{prefix}:s"
    await client.set(key, "text")
    before, bad, after = await asyncio.gather(
        pipe.send([("GET", key)]),
        pipe.send([("ECHO", "x"), ("HSET", key, "f", "v"), ("ECHO", "y")]),
        pipe.send([("GET", key)]),
    )
    assert before == after == [b"text"]
    assert bad[0] == b"x" and bad[2] == b"y"
    assert isinstance(bad[1], ResponseError) and "WRONGTYPE" in str(bad[1])


async def test_a_cancelled_caller_does_not_shift_anyone_elses_reply(
    client: aredis.Redis, prefix: str
) -> None:
    pipe = AutoPipeline(client)
    slow = asyncio.ensure_future(pipe.send([("BLPOP", f"{prefix}:none", "0.3")]))
    other = asyncio.ensure_future(pipe.send([("ECHO", "mine")]))
    await asyncio.sleep(0.05)  # both written, the BLPOP blocks the connection
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert await other == [b"mine"]
    # the BLPOP's nil reply was read and dropped, not handed to the next caller
    assert await pipe.send([("ECHO", "next")]) == [b"next"]
    assert await asyncio.gather(*(pipe.send([("ECHO", i)]) for i in range(5))) == [
        [str(i).encode()] for i in range(5)
    ]


async def test_with_retries_a_killed_connection_is_replaced_and_the_call_resent(
    redis_url: str,
) -> None:
    client = aredis.Redis.from_url(redis_url, retry=Retry(NoBackoff(), 1))
    try:
        pipe = AutoPipeline(client)
        [own] = await pipe.send([("CLIENT", "ID")])
        with redis.Redis.from_url(redis_url) as admin:
            assert admin.client_kill_filter(_id=own) == 1
        [again] = await pipe.send([("CLIENT", "ID")])
        assert again != own
    finally:
        await client.aclose()


async def test_without_retries_a_lost_connection_fails_the_call_then_recovers(
    client: aredis.Redis,
    redis_url: str,
) -> None:
    # as redis-py's own execute_command does with the client's default (no) retries
    pipe = AutoPipeline(client)
    [own] = await pipe.send([("CLIENT", "ID")])
    with redis.Redis.from_url(redis_url) as admin:
        assert admin.client_kill_filter(_id=own) == 1
    with pytest.raises(redis.ConnectionError):
        await pipe.send([("PING",)])
    assert await pipe.send([("PING",)]) == [True]


async def test_concurrent_savers_calls_on_one_connection(
    async_saver: AsyncRedisStreamSaver,
) -> None:
    async def step(i: int) -> None:
        config: Any = {"configurable": {"thread_id": f"t{i}", "checkpoint_ns": ""}}
        checkpoint = _checkpoint(async_saver, i)
        versions = checkpoint["channel_versions"]
        saved = await async_saver.aput(config, checkpoint, {"step": i}, versions)
        await async_saver.aput_writes(saved, [("n", i + 1)], "task")
        got = await async_saver.aget_tuple(saved)
        assert got is not None and got.checkpoint["channel_values"]["n"] == i
        assert got.pending_writes == [("task", "n", i + 1)]

    await asyncio.gather(*(step(i) for i in range(64)))
    assert _connections(async_saver.client) == 1


def test_rounds_load_missing_scripts_once_and_resend_only_those() -> None:
    scripts = Scripts({"a": "return 1", "b": "return 2"})
    scripts.functions = False  # the script cache, as on a server without Functions
    ops = [Eval("a", ("k",), ()), Call(("GET", "k")), Eval("b", ("k",), ()), Eval("a", ("j",), ())]
    flow = rounds(ops, scripts, Moves(1.0, "test"))
    first = next(flow)
    assert isinstance(first, Pipeline) and first.commands[1] == ("GET", "k")
    assert first.commands[0][:2] == ("EVALSHA", scripts.shas["a"])
    missing = NoScriptError("NOSCRIPT No matching script")
    load = flow.send([missing, b"v", 2, missing])
    # once, not twice
    assert isinstance(load, LoadScripts) and load.commands == [("SCRIPT", "LOAD", "return 1")]
    again = flow.send(None)
    assert isinstance(again, Pipeline) and [c[3] for c in again.commands] == ["k", "j"]
    with pytest.raises(StopIteration) as done:
        flow.send([1, 1])
    assert done.value.value == [1, b"v", 2, 1]


def test_rounds_resend_only_what_met_a_moving_slot() -> None:
    scripts = Scripts({})
    ops = [Call(("GET", "a")), Call(("GET", "b"))]
    flow = rounds(ops, scripts, Moves(1.0, "test"))
    next(flow)
    pause = flow.send([b"1", redis.exceptions.TryAgainError("TRYAGAIN")])
    assert isinstance(pause, Pause) and pause.seconds > 0
    again = flow.send(None)
    assert isinstance(again, Pipeline) and again.commands == [("GET", "b")]
    with pytest.raises(StopIteration) as done:
        flow.send([b"2"])
    assert done.value.value == [b"1", b"2"]


def test_rounds_learn_the_layout_once_for_a_batch_that_met_moved_slots() -> None:
    """After a failover every command of a batch whose slot moved comes back MOVED: one
    refresh of the slot map and one more pipeline (which the client may redirect), not one
    round trip per command (a 16384-name feed probe took the projector tens of seconds)."""
    scripts = Scripts({})
    ops = [Call(("EXISTS", f"k{i}")) for i in range(4)]
    flow = rounds(ops, scripts, Moves(1.0, "test"))
    first = next(flow)
    assert isinstance(first, Pipeline) and not first.follow
    moved = [redis.exceptions.MovedError(f"{i} 127.0.0.1:7001") for i in (1, 3)]
    learn = flow.send([1, moved[0], 0, moved[1]])
    assert isinstance(learn, Relearn) and learn.moved is None
    again = flow.send(None)
    assert isinstance(again, Pipeline) and again.follow
    assert again.commands == [("EXISTS", "k1"), ("EXISTS", "k3")]
    with pytest.raises(StopIteration) as done:
        flow.send([1, 1])
    assert done.value.value == [1, 1, 0, 1]


def test_rounds_resend_what_met_ask_without_relearning() -> None:
    scripts = Scripts({})
    flow = rounds([Call(("GET", "a")), Call(("GET", "b"))], scripts, Moves(1.0, "test"))
    next(flow)
    again = flow.send([b"1", redis.exceptions.AskError("3 127.0.0.1:7002")])
    assert isinstance(again, Pipeline) and again.follow and again.commands == [("GET", "b")]
    with pytest.raises(StopIteration) as done:
        flow.send([b"2"])
    assert done.value.value == [b"1", b"2"]


def _exchange(first: Any = None, cluster: bool = True) -> Any:
    scripts = Scripts({"a": "return 1"})
    op = Eval("a", ("k",), (), write=True)
    durability = Durability("none", 1, 1000)
    return exchange(op, scripts, durability, Moves(1.0, "test"), cluster, first), scripts


def test_a_lost_cluster_connection_is_resent_after_learning_the_layout() -> None:
    flow, scripts = _exchange()
    sent = next(flow)
    assert isinstance(sent, Pipeline) and sent.commands[0][:2] == ("FCALL", scripts.names["a"])
    pause = flow.throw(redis.exceptions.ConnectionError("Connection closed by server"))
    assert isinstance(pause, Pause)
    learn = flow.send(None)
    assert isinstance(learn, Relearn) and learn.moved is None
    again = flow.send(None)
    assert isinstance(again, Pipeline) and again.commands == sent.commands
    with pytest.raises(StopIteration) as done:
        flow.send([1])
    assert done.value.value == 1


def test_a_lost_standalone_connection_is_final_and_typed() -> None:
    """redis-py resent it under the client's retry policy already."""
    flow, _ = _exchange(cluster=False)
    next(flow)
    with pytest.raises(ServerUnavailableError, match="Connection closed by server"):
        flow.throw(redis.exceptions.ConnectionError("Connection closed by server"))


def test_the_hot_paths_first_replies_are_taken_up_where_they_stopped() -> None:
    """A shell sent the command itself and met a fresh server: the core loads the script and
    sends again, without sending the first round twice."""
    flow, _ = _exchange(first=[redis.exceptions.ResponseError("Function not found")])
    load = next(flow)
    assert isinstance(load, LoadScripts) and load.commands == [("FUNCTION", "LOAD", LIBRARY)]
    again = flow.send(None)
    assert isinstance(again, Pipeline) and len(again.commands) == 1
    with pytest.raises(StopIteration) as done:
        flow.send([1])
    assert done.value.value == 1


def test_the_hot_paths_send_error_is_met_as_the_cores_own() -> None:
    flow, _ = _exchange(first=redis.exceptions.ConnectionError("Connection reset by peer"))
    assert isinstance(next(flow), Pause)
    assert isinstance(flow.send(None), Relearn)
    assert isinstance(flow.send(None), Pipeline)


def test_a_slot_in_motion_the_client_raised_is_waited_for_and_resent() -> None:
    flow, _ = _exchange()
    sent = next(flow)
    pause = flow.throw(redis.exceptions.TryAgainError("TRYAGAIN"))
    assert isinstance(pause, Pause) and pause.seconds > 0
    assert flow.send(None) == sent  # no relearning: the layout did not change


def test_a_server_error_the_client_raised_is_raised_typed() -> None:
    flow, _ = _exchange()
    next(flow)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        flow.throw(ResponseError("WRONGTYPE Operation against a key holding the wrong kind"))


def test_the_driver_throws_a_verbs_error_into_the_core() -> None:
    """``run`` hands a failed send back to the core, which decides: here a cluster's lost
    connection, resent once the layout is learned again."""
    done: list[str] = []
    sent: list[Any] = []

    def send(step: Pipeline) -> list[Any]:
        sent.append(step.commands)
        if len(sent) == 1:
            raise redis.exceptions.ConnectionError("Connection closed by server")
        return [7]

    verbs = {
        Pipeline: send,
        Pause: lambda step: done.append("pause"),
        Relearn: lambda step: done.append("relearn"),
    }
    flow, _ = _exchange()
    assert run(flow, verbs) == 7
    assert done == ["pause", "relearn"] and len(sent) == 2


def _view(name: str, slots: list[list[int]]) -> dict[str, Any]:
    node = {"flags": "myself,master", "node_id": name, "slots": slots, "migrations": []}
    return {name: node}


def test_a_cluster_scan_visits_every_primary_and_again_when_the_layout_moved() -> None:
    flow = exchange(
        ScanLogs("p:*"), Scripts({}), Durability("none", 1, 1000), Moves(5.0, "test"), True
    )
    before = {"a:1": _view("a:1", [[0, 8000]]), "b:2": _view("b:2", [[8001, 16383]])}
    after = {"a:1": _view("a:1", [[0, 7999]]), "b:2": _view("b:2", [[8000, 16383]])}
    assert isinstance(next(flow), Views)
    first = flow.send(before)
    assert first == ScanNode("a:1", "p:*", 0)
    assert flow.send((17, [b"k1"])) == ScanNode("a:1", "p:*", 17)  # the cursor, followed
    assert flow.send((0, [b"k2"])) == ScanNode("b:2", "p:*", 0)
    assert isinstance(flow.send((0, [b"k3"])), Views)
    # slot 8000 moved meanwhile: its keys may have gone past the scan
    assert isinstance(flow.send(after), Relearn)
    assert isinstance(flow.send(None), Pause)
    assert isinstance(flow.send(None), Views)
    assert flow.send(after) == ScanNode("a:1", "p:*", 0)
    assert flow.send((0, [b"k1"])) == ScanNode("b:2", "p:*", 0)
    assert isinstance(flow.send((0, [b"k2", b"k3", b"k4"])), Views)
    with pytest.raises(StopIteration) as done:
        flow.send(after)
    assert sorted(done.value.value) == [b"k1", b"k2", b"k3", b"k4"]


def test_a_standalone_scan_follows_the_cursor_on_the_one_server() -> None:
    flow = exchange(
        ScanLogs("p:*"), Scripts({}), Durability("none", 1, 1000), Moves(5.0, "test"), False
    )
    assert next(flow) == ScanNode(None, "p:*", 0)
    assert flow.send((9, [b"k1"])) == ScanNode(None, "p:*", 9)
    with pytest.raises(StopIteration) as done:
        flow.send((0, [b"k2"]))
    assert sorted(done.value.value) == [b"k1", b"k2"]


def test_a_sync_saver_keeps_one_connection_and_threads_never_wait_for_it(
    sync_saver: RedisStreamSaver,
) -> None:
    client: Any = sync_saver.client
    pool = client.connection_pool
    sync_saver.setup()
    assert len(pool._in_use_connections) == 1  # held between calls, not checked back in
    errors: list[BaseException] = []

    def steps(n: int) -> None:
        try:
            for i in range(30):
                config: Any = {"configurable": {"thread_id": f"s{n}", "checkpoint_ns": ""}}
                checkpoint = _checkpoint(sync_saver, i)
                versions = checkpoint["channel_versions"]
                saved = sync_saver.put(config, checkpoint, {"step": i}, versions)
                got = sync_saver.get_tuple(saved)
                assert got is not None and got.checkpoint["channel_values"]["n"] == i
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=steps, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    # busy threads went through the pool: it lent more than the one held
    assert len(pool._available_connections) + len(pool._in_use_connections) > 1


def test_a_held_connection_the_server_closed_is_replaced_before_use(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    held: Any = sync_saver._held
    client = sync_saver.client
    [own] = held.send(client, [("CLIENT", "ID")])
    with redis.Redis.from_url(redis_url) as admin:
        assert admin.client_kill_filter(_id=own) == 1
    [again] = held.send(client, [("CLIENT", "ID")])
    assert again != own
    client.close()  # closes the held connection with the pool's
    assert held.conn._sock is None
    assert held.send(client, [("PING",)]) == [True]


def test_savers_on_one_client_share_one_kept_connection(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)  # redis-py's default pool: 100 connections
    try:
        savers = [RedisStreamSaver(client, prefix=f"{prefix}:{n}") for n in range(150)]
        for saver in savers:
            saver.setup()
        assert len({id(saver._held) for saver in savers}) == 1
        assert len(client.connection_pool._in_use_connections) == 1  # type: ignore[attr-defined]
    finally:
        client.close()


@pytest.mark.parametrize(
    "pool",
    [
        lambda url: redis.BlockingConnectionPool.from_url(url, max_connections=50),
        lambda url: redis.ConnectionPool.from_url(url, max_connections=2),
    ],
    ids=["blocking", "small"],
)
def test_a_tightly_sized_pool_lends_the_saver_nothing_to_keep(
    redis_url: str, prefix: str, pool: Any
) -> None:
    client = redis.Redis(connection_pool=pool(redis_url))
    try:
        saver = RedisStreamSaver(client, prefix=prefix)
        saver.setup()
        assert saver._held is None
        # every connection went back: the pool can lend all of them again at once
        size = 50 if isinstance(client.connection_pool, redis.BlockingConnectionPool) else 2
        taken = [client.connection_pool.get_connection() for _ in range(size)]
        for conn in taken:
            client.connection_pool.release(conn)
    finally:
        client.connection_pool.disconnect()  # a pool passed in is not closed with the client


def _durable(op: Eval | Call, cluster: bool = True) -> Any:
    durability = Durability("replicated", 1, 100)
    wait = durability.command()
    assert wait is not None
    scripts = Scripts({"append": "return 1"})
    return durable_rounds(op, scripts, durability, wait, Moves(1.0, "test"), cluster)


def test_a_durable_write_follows_moved_and_ask_then_checks_the_ack() -> None:
    flow = _durable(Eval("append", ("{t}:log",), ("x",), write=True))
    first = next(flow)
    assert isinstance(first, Durably) and first.key == "{t}:log" and first.asked is None
    assert first.commands[1] == ("WAIT", 1, 100)  # with the write, on its connection
    moved = redis.exceptions.MovedError("3999 127.0.0.1:7001")
    assert isinstance(flow.send([moved, 0]), Pause)  # MOVED: no wait, the node is known
    relearn = flow.send(None)
    assert isinstance(relearn, Relearn) and relearn.moved is moved
    again = flow.send(None)
    assert isinstance(again, Durably) and again.asked is None
    ask = redis.exceptions.AskError("3999 127.0.0.2:7002")
    assert isinstance(flow.send([ask, 0]), Pause)
    asked = flow.send(None)
    assert isinstance(asked, Durably) and asked.asked == ("127.0.0.2", 7002)
    load = flow.send([redis.exceptions.ResponseError("Function not found"), 0])
    assert isinstance(load, LoadThere) and load.command == ("FUNCTION", "LOAD", LIBRARY)
    last = flow.send(None)
    assert isinstance(last, Durably) and last.asked is None  # ASKING allows one command
    with pytest.raises(DurabilityError):  # no replica acknowledged
        flow.send([b"ok", 0])


def test_a_connection_lost_under_a_pipelined_command_sends_the_batch_again() -> None:
    """A cluster client's pipeline hands a connection lost under one of its commands back as
    that command's reply: the exchange must take it as the lost connection it is (learn the
    layout, send again), not hand it to the caller as if the server had answered."""
    batch = Each((Call(("EXISTS", "{a}:feed")), Call(("EXISTS", "{b}:feed"))))
    flow = exchange(batch, Scripts({}), Durability("none", 1, 100), Moves(1.0, "test"), True)
    assert isinstance(next(flow), Pipeline)
    lost = redis.ConnectionError("Connection closed by server.")
    assert isinstance(flow.send([1, lost]), Pause)
    relearn = flow.send(None)
    assert isinstance(relearn, Relearn) and relearn.moved is None
    again = flow.send(None)
    assert isinstance(again, Pipeline) and len(again.commands) == 2
    with pytest.raises(StopIteration) as done:
        flow.send([1, 0])
    assert done.value.value == [1, 0]


def test_a_durable_write_on_a_demoted_node_is_sent_again_after_relearning() -> None:
    flow = _durable(Call(("XADD", "{t}:log", "*", "f", "v"), write=True))
    next(flow)
    demoted = ResponseError(
        "UNBLOCKED force unblock from blocking operation, instance state changed"
    )
    assert isinstance(flow.send([b"1-0", demoted]), Pause)
    relearn = flow.send(None)
    assert isinstance(relearn, Relearn) and relearn.moved is None
    assert isinstance(flow.send(None), Durably)
    with pytest.raises(StopIteration) as done:
        flow.send([b"1-1", 1])
    assert done.value.value == b"1-1"


# --- the kept connection (transport/multiplex.py)
# ----------------------------------------------------


def _link(pipe: AutoPipeline) -> Any:
    [lane] = pipe._lanes.values()
    return lane.link


async def test_replies_are_parsed_as_redis_py_parses_them_on_the_kept_connection(
    client: aredis.Redis, prefix: str
) -> None:
    pipe = AutoPipeline(client)
    await client.xadd(f"{prefix}:s", {"f": "v"}, id="1-1")
    info, entries, pong, exists = await pipe.send(
        [("INFO", "server"), ("XRANGE", f"{prefix}:s", "-", "+"), ("PING",), ("EXISTS", "no")]
    )
    assert isinstance(_link(pipe), Link)
    assert info["redis_version"]  # parse_info, as client.info() gives it
    assert entries == [(b"1-1", {b"f": b"v"})]
    assert pong is True and exists == 0


async def test_a_script_error_amid_a_shared_write_is_its_callers_reply_only(
    client: aredis.Redis, prefix: str
) -> None:
    pipe = AutoPipeline(client)
    key = f"{prefix}:n"

    async def call(i: int) -> list[Any]:
        if i == 25:
            return await pipe.send([("INCR", key), ("EVAL", "return redis.call('nope')", 0)])
        return await pipe.send([("INCR", key), ("ECHO", i)])

    replies = await asyncio.gather(*(call(i) for i in range(50)))
    assert isinstance(_link(pipe), Link)
    assert sorted(r[0] for r in replies) == list(range(1, 51))
    error = replies[25][1]
    assert isinstance(error, ResponseError) and "Unknown Redis command" in str(error)
    assert [r[1] for i, r in enumerate(replies) if i != 25] == [
        str(i).encode() for i in range(50) if i != 25
    ]
    assert await pipe.send([("ECHO", "after")]) == [b"after"]


async def test_cancelled_callers_on_the_kept_connection_shift_no_reply(
    client: aredis.Redis, prefix: str
) -> None:
    pipe = AutoPipeline(client)
    await pipe.send([("PING",)])
    calls = [asyncio.ensure_future(pipe.send([("ECHO", i)])) for i in range(40)]
    blocked = asyncio.ensure_future(pipe.send([("BLPOP", f"{prefix}:none", "0.2")]))
    later = [asyncio.ensure_future(pipe.send([("ECHO", f"l{i}")])) for i in range(5)]
    for i in range(0, 40, 3):
        calls[i].cancel()  # before their write went out: they are never sent
    await asyncio.sleep(0.05)  # the rest written; BLPOP holds the connection
    blocked.cancel()
    later[0].cancel()
    for i, call in enumerate(calls):
        if i % 3:
            assert await call == [str(i).encode()]
        else:
            with pytest.raises(asyncio.CancelledError):
                await call
    assert [await c for c in later[1:]] == [[f"l{i}".encode()] for i in range(1, 5)]
    assert await pipe.send([("ECHO", "next")]) == [b"next"]


async def test_no_reply_within_the_socket_timeout_fails_the_call_then_a_new_connection(
    redis_url: str, prefix: str
) -> None:
    client = aredis.Redis.from_url(redis_url, socket_timeout=0.2)
    try:
        pipe = AutoPipeline(client)
        [first] = await pipe.send([("CLIENT", "ID")])
        other = asyncio.ensure_future(pipe.send([("ECHO", "queued behind")]))
        with pytest.raises(redis.TimeoutError):
            await pipe.send([("BLPOP", f"{prefix}:none", "1")])
        with pytest.raises(redis.TimeoutError):
            await other  # written behind the BLPOP: no reply within the timeout either
        [again] = await pipe.send([("CLIENT", "ID")])
        assert again != first
    finally:
        await client.aclose()


async def test_closing_the_client_closes_the_kept_connection(redis_url: str) -> None:
    client = aredis.Redis.from_url(redis_url)
    pipe = AutoPipeline(client)
    [own] = await pipe.send([("CLIENT", "ID")])
    link = _link(pipe)
    await asyncio.wait_for(client.aclose(), 2)
    await asyncio.sleep(0.05)
    assert not link.usable
    with redis.Redis.from_url(redis_url) as admin:
        assert own not in [c["id"] for c in admin.client_list()]


async def test_a_connection_closed_while_it_is_being_kept_fails_its_callers(
    redis_url: str,
) -> None:
    """The client's aclose() on another task closes the connection a link is being made on:
    the close reached redis-py's protocol, so the link must refuse it, or a write on it would
    be dropped by the transport and its callers would wait for good (no socket timeout)."""
    client = aredis.Redis.from_url(redis_url)
    try:
        conn = await client.connection_pool.get_connection()
        conn._writer.close()  # as disconnect() begins; its wait_closed is still ahead
        await asyncio.sleep(0)  # the transport tells redis-py's protocol it is lost
        group = Group([("PING",)], asyncio.get_running_loop().create_future())
        try:
            link = Link(conn, client.response_callbacks, client.connection_pool.release)
        except redis.ConnectionError as refused:
            assert "closed while it was being kept" in str(refused)
        else:
            link.write([group])
            with pytest.raises(redis.ConnectionError):
                await asyncio.wait_for(group.future, 2)
        await client.connection_pool.release(conn)
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "options",
    [
        {"max_connections": 4},
        {"connection_pool": "blocking"},
        {"protocol": 3},
        {"single_connection_client": True},
    ],
)
async def test_clients_that_cannot_lend_a_connection_keep_the_pump(
    redis_url: str, prefix: str, options: dict[str, Any]
) -> None:
    if options.get("connection_pool") == "blocking":
        client = aredis.Redis(connection_pool=aredis.BlockingConnectionPool.from_url(redis_url))
    else:
        client = aredis.Redis.from_url(redis_url, **options)
    try:
        pipe = AutoPipeline(client)
        key = f"{prefix}:c"
        replies = await asyncio.gather(
            *(pipe.send([("INCR", key), ("ECHO", i)]) for i in range(20))
        )
        assert _link(pipe) is False
        assert sorted(r[0] for r in replies) == list(range(1, 21))
        assert [r[1] for r in replies] == [str(i).encode() for i in range(20)]
    finally:
        await client.aclose()
        await client.connection_pool.disconnect()  # a pool passed in is not the client's to close


async def test_savers_on_one_async_client_share_one_kept_connection(
    client: aredis.Redis, prefix: str
) -> None:
    savers = [AsyncRedisStreamSaver(client, prefix=prefix) for _ in range(30)]
    for saver in savers:
        assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None
    assert len({id(saver._autopipe) for saver in savers}) == 1
    assert _connections(client) == 1
