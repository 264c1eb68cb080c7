"""Readers that page through a log another operation rewrites (DESIGN principle 14): a copy, an
export, history pages, a tail and a verification see one version of the source log, whatever
compaction or deletion happens between their pages; and a sliced prune finishes under a busy
writer.

The races are made deterministic by running the rewrite between two pages: the operation's
flow is driven by hand, and the rewrite runs before its second page of the log is read."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest
import redis

from streamsaver import RedisStreamSaver
from streamsaver.audit.exports import verify_export
from streamsaver.core.errors import LogRewrittenError
from streamsaver.core.flow import Call, Each, Emit, Eval
from tests.test_retention import MESSAGE, History
from tests.test_saver import generate_config


def _page_reads(step: Any, key: str) -> bool:
    """Whether ``step`` reads a page of stream ``key`` (not one entry, not its first id)."""
    calls = step.ops if isinstance(step, Each) else (step,)
    for call in calls:
        if not isinstance(call, Call) or call.args[:1] not in (("XRANGE",), ("XREVRANGE",)):
            continue
        args = [a.decode() if isinstance(a, bytes) else a for a in call.args]
        if args[1] == key and "COUNT" in args and args[args.index("COUNT") + 1] != 1:
            return True
    return False


def drive(
    saver: RedisStreamSaver,
    flow: Generator[Any, Any, Any],
    key: str,
    rewrite: Callable[[], None],
    at: int = 2,
) -> tuple[Any, list[Any]]:
    """Run ``flow`` on ``saver``, calling ``rewrite()`` once just before its ``at``-th page read
    of stream ``key``. Returns what the flow returned and the items it emitted."""
    reply: Any = None
    reads, items = 0, []
    while True:
        try:
            step = flow.send(reply)
        except StopIteration as done:
            return done.value, items
        if isinstance(step, Emit):
            items.append(step.item)
            reply = None
            continue
        if _page_reads(step, key):
            reads += 1
            if reads == at:
                rewrite()
        reply = saver._execute(step)


def _another(saver: RedisStreamSaver, **options: Any) -> RedisStreamSaver:
    """A saver of its own connection on the same server and prefix (for another thread)."""
    pool = saver.client.connection_pool
    client = redis.Redis(connection_pool=type(pool)(**pool.connection_kwargs))
    return RedisStreamSaver(client, prefix=saver.prefix, **options)


def _ids(saver: RedisStreamSaver, thread: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(generate_config(thread))]


def _source(saver: RedisStreamSaver, steps: int = 15) -> History:
    """A thread "src" whose log takes several pages (a first page is 20 entries)."""
    return History(saver, thread_id="src").run(steps)


def _whole(saver: RedisStreamSaver, thread: str) -> None:
    """The thread reads as one history: no dangling reference, an intact chain."""
    _, _, problems = saver.verify(thread)
    assert problems == []
    check = saver.verify_chain(thread)
    assert check.ok, check.problem
    assert check.references == []


# --- copy_thread ---------------------------------------------------------------------------


def test_a_copy_racing_a_prune_of_its_source_is_one_history(sync_saver: RedisStreamSaver) -> None:
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    flow = sync_saver._ops.copy_thread("src", "dst")
    drive(sync_saver, flow, log, lambda: sync_saver.prune(["src"], strategy="keep_latest"))
    # the copy is of the pruned source, whole: what a copy started after the prune gives
    assert _ids(sync_saver, "dst") == _ids(sync_saver, "src")
    _whole(sync_saver, "dst")
    kinds = [e.kind for e in sync_saver.history("dst")]
    assert kinds.count("pruned") == 1 and kinds[0] == "pruned"


def test_a_copy_racing_a_delete_of_its_source_writes_nothing(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    flow = sync_saver._ops.copy_thread("src", "dst")
    copied, _ = drive(sync_saver, flow, log, lambda: sync_saver.delete_thread("src"))
    # the source is a deleted thread: its copy is a copy of nothing
    assert copied == 0
    assert not any(redis_client.exists(k) for k in sync_saver._ops.keys("dst"))
    assert "dst" not in sync_saver.thread_ids()
    assert "dst" not in sync_saver.thread_ids(deleted=True)


def test_a_copy_racing_a_delete_and_reuse_of_its_source_copies_the_new_history(
    sync_saver: RedisStreamSaver,
) -> None:
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log

    def delete_and_reuse() -> None:
        sync_saver.delete_thread("src")
        History(sync_saver, thread_id="src").run(3, start=100)

    flow = sync_saver._ops.copy_thread("src", "dst")
    drive(sync_saver, flow, log, delete_and_reuse)
    assert _ids(sync_saver, "dst") == _ids(sync_saver, "src")
    assert len(_ids(sync_saver, "dst")) == 3
    assert "dst" in sync_saver.thread_ids()
    kinds = [e.kind for e in sync_saver.history("dst")]
    assert "thread_deleted" not in kinds
    _whole(sync_saver, "dst")


def test_a_copy_is_invisible_until_whole(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    """Between its pages, the target reads as absent: nothing partial is ever visible."""
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    seen: list[Any] = []

    def look() -> None:
        seen.append(sync_saver.get_tuple(generate_config("dst")))
        seen.append(redis_client.exists(sync_saver._ops.keys("dst").log))

    drive(sync_saver, sync_saver._ops.copy_thread("src", "dst"), log, look)
    assert seen == [None, 0]
    assert _ids(sync_saver, "dst") == _ids(sync_saver, "src")
    # the scratch keys' hour is not the target's: it keeps the saver's time to live (none)
    assert all(redis_client.pttl(k) == -1 for k in sync_saver._ops.keys("dst"))
    assert not list(redis_client.scan_iter(match="*:copy:*"))
    _whole(sync_saver, "dst")


def test_a_copy_keeps_rewriting_sources_bounded(sync_saver: RedisStreamSaver) -> None:
    """A source rewritten between every two pages: the copy gives up, typed, writing nothing."""
    history = _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    flow = sync_saver._ops.copy_thread("src", "dst")
    reply: Any = None
    step_no = 100
    with pytest.raises(LogRewrittenError, match="src"):
        while True:
            step = flow.send(reply)
            if _page_reads(step, log):
                # compacted, then grown back past a page: a new version before every page
                sync_saver.prune(["src"], strategy="keep_latest")
                history.run(12, start=step_no)
                step_no += 12
            reply = sync_saver._execute(step)
    assert sync_saver.get_tuple(generate_config("dst")) is None
    assert "dst" not in sync_saver.thread_ids()


def test_a_copy_racing_prunes_and_deletes_in_a_loop(sync_saver: RedisStreamSaver) -> None:
    """The issue's loop, short: copies while another thread prunes, deletes and reuses the
    source. Every copy is one history of the source: whole, and not deleted."""
    _source(sync_saver, 10)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        other = _another(sync_saver)
        try:
            n = 200
            while not stop.is_set():
                History(other, thread_id="src").run(4, start=n)
                n += 4
                other.prune(["src"], strategy="keep_latest")
                if n % 3 == 0:
                    other.delete_thread("src")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        deadline = time.monotonic() + 2.0
        copies = 0
        while time.monotonic() < deadline:
            target = f"dst-{copies}"
            try:
                sync_saver.copy_thread("src", target)
            except LogRewrittenError:
                assert sync_saver.get_tuple(generate_config(target)) is None
            copies += 1
            if sync_saver.get_tuple(generate_config(target)) is not None:
                assert target in sync_saver.thread_ids()
                _whole(sync_saver, target)
                kinds = [e.kind for e in sync_saver.history(target)]
                assert "thread_deleted" not in kinds
                assert kinds.count("pruned") <= 1 and "pruned" not in kinds[1:]
    finally:
        stop.set()
        worker.join()
    assert not errors
    assert copies > 3


def test_a_copy_into_a_live_thread_racing_a_prune_appends_one_version(
    sync_saver: RedisStreamSaver,
) -> None:
    """Into a target with a history of its own, the copy is appended after it once the source
    was read whole: the copied events are those of one version of the source."""
    _source(sync_saver)
    History(sync_saver, thread_id="dst").run(2, start=500)
    own = [e.id for e in sync_saver.history("dst")]
    log = sync_saver._ops.keys("src").log
    flow = sync_saver._ops.copy_thread("src", "dst")
    drive(sync_saver, flow, log, lambda: sync_saver.prune(["src"], strategy="keep_latest"))
    events = list(sync_saver.history("dst"))
    assert [e.id for e in events[: len(own)]] == own
    copied = [e.copy_of for e in events[len(own) :]]
    assert copied == [("src", e.id) for e in sync_saver.history("src")]


def test_a_copy_into_a_deleted_thread_racing_a_prune(sync_saver: RedisStreamSaver) -> None:
    """A deleted id keeps its deletion first (old workers stay refused), then one version of
    the source; the thread is live again."""
    _source(sync_saver)
    History(sync_saver, thread_id="dst").run(2, start=500)
    sync_saver.delete_thread("dst")
    log = sync_saver._ops.keys("src").log
    flow = sync_saver._ops.copy_thread("src", "dst")
    drive(sync_saver, flow, log, lambda: sync_saver.prune(["src"], strategy="keep_latest"))
    events = list(sync_saver.history("dst"))
    assert events[0].kind == "thread_deleted"
    assert [e.copy_of for e in events[1:]] == [("src", e.id) for e in sync_saver.history("src")]
    assert "dst" in sync_saver.thread_ids()
    assert _ids(sync_saver, "dst") == _ids(sync_saver, "src")


def test_import_refuses_a_thread_deleted_event(sync_saver: RedisStreamSaver) -> None:
    """The server side of the rule: a `thread_deleted` event is never imported as an ordinary
    one (it would mark the target deleted)."""
    from streamsaver.core.errors import InvalidInputError

    History(sync_saver, thread_id="dst").run(1)
    ops = sync_saver._ops
    event = ["k", "thread_deleted", "sv", "1", "thread", "dst", "n", "1", "last", ""]
    event += ["head", "", "upto", ""]
    args = [*ops._appending_args(), 0, "1", len(event), *event]
    with pytest.raises(InvalidInputError, match="thread_deleted"):
        sync_saver._run(_one(Eval("import", ops.appending(ops.keys("dst")), args, write=True)))
    assert "dst" in sync_saver.thread_ids()
    assert [e.kind for e in sync_saver.history("dst")] == ["checkpoint", "writes"]


def _one(op: Any) -> Generator[Any, Any, Any]:
    reply = yield op
    if isinstance(reply, Exception):
        raise reply
    return reply


def test_a_copy_between_slots_of_a_cluster_racing_a_prune(cluster: Any) -> None:
    from redis.cluster import RedisCluster

    saver = RedisStreamSaver(RedisCluster.from_url(cluster.url), prefix="rewrites")
    try:
        saver.setup()
        History(saver, thread_id="src").run(15)
        log = saver._ops.keys("src").log
        target = next(f"dst{i}" for i in range(100) if _slot(f"dst{i}") != _slot("src"))
        flow = saver._ops.copy_thread("src", target)
        drive(saver, flow, log, lambda: saver.prune(["src"], strategy="keep_latest"))
        assert _ids(saver, target) == _ids(saver, "src")
        _whole(saver, target)
    finally:
        saver.client.close()


def _slot(thread: str) -> int:
    from streamsaver.core.keys import thread_keys
    from streamsaver.core.slots import slot_of

    return slot_of(thread_keys("rewrites", thread).log)


# --- audit export, verify_chain, history --------------------------------------------------


def test_an_export_racing_a_compaction_verifies(sync_saver: RedisStreamSaver) -> None:
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    from streamsaver.audit import trail as audit

    out = io.StringIO()
    writer = audit.ExportWriter(out, sync_saver.prefix, sync_saver.serde)
    flow = audit.export(sync_saver._ops, writer, ["src"])
    drive(sync_saver, flow, log, lambda: sync_saver.prune(["src"], strategy="keep_latest"))
    reports = verify_export(out.getvalue().splitlines(), sync_saver.serde)
    assert [r.problem for r in reports] == [None]
    # the export is the log as it is now
    assert reports[0].events == len(list(sync_saver.history("src")))


def test_exports_beside_a_keep_last_writer_verify(sync_saver: RedisStreamSaver) -> None:
    """The issue's measurement, short: exports taken while a keep_last=5 saver writes."""
    writer_saver = _another(sync_saver, keep_last=5)
    history = History(writer_saver, thread_id="busy").run(12)
    stop = threading.Event()

    def write() -> None:
        n = 100
        while not stop.is_set():
            history.step(n)
            n += 1

    worker = threading.Thread(target=write)
    worker.start()
    bad = exports = 0
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            out = io.StringIO()
            try:
                sync_saver.export_audit(["busy"], out)
            except LogRewrittenError:
                continue
            exports += 1
            reports = verify_export(out.getvalue().splitlines(), sync_saver.serde)
            bad += any(r.problem for r in reports)
    finally:
        stop.set()
        worker.join()
        writer_saver.client.close()
    assert exports > 5
    assert bad == 0


def test_verify_chain_racing_a_compaction_reports_nothing(sync_saver: RedisStreamSaver) -> None:
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    from streamsaver.audit import trail as audit

    flow = audit.verify_chain(sync_saver._ops, "src")
    check, _ = drive(
        sync_saver, flow, log, lambda: sync_saver.prune(["src"], strategy="keep_latest")
    )
    assert check.ok, check.problem
    assert check.references == []


def test_history_racing_a_compaction_fails_typed(sync_saver: RedisStreamSaver) -> None:
    """What it handed over cannot be taken back: it stops, typed, rather than go on in
    another log."""
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    from streamsaver.audit import trail as audit

    flow = audit.history(sync_saver._ops, "src", sync_saver.serde, False)
    with pytest.raises(LogRewrittenError, match="src"):
        drive(sync_saver, flow, log, lambda: sync_saver.prune(["src"], strategy="keep_latest"))


def test_a_history_page_racing_a_compaction_is_one_log(sync_saver: RedisStreamSaver) -> None:
    _source(sync_saver)
    log = sync_saver._ops.keys("src").log
    from streamsaver.audit import trail as audit

    flow = audit.page(sync_saver._ops, "src", sync_saver.serde, None, 60)
    (events, older), _ = drive(
        sync_saver, flow, log, lambda: sync_saver.prune(["src"], strategy="keep_latest")
    )
    assert [e.id for e in events] == [e.id for e in sync_saver.history("src")]
    assert older is False


def test_an_older_page_of_a_rewritten_log_fails_typed(sync_saver: RedisStreamSaver) -> None:
    """The console's "older" link holds an id of the log it showed: after a compaction that log
    is gone, and the page says so rather than show an empty past."""
    _source(sync_saver)
    events, older = sync_saver.history_page("src", limit=10)
    assert older
    sync_saver.prune(["src"], strategy="keep_latest")
    with pytest.raises(LogRewrittenError, match="src"):
        sync_saver.history_page("src", before=events[0].id, limit=10)


# --- tails ---------------------------------------------------------------------------------


def test_a_tail_to_the_end_across_a_compaction_goes_on_in_the_new_log(
    sync_saver: RedisStreamSaver,
) -> None:
    """A tail that ends at the log's end (follow=False) goes on as a follow tail does: the
    events it read, then what the new log holds after them (the tombstone, each copy naming
    its original in `origin`). Nothing is skipped silently."""
    _source(sync_saver)
    tail = sync_saver.tail("src", after="0", follow=False, count=10)
    it = iter(tail)
    first = [next(it) for _ in range(10)]
    sync_saver.prune(["src"], strategy="keep_latest")
    rest = list(it)
    kinds = [e.kind for e in rest]
    assert kinds and kinds[0] == "pruned", kinds
    new_log = [e.id for e in sync_saver.history("src")]
    assert [e.id for e in rest] == new_log
    assert all(e.origin for e in rest[1:])
    assert len(first) == 10


def test_a_tail_to_the_end_across_a_deletion_sees_it(sync_saver: RedisStreamSaver) -> None:
    _source(sync_saver)
    it = iter(sync_saver.tail("src", after="0", follow=False, count=10))
    assert len([next(it) for _ in range(10)]) == 10
    sync_saver.delete_thread("src")
    rest = list(it)
    assert [e.kind for e in rest] == ["thread_deleted"]
    assert rest[0].thread_deleted is not None and rest[0].thread_deleted.count > 20


def test_a_follow_tail_across_a_compaction(sync_saver: RedisStreamSaver) -> None:
    """A follow tail goes on after its cursor in the new log: the tombstone, then the copies,
    each naming its original: the one it read, or one the tombstone says was removed."""
    _source(sync_saver)
    tail = sync_saver.tail("src", after="0", follow=True, count=10, block_ms=50)
    it = iter(tail)
    before = [next(it) for _ in range(30)]
    sync_saver.prune(["src"], strategy="keep_latest")
    new_log = list(sync_saver.history("src"))
    after = [next(it) for _ in range(len(new_log))]
    tail.stop()
    assert [e.id for e in after] == [e.id for e in new_log]
    assert after[0].kind == "pruned" and after[0].pruned is not None
    read = {e.id for e in before}
    for copy in after[1:]:
        assert copy.origin is not None
        assert copy.origin in read or copy.origin > before[-1].id


# --- a prune under a busy writer -----------------------------------------------------------


def _busy_thread(saver: RedisStreamSaver) -> Any:
    History(saver, thread_id="busy").run(60)
    latest = saver.get_tuple(generate_config("busy"))
    assert latest is not None
    return latest.config


def test_a_prune_gains_on_a_writer_that_outpaces_its_slices(sync_saver: RedisStreamSaver) -> None:
    """Deterministic: before every slice of the prune, the writer appends more events than a
    paced slice copies. The tail calls must gain on it and the prune finish."""
    config = _busy_thread(sync_saver)
    writer = _another(sync_saver)
    flow = sync_saver._ops.prune(["busy"], "keep_latest")
    reply: Any = None
    calls = appended = 0
    try:
        while True:
            try:
                step = flow.send(reply)
            except StopIteration:
                break
            if any(
                isinstance(op, Eval) and op.script == "compact_slice"
                for op in (step.ops if isinstance(step, Each) else (step,))
            ):
                calls += 1
                assert calls < 400, "the prune never caught up with the writer"
                # one round trip: 12 appends, each the script a put_writes runs
                appends = []
                for _ in range(12):
                    task = f"task-{appended}"
                    writes = writer._ops.put_writes(config, [("n", MESSAGE)], task, "")
                    appends.append(next(writes))
                    appended += 1
                replies = writer._execute(Each(tuple(appends)))
                assert not any(isinstance(r, Exception) for r in replies)
            reply = sync_saver._execute(step)
    finally:
        writer.client.close()
    writes = [e for e in sync_saver.history("busy") if e.kind == "writes"]
    # every write appended while it ran is in the compacted log (pending writes of the latest)
    assert len(writes) >= appended
    _whole(sync_saver, "busy")


_WRITER = """
import sys, redis
from streamsaver import RedisStreamSaver
url, prefix, thread, me = sys.argv[1:5]
saver = RedisStreamSaver(redis.Redis.from_url(url), prefix=prefix)
config = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}).config
n = 0
while True:
    saver.put_writes(config, [("n", "x" * 100)], f"task-{me}-{n}")
    n += 1
"""


def test_a_prune_finishes_under_busy_writers(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    """The issue's case, short: writers in other processes append thousands of events a second
    while a sliced prune runs; it finishes (on the code before, it never did)."""
    import subprocess
    import sys

    _busy_thread(sync_saver)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, redis_url, sync_saver.prefix, "busy", str(i)],
            stderr=subprocess.DEVNULL,
        )
        for i in range(3)
    ]
    log = sync_saver._ops.keys("busy").log
    finished = threading.Event()
    try:
        before = sync_saver.client.xlen(log)
        deadline = time.monotonic() + 10
        while sync_saver.client.xlen(log) < before + 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        worker = threading.Thread(
            target=lambda: (sync_saver.prune(["busy"], strategy="keep_latest"), finished.set())
        )
        worker.daemon = True
        worker.start()
        worker.join(20)
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    assert finished.is_set(), "the prune did not finish within 20 s under the writers"
    ((_, first),) = sync_saver.client.xrange(log, count=1)
    assert first[b"k"] == b"pruned"


# --- the asyncio saver drives the same flows ---------------------------------------------


async def _adrive(
    saver: Any, flow: Generator[Any, Any, Any], key: str, rewrite: Callable[[], Any]
) -> Any:
    reply: Any = None
    reads = 0
    while True:
        try:
            step = flow.send(reply)
        except StopIteration as done:
            return done.value
        if _page_reads(step, key):
            reads += 1
            if reads == 2:
                await rewrite()
        reply = await saver._execute(step)


async def test_async_copy_and_export_racing_a_prune(async_saver: Any, redis_url: str) -> None:
    from streamsaver.audit import trail

    sync = RedisStreamSaver(redis.Redis.from_url(redis_url), prefix=async_saver.prefix)
    try:
        _source(sync)
        await async_saver.asetup()
        log = sync._ops.keys("src").log

        async def prune() -> None:
            await async_saver.aprune(["src"], strategy="keep_latest")

        await _adrive(async_saver, async_saver._ops.copy_thread("src", "dst"), log, prune)
        assert _ids(sync, "dst") == _ids(sync, "src")
        _whole(sync, "dst")

        History(sync, thread_id="src").run(12, start=50)
        out = io.StringIO()
        writer = trail.ExportWriter(out, sync.prefix, sync.serde)
        await _adrive(async_saver, trail.export(async_saver._ops, writer, ["src"]), log, prune)
        reports = verify_export(out.getvalue().splitlines(), sync.serde)
        assert [r.problem for r in reports] == [None]
    finally:
        sync.client.close()


# --- the console's timeline ----------------------------------------------------------------


async def test_the_consoles_older_page_of_a_compacted_log_shows_the_new_log(
    async_saver: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "older" link names an event of the log the page showed; after a compaction that log
    is gone: the console shows the thread's newest page (the new log), not an empty past nor
    an error."""
    import re

    import httpx

    from streamsaver.web import _pages, create_app

    monkeypatch.setattr(_pages, "TIMELINE", 10)
    sync = RedisStreamSaver(redis.Redis.from_url(redis_url), prefix=async_saver.prefix)
    try:
        _source(sync)
        app = create_app(async_saver)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as h:
            page = (await h.get("/thread", params={"thread_id": "src"})).text
            older = re.search(r"before=([0-9]+-[0-9]+)", page)
            assert older, "the newest page links to older events"
            sync.prune(["src"], strategy="keep_latest")
            got = await h.get("/thread", params={"thread_id": "src", "before": older[1]})
            assert got.status_code == 200, got.text
            for event in sync.history("src"):
                assert event.id in got.text
    finally:
        sync.client.close()
