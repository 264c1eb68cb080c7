"""The projector service (python -m projector run): crash and restart, replicas, lag, and the
registry it keeps against a rebuild of the same keys from the logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from streamsaver import RedisStreamSaver
from streamsaver.checkpoint.projections import slot_keys
from streamsaver.core.flow import Eval
from streamsaver.core.keys import thread_keys
from streamsaver.core.slots import slot_of

from .test_cli import ROOT


def projections(client: redis.Redis, prefix: str) -> dict[bytes, Any]:
    """Every projector key's content but the cursors: what the projector derived."""
    out: dict[bytes, Any] = {}
    for name in ("registry", "activity", "runs", "meta"):
        for key in client.scan_iter(match=f"{prefix}:{{*}}:{name}", count=1000):
            kind = client.type(key)
            if kind == b"hash":
                out[key] = client.hgetall(key)
            else:
                out[key] = client.zrange(key, 0, -1, withscores=True)
    return out


def wait_caught_up(saver: RedisStreamSaver, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        lag = saver.projector_lag()
        if lag.usable and lag.pending == 0:
            return
        assert time.monotonic() < deadline, f"the projector did not catch up: {lag}"
        time.sleep(0.05)


def start_projector(url: str, prefix: str, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.Popen(
        [sys.executable, "-m", "projector", "run", "--url", url, "--prefix", prefix, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_projector(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out


def checkpoint(step: int, **values: Any) -> Any:
    return {
        "v": 1, "id": f"{step:05d}", "ts": "", "channel_values": values,
        "channel_versions": {k: step + 1 for k in values}, "versions_seen": {},
        "updated_channels": None,
    }  # fmt: skip


def work(saver: RedisStreamSaver, thread_id: str, steps: int, run: str) -> None:
    """A thread's history: checkpoints of a run, writes, an interrupt on the last one."""
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(steps):
        meta = {"step": step, "source": "loop", "run_id": run, "user": thread_id[:2]}
        run_config = {**config, "metadata": {"run_id": run}}
        config = saver.put(run_config, checkpoint(step, n=step), meta, {"n": step + 1})
        writes = [("__interrupt__", "ask")] if step == steps - 1 else [("n", step)]
        saver.put_writes({**config, "metadata": {"run_id": run}}, writes, f"task{step}")
    # activity is kept in ms and ties list by thread id: threads written one after another
    # must not share their last ms, or a fast machine lists t2 before t3
    time.sleep(0.002)


Start = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def projector(redis_url: str, prefix: str) -> Iterator[Start]:
    """Starts ``python -m projector run`` on the test's prefix, given more arguments; those
    still running after the test are killed."""
    procs: list[subprocess.Popen[str]] = []

    def start(*extra: str) -> subprocess.Popen[str]:
        procs.append(start_projector(redis_url, prefix, *extra))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_killed_mid_batch_and_restarted_it_matches_a_rebuild(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str, projector: Start
) -> None:
    for i in range(10):
        work(sync_saver, f"early{i}", 3, "r0")
    first = projector("--batch", "5")
    deadline = time.monotonic() + 60
    while not sync_saver.projector_seeded():
        assert time.monotonic() < deadline and first.poll() is None, first.stderr
        time.sleep(0.05)
    # writes keep coming while the projector applies them; kill it in the middle
    for i in range(40):
        work(sync_saver, f"t{i}", 4, f"r{i % 3}")
        if i == 20:
            first.kill()
            first.communicate()
            assert first.returncode == -signal.SIGKILL
    sync_saver.delete_for_runs(["r1"])
    sync_saver.copy_thread("t2", "copy-of-t2")
    sync_saver.prune(["t5"], strategy="keep_latest")
    assert sync_saver.projector_lag().pending != 0

    second = projector("--batch", "7")
    wait_caught_up(sync_saver)
    incremental = projections(redis_client, prefix)
    stop_projector(second)

    sync_saver.seed_projections()
    assert projections(redis_client, prefix) == incremental
    infos = {i.thread_id: i for i in sync_saver.threads()}
    assert set(infos) == set(sync_saver.thread_ids())
    assert infos["t6"].step == 3 and infos["t6"].interrupted
    assert infos["t6"].checkpoint_id == "00003"
    # run r1's checkpoints are deleted: its threads have none left
    assert infos["t7"].checkpoint_id is None and not infos["t7"].interrupted


def test_two_replicas_share_the_work(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str, projector: Start
) -> None:
    # the threads' feeds exist before the members join: both block on them, and Redis hands
    # each new entry to the member that has waited longest (a feed found later goes to
    # whichever member probes first)
    for i in range(60):
        work(sync_saver, f"t{i}", 1, "r")
    a = projector("--batch", "3", "--consumer", "a")
    b = projector("--batch", "3", "--consumer", "b")
    for proc in (a, b):  # both have joined the group before any work arrives
        assert proc.stderr is not None
        for line in proc.stderr:
            if "joined group" in line:
                break
    wait_caught_up(sync_saver)
    for i in range(60):
        work(sync_saver, f"t{i}", 3, "r")
    wait_caught_up(sync_saver)
    # "applied N entries in M batches; K slots seeded again"
    done = [stop_projector(p).split() for p in (a, b)]
    applied = [int(words[1]) for words in done]
    reseeded = [int(words[6]) for words in done]
    assert all(n + k > 0 for n, k in zip(applied, reseeded, strict=True)), done
    total = sum(
        int(redis_client.hget(slot_keys(prefix, s.slot).state, "applied") or 0)
        for s in sync_saver.projector_lag().slots
    )
    assert sum(applied) == total
    if sum(reseeded) == 0:
        # no entry was applied twice: a slot's cursor moved past each at most once, and every
        # entry since the members joined was applied. A slot the first member's seed had not
        # reached yet when the other one (seeing a seeded prefix) started applying is applied
        # from its feed's first entry, the two before the members joined included; the seed
        # then leaves it (unseeded_only)
        per_slot = Counter(slot_of(thread_keys(prefix, f"t{i}").log) for i in range(60))
        for slot, threads in per_slot.items():
            applied_here = int(redis_client.hget(slot_keys(prefix, slot).state, "applied") or 0)
            assert 6 * threads <= applied_here <= redis_client.xlen(slot_keys(prefix, slot).feed)
    incremental = projections(redis_client, prefix)
    sync_saver.seed_projections()
    assert projections(redis_client, prefix) == incremental


def test_status_reports_the_lag_and_run_stops_on_sigterm(
    sync_saver: RedisStreamSaver, redis_url: str, prefix: str, projector: Start
) -> None:
    work(sync_saver, "a", 2, "r")
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    base = [sys.executable, "-m", "projector", "status", "--url", redis_url, "--prefix", prefix]
    before = subprocess.run(base, capture_output=True, text=True, env=env, timeout=60)
    assert before.returncode == 0, before.stderr
    assert "not seeded" in before.stdout  # no projector has run: readers scan
    assert not sync_saver.projector_seeded()

    proc = projector()
    wait_caught_up(sync_saver)
    work(sync_saver, "b", 2, "r")
    wait_caught_up(sync_saver)
    assert "applied 4 entries" in stop_projector(proc) or sync_saver.server_version < (7,)
    after = subprocess.run(base, capture_output=True, text=True, env=env, timeout=60)
    assert "lag: 0 entries pending" in after.stdout and "0 unusable" in after.stdout
    assert "not seeded" not in after.stdout


async def test_async_saver_reads_the_registry_like_the_sync_one(
    sync_saver: RedisStreamSaver, async_saver: Any
) -> None:
    for n in range(4):
        work(sync_saver, f"t{n}", 2, "r")
    # both scan: never seeded
    assert [t async for t in async_saver.athreads()] == sync_saver.threads()
    assert await async_saver.aseed_projections() == 4
    # as the sync one: some slots; or only those never seeded (none now: each slot's rows
    # are counted as they are)
    slot = slot_of(thread_keys(sync_saver.prefix, "t1").log)
    assert await async_saver.aseed_projections([slot]) == sync_saver.seed_projections([slot]) == 1
    assert await async_saver.aseed_projections(unseeded_only=True) == 4
    assert sync_saver.seed_projections(unseeded_only=True) == 4
    work(sync_saver, "late", 1, "r")  # not applied: read from the feed
    page = [t async for t in async_saver.athreads(limit=2)]
    assert [i.thread_id for i in page] == ["late", "t3"]
    assert [
        t async for t in async_saver.athreads(limit=10, after=page[-1])
    ] == sync_saver.threads()[2:]
    assert (await async_saver.aprojector_lag()).pending == 2
    assert await async_saver.athread_ids() == sorted(["late", "t0", "t1", "t2", "t3"])


def test_threads_that_vanish_are_left_out_then_forgotten(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    for n in range(5):
        work(sync_saver, f"t{n}", 2, "r")
    sync_saver.seed_projections()
    sync_saver.delete_thread("t1")  # not applied: no projector runs
    redis_client.pexpire(thread_keys(prefix, "t2").log, 1)  # expiry, as retention does
    while redis_client.exists(thread_keys(prefix, "t2").log):
        time.sleep(0.01)
    remaining = ["t0", "t3", "t4"]
    assert sorted(i.thread_id for i in sync_saver.threads()) == remaining
    assert sorted(i.thread_id for i in sync_saver.threads(limit=2)) == ["t3", "t4"]
    stale = projections(redis_client, prefix)
    assert sync_saver.sweep_projections() == 2
    assert sync_saver.sweep_projections() == 0
    swept = projections(redis_client, prefix)
    assert swept != stale
    sync_saver.seed_projections()
    assert projections(redis_client, prefix) == swept
    assert sorted(i.thread_id for i in sync_saver.threads()) == remaining


def test_a_deleted_thread_leaves_the_projections_until_its_id_is_used_again(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    for n in range(3):
        work(sync_saver, f"t{n}", 2, f"r{n}")
    sync_saver.seed_projections()
    slot = slot_of(thread_keys(prefix, "t1").log)
    registry = slot_keys(prefix, slot).registry

    def applied_equals_a_seed() -> None:
        while sync_saver.project(slot).more:
            pass
        incremental = projections(redis_client, prefix)
        sync_saver.seed_projections()
        assert projections(redis_client, prefix) == incremental

    # the deletion's thread_deleted event is in the feed: applying it forgets the thread
    sync_saver.delete_thread("t1")
    applied_equals_a_seed()
    assert not redis_client.hexists(registry, "t1")
    assert sorted(i.thread_id for i in sync_saver.threads()) == ["t0", "t2"]
    assert sync_saver.thread_ids() == ["t0", "t2"]
    assert sync_saver.sweep_projections() == 0
    # a fresh start on the id is a live thread again
    work(sync_saver, "t1", 1, "again")
    applied_equals_a_seed()
    assert redis_client.hexists(registry, "t1")
    assert sorted(i.thread_id for i in sync_saver.threads()) == ["t0", "t1", "t2"]
    assert sync_saver.thread_ids() == ["t0", "t1", "t2"]


def test_a_periodic_lag_finds_a_new_feed_within_one_sweep_and_a_fresh_one_at_once(
    redis_url: str, prefix: str
) -> None:
    """The projector's periodic lag probes one slice of the slots it has not seen a feed in
    (a probe of all 16384 per call kept it busy on a cluster); a listing probes them all."""
    from streamsaver.tailing.steps import SWEEP_SLICES

    watcher = RedisStreamSaver(redis.Redis.from_url(redis_url), prefix=prefix)
    writer = RedisStreamSaver(redis.Redis.from_url(redis_url), prefix=prefix)
    assert watcher.projector_lag(fresh=False).slots == ()  # the first call probes every slot
    work(writer, "new-thread", 1, "r")
    slot = slot_of(writer._ops.keys("new-thread").log)
    found_after = next(
        (
            calls
            for calls in range(1, SWEEP_SLICES + 1)
            if slot in {s.slot for s in watcher.projector_lag(fresh=False).slots}
        ),
        None,
    )
    assert found_after is not None, f"slot {slot} not found in {SWEEP_SLICES} periodic calls"
    late = RedisStreamSaver(redis.Redis.from_url(redis_url), prefix=prefix)
    # its first call probes every slot, periodic or not
    assert {s.slot for s in late.projector_lag(fresh=False).slots} == {slot}
    work(writer, "another", 1, "r")
    other = slot_of(writer._ops.keys("another").log)
    assert other in {s.slot for s in late.projector_lag().slots}  # fresh: at once
    assert other in {s.slot for s in late.projector_lag(fresh=False).slots}  # known from then on


def test_a_slot_far_behind_its_feed_is_listed_without_reading_the_whole_feed(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    """A cross-thread read names the threads of feed entries the projector has not applied;
    past 1,000 of them in a slot (projector/registry.lua's PENDING_MAX) that slot answers 'fallback'
    rather than read up to the feed's MAXLEN in one script, and the read lists the threads
    through the slots' thread indexes instead, with the same result."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    def config(thread: str) -> Any:
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}

    sync_saver.put(config("early"), generate_checkpoint(), generate_metadata(run_id="r0"), {})
    sync_saver.seed_projections()
    parent = config("busy")
    for step in range(501):
        meta = generate_metadata(step=step, run_id="r1" if step == 500 else "r2")
        parent = sync_saver.put(parent, generate_checkpoint(), meta, {})
        sync_saver.put_writes(parent, [("x", step)], f"task{step}")
    slot = slot_of(thread_keys(sync_saver.prefix, "busy").log)
    keys = slot_keys(sync_saver.prefix, slot)
    reply = sync_saver._execute(Eval("candidates", keys, ("runs", "r1")))
    assert reply == [b"fallback"]
    assert {t.thread_id for t in sync_saver.threads()} == {"early", "busy"}
    found = list(sync_saver.list(None, filter={"run_id": "r1"}))
    assert [t.config["configurable"]["checkpoint_id"] for t in found] == [
        parent["configurable"]["checkpoint_id"]
    ]
    # with fewer pending, the slot's own answer names the thread
    sync_saver.seed_projections()
    assert sync_saver._execute(Eval("candidates", keys, ("runs", "r1")))[1:] == [b"busy"]


def test_a_catching_up_projector_applies_a_slice_at_a_time_and_matches_a_seed(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, prefix: str
) -> None:
    """A projector behind by many entries applies them in calls of ``slice_ms`` (one entry at
    least), as long operations do, rather than 1,000 entries in one script."""
    sync_saver.seed_projections()
    for i in range(30):
        work(sync_saver, f"s{i}", 3, f"r{i % 2}")
    sync_saver.prune(["s3"], strategy="keep_latest")
    sync_saver.delete_thread("s4")
    slots = sorted({slot_of(thread_keys(prefix, f"s{i}").log) for i in range(30)})
    calls = []
    for slot in slots:
        while True:
            # a budget no call can meet: one entry each
            done = sync_saver.project(slot, count=1000, slice_ms=0.000001)
            assert done.status == "ok"
            calls.append(done.applied)
            if not done.more:
                break
    assert max(calls) == 1 and len(calls) > 100
    assert sync_saver.projector_lag().pending == 0
    incremental = projections(redis_client, prefix)
    sync_saver.seed_projections()
    assert projections(redis_client, prefix) == incremental


def test_a_listing_probes_the_feeds_a_slice_of_the_slots_per_command(
    sync_saver: RedisStreamSaver,
) -> None:
    """Which slots have a feed is read by name (never SCAN): one XREAD of all 16,384 names held
    the server 1.3-1.5 ms on every listing, longer than any slice of a long operation."""
    work(sync_saver, "t1", 2, "r1")
    sent: list[Any] = []
    original = sync_saver._execute

    def run(op: Any) -> Any:
        sent.extend(o.args for o in getattr(op, "ops", (op,)) if hasattr(o, "args"))
        return original(op)

    sync_saver._execute = run  # type: ignore[method-assign]
    assert [t.thread_id for t in sync_saver.threads()] == ["t1"]
    probes = [args for args in sent if args and args[0] == "XREAD"]
    assert len(probes) == 16 and all(len(args) == 4 + 2 * 1024 for args in probes)
