"""delete_for_runs in slices (issue 13): the runs' checkpoints leave with a sliced compaction
that does not copy them, and the records naming them are bounded, so no call holds the server
for long however many checkpoints a run had; what is deleted is what one script deletes, and
writers going on between the slices are kept, dropped or refused as one script at the swap
would have them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ormsgpack
import pytest
import redis

from streamsaver import RedisStreamSaver
from streamsaver.core.errors import InvalidInputError, ThreadDeletedError
from streamsaver.core.flow import Eval
from streamsaver.core.keys import compact_keys, thread_keys
from tests.test_deletion import put, visible
from tests.test_slices import by_one_script, finish, reads


def runs_history(saver: RedisStreamSaver, steps: int, every: int = 3) -> list[Any]:
    """A thread whose every ``every``-th checkpoint is run "gone"'s, each with a write."""
    configs: list[Any] = [None]
    for step in range(steps):
        run = "gone" if step % every == 0 else f"run-{step}"
        configs.append(put(saver, configs[-1], step, run=run))
        saver.put_writes(configs[-1], [("messages", f"write {step}")], f"task{step}")
    return configs[1:]


def records(client: redis.Redis, saver: RedisStreamSaver) -> list[dict[bytes, bytes]]:
    entries = client.xrange(thread_keys(saver.prefix, "t").log)
    return [f for _, f in entries if f[b"k"] == b"delete"]


def named(client: redis.Redis, saver: RedisStreamSaver) -> list[str]:
    return [cid for f in records(client, saver) for cid in ormsgpack.unpackb(f[b"items"])[1::2]]


def first_compaction_slice(
    saver: RedisStreamSaver, slice_events: int, start: Callable[[Any], Any]
) -> tuple[Any, Any]:
    """The flow of the operation *start* makes of the saver's ops, ``slice_events`` a slice,
    run up to and including its first compaction slice; and that slice's reply."""
    saver._ops.slice_events = slice_events
    flow = start(saver._ops)
    op = next(flow)
    while not (isinstance(op, Eval) and op.script == "compact_slice"):
        op = flow.send(saver._execute(op))
    return flow, saver._execute(op)


def test_many_checkpoints_leave_in_records_of_a_bounded_size_as_one_script_deletes(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    configs = runs_history(sync_saver, 630)
    gone = [c["configurable"]["checkpoint_id"] for c in configs[::3]]
    one = ("", "t", "", 2, "gone")
    deleted, _, expected = by_one_script(redis_client, sync_saver, "delete_runs", *one)
    assert deleted == len(gone) == 210

    sync_saver._ops.slice_events = 25
    assert sync_saver._run(sync_saver._ops.delete_for_runs(["gone"])) == 210
    assert reads(sync_saver, "t") == expected
    # a record names at most 6 (lua/checkpoint/compact_slice.lua's DROP_PAGE): its projection is one
    # unit of a slice's work
    assert [
        len(ormsgpack.unpackb(f[b"items"])) // 2 for f in records(redis_client, sync_saver)
    ] == [6] * 35
    assert sorted(named(redis_client, sync_saver)) == sorted(gone)
    assert all(ormsgpack.unpackb(f[b"runs"]) == ["gone"] for f in records(redis_client, sync_saver))
    log = redis_client.xrange(thread_keys(sync_saver.prefix, "t").log)
    assert not any(f.get(b"id", b"").decode() in gone for _, f in log)
    assert sync_saver.verify("t")[2] == []
    assert sync_saver.verify_chain("t").ok
    # the records project as written: a rebuild from the log gives the same reads
    tk = thread_keys(sync_saver.prefix, "t")
    redis_client.delete(tk.ix, tk.ptr)
    sync_saver.rebuild("t")
    assert reads(sync_saver, "t") == expected
    assert not any(redis_client.exists(k) for k in compact_keys(tk))


def test_writers_between_the_slices_are_kept_dropped_or_refused_as_at_the_swap(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    configs = runs_history(sync_saver, 30)
    flow, reply = first_compaction_slice(sync_saver, 3, lambda ops: ops.delete_for_runs(["gone"]))
    # between two slices of the compaction, on the live log: run "gone" goes on (a checkpoint
    # and its writes), a late write reaches a checkpoint of "gone" put before, and another
    # run continues the latest checkpoint
    late_gone = put(sync_saver, configs[-1], 30, run="gone")
    sync_saver.put_writes(late_gone, [("messages", "of the late gone")], "late")
    sync_saver.put_writes(configs[0], [("messages", "too late")], "late")
    kept = put(sync_saver, late_gone, 31, run="run-31")
    deleted = finish(sync_saver, flow, reply)
    assert deleted == 10 + 1

    ids = visible(sync_saver)
    assert kept["configurable"]["checkpoint_id"] == ids[0]
    gone = {c["configurable"]["checkpoint_id"] for c in [*configs[::3], late_gone]}
    assert not gone & set(ids) and len(ids) == 20 + 1
    assert sorted(named(redis_client, sync_saver)) == sorted(gone)
    log = redis_client.xrange(thread_keys(sync_saver.prefix, "t").log)
    dump = b"".join(v for _, f in log for v in f.values())
    assert b"of the late gone" not in dump and b"too late" not in dump
    assert sync_saver.verify("t")[2] == []
    # from the swap on, the deleted checkpoints cannot be continued
    for stale in (configs[0], late_gone):
        with pytest.raises(ThreadDeletedError, match="delete_for_runs"):
            sync_saver.put_writes(stale, [("messages", "after")], "stale")


def test_a_checkpoint_put_between_the_slices_that_reads_a_dropped_one_is_refused(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    """As when it is put between the check's slices (tests/test_delta_retention.py), but
    later: while the compaction copies, its tail finds it."""
    from tests.test_delta_retention import THREAD, _invoke, _ran, _reference, _run_id

    graph = _ran(sync_saver, 3)
    sync_saver._ops.slice_events = 1
    flow = sync_saver._ops.delete_for_runs([_run_id(2)])
    op, slices = next(flow), 0
    with pytest.raises(InvalidInputError, match="DeltaChannels of the kept checkpoint"):
        while True:
            reply = sync_saver._execute(op)
            if isinstance(op, Eval) and op.script == "compact_slice":
                slices += 1
                if slices == 3:
                    # run 3 continues run 2: its DeltaChannels read run 2's writes
                    _invoke(graph, 3)
            op = flow.send(reply)
    assert slices > 3
    # nothing was deleted, and the compaction left nothing behind
    assert graph.get_state(THREAD).values == _reference(4)[1]
    keys = thread_keys(sync_saver.prefix, THREAD["configurable"]["thread_id"])
    assert not any(redis_client.exists(k) for k in compact_keys(keys))
    assert b"delete" not in [f[b"k"] for _, f in redis_client.xrange(keys.log)]


@pytest.mark.parametrize("operation", ["delete_for_runs", "prune"])
def test_a_slice_that_finds_the_server_full_hands_over_to_one_script(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, operation: str
) -> None:
    """The first slice is pipelined (a refusal is a value); the later ones are sent alone, so
    their own first write checks for room and answers 'oom' instead of raising: the caller
    then drops the scratch keys and runs the one script, which frees first."""
    configs: list[Any] = [None]
    for step in range(12):
        configs.append(
            put(sync_saver, configs[-1], step, run="gone" if step < 6 else "", pad=40_000)
        )
    flow, reply = first_compaction_slice(
        sync_saver,
        1,
        lambda ops: (
            ops.delete_for_runs(["gone"]) if operation == "delete_for_runs" else ops.compact("t", 1)
        ),
    )
    scripts: list[str] = []
    original = sync_saver._execute

    def run(op: Any) -> Any:
        scripts.extend(o.script for o in getattr(op, "ops", (op,)) if isinstance(o, Eval))
        return original(op)

    sync_saver._execute = run  # type: ignore[method-assign]
    used = int(redis_client.info("memory")["used_memory"])
    redis_client.config_set("maxmemory", used - 100_000)
    try:
        result = finish(sync_saver, flow, reply)
    finally:
        redis_client.config_set("maxmemory", 0)
    keys = thread_keys(sync_saver.prefix, "t")
    assert not any(redis_client.exists(k) for k in compact_keys(keys))
    if operation == "delete_for_runs":
        assert result == 6 and scripts == ["compact_slice", "delete_runs"]
        assert visible(sync_saver) == [c["configurable"]["checkpoint_id"] for c in configs[:6:-1]]
    else:
        assert scripts == ["compact_slice", "prune"]
        assert visible(sync_saver) == [configs[-1]["configurable"]["checkpoint_id"]]
    assert sync_saver.verify("t")[2] == []
