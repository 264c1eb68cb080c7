"""Append-only list values stored as their new items (principle 7), on a real Redis."""

from __future__ import annotations

from typing import Any

import ormsgpack
import redis
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import RedisStreamSaver
from streamsaver.core.delta import ENTRY_BYTES, MAX_CHAIN, DeltaCache, Known
from streamsaver.core.keys import thread_keys
from tests.strategies import sharing_fixtures


class Thread:
    """Puts checkpoints like LangGraph: new versions only for the channels that changed."""

    def __init__(self, saver: RedisStreamSaver, thread_id: str = "t", ns: str = "") -> None:
        self.saver, self.thread_id, self.ns = saver, thread_id, ns
        self.versions: dict[str, Any] = {}
        self.values: dict[str, Any] = {}
        self.parent: dict[str, Any] | None = None
        self.history: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def put(self, **changed: Any) -> dict[str, Any]:
        new_versions = {
            ch: self.saver.get_next_version(self.versions.get(ch), None) for ch in changed
        }
        self.versions.update(new_versions)
        self.values.update(changed)
        configurable = {"thread_id": self.thread_id, "checkpoint_ns": self.ns}
        if self.parent:
            configurable["checkpoint_id"] = self.parent["configurable"]["checkpoint_id"]
        cp = generate_checkpoint(
            channel_values=dict(self.values), channel_versions=dict(self.versions)
        )
        step = len(self.history)
        self.parent = dict(
            self.saver.put(
                {"configurable": configurable}, cp, generate_metadata(step=step), new_versions
            )
        )
        self.history.append(
            (
                self.parent,
                {k: list(v) if isinstance(v, list) else v for k, v in self.values.items()},
            )
        )
        return self.parent

    def fork(self, at: int) -> Thread:
        other = Thread(self.saver, self.thread_id, self.ns)
        other.parent, snapshot = self.history[at]
        other.values = dict(snapshot)
        got = self.saver.get_tuple(other.parent)
        assert got is not None
        other.versions = dict(got.checkpoint["channel_versions"])
        other.history = list(self.history)
        return other

    def assert_reads_back(self) -> None:
        for config, values in self.history:
            got = self.saver.get_tuple(config)
            assert got is not None
            assert got.checkpoint["channel_values"] == values


def _value_fields(client: redis.Redis, prefix: str, thread_id: str = "t") -> list[tuple[str, int]]:
    """(type of each stored channel value, its encoded size), in log order."""
    out = []
    for _, fields in client.xrange(thread_keys(prefix, thread_id).log):
        for name, raw in fields.items():
            if name.startswith(b"b") and name[1:].isdigit():
                out.append((ormsgpack.unpackb(raw)[0], len(raw)))
    return out


def test_a_growing_conversation_stores_each_message_about_once(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    thread = Thread(sync_saver)
    messages: list[Any] = []
    for n in range(200):
        messages = [*messages, HumanMessage(f"question {n} " + "x" * 150, id=f"h{n}")]
        thread.put(messages=messages, turn=n)
    thread.assert_reads_back()
    stored = [
        (t, size)
        for t, size in _value_fields(redis_client, sync_saver.prefix)
        if t != "msgpack" or size > 300
    ]
    kinds = [t for t, _ in stored]
    assert kinds.count("append") > 150
    total = sum(size for _, size in stored)
    final = len(ormsgpack.packb(sync_saver.serde.dumps_typed(messages)))
    # whole copies would cost ~100x the final value; parts plus geometric snapshots stay small
    assert total < 4 * final


def test_chains_are_bounded_by_snapshots(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    thread = Thread(sync_saver)
    items: list[str] = ["x" * 5000]  # a big first item: tails never outweigh the snapshot
    for n in range(MAX_CHAIN + 10):
        items = [*items, f"i{n}"]
        thread.put(items=items)
    thread.assert_reads_back()
    kinds = [t for t, _ in _value_fields(redis_client, sync_saver.prefix)]
    run = longest = 0
    for kind in kinds:
        run = run + 1 if kind == "append" else 0
        longest = max(longest, run)
    assert longest == MAX_CHAIN
    assert kinds.count("msgpack") == 2


def test_forks_read_their_own_branch(sync_saver: RedisStreamSaver) -> None:
    main = Thread(sync_saver)
    for n in range(6):
        main.put(log=[f"m{i}" for i in range(n + 1)])
    fork = main.fork(at=2)
    for n in range(4):
        fork.put(log=[*fork.values["log"], f"f{n}"])
    main.put(log=[*main.values["log"], "m-last"])
    main.assert_reads_back()
    fork.assert_reads_back()


def test_a_second_writer_and_a_prune_never_corrupt_appends(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    a = Thread(sync_saver)
    for n in range(5):
        a.put(log=[f"a{i}" for i in range(n + 1)])
    # another process (its own cache) prunes the thread: every base a's cache knows is trimmed
    other = RedisStreamSaver(redis_client, prefix=sync_saver.prefix)
    other.prune(["t"], strategy="keep_latest")
    a.history = a.history[-1:]
    a.put(log=[*a.values["log"], "after-prune"])
    a.put(log=[*a.values["log"], "again"])
    a.assert_reads_back()
    assert _value_fields(redis_client, sync_saver.prefix)[-1][0] == "append"
    assert sync_saver.verify("t")[2] == []


def test_values_that_are_not_appends_are_stored_whole(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    thread = Thread(sync_saver)
    thread.put(log=["a", "b", "c"], obj={"k": 1})
    thread.put(log=["a", "b"])  # shrank
    thread.put(log=["z", "b", "c"])  # rewrote the first item
    thread.put(log=["z", "b", "c", "d"], obj={"k": 2})
    thread.assert_reads_back()
    kinds = [t for t, _ in _value_fields(redis_client, sync_saver.prefix)]
    assert kinds == ["msgpack", "msgpack", "msgpack", "msgpack", "append", "msgpack"]


def test_prune_copy_and_replay_keep_append_values(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    thread = Thread(sync_saver)
    for n in range(30):
        thread.put(messages=[AIMessage(f"m{i}", id=f"a{i}") for i in range(n + 1)])
    thread.assert_reads_back()
    sync_saver.copy_thread("t", "copy")
    for (config, values), got in zip(
        thread.history[::-1], sync_saver.list({"configurable": {"thread_id": "copy"}}), strict=True
    ):
        assert got.checkpoint["channel_values"] == values
        assert got.checkpoint["id"] == config["configurable"]["checkpoint_id"]
    latest = sync_saver.get_tuple({"configurable": {"thread_id": "t"}})
    sync_saver.prune(["t"], strategy="keep_latest")
    assert sync_saver.get_tuple({"configurable": {"thread_id": "t"}}) == latest
    assert sync_saver.rebuild("t")[:2] == (2, 0)  # the pruned tombstone and the copy
    assert sync_saver.get_tuple({"configurable": {"thread_id": "t"}}) == latest
    thread.history = thread.history[-1:]
    thread.put(messages=[*thread.values["messages"], AIMessage("after", id="z")])
    thread.assert_reads_back()


edits = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.text(max_size=5), max_size=3)),
        st.tuples(st.just("truncate"), st.integers(0, 5)),
        st.tuples(st.just("replace"), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)),
        st.tuples(st.just("fork"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=25,
)


@sharing_fixtures(30)
@given(edits)
def test_any_sequence_of_list_edits_reads_back_exactly(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, steps: list[tuple[str, Any]]
) -> None:
    thread_id = f"p{abs(hash(repr(steps)))}"
    threads = [Thread(sync_saver, thread_id)]
    thread = threads[0]
    thread.put(items=[])
    for op, arg in steps:
        items = list(thread.values["items"])
        if op == "append":
            thread.put(items=[*items, *arg])
        elif op == "truncate":
            thread.put(items=items[:arg])
        elif op == "replace":
            thread.put(items=arg)
        else:
            thread = thread.fork(min(arg, len(thread.history) - 1))
            threads.append(thread)
    for t in threads:
        t.assert_reads_back()
    assert sync_saver.verify(thread_id)[2] == []
    # list pages read oldest first, each value extending the previous: same results with or
    # without the client's cache, page boundaries included
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    expected = {c["configurable"]["checkpoint_id"]: v for t in threads for c, v in t.history}
    uncached = RedisStreamSaver(redis_client, prefix=sync_saver.prefix, delta_cache_bytes=0)
    for reader in (sync_saver, uncached):
        listed = list(reader.list(config))
        assert {t.checkpoint["id"]: t.checkpoint["channel_values"] for t in listed} == expected
        paged, before = [], None
        while batch := list(reader.list(config, before=before, limit=3)):
            paged += batch
            before = batch[-1].config
        assert paged == listed


def _known(n: int, body: bytes) -> Known:
    return Known(f"{n:010d}.00000000", f"1-{n} v", body, 1, 0, 0, len(body))


def test_the_cache_bound_counts_bookkeeping_and_evicts_least_recent_threads() -> None:
    bound = 100 * (ENTRY_BYTES + 10)
    cache = DeltaCache(bound)
    for n in range(1000):  # tiny values: bookkeeping, not bodies, is what fills the cache
        cache.put((f"t{n}", "", "messages"), _known(n, b"x" * 10))
    assert cache.nbytes <= bound and len(cache) == 100
    assert cache.get(("t999", "", "messages")) is not None
    assert cache.get(("t0", "", "messages")) is None
    cache.put(("big", "", "messages"), _known(0, b"x" * bound))  # never fits: not held
    assert cache.get(("big", "", "messages")) is None and len(cache) == 100


def test_dropping_a_threads_last_value_forgets_the_thread() -> None:
    cache = DeltaCache(10**6)
    for n in range(50):
        cache.put((f"t{n}", "", "messages"), _known(n, b"abc"))
        cache.drop((f"t{n}", "", "messages"))  # as a stale base does
    assert len(cache) == 0 and cache.nbytes == 0


def test_a_thread_read_lately_outlives_older_ones_and_an_evicted_thread_takes_its_writes() -> None:
    bound = 3 * (ENTRY_BYTES + 10) + 3 * (ENTRY_BYTES + 5)  # three threads and their writes
    cache = DeltaCache(bound)
    for n in range(3):
        cache.put((f"t{n}", "", "messages"), _known(n, b"x" * 10))
        cache.wrote((f"t{n}", ""), f"c{n}", [(f"1-{n} w0", b"y" * 5)])
    assert cache.nbytes == bound
    assert cache.get(("t0", "", "messages")) is not None  # t0 is now the most recent
    cache.put(("t3", "", "messages"), _known(3, b"x" * 10))
    assert cache.get(("t1", "", "messages")) is None
    assert cache.written(("t1", ""), "c1") is None
    assert cache.written(("t0", ""), "c0") is not None
    assert cache.nbytes <= bound
    # writes of a newer checkpoint replace the older ones, and are counted instead of them
    before = cache.nbytes
    cache.wrote(("t0", ""), "c9", [("2-0 w0", b"z" * 8)])
    assert cache.written(("t0", ""), "c0") is None
    assert cache.written(("t0", ""), "c9") is not None and cache.nbytes == before + 3
