"""Live tailing of one thread and of every thread (issue 3), on a real Redis.

The helpers at the top (a producer process, child processes with line reading, CLIENT LIST
queries) are shared with test_tail_groups.py and test_tail_cluster.py.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

import ormsgpack
import pytest
import redis
import redis.asyncio as aredis
from langchain_core.messages import AIMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from redis.crc import key_slot
from typing_extensions import TypedDict

from streamsaver import SCHEMA_VERSION, AsyncRedisStreamSaver, InvalidInputError, RedisStreamSaver
from streamsaver.core.codec import Codec
from streamsaver.core.feeds import feed_key, feed_of_log, feed_pattern
from streamsaver.core.keys import thread_keys
from streamsaver.core.slots import SLOTS, slot_tag
from streamsaver.events import Delivery, FeedCursor, SkippedEvent, ThreadEvent
from streamsaver.tailing.decode import decode_event, streams
from streamsaver.tailing.feeds import FeedTail
from streamsaver.tailing.steps import Batch, Block
from streamsaver.tailing.thread import ThreadTail
from tests.graphs import pipeline

# --- shared helpers --------------------------------------------------------------------------

# A producer in its own process: for each line "N" on stdin it writes N steps (a checkpoint and
# its writes: two events) to every thread named on its command line, then prints "done <total>".
PRODUCER = r"""
import sys
import redis
from streamsaver import RedisStreamSaver

url, prefix, *threads = sys.argv[1:]
saver = RedisStreamSaver(redis.Redis.from_url(url), prefix=prefix)
parents = dict.fromkeys(threads)
step = 0
for line in sys.stdin:
    for _ in range(int(line)):
        for thread in threads:
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            if parents[thread]:
                config["configurable"]["checkpoint_id"] = parents[thread]
            checkpoint = {
                "v": 1, "id": f"{step:08d}", "ts": "", "channel_values": {"n": step},
                "channel_versions": {"n": step + 1}, "versions_seen": {},
                "updated_channels": None,
            }
            stored = saver.put(config, checkpoint, {"step": step, "source": "loop"},
                               {"n": step + 1})
            saver.put_writes(stored, [("n", step)], f"task-{step}", "~__pregel_pull, worker")
            parents[thread] = checkpoint["id"]
        step += 1
    print("done", step, flush=True)
"""


def under(thread: str, parent: Any = None, ns: str = "") -> Any:
    """The config a put of the next checkpoint after *parent* (or the first) is given."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    return config


def checkpoint_at(n: int, checkpoint_id: str) -> Any:
    """A small checkpoint of step *n*: its one channel ``n`` holds *n*, at version *n + 1*."""
    return {
        "v": 1, "id": checkpoint_id, "ts": "", "channel_values": {"n": n},
        "channel_versions": {"n": n + 1}, "versions_seen": {}, "updated_channels": None,
    }  # fmt: skip


def step(saver: RedisStreamSaver, thread: str, n: int, parent: Any = None, ns: str = "") -> Any:
    """One step of a thread: a checkpoint, then the writes of a task (two events)."""
    metadata: Any = {"step": n, "source": "loop", "run_id": "run-1"}
    stored = saver.put(
        under(thread, parent, ns), checkpoint_at(n, f"{n:08d}"), metadata, {"n": n + 1}
    )
    saver.put_writes(stored, [("n", n), ("log", {"step": n})], f"task-{n}", "~__pregel_pull, node")
    return stored


def steps(saver: RedisStreamSaver, thread: str, count: int, start: int = 0) -> Any:
    parent = None
    for n in range(start, start + count):
        parent = step(saver, thread, n, parent)
    return parent


class Child:
    """A child process whose stdout lines are read in the background, with timeouts."""

    def __init__(self, args: list[str], stdin: bool = False) -> None:
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: str | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def line(self, timeout: float = 30) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output within {timeout} s") from None
        if line is None:
            raise AssertionError(f"the process ended: {self.stderr()}")
        return line

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def rest(self, timeout: float = 30) -> list[str]:
        """Every line still to come, until the process closes its output."""
        out = []
        while (line := self.lines.get(timeout=timeout)) is not None:
            out.append(line)
        return out

    def stderr(self) -> str:
        """What it wrote to stderr (waits for it to end)."""
        if self._stderr is None:
            self.process.wait(30)
            assert self.process.stderr is not None
            with self.process.stderr:
                self._stderr = self.process.stderr.read()
        return self._stderr

    def finish(self, timeout: float = 30) -> int:
        """Close its stdin and wait for it to end."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        return self.process.wait(timeout)

    def kill(self) -> None:
        """kill -9, if it still runs; then release its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.finish()
        self.stderr()


def python(code: str, *args: str, stdin: bool = False) -> Child:
    return Child([sys.executable, "-c", code, *args], stdin=stdin)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    """Poll a condition until it holds (never a fixed sleep standing in for one)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)
    return value


def named(client: redis.Redis, name: str) -> list[dict[str, Any]]:
    """The server's connections named ``name`` (CLIENT LIST)."""
    return [c for c in client.client_list() if c.get("name") == name]


def blocked(client: redis.Redis, name: str, command: str = "xread") -> list[dict[str, Any]]:
    """Connections named ``name`` waiting in a blocking ``command``."""
    return [c for c in named(client, name) if c.get("cmd") == command and "b" in c["flags"]]


def log_ids(client: redis.Redis, prefix: str, thread: str) -> list[str]:
    return [eid.decode() for eid, _ in client.xrange(thread_keys(prefix, thread).log)]


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


@pytest.fixture
def client_name(prefix: str) -> str:
    return f"tail-{prefix}"


@pytest.fixture
def named_saver(redis_url: str, prefix: str, client_name: str) -> Any:
    """A saver whose connections (its pool's and its tails' own) carry one client name."""
    client = redis.Redis.from_url(redis_url, client_name=client_name)
    yield RedisStreamSaver(client, prefix=prefix)
    client.close()


# --- the keyspace of feeds -------------------------------------------------------------------


def test_every_slot_has_a_feed_in_it_and_the_names_never_change() -> None:
    for slot in range(SLOTS):
        assert key_slot(feed_key("p", slot).encode()) == slot
    # stored key names: a change here would orphan every feed already written
    assert [slot_tag(s) for s in (0, 1, 8000, 16383)] == ["05cc", "0als", "06g2", "01k0"]
    assert feed_key("app", 0) == "app:{05cc}:feed"
    for thread in ("t", "", "a{b}c", "x" * 300, "ünï:cødé\n"):
        log = thread_keys("app", thread).log
        assert key_slot(feed_of_log("app", log).encode()) == key_slot(log.encode())
    # feeds stay out of the thread-key patterns, and inside the prefix
    assert feed_pattern("a*b") == "a\\*b:{*}:feed"


# --- the I/O-free core -----------------------------------------------------------------------


def _codec() -> Codec:
    return Codec(JsonPlusSerializer(), 1 << 20)


def test_bad_arguments_raise_before_anything_is_sent() -> None:
    for bad in ({"after": "yesterday"}, {"after": "12"}, {"block_ms": 0}, {"count": -1}):
        with pytest.raises(InvalidInputError):
            ThreadTail("p", _codec(), "t", **bad)
    with pytest.raises(InvalidInputError, match="prefix 'other'"):
        FeedTail("p", _codec(), after=FeedCursor(prefix="other"))
    with pytest.raises(InvalidInputError):
        FeedTail("p", _codec(), after='{"prefix": "p", "positions": {"99999": "1-0"}}')


def test_a_thread_tail_resolves_dollar_once_then_reads_strictly_after() -> None:
    core = ThreadTail("p", _codec(), "t", block_ms=250, count=7)
    flow = core.run()
    log = thread_keys("p", "t").log
    assert flow.send(None) == Batch((("XREVRANGE", log, "+", "-", "COUNT", 1),))
    # '$' becomes the last id now, so nothing appended between two reads is ever lost
    read = flow.send([[("5-1", {b"k": b"x"})]])
    assert read == Block(("XREAD", "COUNT", 7, "BLOCK", 250, "STREAMS", log, "5-1"), log, 250)
    assert core.position == "5-1"
    # a timeout: the same read again
    assert flow.send(None) == read


def test_replies_are_read_in_every_shape_redis_py_gives() -> None:
    entry = [b"1-0", [b"k", b"v"]]
    parsed = (b"1-0", {b"k": b"v"})
    want = [("s", [("1-0", {b"k": b"v"})])]
    assert streams([[b"s", [entry]]]) == want  # RESP2, raw
    assert streams({b"s": [entry]}) == want  # RESP3, raw
    assert streams([[b"s", [parsed]]]) == want  # RESP2, parsed
    assert streams({b"s": [[parsed]]}) == want  # RESP3, parsed
    assert streams(None) == streams([]) == []


def test_decoding_reports_what_it_cannot_hand_over() -> None:
    codec = _codec()

    def decode(**fields: Any) -> ThreadEvent | SkippedEvent:
        return decode_event(
            codec, "log", "1700000000123-4", {k.encode(): v for k, v in fields.items()}
        )

    good = decode(
        k=b"writes", sv=b"1", thread=b"t", ns=b"", id=b"c1", task=b"tk", path=b"~p, agent",
        run=b"", wi=ormsgpack.packb(["msg", 0]), w0=codec.dump(AIMessage(content="hi")),
    )  # fmt: skip
    assert isinstance(good, ThreadEvent)
    assert good.writes[0][0] == "msg" and good.writes[0][1].content == "hi"
    assert good.node == "agent" and good.timestamp.timestamp() == 1700000000.123
    assert good.config == {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}
    }
    for fields, reason in (
        ({"k": b"merge", "sv": b"1", "thread": b"t"}, "unknown kind 'merge'"),
        ({"k": b"checkpoint", "sv": b"3", "thread": b"t"}, "schema version 3 is newer"),
        ({"k": b"checkpoint", "thread": b"t"}, "no readable schema version"),
        ({"k": b"checkpoint", "sv": b"1", "thread": b"t", "nv": b"\xc1"}, "cannot decode"),
    ):
        skipped = decode(**fields)
        assert isinstance(skipped, SkippedEvent) and reason in skipped.reason, skipped


# --- one thread ------------------------------------------------------------------------------


def test_history_comes_back_decoded_in_log_order(sync_saver: RedisStreamSaver) -> None:
    last = steps(sync_saver, "t", 3)
    events = list(sync_saver.tail("t", after="0", follow=False))
    assert [e.id for e in events] == log_ids(sync_saver.client, sync_saver.prefix, "t")  # type: ignore[arg-type]
    assert [e.kind for e in events] == ["checkpoint", "writes"] * 3
    cp, writes = events[4], events[5]
    assert cp.checkpoint_id == "00000002" and cp.parent_checkpoint_id == "00000001"
    assert cp.step == 2 and cp.run_id == "run-1" and cp.channels == ("n",)
    assert cp.metadata is not None and cp.metadata["source"] == "loop"
    assert writes.writes == (("n", 2), ("log", {"step": 2})) and writes.node == "node"
    assert writes.task_id == "task-2" and writes.checkpoint_id == "00000002"
    # a checkpoint event leads to the whole state
    state = sync_saver.get_tuple(cp.config)  # type: ignore[arg-type]
    assert state is not None and state.checkpoint["channel_values"] == {"n": 2}
    assert state.config == last
    assert all(e.schema_version == SCHEMA_VERSION for e in events)


def test_follow_false_stops_at_the_end_as_of_the_call(sync_saver: RedisStreamSaver) -> None:
    steps(sync_saver, "t", 2)
    seen = []
    for event in sync_saver.tail("t", after="0", follow=False):
        seen.append(event.id)
        if len(seen) == 1:
            steps(sync_saver, "t", 1, start=10)  # appended during the read: not waited for
    assert len(seen) == 4
    assert list(sync_saver.tail("nobody", after="0", follow=False)) == []
    assert list(sync_saver.tail("t", after="$", follow=False)) == []


def test_resume_from_position_loses_and_repeats_nothing(sync_saver: RedisStreamSaver) -> None:
    steps(sync_saver, "t", 5)
    with sync_saver.tail("t", after="0") as tail:
        first = [event.id for event in islice(tail, 4)]
        position = tail.position
    assert position == first[-1]
    steps(sync_saver, "t", 2, start=5)
    rest = [e.id for e in sync_saver.tail("t", after=position, follow=False)]  # type: ignore[arg-type]
    assert first + rest == log_ids(sync_saver.client, sync_saver.prefix, "t")  # type: ignore[arg-type]


def test_a_namespace_filter_keeps_only_that_namespace(sync_saver: RedisStreamSaver) -> None:
    step(sync_saver, "t", 0)
    step(sync_saver, "t", 1, ns="child:1")
    got = list(sync_saver.tail("t", after="0", follow=False, checkpoint_ns="child:1"))
    assert [(e.kind, e.checkpoint_ns) for e in got] == [
        ("checkpoint", "child:1"),
        ("writes", "child:1"),
    ]


def test_a_tailer_process_gets_1000_events_of_a_producer_process_exactly_once_across_a_kill(
    redis_url: str, prefix: str, redis_client: redis.Redis
) -> None:
    producer = python(PRODUCER, redis_url, prefix, "live", stdin=True)

    def tailer(after: str) -> Child:
        return Child(
            [sys.executable, "-m", "streamsaver", "tail", "live", "--follow", "--json",
             "--from", after, "--url", redis_url, "--prefix", prefix]
        )  # fmt: skip

    children = [producer]
    try:
        producer.send("1")
        assert producer.line() == "done 1"
        children.append(first := tailer("0"))
        got = [json.loads(first.line()) for _ in range(2)]  # it follows: go on
        producer.send("249")  # 498 more events while the tailer follows
        got += [json.loads(first.line()) for _ in range(398)]
        first.kill()  # kill -9 mid-stream, at event 400 of 500
        children.append(second := tailer(got[-1]["id"]))
        producer.send("250")  # 500 more: some before the new tailer is up, some after
        got += [json.loads(second.line()) for _ in range(600)]
        assert [producer.line(), producer.line()] == ["done 250", "done 500"]
        assert producer.finish() == 0
        second.process.send_signal(signal.SIGTERM)
        assert second.rest() == []  # nothing more: nothing repeated
        assert second.process.wait(10) == 0
        assert f"resume with --from {got[-1]['id']}" in second.stderr()
    finally:
        for child in children:
            child.kill()
    ids = log_ids(redis_client, prefix, "live")
    assert len(ids) == 1000 and [g["id"] for g in got] == ids
    assert got[1]["kind"] == "writes" and got[1]["writes"] == [["n", 0]]
    assert got[998]["metadata"] == {"step": 499, "source": "loop"}


def test_a_graph_run_is_tailed_live_from_another_thread(sync_saver: RedisStreamSaver) -> None:
    seen_first = threading.Event()
    events: list[ThreadEvent] = []

    class State(TypedDict):
        log: Annotated[list[str], operator.add]

    def first(state: State) -> dict[str, Any]:
        return {"log": ["first"]}

    def second(state: State) -> dict[str, Any]:
        # the graph is still running here: it goes on only once the tailer saw `first` write
        assert seen_first.wait(15), "the tailer did not see the first node's writes in time"
        return {"log": ["second"]}

    graph = pipeline(State, first=first, second=second).compile(checkpointer=sync_saver)

    tail = sync_saver.tail("run", after="0")

    def follow() -> None:
        for event in tail:
            events.append(event)
            if event.kind == "writes" and event.node == "first":
                seen_first.set()
            if len(events) == 7:  # 4 checkpoints, 3 tasks' writes
                return

    reader, errors = in_thread(follow)
    result = graph.invoke({"log": []}, {"configurable": {"thread_id": "run"}})
    reader.join(15)
    tail.close()
    assert not errors and not reader.is_alive()
    assert result == {"log": ["first", "second"]}
    # everything the run wrote, in log order (LangGraph writes a step's checkpoint and the
    # previous step's writes concurrently, so their relative order varies from run to run)
    assert [e.id for e in events] == log_ids(sync_saver.client, sync_saver.prefix, "run")  # type: ignore[arg-type]
    assert sorted(f"{e.kind}:{e.node or e.step}" for e in events) == [
        "checkpoint:-1", "checkpoint:0", "checkpoint:1", "checkpoint:2", "writes:__start__",
        "writes:first", "writes:second",
    ]  # fmt: skip
    second = next(e for e in events if e.node == "second")
    assert dict(second.writes) == {"log": ["second"]}


async def test_an_async_graph_run_is_tailed_live(async_saver: AsyncRedisStreamSaver) -> None:
    seen_first = asyncio.Event()

    class State(TypedDict):
        log: Annotated[list[str], operator.add]

    async def first(state: State) -> dict[str, Any]:
        return {"log": ["first"]}

    async def second(state: State) -> dict[str, Any]:
        await asyncio.wait_for(seen_first.wait(), 15)  # only once the tailer saw `first` write
        return {"log": ["second"]}

    graph = pipeline(State, first=first, second=second).compile(checkpointer=async_saver)

    async def follow() -> list[str]:
        seen = []
        async with async_saver.atail("arun", after="0") as tail:
            async for event in tail:
                seen.append(f"{event.kind}:{event.node or event.step}")
                if event.kind == "writes" and event.node == "first":
                    seen_first.set()
                if len(seen) == 7:
                    return seen
        return seen

    reader = asyncio.create_task(follow())
    result = await graph.ainvoke({"log": []}, {"configurable": {"thread_id": "arun"}})
    seen = await asyncio.wait_for(reader, 15)
    assert result == {"log": ["first", "second"]}
    assert sorted(seen) == [
        "checkpoint:-1", "checkpoint:0", "checkpoint:1", "checkpoint:2", "writes:__start__",
        "writes:first", "writes:second",
    ]  # fmt: skip


# --- every thread ----------------------------------------------------------------------------


def test_every_append_is_announced_in_the_feed_of_its_slot(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    prefix = sync_saver.prefix
    steps(sync_saver, "a", 2)
    sync_saver.copy_thread("a", "b")
    step(sync_saver, "c", 0)
    sync_saver.delete_for_runs(["run-1"])
    sync_saver.prune(["b"], strategy="keep_latest")
    pointed: dict[str, set[str]] = {}
    for feed in {feed_of_log(prefix, thread_keys(prefix, t).log) for t in "abc"}:
        for _, f in redis_client.xrange(feed):
            pointed.setdefault(f[b"t"].decode(), set()).add(f[b"e"].decode())
            # what readers act on before fetching the event, no more (no checkpoint id)
            assert set(f) == {b"t", b"e", b"k", b"ns"}
    for thread in "abc":
        # every event in every log was announced, by the script that appended it
        assert set(log_ids(redis_client, prefix, thread)) <= pointed[thread]
    kinds = [e.kind for e in sync_saver.tail("c", after="0", follow=False)]
    # delete_for_runs took the run's events out of the log (a compaction, which leaves its
    # tombstone); the record of the deletion stays
    assert kinds == ["pruned", "delete"]


def test_rebuild_and_reads_need_no_feed(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    last = steps(sync_saver, "t", 4)
    before = list(sync_saver.list({"configurable": {"thread_id": "t"}}))
    feeds = list(redis_client.scan_iter(match=feed_pattern(sync_saver.prefix)))
    assert len(feeds) == 1
    redis_client.delete(*feeds)
    replay = sync_saver.rebuild("t")
    assert (replay.applied, replay.skipped) == (8, 0)
    assert sync_saver.verify("t")[2] == []
    assert list(sync_saver.list({"configurable": {"thread_id": "t"}})) == before
    assert sync_saver.get_tuple(last) == before[0]


def test_feed_maxlen_trims_pointers_never_events(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    feed = feed_of_log(sync_saver.prefix, thread_keys(sync_saver.prefix, "t").log)
    sync_saver.feed_maxlen = 10
    # LangGraph compiles a graph with a clone of the saver (strict msgpack): it keeps the setting
    strict = RedisStreamSaver(
        redis_client,
        prefix=sync_saver.prefix,
        serde=JsonPlusSerializer(allowed_msgpack_modules=None),
    )
    strict.feed_maxlen = 10
    clone = strict.with_allowlist([("mymodule", "MyType")])
    assert clone is not strict and clone.feed_maxlen == 10
    steps(sync_saver, "t", 150)
    assert redis_client.xlen(thread_keys(sync_saver.prefix, "t").log) == 300
    assert 10 <= redis_client.xlen(feed) < 300  # approximate MAXLEN: whole nodes go
    sync_saver.feed_maxlen = 0
    before = redis_client.xlen(feed)
    step(sync_saver, "t", 200)
    assert redis_client.xlen(feed) == before
    with pytest.raises(InvalidInputError):
        sync_saver.feed_maxlen = -1


def test_a_cursor_older_than_the_feeds_trimming_reports_the_gap(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    sync_saver.feed_maxlen = 10
    step(sync_saver, "t", 0)
    with sync_saver.tail_all(after="0", follow=False) as tail:
        assert len(list(tail)) == 2
        cursor = tail.cursor
    steps(sync_saver, "t", 150, start=1)  # 300 pointers: whole nodes trimmed past the cursor
    reports: list[SkippedEvent] = []
    rest = list(sync_saver.tail_all(after=cursor, follow=False, on_skip=reports.append))
    assert 10 <= len(rest) < 300
    assert len(reports) == 1 and "trimmed (feed_maxlen) past this position" in reports[0].reason
    # the thread log still has every event: one thread's tail recovers them
    assert len(list(sync_saver.tail("t", after="0", follow=False))) == 302


def test_tail_all_hands_over_every_thread_and_resumes_from_a_cursor(
    redis_url: str, prefix: str, redis_client: redis.Redis, sync_saver: RedisStreamSaver
) -> None:
    threads = [f"user:{i}" for i in range(24)]
    assert len({key_slot(thread_keys(prefix, t).log.encode()) for t in threads}) > 20
    producer = python(PRODUCER, redis_url, prefix, *threads, stdin=True)
    try:
        producer.send("1")
        assert producer.line() == "done 1"
        got: list[ThreadEvent] = []
        with sync_saver.tail_all(after="0", discover_ms=50) as tail:
            for event in tail:
                got.append(event)
                if len(got) == 24:
                    producer.send("9")  # new events and, for slots not seen yet, new feeds
                if len(got) == 200:
                    break
            cursor = tail.cursor.model_dump_json()
        assert producer.line() == "done 10" and producer.finish() == 0
    finally:
        producer.kill()
    rest = list(sync_saver.tail_all(after=cursor, follow=False))
    by_thread: dict[str, list[str]] = {}
    for event in got + rest:
        by_thread.setdefault(event.thread_id, []).append(event.id)
    # every event exactly once, each thread in its own order, across the restart
    assert by_thread == {t: log_ids(redis_client, prefix, t) for t in threads}
    assert len(got) + len(rest) == 24 * 20
    assert (
        list(sync_saver.tail_all(after=FeedCursor.model_validate_json(cursor), follow=False))[-1].id
        == rest[-1].id
    )


def test_tail_all_from_dollar_sees_only_new_events_even_in_new_feeds(
    sync_saver: RedisStreamSaver,
) -> None:
    step(sync_saver, "old", 0)
    got: list[str] = []
    with sync_saver.tail_all(discover_ms=20, block_ms=50) as tail:
        reader, errors = in_thread(lambda: [got.append(e.thread_id) for e in tail])
        step(sync_saver, "old", 1)
        step(sync_saver, "brand-new", 0)
        wait_for(lambda: len(got) >= 4, "four new events")
        tail.stop()
        reader.join(5)
    assert not errors
    assert sorted(got) == ["brand-new", "brand-new", "old", "old"]


def test_unknown_kinds_newer_schemas_and_undecodable_events_are_reported_and_skipped(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    prefix = sync_saver.prefix
    log = thread_keys(prefix, "t").log
    feed = feed_of_log(prefix, log)
    step(sync_saver, "t", 0)
    bad: list[dict[str, Any]] = [
        {"k": "merge", "sv": "1", "thread": "t"},  # a kind from a newer version
        {"k": "checkpoint", "sv": "7", "thread": "t", "ns": "", "id": "x"},  # a newer schema
        {"k": "writes", "sv": "1", "thread": "t", "ns": "", "id": "x", "task": "k", "path": "",
         "run": "", "wi": ormsgpack.packb(["c", 0]), "w0": b"not msgpack \xc1"},
    ]  # fmt: skip
    for fields in bad:
        eid = redis_client.xadd(log, fields)
        # as a newer writer would announce it
        redis_client.xadd(feed, {"t": "t", "e": eid, "k": fields["k"], "ns": "", "c": ""})
    redis_client.xadd(feed, {"junk": "1"})  # not even a pointer
    step(sync_saver, "t", 1)

    reports: list[SkippedEvent] = []
    tail = sync_saver.tail("t", after="0", follow=False, on_skip=reports.append)
    assert [e.kind for e in tail] == ["checkpoint", "writes"] * 2
    assert tail.skipped == 3
    assert [r.kind for r in reports] == ["merge", "checkpoint", "writes"]
    assert "unknown kind 'merge'" in reports[0].reason and "newer" in reports[1].reason
    assert "cannot decode" in reports[2].reason

    reports.clear()
    every = sync_saver.tail_all(after="0", follow=False, on_skip=reports.append)
    assert [e.kind for e in every] == ["checkpoint", "writes"] * 2
    assert every.skipped == 4 and reports[3].reason == "not a feed pointer"


def test_a_pointer_to_a_deleted_thread_is_reported_as_gone(sync_saver: RedisStreamSaver) -> None:
    step(sync_saver, "gone", 0)
    sync_saver.delete_thread("gone")
    reports: list[SkippedEvent] = []
    # the log starts again with the deletion, which tailers read like any event
    every = list(sync_saver.tail_all(after="0", follow=False, on_skip=reports.append))
    assert len(every) == 1, [(e.kind, e.id, e.thread_id) for e in every]
    [deleted] = every
    assert deleted.kind == "thread_deleted" and deleted.thread_deleted is not None
    assert deleted.thread_deleted.count == 2
    assert [r.reason.split(":")[0] for r in reports] == ["gone", "gone"]
    assert {r.thread_id for r in reports} == {"gone"}


# --- connections, timeouts, stopping ---------------------------------------------------------


def test_a_socket_timeout_shorter_than_the_block_time_does_no_harm(
    redis_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis_url, socket_timeout=0.1)
    saver = RedisStreamSaver(client, prefix=prefix)
    got: list[ThreadEvent] = []
    tail = saver.tail("t", block_ms=2000)
    reader, errors = in_thread(lambda: got.extend(islice(tail, 2)))
    # the scenario itself: the tail waits several socket timeouts before anything arrives
    time.sleep(0.5)
    assert reader.is_alive() and not errors
    step(saver, "t", 0)
    reader.join(5)
    tail.close()
    client.close()
    assert not errors, errors
    assert [e.kind for e in got] == ["checkpoint", "writes"]


def test_stop_ends_a_blocked_tail_at_once_and_closes_its_connection(
    named_saver: RedisStreamSaver, redis_client: redis.Redis, client_name: str
) -> None:
    for make in (
        lambda: named_saver.tail("quiet", block_ms=60_000),
        lambda: named_saver.tail_all(block_ms=60_000, discover_ms=60_000),
    ):
        step(named_saver, "elsewhere", 0)  # tail_all blocks on existing feeds
        tail = make()
        reader, errors = in_thread(lambda: list(tail))  # noqa: B023 - joined in this iteration
        wait_for(lambda: blocked(redis_client, client_name), "the tail to block")
        started = time.monotonic()
        tail.stop()
        reader.join(5)
        assert not reader.is_alive() and not errors
        assert time.monotonic() - started < 1.0  # not the 60 s block time
        # its own connection is closed; the saver's pool keeps only idle ones
        assert not [c for c in named(redis_client, client_name) if c["cmd"].startswith("xread")]


def test_leaving_the_loop_closes_the_tail(
    named_saver: RedisStreamSaver, redis_client: redis.Redis, client_name: str
) -> None:
    steps(named_saver, "t", 2)
    for event in named_saver.tail("t", after="0"):
        if event.kind == "writes":
            step(named_saver, "t", 5)
            break
    # the iterator is gone with the loop: its blocking connection is closed at once
    assert not [c for c in named(redis_client, client_name) if c["cmd"] == "xread"]
    with named_saver.tail("t", after="0") as tail:
        assert next(tail).kind == "checkpoint"
    assert not [c for c in named(redis_client, client_name) if c["cmd"] == "xread"]
    assert list(tail) == []  # closed for good


def test_blocked_tails_hold_no_connection_of_the_savers_pool(
    redis_url: str, prefix: str, redis_client: redis.Redis, client_name: str
) -> None:
    pool = redis.BlockingConnectionPool.from_url(
        redis_url, max_connections=1, timeout=2, client_name=client_name
    )
    saver = RedisStreamSaver(redis.Redis(connection_pool=pool), prefix=prefix)
    step(saver, "t", 0)
    one, all_ = saver.tail("t", block_ms=10_000), saver.tail_all(block_ms=10_000)
    group = saver.consumer_group("g", "m", block_ms=10_000)
    got: list[str] = []

    def deliveries() -> Any:
        for delivery in group:
            group.ack(delivery)
            yield delivery.event

    readers = [
        in_thread(lambda t=t: got.extend(e.id for e in islice(t, 2)))  # type: ignore[misc]
        for t in (one, all_, deliveries())
    ]
    wait_for(
        lambda: (
            len(blocked(redis_client, client_name))
            + len(blocked(redis_client, client_name, "xreadgroup"))
            == 3
        ),
        "every reader to block",
    )
    # the pool's only connection is free: the saver works while every reader waits
    stored = step(saver, "t", 1)
    assert saver.get_tuple(stored) is not None
    for reader, errors in readers:
        reader.join(5)
        assert not errors
    assert sorted(got) == sorted(log_ids(redis_client, prefix, "t")[2:] * 3)
    one.close()
    all_.close()
    group.close()
    pool.disconnect()


async def test_async_tails_stop_on_cancel_and_on_aclose(
    redis_url: str, prefix: str, redis_client: redis.Redis, client_name: str
) -> None:
    client = aredis.Redis.from_url(redis_url, client_name=client_name, socket_timeout=0.1)
    saver = AsyncRedisStreamSaver(client, prefix=prefix)

    async def drain(tail: Any) -> None:
        async for _ in tail:
            pass

    await saver.aput_writes(
        {"configurable": {"thread_id": "w", "checkpoint_ns": "", "checkpoint_id": "c"}},
        [("x", 1)],
        "task",
    )  # so that tail_all has a feed to block on
    for tail in (saver.atail("quiet", block_ms=60_000), saver.atail_all(block_ms=60_000)):
        task = asyncio.create_task(drain(tail))
        await asyncio.to_thread(
            wait_for, lambda: blocked(redis_client, client_name), "the async tail to block"
        )
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 1.0
        assert not [c for c in named(redis_client, client_name) if c["cmd"] == "xread"]

    # a socket timeout far below the block time, and aclose after the first event
    await saver.aput_writes(
        {"configurable": {"thread_id": "w", "checkpoint_ns": "", "checkpoint_id": "c"}},
        [("x", 2)],
        "task",
    )
    async with saver.atail("w", after="0", block_ms=1000) as tail:
        first = await tail.__anext__()
        assert first.writes == (("x", 1),)
    assert [e async for e in tail] == []
    assert tail.position == first.id
    await client.aclose()


def test_cancelled_async_readers_stop_wherever_the_cancel_lands(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    """redis-py's asyncio connection can swallow a cancel delivered while it sends a command
    (a start's probe for feeds is a large one): the read loop went on and a cancelled
    aconsumer_group did not stop. Each reader runs in an asyncio.run of its own, as a fresh
    process would, and is cancelled at moments spread over its start and its first reads."""
    steps(sync_saver, "t", 2)
    readers: list[Callable[[AsyncRedisStreamSaver], Any]] = [
        lambda saver: saver.atail_all(after="0", block_ms=60_000),
        lambda saver: saver.aconsumer_group("g", "c", start="0", block_ms=60_000),
    ]

    async def cancelled_at(make: Callable[[AsyncRedisStreamSaver], Any], delay: float) -> bool:
        client = aredis.Redis.from_url(redis_url)
        reader = make(AsyncRedisStreamSaver(client, prefix=sync_saver.prefix))

        async def drain() -> None:
            async for item in reader:
                if isinstance(item, Delivery):
                    await reader.ack(item)

        task = asyncio.create_task(drain())
        await asyncio.sleep(delay)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=10)
        await client.aclose()
        return bool(done)

    stuck = [
        (k, delay)
        for delay in [i * 0.003 for i in range(20)]
        for k, make in enumerate(readers)
        if not asyncio.run(cancelled_at(make, delay))
    ]
    assert stuck == []


def test_the_tailing_guide_example_runs_as_written(
    redis_url: str, redis_client: redis.Redis
) -> None:
    guide = (Path(__file__).resolve().parent.parent / "docs" / "tailing.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", guide, flags=re.S)

    def clean() -> None:
        for key in redis_client.scan_iter(match="tail-demo:*"):
            redis_client.unlink(key)

    clean()
    try:
        env = {**os.environ, "REDIS_URL": redis_url}
        out = subprocess.run(
            [sys.executable, "-c", example], capture_output=True, text=True, env=env, timeout=60
        )
    finally:
        clean()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # LangGraph sends a step's writes and checkpoints concurrently: their order varies
    assert sorted(" ".join(line.split()[:3]) for line in lines[:5]) == [
        "checkpoint -1 None", "checkpoint 0 None", "checkpoint 1 None", "writes None __start__",
        "writes None reply",
    ]  # fmt: skip
    assert lines[5:7] == ["5 events", "0 new since"]
    # the group stops at the last checkpoint. LangGraph saves writes in the background, so the
    # log may hold any of them after that checkpoint, where the group never gets to them
    handled = lines[7:]
    assert handled[-1] == "handled checkpoint t1" and handled.count("handled checkpoint t1") == 3
    assert set(handled) <= {"handled checkpoint t1", "handled writes t1"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "streamsaver", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_tail_command_prints_a_line_per_event_and_how_to_resume(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    steps(sync_saver, "a", 2)
    step(sync_saver, "b:1", 0)
    out = _cli("tail", "a", *where)
    assert out.returncode == 0, out.stderr
    time = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    lines = out.stdout.splitlines()
    assert len(lines) == 4
    assert re.fullmatch(rf"{time} checkpoint ns='' step=0 loop n", lines[0]), lines[0]
    # writes: their checkpoint's step, the node from the task path, the channels written
    assert re.fullmatch(rf"{time} writes     ns='' step=0 node n,log", lines[1]), lines[1]
    last = log_ids(sync_saver.client, sync_saver.prefix, "a")[-1]  # type: ignore[arg-type]
    assert f"resume with --from {last}" in out.stderr

    every = _cli("tail", "--all", "--json", *where)
    assert every.returncode == 0, every.stderr
    events = [json.loads(line) for line in every.stdout.splitlines()]
    assert sorted(e["thread_id"] for e in events) == ["a"] * 4 + ["b:1"] * 2
    assert events[0]["schema_version"] == SCHEMA_VERSION and "timestamp" in events[0]
    cursor = every.stderr.split("resume with --from ", 1)[1].strip().strip("'")
    step(sync_saver, "b:1", 1)
    again = _cli("tail", "--all", "--from", cursor, *where)
    assert again.returncode == 0, again.stderr
    assert [line.split()[1] for line in again.stdout.splitlines()] == ["'b:1'"] * 2


def test_the_tail_command_explains_itself_and_refuses_bad_input(redis_url: str) -> None:
    help_ = _cli("tail", "--help")
    assert help_.returncode == 0
    for text in ("THREAD_ID", "--all", "--from", "--follow", "--json", "resume", "node"):
        assert text in help_.stdout
    for args, message in (
        (("tail", "--url", redis_url), "give a THREAD_ID or --all"),
        (("tail", "t", "--from", "yesterday", "--url", redis_url), "after='yesterday'"),
        (("tail", "--all", "--from", "{oops", "--url", redis_url), "not a valid FeedCursor"),
        (("tail", "t"), "pass --url or set $REDIS_URL"),
    ):
        out = _cli(*args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
