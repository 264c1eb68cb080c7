"""A slot's seed in slices (lua/projector/seed.lua; issue 13): rebuild --all and a projector's first
start
build the projections from the logs in calls of ``slice_ms`` each, in scratch keys swapped in by
the last, so no slot's threads hold the server (one script over a slot of 100,000 events held
it 0.53 s). What they build is what one call builds, with writers and other seeds going on
between the slices."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import redis

from streamsaver import RedisStreamSaver
from streamsaver.core.feeds import SEED_KINDS, slot_key
from streamsaver.core.flow import Eval
from streamsaver.core.keys import thread_keys
from streamsaver.core.slots import slot_of
from streamsaver.projector import Projector
from tests.test_projector import checkpoint, projections, work
from tests.test_slices import counting, finish


def crowded_slot(prefix: str, threads: int) -> list[str]:
    """``threads`` thread ids whose keys share one slot: a slot's seed walks them in turn."""
    by_slot: dict[int, list[str]] = defaultdict(list)
    n = 0
    while True:
        same = by_slot[slot_of(thread_keys(prefix, f"s{n}").log)]
        same.append(f"s{n}")
        if len(same) == threads:
            return same
        n += 1


def histories(saver: RedisStreamSaver, prefix: str) -> list[str]:
    threads = crowded_slot(prefix, 3)
    for i, t in enumerate(threads):
        work(saver, t, 12, f"r{i}")
    work(saver, "elsewhere", 3, "r0")
    return [*threads, "elsewhere"]


def one_call(saver: RedisStreamSaver, client: redis.Redis, prefix: str) -> dict[bytes, Any]:
    saver.slice_ms = 10_000.0
    saver.seed_projections()
    return projections(client, prefix)


def no_scratch(client: redis.Redis, prefix: str, threads: list[str]) -> bool:
    slots = {slot_of(thread_keys(prefix, t).log) for t in threads}
    return not any(client.exists(slot_key(prefix, s, kind)) for s in slots for kind in SEED_KINDS)


def test_a_sliced_seed_equals_one_call(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    threads = histories(sync_saver, prefix)
    expected = one_call(sync_saver, redis_client, prefix)
    assert sum(len(v) for v in expected.values()) > 20
    for name in ("registry", "activity", "runs", "meta"):
        for key in redis_client.scan_iter(match=f"{prefix}:{{*}}:{name}"):
            redis_client.delete(key)

    sync_saver.slice_ms = 0.000001  # a budget no call meets: one unit of work each
    calls = counting(sync_saver, "seed")
    assert sync_saver.seed_projections() == len(threads)
    # a unit is a thread's row or one event: the crowded slot alone takes one call per event
    assert len(calls) > 3 * 24
    assert projections(redis_client, prefix) == expected
    assert no_scratch(redis_client, prefix, threads)
    assert sync_saver.projector_lag().usable


def run_until_second_call(saver: RedisStreamSaver, flow: Any) -> Any:
    """Drive ``flow`` through its first seed call; the reply to send it next."""
    reply, seen = None, 0
    while True:
        op = flow.send(reply)
        reply = saver._execute(op)
        ops = getattr(op, "ops", (op,))
        seen += sum(1 for o in ops if isinstance(o, Eval) and o.script == "seed")
        if seen:
            return reply


def catch_up(saver: RedisStreamSaver, prefix: str, threads: list[str]) -> None:
    for slot in {slot_of(thread_keys(prefix, t).log) for t in threads}:
        while True:
            done = saver.project(slot)
            assert done.status == "ok"
            if not done.more:
                break


def test_writes_between_the_slices_reach_the_projections_through_the_feed(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    threads = histories(sync_saver, prefix)
    flow = sync_saver._projections.seed(None, 0.000001, 0.0)
    reply = run_until_second_call(sync_saver, flow)
    # meanwhile: the crowded slot's threads go on, one is deleted, a new one starts
    work(sync_saver, threads[0], 2, "late")
    work(sync_saver, threads[2], 1, "r9")
    sync_saver.delete_thread(threads[1])
    new = crowded_slot(prefix, 4)[3]
    work(sync_saver, new, 2, "new")
    finish(sync_saver, flow, reply)
    assert no_scratch(redis_client, prefix, threads)
    # what the seed's cursor left after it, the projector applies
    catch_up(sync_saver, prefix, [*threads, new])
    assert sync_saver.projector_lag().pending == 0
    incremental = projections(redis_client, prefix)
    assert incremental == one_call(sync_saver, redis_client, prefix)
    listed = {i.thread_id for i in sync_saver.threads()}
    assert new in listed and threads[1] not in listed


def test_a_seed_begun_since_finishes_the_slot_the_first_one_leaves(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    threads = histories(sync_saver, prefix)
    expected = one_call(sync_saver, redis_client, prefix)
    first = sync_saver._projections.seed(None, 0.000001, 0.0)
    reply = run_until_second_call(sync_saver, first)
    sync_saver.slice_ms = 0.000001
    assert sync_saver.seed_projections() == len(threads)
    # the first seed's remaining calls find the other's token: they leave the slot to it
    finish(sync_saver, first, reply)
    assert projections(redis_client, prefix) == expected
    assert no_scratch(redis_client, prefix, threads)


def test_a_long_log_rewritten_is_recomputed_by_a_sliced_seed_not_in_the_projectors_call(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    """A compaction's tombstone asks for its thread's recompute, a read of its whole log: in
    the projector's own call that held the server for as long as the log (seconds for a
    million events). A log over 50 events is answered ``reseed`` instead, and the projector
    seeds the slot in slices."""
    work(sync_saver, "long", 40, "r1")
    sync_saver.put_writes(
        sync_saver.put(
            {"configurable": {"thread_id": "long", "checkpoint_ns": "", "checkpoint_id": None}},
            checkpoint(99, n=99),
            {"step": 99, "source": "loop", "run_id": "gone", "user": "lo"},
            {"n": 100},
        ),
        [("n", 99)],
        "task99",
    )
    slot = slot_of(thread_keys(prefix, "long").log)
    sync_saver.seed_projections()
    sync_saver.delete_for_runs(["gone"])
    assert redis_client.xlen(thread_keys(prefix, "long").log) > 50
    before = redis_client.hget(slot_key(prefix, slot, "projector"), "cursor")
    done = sync_saver.project(slot)
    assert (done.status, done.thread, done.applied) == ("reseed", "long", 0)
    assert redis_client.hget(slot_key(prefix, slot, "projector"), "cursor") == before
    # what the projector service does with it
    projector = Projector(sync_saver)
    projector.apply(slot, [])
    assert projector.totals.reseeded == 1
    assert sync_saver.projector_lag().pending == 0
    assert projections(redis_client, prefix) == one_call(sync_saver, redis_client, prefix)
    assert "gone" not in str(projections(redis_client, prefix))


def test_a_deleted_thread_of_many_runs_is_unindexed_by_a_sliced_seed(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    """A deleted thread's log is one tombstone, short, but its recompute first drops each of
    its members from the slot's run and metadata indexes: a thread of thousands of runs held
    the server for as long, in the projector's own call. Past 100 members the projector is
    answered ``reseed`` and seeds the slot in slices."""
    config: Any = {"configurable": {"thread_id": "chatty", "checkpoint_ns": ""}}
    for step in range(120):
        meta = {"step": step, "source": "loop", "run_id": f"run{step}"}
        config = sync_saver.put(config, checkpoint(step, n=step), meta, {"n": step + 1})
    work(sync_saver, "quiet", 2, "r1")
    sync_saver.seed_projections()
    assert "run7" in str(projections(redis_client, prefix))
    slot = slot_of(thread_keys(prefix, "chatty").log)
    sync_saver.delete_thread("chatty")
    assert redis_client.xlen(thread_keys(prefix, "chatty").log) <= 50
    done = sync_saver.project(slot)
    assert (done.status, done.thread, done.applied) == ("reseed", "chatty", 0)
    projector = Projector(sync_saver)
    projector.apply(slot, [])
    assert projector.totals.reseeded == 1
    assert sync_saver.projector_lag().pending == 0
    assert "run7" not in str(projections(redis_client, prefix))
    assert sync_saver.thread_ids() == ["quiet"]


def test_a_seed_ends_though_its_threads_are_written_faster_than_it_reads(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    """A thread's slices stop at its log's last event when its row was made: what comes after
    is after the seed's cursor, and the projector applies it. Chasing the log's end, a seed of
    a thread written faster than its slices read never finished (a projector starting beside
    busy graphs on a cluster stayed in it)."""
    work(sync_saver, "busy", 10, "r1")
    sync_saver.slice_ms = 0.000001  # one event a call
    calls = counting(sync_saver, "seed")
    original = sync_saver._execute
    config: Any = {"configurable": {"thread_id": "busy", "checkpoint_ns": ""}}
    steps = [100]

    writing = [False]

    def busy_writer(op: Any) -> Any:
        reply = original(op)
        if calls and len(calls) < 500 and not writing[0]:
            # two events after each of the seed's calls
            nonlocal config
            writing[0] = True
            cp = checkpoint(steps[0], n=steps[0])
            config = sync_saver.put(config, cp, {}, {"n": steps[0] + 1})
            sync_saver.put_writes(config, [("n", steps[0])], f"task{steps[0]}")
            steps[0] += 1
            writing[0] = False
        return reply

    sync_saver._execute = busy_writer  # type: ignore[method-assign]
    assert sync_saver.seed_projections() == 1
    assert len(calls) < 100
    sync_saver._execute = original  # type: ignore[method-assign]
    catch_up(sync_saver, prefix, ["busy"])
    assert projections(redis_client, prefix) == one_call(sync_saver, redis_client, prefix)
