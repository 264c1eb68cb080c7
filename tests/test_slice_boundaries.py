"""Where slices end (issue 13). A slice stops at the first event or index member that ends
past its budget: the server is held one unit of work past ``slice_ms``, not a page of them.
With a budget nothing fits in, every slice does exactly one unit, resuming inside a page still
gives what one script gives, and what a later slice removes from what an earlier one wrote
is removed."""

from __future__ import annotations

from typing import Any

import redis

from streamsaver import RedisStreamSaver
from streamsaver.core.flow import Eval
from streamsaver.core.keys import thread_keys
from tests.test_deletion import history, put
from tests.test_slices import (
    counting,
    fill,
    indexes,
    one_script,
    one_verify,
    reads,
    restore,
    rich,
    snapshot,
    state,
)

# a budget every unit of work overruns
NOTHING_FITS = 0.000001


def tight(saver: RedisStreamSaver) -> None:
    saver._ops.slice_ms = NOTHING_FITS
    saver._ops.slice_pause = 0


def test_a_rebuild_slice_applies_one_event_past_its_budget(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    fill(sync_saver)
    events = redis_client.xlen(thread_keys(sync_saver.prefix, "t").log)
    big = one_script(sync_saver, "t")
    expected = indexes(redis_client, sync_saver, "t")
    tight(sync_saver)
    calls = counting(sync_saver, "replay_slice")
    assert sync_saver.rebuild("t") == big
    # one event a slice, then one that finds the log's end (a batch of ten before)
    assert len(calls) == events + 1
    assert indexes(redis_client, sync_saver, "t") == expected


def test_a_verify_slice_checks_one_event_or_member_past_its_budget(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    fill(sync_saver)
    keys = thread_keys(sync_saver.prefix, "t")
    redis_client.zadd(keys.ix, {b"cbogus": 0})
    events, members = redis_client.xlen(keys.log), redis_client.zcard(keys.ix)
    expected = one_verify(sync_saver, "t")
    assert "ix extra cbogus" in expected[2]
    tight(sync_saver)
    calls = counting(sync_saver, "verify_slice")
    assert sync_saver.verify("t") == expected
    # the replay, the references and the index's members, one at a time (pages of ten events
    # and a hundred members before)
    assert len(calls) >= 2 * events + members


def test_a_compaction_slice_copies_one_member_or_event_past_its_budget(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    rich(sync_saver)
    keys = thread_keys(sync_saver.prefix, "t")
    before = snapshot(redis_client, sync_saver, "t")
    checkpoints = sum(1 for m in redis_client.zrange(keys.ix, 0, -1) if m[:1] == b"c")
    appending = sync_saver._ops.appending(keys)
    removed = sync_saver._execute(Eval("prune", appending, (*sync_saver._ops._appending_args(), 0)))
    expected, expected_reads = state(redis_client, sync_saver, "t"), reads(sync_saver, "t")
    announced = redis_client.xlen(keys.log)
    restore(redis_client, sync_saver, "t", before)

    tight(sync_saver)
    calls = counting(sync_saver, "compact_slice")
    assert sync_saver._run(sync_saver._ops.compact("t", 0)) == removed
    # every live checkpoint listed, then every event of the new log announced, one a slice
    # (pages of a hundred before)
    assert len(calls) >= checkpoints + announced
    assert state(redis_client, sync_saver, "t") == expected
    assert reads(sync_saver, "t") == expected_reads


def test_a_copy_sends_each_import_one_event_more_than_the_last_one_took(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    history(sync_saver, 20)
    tight(sync_saver)
    sent: list[int] = []
    original = sync_saver._execute

    def run(op: Any) -> Any:
        if isinstance(op, Eval) and op.script == "import":
            # after the feed's MAXLEN, 'chain', the time to live and the budget: per event, its
            # field count, then its fields
            i, events = 4, 0
            while i < len(op.args):
                i += int(op.args[i]) + 1
                events += 1
            sent.append(events)
        return original(op)

    sync_saver._execute = run  # type: ignore[method-assign]
    sync_saver.copy_thread("t", "t2")
    assert redis_client.xlen(thread_keys(sync_saver.prefix, "t2").log) == len(sent)
    # each call takes one event: the next is sent two (one at a page's end), not the page's
    # rest (up to 50)
    assert sent[0] == 8
    assert max(sent[1:]) == 2


def test_a_later_slice_removes_what_an_earlier_one_wrote(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    # a deleted thread's mark ('d'), written by one slice and removed by the next put's, in
    # another slice: a rebuild that kept it refused every write to the thread used again
    history(sync_saver, 3)
    sync_saver.delete_thread("t")
    configs = history(sync_saver, 3)
    big = one_script(sync_saver, "t")
    expected = indexes(redis_client, sync_saver, "t")
    assert b"d" not in expected[1]
    sync_saver._ops.slice_events = 1
    assert sync_saver.rebuild("t") == big
    assert indexes(redis_client, sync_saver, "t") == expected
    assert sync_saver.verify("t")[2] == []
    history_after = put(sync_saver, configs[-1], 3)
    assert sync_saver.get_tuple(history_after) is not None
