"""Principle 1 over everything the saver derives, the projector's keys included: delete every
non-stream key under the prefix, run ``python -m projector rebuild --all``, and every read gives
back what it gave before. And the cross-thread reads give the same answers through the
projector's indexes (applied or lagging) as through a scan of every log."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple

from streamsaver import RedisStreamSaver

from . import graphs
from .test_cli import ROOT
from .test_projector import checkpoint, projections, work

FILTERS: list[dict[str, Any]] = [
    {},
    {"source": "loop"},
    {"source": "input", "step": -1},
    {"step": 1},
    {"step": 2, "user": "t1"},
    {"run_id": "r1"},
    {"user": None},
    {"missing": None, "source": "update"},
    {"parents": {}},
    {"writes": None, "step": 0},
]


def scanning(saver: RedisStreamSaver) -> RedisStreamSaver:
    """A saver on the same keys whose cross-thread reads ignore the projector's keys."""
    twin = RedisStreamSaver(saver.client, prefix=saver.prefix)
    twin._projections.scan_only = True
    return twin


def cross_thread_reads(saver: RedisStreamSaver) -> list[Any]:
    out: list[Any] = [saver.threads()]
    for f in FILTERS:
        out.append(list(saver.list(None, filter=f)))
        out.append(list(saver.list(None, filter=f, limit=3)))
    return out


def every_read(saver: RedisStreamSaver) -> list[Any]:
    out = cross_thread_reads(saver)
    for t in saver.thread_ids():
        history: list[CheckpointTuple] = list(saver.list({"configurable": {"thread_id": t}}))
        out.append(history)
        for item in history:
            out.append(saver.get_tuple(item.config))
        for ns in sorted({item.config["configurable"]["checkpoint_ns"] for item in history}):
            out.append(saver.get_tuple({"configurable": {"thread_id": t, "checkpoint_ns": ns}}))
    return out


def drop_derived(client: redis.Redis, prefix: str) -> int:
    doomed = [
        k for k in client.scan_iter(match=f"{prefix}:*", count=1000) if client.type(k) != b"stream"
    ]
    return client.delete(*doomed) if doomed else 0


def rebuild_all(url: str, prefix: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    out = subprocess.run(
        [sys.executable, "-m", "projector", "rebuild", "--all", "--url", url, "--prefix", prefix],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def apply_all(saver: RedisStreamSaver) -> None:
    for slot in saver.projector_lag().slots:
        while saver.project(slot.slot).more:
            pass


def test_graph_runs_read_back_identically_after_a_rebuild_of_everything(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, redis_url: str, prefix: str
) -> None:
    saver = sync_saver
    graphs.linear(saver)
    graphs.hitl(saver)
    graphs.parallel_interrupts(saver)
    graphs.time_travel(saver)  # forks
    graphs.subgraph(saver)  # subgraph namespaces, pending interrupt writes
    graphs.send_fanout(saver)
    linear = graphs.build_linear(saver)
    for i in range(30):
        linear.invoke({"log": [f"x{i}"], "total": i}, graphs.thread(f"many-{i}"))
    review = graphs.build_review(saver)
    review.invoke({"topic": "t", "log": []}, graphs.thread("waiting"))  # stops at interrupt()
    saver.seed_projections()
    # after the seed, more history the projector has not applied: reads see it all the same
    graphs.long_thread(saver)
    saver.delete_thread("many-3")
    saver.copy_thread("hitl", "hitl-copy")
    saver.prune(["many-4", "linear-1"], strategy="keep_latest")
    run_ids = [
        item.metadata["run_id"]
        for item in saver.list({"configurable": {"thread_id": "many-5"}})
        if item.metadata and "run_id" in item.metadata
    ]
    saver.delete_for_runs(run_ids[:1])
    assert saver.projector_lag().pending > 0

    before = every_read(saver)
    assert before == every_read(scanning(saver))
    assert len(before) > 300
    interrupted = {i.thread_id for i in saver.threads() if i.interrupted}
    assert "waiting" in interrupted and "hitl" not in interrupted

    # the deleted thread is its deletion's mark, listed nowhere else
    assert set(saver.thread_ids(deleted=True)) - set(saver.thread_ids()) == {"many-3"}
    assert drop_derived(redis_client, prefix) > 0
    out = rebuild_all(redis_url, prefix)
    # the mark is no stream: dropping every other key forgets that deletion (docs/retention.md),
    # and reads of the thread were nothing before as after
    assert f"rebuilt {len(saver.thread_ids(deleted=True))} threads" in out
    assert saver.thread_ids(deleted=True) == saver.thread_ids()
    assert "projector's keys" in out
    assert saver.projector_lag().usable  # the rebuild seeded every slot: indexes are used
    assert every_read(saver) == before

    # and the projector applying the rest changes no answer, and matches another rebuild
    apply_all(saver)
    assert every_read(saver) == before
    applied = projections(redis_client, prefix)
    saver.seed_projections()
    assert projections(redis_client, prefix) == applied


# --- the same as a property over random sequences of saver calls -----------------------------

THREADS = ["a", "b:{x}", "", "c%d", "é"]
threads_st = st.sampled_from(THREADS)
calls = st.one_of(
    st.tuples(st.just("work"), threads_st, st.integers(1, 3), st.sampled_from(["r0", "r1"])),
    st.tuples(st.just("sub"), threads_st, st.sampled_from(["", "child:1"])),
    st.tuples(st.just("delete_thread"), threads_st),
    st.tuples(st.just("delete_for_runs"), st.sampled_from(["r0", "r1"])),
    st.tuples(st.just("copy_thread"), threads_st, threads_st),
    st.tuples(st.just("prune"), threads_st),
    st.tuples(
        st.just("project"),
    ),
    st.tuples(
        st.just("seed"),
    ),
    st.tuples(st.just("unknown_kind"), threads_st),
)


def perform(saver: RedisStreamSaver, call: tuple[Any, ...], step: int) -> None:
    name, *args = call
    if name == "work":
        work(saver, args[0], args[1], args[2])
    elif name == "sub":
        config: Any = {"configurable": {"thread_id": args[0], "checkpoint_ns": args[1]}}
        meta = {"source": "update", "step": step, "parents": {"": "p"}}
        stored = saver.put(config, checkpoint(step, s=step), meta, {"s": step + 1})
        saver.put_writes(stored, [("__interrupt__", step)], "t")
    elif name == "delete_thread":
        saver.delete_thread(args[0])
    elif name == "delete_for_runs":
        saver.delete_for_runs(args)
    elif name == "copy_thread" and args[0] != args[1]:
        saver.copy_thread(args[0], args[1])
    elif name == "prune":
        saver.prune(args, strategy="keep_latest")
    elif name == "project":
        apply_all(saver)
    elif name == "seed":
        saver.seed_projections()
    elif name == "unknown_kind":
        # an event of a kind from a newer version, announced in the feed and the slot's thread
        # index like any other (lua/shared/common.lua's notify())
        from streamsaver.core.feeds import feed_of_log, threads_key
        from streamsaver.core.marks import MARK_FIELDS, marked_events
        from streamsaver.core.slots import slot_of

        keys = saver._ops.keys(args[0])
        log = keys.log
        # a deleted thread's mark starts its log again, as every writer's script does
        # (lua/checkpoint/projection.lua's restore_deleted())
        if not saver.client.exists(log):
            for entry_id, fields in marked_events(saver.client.hmget(keys.ptr, MARK_FIELDS)):
                saver.client.xadd(log, {k: v for k, v in fields.items()}, id=entry_id)
            saver.client.hdel(keys.ptr, "Dt", "Dn", "Dl", "Dh", "DP")
        eid = saver.client.xadd(log, {"k": "pruned", "sv": "1", "thread": args[0]})
        saver.client.xadd(feed_of_log(saver.prefix, log), {"t": args[0], "e": eid, "k": "pruned"})
        saver.client.sadd(threads_key(saver.prefix, slot_of(log)), args[0])


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=st.lists(calls, min_size=1, max_size=12))
def test_any_call_sequence_reads_the_same_through_indexes_scan_and_rebuild(
    redis_client: redis.Redis, redis_url: str, script: list[tuple[Any, ...]]
) -> None:
    from uuid import uuid4

    prefix = f"h{uuid4().hex[:10]}"
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    try:
        saver.seed_projections()
        for step, call in enumerate(script):
            perform(saver, call, step)
        before = every_read(saver)
        assert before == every_read(scanning(saver))
        drop_derived(redis_client, prefix)
        # the thread indexes are derived too: a rebuild of everything finds the logs first
        assert saver.thread_ids() == [] or not before[0]
        saver.reindex_threads()
        for t in saver.thread_ids():
            saver.rebuild(t)
        saver.seed_projections()
        assert every_read(saver) == before
        apply_all(saver)
        applied = projections(redis_client, prefix)
        assert every_read(saver) == before
        saver.seed_projections()
        assert projections(redis_client, prefix) == applied
    finally:
        keys = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            redis_client.delete(*keys)
