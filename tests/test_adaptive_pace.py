"""The adaptive pace of long operations (core.flow.Pace): its decisions, from synthetic command
counts and a synthetic clock, and on real servers what a check sends when it is alone on the
server and when another client keeps it busy (counted in calls and budgets, never in time)."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from streamsaver import RedisStreamSaver
from streamsaver.core.flow import PROBE, Call, Done, Each, Eval, Pace, Pause, advance, commands_run
from streamsaver.core.slicing import (
    DEFAULT_SLICE_MS,
    DEFAULT_SLICE_PAUSE,
    MOST_SLICE_MS,
    QUIET_S,
)
from streamsaver.embedded import EmbeddedRedis as EmbeddedServer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def adaptive(clock: Clock) -> Pace:
    return Pace(DEFAULT_SLICE_PAUSE, DEFAULT_SLICE_MS, adapts=True, clock=clock)


# one observation: the commands others ran since the last slice, and the seconds it took
Seen = tuple[int, float]


@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0.0, 0.3)), max_size=60))
def test_the_budget_grows_only_while_nobody_is_served_and_never_past_the_cap(
    seen: list[Seen],
) -> None:
    clock = Clock()
    pace = adaptive(clock)
    last_other = -1e9
    for others, elapsed in seen:
        before = pace.ms
        clock.now += elapsed
        pace.observe(others)
        assert DEFAULT_SLICE_MS <= pace.ms <= MOST_SLICE_MS
        if others:
            last_other = clock.now
            # someone was served: at once the short, paused slices of the fixed default
            assert (pace.ms, pace.pausing) == (DEFAULT_SLICE_MS, True)
        elif clock.now - last_other < QUIET_S:
            # and so until nobody has been seen for QUIET_S
            assert (pace.ms, pace.pausing) == (DEFAULT_SLICE_MS, True) or last_other < 0
        else:
            assert not pace.pausing and pace.ms == min(before * 2, MOST_SLICE_MS)


def test_alone_the_budget_doubles_to_the_cap_in_a_few_slices() -> None:
    clock = Clock()
    pace = adaptive(clock)
    budgets = []
    for _ in range(6):
        pace.observe(0)
        budgets.append(pace.ms)
    assert budgets == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0]
    assert not pace.pausing


def test_a_budget_given_above_the_cap_is_kept_as_the_floor() -> None:
    pace = Pace(1.0, 5.0, adapts=True, clock=Clock())
    pace.observe(0)
    assert pace.ms == 5.0


def run_slices(pace: Pace, counts: Iterator[int], slices: int) -> list[Any]:
    """The steps ``slices`` slices of ``pace`` send, the server's command count answering each
    probe from ``counts`` (an Eval's reply: ``b"ok"``)."""
    steps: list[Any] = []

    def reply(op: Eval | Call) -> Any:
        return {"total_commands_processed": next(counts)} if op == PROBE else b"ok"

    for _ in range(slices):
        flow = pace.run(Eval("verify_slice", ("k",), (pace.ms,)))
        step = advance(flow)
        while not isinstance(step, Done):
            steps.append(step)
            if isinstance(step, Pause):
                step = advance(flow)
            elif isinstance(step, Each):
                step = advance(flow, [reply(op) for op in step.ops])  # type: ignore[arg-type]
            else:
                step = advance(flow, reply(step))  # type: ignore[arg-type]
        assert step.value == b"ok"
    return steps


def test_alone_a_slice_reads_the_count_in_its_pipeline_and_asks_again_before_the_next() -> None:
    clock = Clock()
    pace = adaptive(clock)
    # each probe is one command more than the last: its own
    steps = run_slices(pace, iter(range(1000, 2000)), 5)
    assert not any(isinstance(s, Pause) for s in steps)
    slices = [s for s in steps if isinstance(s, Each) and len(s.ops) == 2]
    probes = [s for s in steps if s == Each((PROBE,))]
    assert len(slices) == len(probes) == 5
    assert all(s.ops[1] == PROBE for s in slices)
    # the budgets sent: doubling from the default
    assert [s.ops[0].args[0] for s in slices] == [0.25, 0.5, 1.0, 2.0, 2.0]  # type: ignore[union-attr]
    assert pace.slices == 5 and pace.shared == 0


def test_among_others_slices_are_short_and_paused_and_ask_in_their_own_pipeline() -> None:
    clock = Clock()
    pace = adaptive(clock)
    # another client runs 3 commands between each probe and the next
    steps = run_slices(pace, iter(range(1000, 100000, 4)), 6)
    pauses = [s for s in steps if isinstance(s, Pause)]
    assert len(pauses) >= 5
    # after the first slice it asks before and after each slice in the slice's pipeline
    slices = [s for s in steps if isinstance(s, Each) and len(s.ops) == 3]
    assert len(slices) == 5
    assert all(s.ops[0] == PROBE and s.ops[2] == PROBE for s in slices)
    assert {s.ops[1].args[0] for s in slices} == {DEFAULT_SLICE_MS}  # type: ignore[union-attr]
    assert pace.shared == 6


def test_the_pause_is_the_ratio_of_the_time_busy() -> None:
    clock = Clock()
    pace = adaptive(clock)
    pace.after, pace.pausing = 10, True
    clock.now += 0.004
    step = advance(pace.rest())
    assert isinstance(step, Pause)
    assert step.seconds == pytest.approx(0.004 * DEFAULT_SLICE_PAUSE)


def test_a_refused_probe_leaves_the_fixed_pace() -> None:
    pace = adaptive(Clock())
    flow = pace.run(Eval("verify_slice", ("k",), ()))
    step = advance(flow)
    assert isinstance(step, Each)
    step = advance(flow, [b"ok", redis.exceptions.NoPermissionError("no info")])
    assert not pace.adapts and pace.ms == DEFAULT_SLICE_MS
    # the fixed default from now on: a pause after each slice, no probe
    assert isinstance(step, Pause)
    assert isinstance(advance(flow), Done)


def test_a_fixed_pace_sends_no_probe() -> None:
    pace = Pace(1.0, 0.5, clock=Clock())
    steps = run_slices(pace, iter(()), 3)
    assert not any(isinstance(s, Each) for s in steps)
    assert len([s for s in steps if isinstance(s, Pause)]) == 3


@pytest.mark.parametrize(
    "reply",
    [
        {"total_commands_processed": 42, "total_connections_received": 1},
        b"# Stats\r\ntotal_connections_received:1\r\ntotal_commands_processed:42\r\n",
        "total_commands_processed:42",
    ],
)
def test_the_count_is_read_from_either_form_of_info(reply: object) -> None:
    assert commands_run(reply) == 42


def test_no_count_is_read_from_an_error_or_a_reply_without_it() -> None:
    assert commands_run(redis.exceptions.ResponseError("unknown command")) is None
    assert commands_run({"uptime_in_seconds": 3}) is None
    assert commands_run(b"uptime_in_seconds:3") is None


# --- on real servers -------------------------------------------------------------------------


def long_thread(saver: RedisStreamSaver, thread: str, steps: int) -> None:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    for step in range(steps):
        cp = generate_checkpoint(channel_values={"x": step, "msg": "m" * 200})
        config = saver.put(config, cp, generate_metadata(step=step, source="loop"), {})
        saver.put_writes(config, [("x", step)], f"task-{step}")


def watched(saver: RedisStreamSaver) -> tuple[list[str], list[Any]]:
    """The budgets of every verify slice the saver sends from now on, and its pauses."""
    budgets: list[str] = []
    pauses: list[Any] = []
    original = saver._execute

    def execute(op: Any) -> Any:
        for one in op.ops if isinstance(op, Each) else (op,):
            if isinstance(one, Eval) and one.script == "verify_slice":
                budgets.append(str(one.args[-1]))
        if isinstance(op, Pause):
            pauses.append(op)
        return original(op)

    saver._execute = execute  # type: ignore[method-assign]
    return budgets, pauses


def test_alone_on_a_server_a_check_takes_far_fewer_slices_than_the_fixed_pace(
    stoppable_server: EmbeddedServer,
) -> None:
    client = redis.Redis.from_url(stoppable_server.url)
    saver = RedisStreamSaver(client, prefix="alone")
    long_thread(saver, "t", 400)
    fixed = RedisStreamSaver(client, prefix="alone", slice_ms=0.25, slice_pause=1.0)
    fixed_budgets, fixed_pauses = watched(fixed)
    expected = fixed.verify("t")
    budgets, pauses = watched(saver)
    assert saver.verify("t") == expected
    assert expected[0] == 800 and expected[2] == []
    # no pause at all, slices grown to the cap: a fraction of the fixed pace's calls
    assert not pauses and len(fixed_pauses) == len(fixed_budgets)
    assert len(budgets) * 4 < len(fixed_budgets)
    assert budgets[:4] == ["0.25", "0.5", "1", "2"] and set(budgets[3:]) == {"2"}
    assert set(fixed_budgets) == {"0.25"}
    # the audit's walk of the chain too (the console's badge)
    chain = saver.verify_chain("t")
    assert chain.problem is None and chain.events == 800
    client.close()


def hammer(url: str, stop: Any, started: Any) -> None:
    """Another client, calling without a break until told to stop."""
    with redis.Redis.from_url(url) as client:
        client.ping()
        started.set()
        while not stop.is_set():
            client.get("elsewhere")


def test_while_another_client_keeps_the_server_busy_the_check_backs_off(
    stoppable_server: EmbeddedServer,
) -> None:
    client = redis.Redis.from_url(stoppable_server.url)
    saver = RedisStreamSaver(client, prefix="shared")
    long_thread(saver, "t", 150)
    stop, started = mp.Event(), mp.Event()
    other = mp.Process(target=hammer, args=(stoppable_server.url, stop, started))
    other.start()
    try:
        assert started.wait(30)
        budgets, pauses = watched(saver)
        found = saver.verify("t")
    finally:
        stop.set()
        other.join(30)
    assert found[0] == 300 and found[2] == []
    # the other client is seen at once: the default's short slices, paused
    at_floor = [b for b in budgets if b == "0.25"]
    assert len(budgets) > 20 and len(at_floor) >= 0.9 * len(budgets)
    assert len(pauses) >= 0.9 * len(budgets)
    client.close()


def test_a_given_pace_is_kept_whatever_the_server_does(stoppable_server: EmbeddedServer) -> None:
    client = redis.Redis.from_url(stoppable_server.url)
    saver = RedisStreamSaver(client, prefix="given", slice_pause=0)
    long_thread(saver, "t", 100)
    budgets, pauses = watched(saver)
    saver.verify("t")
    # slice_pause given: slice_ms at its default, fixed, and no pause
    assert set(budgets) == {"0.25"} and not pauses and len(budgets) > 4
    client.close()


def test_on_a_cluster_the_pace_stays_fixed(cluster: Any) -> None:
    """No one server's INFO speaks for every node a cross-slot operation's slices reach."""
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(cluster.url)
    saver = RedisStreamSaver(client, prefix="fixed-on-cluster")
    long_thread(saver, "t", 60)
    sent: list[Any] = []
    original = saver._execute

    def execute(op: Any) -> Any:
        sent.extend(op.ops if isinstance(op, Each) else (op,))
        return original(op)

    saver._execute = execute  # type: ignore[method-assign]
    budgets, pauses = watched(saver)
    assert saver.verify("t")[2] == []
    assert PROBE not in sent and set(budgets) == {"0.25"} and len(pauses) == len(budgets)
    client.close()


@pytest.mark.parametrize("role", ["saver", "reader"])
def test_a_tenants_user_reads_the_count_with_what_its_role_allows(
    stoppable_server: EmbeddedServer, role: str
) -> None:
    from streamsaver.acl import acl_rules

    admin = redis.Redis.from_url(stoppable_server.url)
    long_thread(RedisStreamSaver(admin, prefix="walled"), "t", 150)
    version = tuple(int(p) for p in str(admin.info("server")["redis_version"]).split(".")[:2])
    admin.execute_command(
        "ACL", "SETUSER", "tenant", "on", ">pw", *acl_rules("walled", version, role)
    )
    host, port = (
        admin.connection_pool.connection_kwargs["host"],
        admin.connection_pool.connection_kwargs["port"],
    )
    client = redis.Redis(host=host, port=port, username="tenant", password="pw")
    saver = RedisStreamSaver(client, prefix="walled")
    budgets, pauses = watched(saver)
    check = saver.verify_chain("t")
    assert check.problem is None and check.events == 300
    # the reader may not write the scratch keys the references are checked in (reported as
    # unchecked); the saver's slices grow as they do for any user alone on the server
    if role == "reader":
        assert check.unchecked and budgets == ["0.25"]
    else:
        assert check.references == [] and "2" in budgets and not pauses
    client.close()
    admin.close()


async def test_the_async_saver_paces_the_same(stoppable_server: EmbeddedServer) -> None:
    """Its shell sleeps a Pause with asyncio.sleep: alone on the server there is none to sleep,
    and the console's audit badge (averify_chain) takes grown slices."""
    import redis.asyncio as aredis

    from streamsaver import AsyncRedisStreamSaver

    long_thread(RedisStreamSaver(redis.Redis.from_url(stoppable_server.url), prefix="a"), "t", 150)
    client = aredis.Redis.from_url(stoppable_server.url)
    saver = AsyncRedisStreamSaver(client, prefix="a")
    steps: list[Any] = []
    original = saver._execute

    async def execute(op: Any) -> Any:
        steps.append(op)
        return await original(op)

    saver._execute = execute  # type: ignore[method-assign]
    check = await saver.averify_chain("t")
    assert check.problem is None and check.references == [] and check.events == 300
    budgets = [
        str(one.args[-1])
        for op in steps
        if isinstance(op, Each)
        for one in op.ops
        if isinstance(one, Eval) and one.script == "verify_slice"
    ]
    assert not any(isinstance(op, Pause) for op in steps) and "2" in budgets
    await client.aclose()


def test_audit_verify_takes_the_slice_options_verify_takes(
    stoppable_server: EmbeddedServer,
) -> None:
    """Given, they reach the saver (a bad one is refused naming it); unset, the pace adapts."""
    import subprocess
    import sys

    long_thread(RedisStreamSaver(redis.Redis.from_url(stoppable_server.url), prefix="c"), "t", 20)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "streamsaver", *args]
        base = ("--url", stoppable_server.url, "--prefix", "c")
        return subprocess.run(
            [*command, *base], capture_output=True, text=True, env=env, timeout=60
        )

    for verb in (("verify",), ("audit", "verify")):
        for paced in ((), ("--slice-ms", "0.5", "--slice-pause", "0")):
            done = cli(*verb, "t", *paced)
            assert done.returncode == 0, done.stdout + done.stderr
        bad = cli(*verb, "t", "--slice-ms", "-1")
        assert bad.returncode == 2 and "slice_ms=-1" in bad.stderr, bad.stdout + bad.stderr
