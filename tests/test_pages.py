"""Long reads of a log come in pages of about one slice (issue 13): XRANGE is one command, and
a page of a fixed count holds every other tenant for as long as its entries take, ~0.8 ms for
500 of the saver's events and four times that for events of 40 channels."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest
import redis

from streamsaver import RedisStreamSaver
from streamsaver.core.flow import Call, Each, Pause, iterate
from streamsaver.core.pages import FIRST_COUNT, MOST_BYTES, MOST_COUNT, next_count, page_cost
from tests.test_saver import generate_config

WIDE = 40


def wide_thread(saver: RedisStreamSaver, thread: str, steps: int) -> int:
    """A thread of ``steps`` checkpoints of WIDE channels each and their writes: wide events."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    config = generate_config(thread)
    for step in range(steps):
        values = {f"c{i}": f"{step}-{i}" for i in range(WIDE)}
        versions = {f"c{i}": step + 1 for i in range(WIDE)}
        cp = generate_checkpoint(channel_values=values, channel_versions=versions)
        config = saver.put(config, cp, generate_metadata(step=step), versions)
        saver.put_writes(config, [("c0", step), ("c1", step)], f"task-{step}")
    return 2 * steps


def recording(saver: RedisStreamSaver) -> list[tuple[tuple[Any, ...], Any]]:
    """Every plain read of a stream the saver sends from now on, with its reply."""
    seen: list[tuple[tuple[Any, ...], Any]] = []
    original = saver._execute

    def execute(op: Any) -> Any:
        reply = original(op)
        calls, replies = (op.ops, reply) if isinstance(op, Each) else ((op,), [reply])
        for call, answer in zip(calls, replies, strict=True):
            if isinstance(call, Call) and call.args[0] in ("XRANGE", "XREVRANGE"):
                seen.append((call.args, answer))
        return reply

    saver._execute = execute  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("operation", ["copy_thread", "verify_chain", "history_page", "export"])
def test_a_long_read_of_a_log_comes_in_pages_of_one_slice(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, operation: str
) -> None:
    events = wide_thread(sync_saver, "wide", 150)
    # the fixed pace, as a given slice_ms gives (the adaptive one's budget grows on an idle
    # server: tests/test_adaptive_pace.py)
    sync_saver._ops.pace_adapts = False
    seen = recording(sync_saver)
    if operation == "copy_thread":
        sync_saver.copy_thread("wide", "copy")
        assert redis_client.xlen(sync_saver._ops.keys("copy").log) == events
    elif operation == "verify_chain":
        assert sync_saver.verify_chain("wide").events == events
    elif operation == "history_page":
        found, more = sync_saver.history_page("wide", limit=10_000)
        assert (len(found), more) == (events, False)
    else:
        assert sync_saver.export_audit(["wide"], io.StringIO()) == events
    pages = [reply for args, reply in seen if len(args) > 2 and args[-2] == "COUNT"]
    assert sum(len(p) for p in pages) >= events
    budget_us = sync_saver._ops.slice_ms * 1000
    costs = [page_cost(p) for p in pages]
    # by the server's measured rates (a page of one entry costs what the entry does, whatever the
    # budget)
    assert all(
        (us <= budget_us and size <= MOST_BYTES) or len(p) == 1
        for (us, size), p in zip(costs, pages, strict=True)
    ), costs
    assert len(pages) > 3


def test_the_pages_of_a_long_operation_are_paced_like_its_slices(
    sync_saver: RedisStreamSaver,
) -> None:
    wide_thread(sync_saver, "wide", 60)
    sync_saver._ops.pace_adapts = False
    steps: list[Any] = []
    original = sync_saver._execute

    def execute(op: Any) -> Any:
        steps.append(op)
        return original(op)

    sync_saver._execute = execute  # type: ignore[method-assign]
    sync_saver.verify_chain("wide")
    reads = [i for i, s in enumerate(steps) if isinstance(s, (Call, Each))]
    assert len(reads) > 3
    assert all(isinstance(steps[i + 1], Pause) for i in reads)
    # a reader waits on history: its pages come without pauses
    steps.clear()
    sync_saver.history_page("wide", limit=10_000)
    assert len(steps) > 3 and not any(isinstance(s, Pause) for s in steps)


def test_a_page_fits_its_budget_by_the_entries_it_follows() -> None:
    narrow = [(b"1-0", {b"k": b"v", b"n": b"1"})] * 10
    wide = [(b"1-0", {f"f{i}".encode(): b"0123456789" for i in range(40)})] * 10
    assert next_count([], 0.25) == FIRST_COUNT
    assert next_count(wide, 0.25) < next_count(narrow, 0.25) / 4
    assert next_count(narrow, 0.5) > next_count(narrow, 0.25)
    assert next_count(narrow, 100.0) == MOST_COUNT
    # big values: bounded by the reply's bytes, and by one entry at least
    big = [(b"1-0", {b"v": b"x" * 100_000})]
    assert next_count(big, 100.0) == MOST_BYTES // 100_001
    assert next_count([(b"1-0", {b"v": b"x" * 10_000_000})], 0.25) == 1
    # the raw form of a reply (a flat list of fields) counts the same
    raw = [(b"1-0", [x for pair in fields.items() for x in pair]) for _, fields in wide]
    assert next_count(raw, 0.25) == next_count(wide, 0.25)


def test_a_pause_answers_for_the_readers_own_work_too(sync_saver: RedisStreamSaver) -> None:
    """What the operation's own process did between two reads (here: its caller, 1 ms an
    event) counts as busy, up to 50 ms: on a small machine that work competes for the cores."""
    wide_thread(sync_saver, "wide", 60)
    sync_saver._ops.slice_pause = 2.0
    pages: list[int] = []
    pauses: list[float] = []

    def execute(step: Any) -> Any:
        if isinstance(step, Pause):
            pauses.append(step.seconds)
            return None
        reply = sync_saver._execute(step)
        pages.append(len(reply))
        return reply

    for _ in iterate(sync_saver._ops.log_entries("wide"), execute):
        time.sleep(0.001)
    assert len(pages) > 3 and len(pauses) == len(pages)
    for before, pause in zip(pages, pauses[1:], strict=False):
        assert pause >= min(before * 0.001, 0.05) * 2.0
    assert max(pauses) <= 0.05 * 2.0 + 0.01
