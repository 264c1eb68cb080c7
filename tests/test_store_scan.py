"""A search that looks at every item under its prefix (a filter, a ranking without the
server's vector index) reads in slices (issue 13): in one script, a big namespace held the
server, and every tenant on it, for seconds. Its answer is what one script would have given
at its last slice: InMemoryStore's, with writes between the slices (puts, updates, deletes)
and a rebuild swapping the bucket's indexes in under it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from streamsaver import RedisStreamStore
from streamsaver.core.flow import Each, Eval

from . import store_servers
from .store_servers import Target, drop
from .test_store_search import INDEX

target = store_servers.target  # the fixture: Redis 7, a 3-primary cluster, Valkey 9

NS = ("big", "scan")
ITEMS = 400
WORDS = ("apple", "pear", "rust", "redis", "stream", "memory", "tea")


def _value(i: int) -> dict[str, Any]:
    return {"i": i, "even": i % 2 == 0, "text": f"{WORDS[i % 7]} {WORDS[i % 5]} {i}"}


@pytest.fixture
def stores(target: Target, prefix: str) -> Iterator[tuple[RedisStreamStore, RedisStreamStore]]:
    """The store under test (ranked searches with INDEX), and a writer beside it."""
    client, other = target.client(), target.client()
    try:
        store = RedisStreamStore(client, prefix=prefix, index=INDEX)  # type: ignore[arg-type]
        store.batch([PutOp(NS, f"k{i}", _value(i)) for i in range(ITEMS)])
        yield store, RedisStreamStore(other, prefix=prefix, index=INDEX)  # type: ignore[arg-type]
    finally:
        drop(client, prefix)
        client.close()
        other.close()


def _on_scans(store: RedisStreamStore, each: Callable[[int], object]) -> list[int]:
    """Call ``each(n)`` before the n-th round of a search's scan slices; the rounds' sizes."""
    seen: list[int] = []
    original = store._saver._execute

    def execute(op: Any) -> Any:
        if isinstance(op, Each) and any(
            isinstance(e, Eval) and e.script == "store_scan" and e.args[0] == "scan" for e in op.ops
        ):
            each(len(seen))
            seen.append(len(op.ops))
        return original(op)

    store._saver._execute = execute  # type: ignore[method-assign]
    return seen


def _memory(values: dict[str, dict[str, Any] | None]) -> InMemoryStore:
    memory = InMemoryStore(index=INDEX)  # type: ignore[arg-type]
    for key, value in values.items():
        if value is not None:
            memory.put(NS, key, value)
    return memory


def _rows(items: list[Any]) -> list[Any]:
    return [(i.key, i.value, i.score) for i in items]


def _same(store: RedisStreamStore, memory: InMemoryStore) -> None:
    """A filtered search, a ranked one and both: the same items, order and scores."""
    for kwargs in (
        {"filter": {"even": True}},
        {"query": "apple tea"},
        {"query": "rust", "filter": {"even": False}},
    ):
        ours = _rows(store.search(NS, limit=ITEMS + 50, **kwargs))
        theirs = _rows(memory.search(NS, limit=ITEMS + 50, **kwargs))
        # InMemoryStore orders unranked results by insertion; ours newest first: compare sets
        assert (sorted(ours, key=repr) if "query" not in kwargs else ours) == (
            sorted(theirs, key=repr) if "query" not in kwargs else theirs
        ), kwargs


def test_a_search_over_every_item_reads_in_slices_with_in_memory_results(
    stores: tuple[RedisStreamStore, RedisStreamStore],
) -> None:
    store, _ = stores
    rounds = _on_scans(store, lambda n: None)
    _same(store, _memory({f"k{i}": _value(i) for i in range(ITEMS)}))
    # three searches, each more than a few slices (one script each before)
    assert len(rounds) > 3 * 3


def test_writes_between_search_slices_are_answered_as_at_the_last_slice(
    stores: tuple[RedisStreamStore, RedisStreamStore],
) -> None:
    store, writer = stores
    values: dict[str, dict[str, Any] | None] = {f"k{i}": _value(i) for i in range(ITEMS)}

    def write(n: int) -> None:
        # an update, a delete and a new item between slices, early keys and late ones
        changes: dict[str, dict[str, Any] | None] = {
            f"k{n}": _value(n + 1),
            f"k{ITEMS - 1 - n}": None,
            f"new{n}": _value(1000 + n),
        }
        writer.batch([PutOp(NS, key, value) for key, value in changes.items()])
        values.update(changes)

    rounds = _on_scans(store, lambda n: write(n) if n else None)
    filtered = store.search(NS, filter={"even": True}, limit=2 * ITEMS)
    assert len(rounds) > 3
    assert sorted((i.key, i.value) for i in filtered) == sorted(
        (k, v) for k, v in values.items() if v is not None and v["even"]
    )
    del store._saver._execute  # the writes stop
    _same(store, _memory(values))


def test_a_rebuild_between_search_slices_leaves_no_item_out(
    stores: tuple[RedisStreamStore, RedisStreamStore],
) -> None:
    store, other = stores
    rounds = _on_scans(store, lambda n: other.rebuild() if n == 2 else None)
    found = store.search(NS, filter={"even": True}, limit=2 * ITEMS)
    assert len(rounds) > 3
    assert sorted(i.key for i in found) == sorted(f"k{i}" for i in range(0, ITEMS, 2))


def test_a_deep_page_or_a_sparse_prefix_reads_in_slices_with_the_same_answer(
    target: Target, prefix: str
) -> None:
    """A search without filter or query looks at the newest members of each bucket until it
    has its page; past 2,000 members (a large offset, or a prefix with few items in a bucket
    of many others) it reads the prefix's items in slices instead of holding the server."""
    from langgraph.store.base import GetOp, Item

    from streamsaver.core.keys import store_bucket

    client = target.client()
    try:
        store = RedisStreamStore(client, prefix=prefix)
        many = 2500
        for start in range(0, many, 500):
            store.batch([PutOp(NS, f"k{i}", {"i": i}) for i in range(start, start + 500)])
        # another namespace in the same bucket, with three items
        bucket = store_bucket(".".join(NS))
        few = next((f"few{n}",) for n in range(10_000) if store_bucket(f"few{n}") == bucket)
        store.batch([PutOp(few, f"f{i}", {"f": i}) for i in range(3)])
        items = [i for i in store.batch([GetOp(NS, f"k{i}") for i in range(many)])]
        assert all(isinstance(i, Item) for i in items)
        # newest first, ties by the member's bytes (lp(namespace) .. key), as the store orders
        member = f"{len('big.scan')}:big.scan"
        newest = sorted(
            cast(list[Item], items),
            key=lambda i: (-i.updated_at.timestamp(), (member + i.key).encode()),
        )
        rounds = _on_scans(store, lambda n: None)
        deep = store.search(NS, offset=2400, limit=50)
        assert [i.key for i in deep] == [i.key for i in newest[2400:2450]]
        assert sorted(i.key for i in store.search(few, limit=10)) == ["f0", "f1", "f2"]
        assert len(rounds) >= 2
        # a shallow page is still one script: no slices
        before = len(rounds)
        assert len(store.search(NS, limit=10)) == 10
        assert len(rounds) == before
    finally:
        drop(client, prefix)
        client.close()


def test_the_namespace_index_answers_prefixes_and_fills_itself_in_old_buckets(
    target: Target, prefix: str
) -> None:
    """Whether a bucket holds a namespace under a search's prefix is one ZRANGEBYLEX of its
    mnsz, not a read of every namespace (a namespace per user: thousands a bucket). A bucket
    written before mnsz existed is read through mns until a write adds or removes one of its
    namespaces, which fills mnsz whole; verify compares it like every index."""
    from streamsaver.core.keys import STORE_BUCKETS, store_bucket, store_keys

    client = target.client()
    try:
        store = RedisStreamStore(client, prefix=prefix)
        store.batch([PutOp(("users", f"u{i}"), "p", {"i": i}) for i in range(300)])
        store.batch([PutOp(("usersx",), "p", {"x": 1}), PutOp(("users",), "top", {"t": 1})])
        every = [store_keys(prefix, b) for b in range(STORE_BUCKETS)]
        assert sum(client.zcard(k.nsz) for k in every) == 302
        # a store as an earlier version left it: no mnsz anywhere
        for k in every:
            client.delete(k.nsz)
        found = store.search(("users",), limit=1000)
        assert len(found) == 301 and {i.namespace[0] for i in found} == {"users"}
        assert [i.key for i in store.search(("users", "u7"))] == ["p"]
        # a write adding a namespace to u5's bucket fills that bucket's mnsz from mns
        b = store_bucket("users.u5")
        new = next(f"n{i}" for i in range(10_000) if store_bucket(f"users.n{i}") == b)
        store.put(("users", new), "p", {"new": True})
        keys = every[b]
        assert client.zcard(keys.nsz) == client.hlen(keys.ns) > 1
        assert set(client.zrange(keys.nsz, 0, -1)) == set(client.hkeys(keys.ns))
        # and a delete removing the last item of a namespace fills another's
        other = store_bucket("users.u9")
        store.delete(("users", "u9"), "p")
        assert set(client.zrange(every[other].nsz, 0, -1)) == set(client.hkeys(every[other].ns))
        assert b"users.u9" not in client.zrange(every[other].nsz, 0, -1)
        assert len(store.search(("users",), limit=1000)) == 301
        # buckets still without mnsz are the ones verify names; a rebuild writes them all
        problems = store.verify()[2]
        assert problems and all(" mnsz missing " in p for p in problems)
        store.rebuild()
        assert store.verify()[2] == []
        client.zrem(keys.nsz, "users.u5")
        assert store.verify()[2] == [f"bucket {b} mnsz missing users.u5"]
        assert store.search(("users", "u5")) == []  # the index is what reads trust
        store.rebuild()
        assert [i.key for i in store.search(("users", "u5"))] == ["p"]
    finally:
        drop(client, prefix)
        client.close()


def test_namespaces_are_listed_in_slices_as_at_the_last_slice(target: Target, prefix: str) -> None:
    """list_namespaces read every bucket's namespaces in one script (100,000 namespaces: a
    45 ms script); it reads them in slices, and namespaces added or emptied between the
    slices are listed as they are at the last one."""
    client, other = target.client(), target.client()
    try:
        store, writer = (
            RedisStreamStore(client, prefix=prefix),
            RedisStreamStore(other, prefix=prefix),
        )
        store.batch([PutOp(("users", f"u{i}"), "p", {"i": i}) for i in range(1500)])
        live = {("users", f"u{i}") for i in range(1500)}

        def write(n: int) -> None:
            writer.batch(
                [PutOp(("users", f"new{n}"), "p", {}), PutOp(("users", f"u{n}"), "p", None)]
            )
            live.add(("users", f"new{n}"))
            live.discard(("users", f"u{n}"))

        rounds = _on_scans(store, lambda n: write(n) if n else None)
        listed = store.list_namespaces(prefix=("users",), limit=5000)
        # one script held all 256 buckets' namespaces on a single server; on a cluster each
        # bucket is its own call already, and ~6 namespaces a bucket are one page each
        assert len(rounds) > 3 or target.kind == "cluster"
        assert listed == sorted(live)
        assert store.list_namespaces(prefix=("users",), max_depth=1) == [("users",)]
    finally:
        drop(client, prefix)
        client.close()
        other.close()


def test_changes_read_a_backlog_in_bounded_rounds(target: Target, prefix: str) -> None:
    """changes() read `count` events of every bucket in one pipeline, which Redis runs as one
    block (a tail from the start of a big store: 256 x count events); it peeks at every bucket
    first, then reads on in rounds of about 256 events, with the same events and cursor."""
    from streamsaver.core.keys import store_bucket

    client = target.client()
    try:
        store = RedisStreamStore(client, prefix=prefix)
        names = [(f"ns{i}",) for i in range(3)]
        assert len({store_bucket(n[0]) for n in names}) == 3
        for i in range(50):
            store.batch([PutOp(ns, f"k{i}", {"i": i}) for ns in names])
        sizes: list[int] = []
        original = store._saver._execute

        def execute(op: Any) -> Any:
            if isinstance(op, Each):
                sizes.append(len(op.ops))
            return original(op)

        store._saver._execute = execute  # type: ignore[method-assign]
        events, cursor = store.changes(count=40)
        assert sizes[0] == 256 and len(sizes) > 1 and max(sizes[1:]) <= 256 // 40
        assert len(events) == 120
        assert [e.at for e in events] == sorted(e.at for e in events)
        for ns in names:
            keys = [e.key for e in events if e.namespace == ns]
            assert keys == [f"k{i}" for i in range(40)]
        rest, _ = store.changes(cursor, count=40)
        assert sorted((e.namespace, e.key) for e in rest) == sorted(
            (ns, f"k{i}") for ns in names for i in range(40, 50)
        )
    finally:
        drop(client, prefix)
        client.close()
