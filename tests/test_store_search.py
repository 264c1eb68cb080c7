"""Semantic search: the same puts and searches on InMemoryStore and on the streamsaver stores
(sync and async; Redis 7 standalone, a 3-primary cluster, Valkey 9) give the same items, in the
same order, with the same scores.

The fake embedding is deterministic and float32-exact (integers from a hash of the text),
so InMemoryStore's float64 vectors and the store's float32 ones are the same numbers, and the
integer dot products make the cosines equal to the last bit. Distinct texts give distinct
vectors, so no two items tie on a score (ties go by each store's own order of candidates).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.memory import InMemoryStore

from streamsaver import (
    AsyncRedisStreamStore,
    DataLostError,
    InvalidInputError,
    RedisStreamStore,
)
from streamsaver.core.keys import STORE_BUCKETS, store_keys

from . import store_servers
from .store_servers import Target, drop

target = store_servers.target  # the fixture: Redis 7, a 3-primary cluster, Valkey 9

DIMS = 16


def fake_embed(texts: list[str]) -> list[list[float]]:
    # bytes - 128: integers, exact in float32, and varied enough that two texts' cosines with
    # a query tie only if their vectors do (small ranges made distinct texts tie)
    return [[float(b - 128) for b in hashlib.sha256(t.encode()).digest()[:DIMS]] for t in texts]


async def afake_embed(texts: list[str]) -> list[list[float]]:
    return fake_embed(texts)


INDEX: dict[str, Any] = {"dims": DIMS, "embed": fake_embed, "fields": ["text", "tags[*]"]}


@pytest.fixture
def store(target: Target, prefix: str) -> Iterator[RedisStreamStore]:
    client = target.client()
    yield RedisStreamStore(client, prefix=prefix, index=INDEX)
    drop(client, prefix)
    client.close()


@pytest.fixture
async def astore(target: Target, prefix: str) -> AsyncIterator[AsyncRedisStreamStore]:
    client = target.aclient()
    index = {**INDEX, "embed": afake_embed}
    yield AsyncRedisStreamStore(client, prefix=prefix, index=index)  # type: ignore[arg-type]
    await client.aclose()
    with target.client() as sync:
        drop(sync, prefix)


def _rows(items: list[Any]) -> list[Any]:
    return [(i.namespace, i.key, i.value, i.score) for i in items]


words = st.sampled_from(["apple", "pear", "rust", "redis", "stream", "memory", "tea", "x{y}"])
texts = st.lists(words, min_size=1, max_size=3).map(" ".join)
labels = st.sampled_from(["a", "b", "c:{d}", "é"])
spaces = st.lists(labels, min_size=1, max_size=2).map(tuple)
puts = st.tuples(
    spaces,
    st.sampled_from(["k1", "k2", "k3"]),
    st.fixed_dictionaries(
        {"text": texts, "n": st.integers(0, 3)},
        optional={"tags": st.lists(texts, max_size=2)},
    ),
)
searches = st.tuples(
    st.lists(labels, max_size=1).map(tuple),
    texts,
    st.none() | st.builds(lambda n: {"n": {"$gte": n}}, st.integers(0, 3)),
    st.integers(1, 5),
    st.integers(0, 3),
)


def _distinct(program: list[Any]) -> bool:
    """No two live items hold the same text (which would tie their scores)."""
    live: dict[Any, Any] = {}
    for ns, key, value in program:
        own = [value["text"], *value.get("tags", [])]
        if len(own) != len(set(own)):
            return False  # InMemoryStore fails on a value repeating a text (langgraph 1.2)
        live[(ns, key)] = value
    seen = [t for v in live.values() for t in [v["text"], *v.get("tags", [])]]
    return len(seen) == len(set(seen))


def programs_and_queries(
    queries: st.SearchStrategy[Any], max_examples: int
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A Hypothesis test of ``program``, puts whose texts tie no scores, and ``queries``."""
    given_them = given(
        program=st.lists(puts, min_size=1, max_size=12).filter(_distinct),
        queries=st.lists(queries, min_size=1, max_size=4),
    )
    return lambda test: settings(
        max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck)
    )(given_them(test))


def example_prefix(tag: str, *example: Any) -> str:
    """A key prefix of its own for each example, the same when Hypothesis replays it."""
    return f"{tag}{hashlib.sha1(repr(example).encode()).hexdigest()[:10]}"


@programs_and_queries(searches, max_examples=25)
def test_same_scores_and_order_as_in_memory(
    target: Target, program: list[Any], queries: list[Any]
) -> None:
    prefix = example_prefix("hs", program, queries)
    client = target.client()
    try:
        store = RedisStreamStore(client, prefix=prefix, index=INDEX)
        ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
        for ns, key, value in program:
            store.put(ns, key, value)
            # InMemoryStore (langgraph 1.2) keeps the vectors of fields an update no longer
            # has; the store's are the current value's, as InMemoryStore's after a fresh put
            ref.delete(ns, key)
            ref.put(ns, key, value)
        for ns_prefix, query, filter_, limit, offset in queries:
            want = ref.search(ns_prefix, query=query, filter=filter_, limit=limit, offset=offset)
            got = store.search(ns_prefix, query=query, filter=filter_, limit=limit, offset=offset)
            assert _rows(got) == _rows(want)
            assert all(isinstance(i.score, float) for i in got)
    finally:
        drop(client, prefix)
        client.close()


async def test_async_same_results(astore: AsyncRedisStreamStore) -> None:
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    docs = {"k1": "apple pie", "k2": "redis streams", "k3": "green tea", "k4": "stream of tea"}
    for key, text in docs.items():
        await astore.aput(("docs", key[-1]), key, {"text": text, "n": int(key[-1])})
        ref.put(("docs", key[-1]), key, {"text": text, "n": int(key[-1])})
    for query, filter_ in (("tea", None), ("redis", {"n": {"$gt": 1}}), ("apple", {"n": 9})):
        want = ref.search(("docs",), query=query, filter=filter_, limit=3)
        got = await astore.asearch(("docs",), query=query, filter=filter_, limit=3)
        assert _rows(got) == _rows(want)
    # the sync methods of the async store, from another thread, embed the same way
    assert len(await astore.asearch((), query="tea", limit=10)) == 4


def test_fields_per_put_index_and_unindexed_items(store: RedisStreamStore) -> None:
    ref = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    for s in (store, ref):
        s.put(("m",), "whole", {"text": "apple", "tags": ["redis", "tea"]})
        s.put(("m",), "other", {"text": "pear", "body": "rust"}, index=["body"])
        s.put(("m",), "none", {"text": "stream"}, index=False)
    for query in ("tea", "rust", "stream", "pear"):
        # `none` has no vector: scored items first, then it, unscored, as InMemoryStore does
        got = store.search(("m",), query=query, limit=5)
        assert _rows(got) == _rows(ref.search(("m",), query=query, limit=5))
        assert got[-1].key == "none" and got[-1].score is None
    # the best of an item's vectors is its score: a query equal to one of its tags scores 1
    top = store.search(("m",), query="tea", limit=1)[0]
    assert (top.key, top.score) == ("whole", pytest.approx(1.0))
    # without a query, no scores and the usual newest-first order
    assert [(i.key, i.score) for i in store.search(("m",))] == [
        ("none", None),
        ("other", None),
        ("whole", None),
    ]


def test_delete_and_update_change_what_is_found(store: RedisStreamStore) -> None:
    store.put(("u",), "k", {"text": "apple"})
    store.put(("u",), "j", {"text": "pear"})
    assert store.search(("u",), query="apple", limit=1)[0].score == pytest.approx(1.0)
    store.put(("u",), "k", {"text": "redis"})
    assert [i.key for i in store.search(("u",), query="redis", limit=1)] == ["k"]
    assert store.search(("u",), query="apple", limit=1)[0].score != pytest.approx(1.0)
    store.delete(("u",), "k")
    assert [i.key for i in store.search(("u",), query="redis")] == ["j"]


def test_rebuild_gives_identical_search_results(store: RedisStreamStore) -> None:
    client = store._saver.client
    for i in range(40):
        store.put(("r", str(i % 5)), f"k{i % 9}", {"text": f"note {i} " + "tea " * (i % 4), "n": i})
    store.delete(("r", "1"), "k1")
    queries = [("tea", None), ("note 7", {"n": {"$lt": 30}}), ("memory", None)]

    def results() -> list[Any]:
        return [
            [(*row, i.created_at, i.updated_at) for row, i in zip(_rows(found), found, strict=True)]
            for found in (store.search(("r",), query=q, filter=f, limit=7) for q, f in queries)
        ]

    before = results()
    for b in range(STORE_BUCKETS):
        # every key but the log, the vectors' projection (mvec) too
        for key in store_keys(store._ops.prefix, b)[1:]:
            client.delete(key)
    assert store.search(("r",), query="tea") == []
    assert store.rebuild().skipped == 0
    assert results() == before
    assert store.verify()[2] == []


def test_vectors_are_kept_compact_in_the_event(store: RedisStreamStore) -> None:
    store.put(("v",), "k", {"text": "apple", "tags": ["a", "b"]})
    (event,) = [e for e in store.history(("v",), "k")]
    client = store._saver.client
    (fields,) = [f for _, f in client.xrange(store_keys(store._ops.prefix, event.bucket).log)]
    # three texts (text, tags[0], tags[1]) of DIMS float32 each
    assert len(fields[b"vec"]) == 3 * DIMS * 4


def test_pure_python_scoring_matches_numpy(
    store: RedisStreamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, text in {"a": "apple pie", "b": "redis", "c": "tea time"}.items():
        store.put(("p",), key, {"text": text})
    with_numpy = _rows(store.search(("p",), query="apple", limit=3))
    monkeypatch.setattr("streamsaver.store.index._check_numpy", lambda: False)
    assert _rows(store.search(("p",), query="apple", limit=3)) == with_numpy


def test_real_valued_embeddings_round_to_float32(target: Target, prefix: str) -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        return [[(len(t) + i) / 7.0, 0.1 * i, -1 / (i + 1)] for i, t in enumerate(texts)]

    index = {"dims": 3, "embed": lambda ts: [embed([t])[0] for t in ts]}
    client = target.client()
    try:
        store = RedisStreamStore(client, prefix=prefix, index=index)  # type: ignore[arg-type]
        ref = InMemoryStore(index=index)  # type: ignore[arg-type]
        for s in (store, ref):
            for key in ("a", "bb", "ccc"):
                s.put(("f",), key, {"t": key})
        got, want = (s.search(("f",), query="query", limit=3) for s in (store, ref))
        assert [i.key for i in got] == [i.key for i in want]
        # float32 keeps ~7 significant digits, as pgvector and RediSearch do
        assert [i.score for i in got] == pytest.approx([i.score for i in want], rel=1e-6)
    finally:
        drop(client, prefix)
        client.close()


@pytest.mark.parametrize(
    "index, match",
    [
        ({"dims": 0, "embed": fake_embed}, "dims"),
        ({"dims": "8", "embed": fake_embed}, "dims"),
        ({"embed": fake_embed}, "dims"),
        ({"dims": 8, "embed": fake_embed, "fields": "text"}, "fields"),
        ([8], "index="),
    ],
)
def test_bad_index_config_refused(redis_client: redis.Redis, index: Any, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        RedisStreamStore(redis_client, index=index)


def test_embedding_of_the_wrong_size_writes_nothing(store: RedisStreamStore) -> None:
    bad = RedisStreamStore(
        store._saver.client,
        prefix=store._ops.prefix,
        index={"dims": DIMS + 1, "embed": fake_embed},
    )
    with pytest.raises(InvalidInputError, match=f"dims'\\]={DIMS + 1}"):
        bad.put(("w",), "k", {"text": "apple"})
    assert store.get(("w",), "k") is None
    assert store.history(("w",)) == []


def test_lost_event_of_a_ranked_page_is_an_integrity_error(store: RedisStreamStore) -> None:
    store.put(("l",), "k", {"text": "apple"})
    (event,) = store.history(("l",), "k")
    store._saver.client.xdel(store_keys(store._ops.prefix, event.bucket).log, event.id)
    with pytest.raises(DataLostError, match="rebuild"):
        store.search(("l",), query="apple")
