"""The Store against InMemoryStore: the same calls on both give the same results.

Order is the one deliberate difference: without a query, streamsaver returns the most recently
updated first (as PostgresStore does), where InMemoryStore keeps insertion order; the reference
here is InMemoryStore's results put in that order (the harness knows the order of its puts).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore

from streamsaver import (
    AsyncRedisStreamStore,
    DataLostError,
    InvalidInputError,
    InvalidUsageError,
    RedisStreamStore,
)
from streamsaver.core.keys import STORE_BUCKETS, store_keys
from streamsaver.memory_events import StoreCursor

from . import store_servers
from .store_servers import Target, drop

target = store_servers.target  # the fixture: Redis 7, a 3-primary cluster, Valkey 9

# labels may hold anything but "." and NUL (BaseStore refuses those)
LABEL_CHARS = ":{}*?[]$%\\|\n \t~-_é中😀ab"
labels = st.text(alphabet=st.sampled_from(LABEL_CHARS), min_size=1, max_size=4)
namespaces = st.lists(labels, min_size=1, max_size=3).map(tuple)
keys = st.text(alphabet=st.sampled_from(LABEL_CHARS + ".\x00"), max_size=5)
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["x", "y", ""])
values = st.fixed_dictionaries(
    {"num": st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False)},
    optional={
        "a": scalars,
        "n": st.fixed_dictionaries({}, optional={"c": scalars, "d": st.lists(scalars, max_size=2)}),
    },
)
operators = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
filters = (
    st.none()
    | st.dictionaries(
        st.sampled_from(["a", "n", "num"]),
        scalars | st.fixed_dictionaries({"c": scalars}),
        max_size=2,
    )
    | st.builds(lambda op, x: {"num": {op: x}}, operators, st.integers(-5, 5))
)


def _norm(result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, list) and result and not isinstance(result[0], tuple):
        return [(i.namespace, i.key, i.value) for i in result]
    if isinstance(result, list):
        return result
    return (result.namespace, result.key, result.value)


class Reference:
    """InMemoryStore, with search results newest first (by the order of the puts), and a
    namespace listed only while it holds an item (as PostgresStore; InMemoryStore keeps listing
    a namespace whose items were all deleted)."""

    def __init__(self) -> None:
        self.store = InMemoryStore()
        self.order: dict[tuple[tuple[str, ...], str], int] = {}
        self.seq = 0

    def put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any] | None) -> None:
        if value is None:
            self.store.delete(namespace, key)
            self.order.pop((namespace, key), None)
            if not self.store._data.get(namespace, True):
                del self.store._data[namespace]
        else:
            self.store.put(namespace, key, value)
            self.seq += 1
            self.order[(namespace, key)] = self.seq

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        self.put(namespace, key, None)

    def search(self, prefix: tuple[str, ...], **kw: Any) -> list[Any]:
        limit, offset = kw.pop("limit", 10), kw.pop("offset", 0)
        found = self.store.search(prefix, limit=10**6, **kw)
        found.sort(key=lambda i: -self.order[(i.namespace, i.key)])
        return found[offset : offset + limit]

    def list_namespaces(self, **kw: Any) -> list[tuple[str, ...]]:
        return self.store.list_namespaces(**kw)


@pytest.fixture
def store(redis_client: redis.Redis, prefix: str) -> RedisStreamStore:
    return RedisStreamStore(redis_client, prefix=prefix)


@pytest.fixture
async def astore(redis_url: str, prefix: str) -> AsyncIterator[AsyncRedisStreamStore]:
    client = aredis.Redis.from_url(redis_url)
    yield AsyncRedisStreamStore(client, prefix=prefix + "-async")
    await client.aclose()


def test_get_put_delete_like_in_memory(store: RedisStreamStore) -> None:
    ref = Reference()
    for s in (ref, store):
        s.put(("users", "1"), "prefs", {"theme": "dark"})
        s.put(("users", "1"), "prefs", {"theme": "light"})
        s.put(("users", "2"), "a:b{c}", {"n": 1})
    for ns, key in [(("users", "1"), "prefs"), (("users", "2"), "a:b{c}"), (("users",), "x")]:
        assert _norm(store.get(ns, key)) == _norm(ref.store.get(ns, key))
    store.delete(("users", "1"), "prefs")
    assert store.get(("users", "1"), "prefs") is None
    assert store.list_namespaces() == [("users", "2")]


def test_timestamps(store: RedisStreamStore) -> None:
    store.put(("a",), "k", {"v": 1})
    first = store.get(("a",), "k")
    store.put(("a",), "k", {"v": 2})
    second = store.get(("a",), "k")
    assert first is not None and second is not None
    assert first.created_at == first.updated_at
    # an update keeps created_at (as PostgresStore does) and moves updated_at
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert second.updated_at.tzinfo is not None


def test_search_newest_first_with_limit_offset(store: RedisStreamStore) -> None:
    for i in range(12):
        store.put(("docs", str(i % 3)), f"k{i}", {"i": i})
    found = store.search(("docs",), limit=5, offset=2)
    assert [i.value["i"] for i in found] == [9, 8, 7, 6, 5]
    store.put(("docs", "0"), "k0", {"i": 100})
    assert store.search(("docs",), limit=1)[0].key == "k0"
    # query is accepted and ignored: the same order, no score
    assert [i.key for i in store.search(("docs",), query="anything", limit=3)] == [
        "k0",
        "k11",
        "k10",
    ]


def test_namespace_listing(store: RedisStreamStore) -> None:
    ref = Reference()
    for ns in [("a", "b", "c"), ("a", "x"), ("b", "b"), ("a", "b", "d", "e")]:
        for s in (ref, store):
            s.put(ns, "k", {"v": 1})
    calls: list[dict[str, Any]] = [
        {},
        {"prefix": ("a",)},
        {"prefix": ("a", "*")},
        {"suffix": ("b",)},
        {"prefix": ("*", "b")},
        {"max_depth": 2},
        {"prefix": ("a",), "max_depth": 1},
        {"limit": 2, "offset": 1},
    ]
    for kw in calls:
        assert store.list_namespaces(**kw) == ref.store.list_namespaces(**kw), kw
    store.delete(("a", "x"), "k")
    assert ("a", "x") not in store.list_namespaces()


def test_bad_input_writes_nothing(store: RedisStreamStore, redis_client: redis.Redis) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"v": 1})
    with pytest.raises(InvalidInputError, match="must be a mapping"):
        store.batch([PutOp(("a",), "k1", {"v": 1}), PutOp(("a",), "k2", [1])])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="ttl"):
        store.put(("a",), "k", {"v": 1}, ttl=-1)
    with pytest.raises(InvalidInputError, match="AsyncRedisStreamStore"):
        RedisStreamStore(aredis.Redis())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="serde"):
        RedisStreamStore(redis_client, serde=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="'embed'"):
        RedisStreamStore(redis_client, index={"dims": 1})  # type: ignore[typeddict-item]
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("a", ""), "k")])
    with pytest.raises(InvalidInputError, match="unknown store operation"):
        store.batch([PutOp(("a",), "k", {"v": 1}), ("not", "an", "op")])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="limit"):
        store.search(("a",), limit=-1)
    assert store.list_namespaces() == []


def test_batch_reads_before_its_writes(store: RedisStreamStore) -> None:
    store.put(("a",), "k", {"v": 1})
    got, _, again = store.batch(
        [GetOp(("a",), "k"), PutOp(("a",), "k", {"v": 2}), GetOp(("a",), "k")]
    )
    assert got is not None and again is not None
    assert got.value == again.value == {"v": 1}
    assert store.get(("a",), "k").value == {"v": 2}  # type: ignore[union-attr]


def test_events_record_digests_and_writer(store: RedisStreamStore) -> None:
    store.put(("a",), "k", {"v": 1})
    store.put(("a",), "k", {"v": 2})
    store.delete(("a",), "k")
    store.delete(("a",), "k")  # deletes nothing: no event
    events = store.history(("a",), "k", values=True)
    assert [e.kind for e in events] == ["put", "put", "delete"]
    assert [e.value for e in events] == [{"v": 1}, {"v": 2}, None]
    assert events[0].old_digest == ""
    assert events[1].old_digest == events[0].value_digest != events[1].value_digest
    assert events[2].old_digest == events[1].value_digest
    assert all(check.ok for _, check in store.verify_chain())


def test_rebuild_gives_identical_reads(store: RedisStreamStore, redis_client: redis.Redis) -> None:
    for i in range(30):
        store.put(("r", str(i % 4)), f"k{i % 7}", {"i": i})
    store.delete(("r", "1"), "k1")
    before = (
        _norm(store.search(("r",), limit=100)),
        store.list_namespaces(),
        [(i.created_at, i.updated_at) for i in store.search(("r",), limit=100)],
    )
    for b in range(STORE_BUCKETS):
        keys = store_keys(store._ops.prefix, b)
        redis_client.delete(keys.ix, keys.item, keys.ns, keys.exp)
    assert store.search(("r",)) == []
    replay = store.rebuild()
    assert replay.skipped == 0 and replay.applied == 31
    after = (
        _norm(store.search(("r",), limit=100)),
        store.list_namespaces(),
        [(i.created_at, i.updated_at) for i in store.search(("r",), limit=100)],
    )
    assert after == before
    assert store.verify()[2] == []


def test_verify_finds_divergence(store: RedisStreamStore, redis_client: redis.Redis) -> None:
    store.put(("v",), "k", {"i": 1})
    store.put(("v",), "gone", {"i": 2})
    keys = next(
        store_keys(store._ops.prefix, b)
        for b in range(STORE_BUCKETS)
        if redis_client.exists(store_keys(store._ops.prefix, b).log)
    )
    redis_client.zadd(keys.ix, {b"extra": 1})
    redis_client.hdel(keys.ns, "v")
    problems = store.verify()[2]
    assert any("mix extra extra" in p for p in problems)
    assert any("mns missing v" in p for p in problems)
    store.rebuild()
    assert store.verify()[2] == []


def test_lost_event_is_an_integrity_error(
    store: RedisStreamStore, redis_client: redis.Redis
) -> None:
    store.put(("l",), "k", {"i": 1})
    log = next(
        store_keys(store._ops.prefix, b).log
        for b in range(STORE_BUCKETS)
        if redis_client.exists(store_keys(store._ops.prefix, b).log)
    )
    (eid, _), *_ = redis_client.xrange(log)
    redis_client.xdel(log, eid)
    with pytest.raises(DataLostError, match="rebuild"):
        store.get(("l",), "k")


def test_ttl_expires_item_and_index_entries(store: RedisStreamStore) -> None:
    store.put(("t",), "short", {"v": 1}, ttl=1 / 60_000)  # 1 ms
    store.put(("t",), "kept", {"v": 2})
    store.put(("gone",), "short", {"v": 3}, ttl=1 / 60_000)
    time.sleep(0.05)
    assert store.get(("t",), "short") is None
    # before any sweep, a namespace whose items all expired is no longer listed
    assert store.list_namespaces() == [("t",)]
    assert [i.key for i in store.search(("t",))] == ["kept"]
    assert store.sweep_ttl() == 2
    assert store.history(("t",), "short")[-1].why == "expired"
    assert store.list_namespaces() == [("t",)]
    store.delete(("t",), "kept")
    assert store.list_namespaces() == []
    assert store.verify()[2] == []


def test_ttl_refresh_on_read(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = RedisStreamStore(client, prefix=prefix, ttl={"default_ttl": 1, "refresh_on_read": True})
    store.put(("t",), "k", {"v": 1})
    store.get(("t",), "k")
    store.get(("t",), "k", refresh_ttl=False)
    kinds = [e.kind for e in store.history(("t",), "k")]
    assert kinds == ["put", "touch"]
    assert store.verify()[2] == []
    client.close()


async def test_async_store_matches(astore: AsyncRedisStreamStore) -> None:
    await astore.aput(("a", "b"), "k", {"v": 1})
    await astore.aput(("a", "c"), "k", {"v": 2})
    got = await astore.aget(("a", "b"), "k")
    found = await astore.asearch(("a",), filter={"v": {"$gte": 2}})
    listed = await astore.alist_namespaces(prefix=("a",))
    await astore.adelete(("a", "b"), "k")
    assert [_norm(got), _norm(found), listed, await astore.alist_namespaces()] == [
        (("a", "b"), "k", {"v": 1}),
        [(("a", "c"), "k", {"v": 2})],
        [("a", "b"), ("a", "c")],
        [("a", "c")],
    ]


async def test_async_store_sync_call_on_loop_refused(astore: AsyncRedisStreamStore) -> None:
    await astore.aput(("a",), "k", {"v": 1})
    with pytest.raises(InvalidUsageError, match="aget"):
        astore.get(("a",), "k")
    got = await asyncio.to_thread(astore.get, ("a",), "k")
    assert got is not None and got.value == {"v": 1}


def test_cluster(cluster: Any, prefix: str) -> None:
    with RedisStreamStore.from_conn_string(cluster.url, prefix=prefix) as store:
        for i in range(20):
            store.put(("c", str(i), "a:{b}"), "k", {"i": i})
        assert len(store.list_namespaces(prefix=("c",))) == 20
        assert [i.value["i"] for i in store.search(("c",), limit=3)] == [19, 18, 17]
        assert [i.value["i"] for i in store.search((), filter={"i": {"$lt": 2}})] == [1, 0]
        store.delete(("c", "0", "a:{b}"), "k")
        assert store.list_namespaces(max_depth=1) == [("c",)]
        assert store.rebuild().applied == 21
        assert store.verify()[2] == []


async def test_async_cluster(cluster: Any, prefix: str) -> None:
    async with AsyncRedisStreamStore.from_conn_string(cluster.url, prefix=prefix) as store:
        for i in range(5):
            await store.aput(("c", str(i)), "k", {"i": i})
        found = await store.asearch(("c",), limit=2, offset=1)
        assert [i.value["i"] for i in found] == [3, 2]
        assert len(await store.alist_namespaces()) == 5
        assert (await store.arebuild()).applied == 5


programs = st.lists(
    st.one_of(
        st.tuples(st.just("put"), namespaces, keys, values),
        st.tuples(st.just("del"), namespaces, keys),
        st.tuples(
            st.just("search"),
            st.lists(labels, max_size=2).map(tuple),
            filters,
            st.integers(0, 4),
            st.integers(0, 3),
        ),
        st.tuples(
            st.just("list"),
            st.lists(labels | st.just("*"), max_size=2).map(tuple),
            st.booleans(),
            st.none() | st.integers(1, 3),
        ),
    ),
    max_size=25,
)


def test_same_calls_same_results(target: Target, prefix: str) -> None:
    """Hypothesis: any program of puts, deletes, searches (equality and comparison filters,
    nested keys, limit/offset) and listings (prefix/suffix, wildcards, max_depth), with hostile
    namespaces and keys, gives the same results on InMemoryStore and on the sync and async
    stores, on Redis 7, a 3-primary cluster (searches and listings fan out to every primary)
    and Valkey 9; dropping the indexes and rebuilding reads back the same."""
    # a cluster search is one script per bucket: fewer programs keep CI's time
    examples = 15 if target.kind == "cluster" else 60

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(program=programs)
    def same_results(program: list[Any]) -> None:
        client = target.client()
        sub = f"{prefix}-{time.monotonic_ns()}"
        try:
            _check_program(target, client, sub, program)
        finally:
            drop(client, sub)
            drop(client, sub + "-a")
            client.close()

    same_results()


def _check_program(target: Target, client: Any, sub: str, program: list[Any]) -> None:
    ref = Reference()
    store = RedisStreamStore(client, prefix=sub)

    async def async_results() -> list[Any]:
        aclient = target.aclient()
        astore = AsyncRedisStreamStore(aclient, prefix=sub + "-a")
        try:
            return [await _arun(astore, step) for step in program]
        finally:
            await aclient.aclose()

    want, got = [], []
    for step in program:
        want.append(_run(ref, step))
        got.append(_run(store, step))
    assert got == want
    # replay is the one definition: dropping every index and rebuilding reads back the same,
    # timestamps included
    everything = _snapshot(store)
    for b in range(STORE_BUCKETS):
        k = store_keys(sub, b)
        client.delete(k.ix, k.item, k.ns, k.exp)
    assert store.rebuild().skipped == 0
    assert _snapshot(store) == everything
    assert store.verify()[2] == []
    assert asyncio.run(async_results()) == want


def _snapshot(store: RedisStreamStore) -> Any:
    items = store.search((), limit=10**6)
    return store.list_namespaces(limit=10**6), [i.dict() for i in items]


def _run(store: RedisStreamStore | Reference, step: Any) -> Any:
    kind, *rest = step
    if kind == "put":
        store.put(*rest)
        return None
    if kind == "del":
        store.delete(*rest)
        return None
    if kind == "search":
        prefix, filter_, limit, offset = rest
        return _norm(store.search(prefix, filter=filter_, limit=limit, offset=offset)) or []
    prefix, as_suffix, depth = rest
    where = {"suffix" if as_suffix else "prefix": prefix or None}
    return store.list_namespaces(**where, max_depth=depth)


async def _arun(store: AsyncRedisStreamStore, step: Any) -> Any:
    kind, *rest = step
    if kind == "put":
        await store.aput(*rest)
        return None
    if kind == "del":
        await store.adelete(*rest)
        return None
    if kind == "search":
        prefix, filter_, limit, offset = rest
        return _norm(await store.asearch(prefix, filter=filter_, limit=limit, offset=offset)) or []
    prefix, as_suffix, depth = rest
    where = {"suffix" if as_suffix else "prefix": prefix or None}
    return await store.alist_namespaces(**where, max_depth=depth)


def test_events_name_the_run_that_wrote_them(store: RedisStreamStore) -> None:
    from langgraph.config import get_store
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        n: int

    def remember(state: State) -> State:
        get_store().put(("memories", "u1"), "last", {"n": state["n"]})
        return state

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(store=store)
    # the run id as LangGraph's server passes it, in the run's metadata
    graph.invoke({"n": 1}, {"configurable": {"thread_id": "t-1"}, "metadata": {"run_id": RUN_ID}})
    (event,) = store.history(("memories", "u1"), "last")
    assert (event.thread_id, event.node, event.run_id) == ("t-1", "remember", str(RUN_ID))


RUN_ID = __import__("uuid").UUID("00000000-0000-4000-8000-000000000001")


async def test_async_from_conn_string(redis_url: str, prefix: str) -> None:
    async with AsyncRedisStreamStore.from_conn_string(redis_url, prefix=prefix) as store:
        await store.aput(("a",), "k", {"v": 1})
        got = await store.aget(("a",), "k")
        assert got is not None and got.value == {"v": 1}
        assert (await store.averify())[2] == []
    with RedisStreamStore.from_conn_string(redis_url, prefix=prefix) as sync:
        # the two shells read one keyspace
        assert sync.get(("a",), "k") == got


def test_store_over_tls_as_a_least_privilege_user(tmp_path: Any) -> None:
    """The documented ACL rules of a prefix are all the Store needs, over TLS."""
    from tests.test_security import TlsServer

    tls = TlsServer(tmp_path)
    try:
        tls.add_user("mem", "pw", "mem")
        url = tls.url("mem", "pw")
        with RedisStreamStore.from_conn_string(url, prefix="mem") as store:
            store.put(("a", "c"), "k", {"v": 2})
            assert store.get(("a", "c"), "k") is not None
            assert [i.value for i in store.search(("a",))] == [{"v": 2}]
            assert store.list_namespaces(prefix=("a",)) == [("a", "c")]
            store.put(("a", "b"), "k", {"v": 1}, ttl=1 / 60_000)
            time.sleep(0.05)
            assert store.sweep_ttl() == 1
            store.delete(("a", "c"), "k")
            assert store.rebuild().skipped == 0
            assert store.verify()[2] == []
            assert all(check.ok for _, check in store.verify_chain())
            assert len(store.history(("a", "c"))) == 2
        with (
            RedisStreamStore.from_conn_string(url, prefix="other") as outside,
            pytest.raises(redis.exceptions.NoPermissionError),
        ):
            outside.put(("a",), "k", {"v": 1})
    finally:
        tls.admin.close()
        tls.server.stop()


def test_cli_history_verify_rebuild(redis_url: str, prefix: str, store: RedisStreamStore) -> None:
    from tests.test_cli import _cli

    store.put(("users", "a:b"), "prefs", {"v": 1})
    store.put(("users", "a:b"), "prefs", {"v": 2})
    store.delete(("users", "a:b"), "prefs")
    out = _cli("store", "history", "users.a:b", "prefs", "--prefix", prefix, url=redis_url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["put", "put", "delete"]
    assert lines[0].endswith(" - -> " + store.history(("users", "a:b"))[0].value_digest[:12])
    as_json = _cli("store", "history", "users.a:b", "--json", "--prefix", prefix, url=redis_url)
    assert [json.loads(line)["kind"] for line in as_json.stdout.splitlines()] == [
        "put",
        "put",
        "delete",
    ]
    assert _cli("store", "verify", "--prefix", prefix, url=redis_url).returncode == 0
    rebuilt = _cli("store", "rebuild", "--prefix", prefix, url=redis_url)
    assert rebuilt.returncode == 0 and "3 events applied" in rebuilt.stdout
    assert "swept 0" in _cli("store", "sweep", "--prefix", prefix, url=redis_url).stdout


def test_docs_example_runs_and_prints_what_it_says(redis_url: str, prefix: str) -> None:
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "store.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(examples) == 2  # the first steps, semantic search
    for example in examples:
        example = example.replace('prefix="docs"', f"prefix={prefix!r}")
        env = {**os.environ, "REDIS_URL": redis_url}
        out = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", example],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        said = [line.split("  # ")[1] for line in example.splitlines() if "print(" in line]
        assert out.stdout.splitlines() == said


def test_sweeper_started_by_from_conn_string(redis_url: str, prefix: str) -> None:
    ttl: Any = {"sweep_interval_minutes": 0.0005}
    with RedisStreamStore.from_conn_string(redis_url, prefix=prefix, ttl=ttl) as store:
        store.put(("s",), "k", {"v": 1}, ttl=1 / 60_000)
        deadline = time.monotonic() + 10
        while len(store.history(("s",), "k")) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        # the sweeper deleted it, as an event
        assert store.history(("s",), "k")[-1].why == "expired"
        assert store.verify()[2] == []
    assert store._sweeper is None


async def test_async_sweeper(redis_url: str, prefix: str) -> None:
    ttl: Any = {"sweep_interval_minutes": 0.0005}
    async with AsyncRedisStreamStore.from_conn_string(redis_url, prefix=prefix, ttl=ttl) as store:
        await store.aput(("s",), "k", {"v": 1}, ttl=1 / 60_000)
        deadline = time.monotonic() + 10
        while len(await store.ahistory(("s",), "k")) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert [e.why for e in await store.ahistory(("s",), "k")] == [None, "expired"]
    assert store._sweeper is None


def test_bad_ttl_config_refused(redis_client: redis.Redis) -> None:
    for ttl in ({"default_ttl": 0}, {"sweep_interval_minutes": -1}, {"nope": 1}, [1]):
        with pytest.raises(InvalidInputError, match="ttl"):
            RedisStreamStore(redis_client, ttl=ttl)  # type: ignore[arg-type]


def test_changes_and_tail_follow_memory_events(store: RedisStreamStore) -> None:
    assert store.changes() == ([], store.changes()[1])
    for i in range(5):
        store.put(("feed", str(i % 2)), f"k{i}", {"i": i})
    events, cursor = store.changes(values=True)
    assert [e.value for e in events] == [{"i": i} for i in range(5)]
    assert store.changes(cursor)[0] == []
    store.delete(("feed", "0"), "k0")
    (deleted,), cursor = store.changes(cursor)
    assert (deleted.kind, deleted.namespace, deleted.key) == ("delete", ("feed", "0"), "k0")
    assert cursor == StoreCursor.model_validate_json(cursor.model_dump_json())
    store.put(("feed", "0"), "k9", {"i": 9})
    assert [e.key for e in store.tail(cursor, follow=False)] == ["k9"]
    # an entry of a newer version is passed over, never a crash
    log = store._ops.keys(deleted.bucket).log
    store._saver.client.xadd(log, {"k": "mput", "sv": "99", "ns": "x", "key": "y", "at": "1"})
    assert [e.key for e in store.tail(cursor, follow=False)] == ["k9"]


def test_store_keys_follow_the_keyspace_rule() -> None:
    from streamsaver.core.keys import store_bucket, thread_keys
    from streamsaver.core.slots import slot_of, slot_tag

    slots = set()
    for b in range(STORE_BUCKETS):
        keys = store_keys("p", b)
        # one tenant's keys all start with "<prefix>:{"; a bucket's share one slot
        assert all(k.startswith("p:{") for k in keys)
        assert len({slot_of(k) for k in keys}) == 1
        slots.add(slot_of(keys.log))
        # a thread whose tag is the bucket's slot tag shares the slot, never a key
        tag = slot_tag(slot_of(keys.log))
        assert not set(keys) & set(thread_keys("p", tag))
    assert len(slots) == STORE_BUCKETS
    assert store_bucket("a.b") == store_bucket("a.b")


def test_oversized_value_refused(redis_client: redis.Redis, prefix: str) -> None:
    from streamsaver import PayloadTooLargeError

    small = RedisStreamStore(redis_client, prefix=prefix, max_payload_bytes=100)
    with pytest.raises(PayloadTooLargeError, match="max_payload_bytes"):
        small.batch([PutOp(("a",), "ok", {"v": 1}), PutOp(("a",), "big", {"v": "x" * 200})])
    assert small.search(("a",)) == []


async def test_sync_store_async_methods(store: RedisStreamStore) -> None:
    await store.aput(("a",), "k", {"v": 1})
    got = await store.aget(("a",), "k")
    assert got is not None and got.value == {"v": 1}
    assert await store.alist_namespaces() == [("a",)]


def test_encrypted_serde(redis_client: redis.Redis, prefix: str) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    store = RedisStreamStore(redis_client, prefix=prefix, serde=serde)
    store.put(("a",), "k", {"secret": "plaintext-canary"})
    assert store.search(("a",), filter={"secret": "plaintext-canary"})[0].key == "k"
    (event,) = store.history(("a",), "k")
    log = store._ops.keys(event.bucket).log
    assert b"plaintext-canary" not in b"".join(redis_client.xrange(log)[0][1].values())


def test_verify_checks_each_events_references(
    store: RedisStreamStore, redis_client: redis.Redis
) -> None:
    for v in range(3):
        store.put(("refs",), "k", {"v": v})
    events = store.history(("refs",), "k")
    log = store._ops.keys(events[0].bucket).log
    assert store.verify()[2] == []
    # a put removed from the middle: the next one no longer replaces what it says it did
    redis_client.xdel(log, events[1].id)
    problems = store.verify()[2]
    assert any(f"ref {events[2].id} od" in p for p in problems), problems
    # a forged put whose value is not what its digest says
    forged = redis_client.xadd(
        log,
        {"k": "mput", "sv": "1", "ns": "refs", "key": "k", "at": "1", "vt": "msgpack",
         "v": b"\x81\xa1v\x07", "vd": "0" * 40, "od": events[2].value_digest},
    )  # fmt: skip
    problems = store.verify()[2]
    assert any(f"ref {forged.decode()} vd" in p for p in problems), problems
    assert not all(check.ok for _, check in store.verify_chain())


def test_sweeper_survives_an_unavailable_server(caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis(port=port, socket_connect_timeout=0.2, retry=None)
    store = RedisStreamStore(client)
    store.start_ttl_sweeper(0.0005)
    deadline = time.monotonic() + 10
    while len(caplog.records) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store._sweeper is not None and store._sweeper.is_alive()
    store.stop_ttl_sweeper()
    assert [r.message for r in caplog.records[:2]] == [
        "TTL sweep failed; retrying next interval"
    ] * 2
    client.close()
