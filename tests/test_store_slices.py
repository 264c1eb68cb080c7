"""The Store's rebuild and verify run in bounded slices (issue 13): one script over a bucket's
whole log held the server, which runs one script at a time, for as long as the log was long,
so one tenant's big store stalled every other tenant. A sliced rebuild gives back what the
writers projected and keeps the writes made between its slices; a sliced verify finds nothing
wrong with those writes and names each damaged member; another run taking a bucket over
starts this one again, and too many takeovers are an error, not a loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langgraph.store.base import PutOp

from streamsaver import RedisStreamStore
from streamsaver.core.errors import InvalidUsageError
from streamsaver.core.flow import Each, Eval
from streamsaver.core.keys import StoreKeys, store_bucket, store_keys, store_slice_keys

from . import store_servers
from .store_servers import Target, drop

target = store_servers.target  # the fixture: Redis 7, a 3-primary cluster, Valkey 9

NS = ("big", "docs")
ITEMS = 300


@pytest.fixture
def pair(target: Target, prefix: str) -> Iterator[tuple[RedisStreamStore, RedisStreamStore, Any]]:
    """The store under test, another one (its own client) writing beside it, and a client."""
    client, other = target.client(), target.client()
    try:
        stores = RedisStreamStore(client, prefix=prefix), RedisStreamStore(other, prefix=prefix)
        yield (*stores, client)
    finally:
        drop(client, prefix)
        client.close()
        other.close()


def _keys(store: RedisStreamStore) -> StoreKeys:
    return store_keys(store._ops.prefix, store_bucket(".".join(NS)))


def _indexes(client: Any, keys: StoreKeys) -> Any:
    return (
        client.zrange(keys.ix, 0, -1, withscores=True),
        client.hgetall(keys.item),
        client.hgetall(keys.ns),
        client.zrange(keys.exp, 0, -1, withscores=True),
        client.hgetall(keys.vec),
        client.zrange(keys.nsz, 0, -1),
    )


def _fill(store: RedisStreamStore) -> int:
    """ITEMS puts, a tenth overwritten and a tenth deleted: the events written."""
    store.batch([PutOp(NS, f"k{i}", {"i": i, "pad": "x" * 100}) for i in range(ITEMS)])
    store.batch([PutOp(NS, f"k{i}", {"i": -i}) for i in range(0, ITEMS, 10)])
    store.batch([PutOp(NS, f"k{i}", None) for i in range(5, ITEMS, 10)])
    return ITEMS + 2 * (ITEMS // 10)


def _projected(store: RedisStreamStore, client: Any) -> tuple[int, StoreKeys, Any]:
    """_fill's events, the bucket's keys, and the indexes its writers projected."""
    events = _fill(store)
    keys = _keys(store)
    return events, keys, _indexes(client, keys)


def _on_slices(store: RedisStreamStore, each: Callable[[int], object]) -> list[int]:
    """Call ``each(n)`` before the n-th slice (from 0) of NS's bucket; the slices' sizes (the
    calls of their round) are returned as they go."""
    log, seen = _keys(store).log, list[int]()
    original = store._saver._execute

    def execute(op: Any) -> Any:
        if isinstance(op, Each) and any(
            isinstance(e, Eval) and e.script == "store_slice" and e.keys[0] == log for e in op.ops
        ):
            each(len(seen))
            seen.append(len(op.ops))
        return original(op)

    store._saver._execute = execute  # type: ignore[method-assign]
    return seen


def test_a_bucket_is_rebuilt_in_slices_to_what_its_writers_projected(
    pair: tuple[RedisStreamStore, RedisStreamStore, Any],
) -> None:
    store, _, client = pair
    events, keys, expected = _projected(store, client)
    for key in (*keys[1:6], keys.nsz):
        client.delete(key)
    assert store.search(NS, limit=5) == []
    slices = _on_slices(store, lambda n: None)
    replay = store.rebuild()
    assert (replay.applied, replay.skipped, replay.problems) == (events, 0, [])
    # one script did all of it before; each slice now holds the server for ~0.25 ms
    assert len(slices) > 10
    assert _indexes(client, keys) == expected
    assert not any(client.exists(k) for k in store_slice_keys(keys, "rebuild")[8:16])
    assert store.get(NS, "k10").value == {"i": -10}  # type: ignore[union-attr]
    assert store.get(NS, "k15") is None


def test_writes_between_rebuild_slices_are_kept(
    pair: tuple[RedisStreamStore, RedisStreamStore, Any],
) -> None:
    store, writer, _ = pair
    events = _fill(store)
    written: list[str] = []

    def write(n: int) -> None:
        if n % 3 == 1:
            key = f"new{n}"
            writer.put(NS, key, {"n": n})
            written.append(key)

    _on_slices(store, write)
    replay = store.rebuild()
    assert written, "the rebuild ended before any write went between its slices"
    # what it replayed: the log up to its last slice, the writes among it
    assert replay.skipped == 0 and events < replay.applied <= events + len(written)
    for key in written:
        assert store.get(NS, key).value == {"n": int(key[3:])}  # type: ignore[union-attr]
    assert len(store.search(NS, limit=1000)) == ITEMS - ITEMS // 10 + len(written)
    assert store.verify()[2] == []


def test_a_sliced_verify_passes_writes_between_its_slices_and_names_each_damage(
    pair: tuple[RedisStreamStore, RedisStreamStore, Any],
) -> None:
    store, writer, client = pair
    events = _fill(store)
    _on_slices(store, lambda n: writer.put(NS, f"new{n}", {"n": n}) if n % 4 == 2 else None)
    applied, skipped, problems = store.verify()
    assert (problems, skipped) == ([], 0) and applied > events
    keys, b = _keys(store), store_bucket(".".join(NS))
    member = "8:big.docsk3"
    client.hdel(keys.item, member)
    client.zadd(keys.exp, {"stray": 1})
    client.hincrby(keys.ns, "big.docs", 5)
    client.zadd(keys.ix, {"8:big.docsk7": 1})
    assert store.verify()[2] == sorted(
        [
            f"bucket {b} mitem missing {member}",
            f"bucket {b} mexp extra stray",
            f"bucket {b} mns differs big.docs",
            f"bucket {b} mix differs 8:big.docsk7",
        ]
    )
    store.rebuild()
    assert store.verify()[2] == []
    assert not any(client.exists(k) for k in store_slice_keys(keys, "verify")[8:16])


def test_a_rebuild_taken_over_starts_again_and_too_many_takeovers_are_an_error(
    pair: tuple[RedisStreamStore, RedisStreamStore, Any],
) -> None:
    store, other, client = pair
    events, keys, expected = _projected(store, client)
    # another rebuild of the store runs whole between this one's second and third slice
    _on_slices(store, lambda n: other.rebuild() if n == 2 else None)
    assert store.rebuild().applied == events
    assert _indexes(client, keys) == expected
    # a state that keeps vanishing under the slices (taken over, expired) is given up on
    state = store_slice_keys(keys, "rebuild")[14]
    store2 = RedisStreamStore(client, prefix=store._ops.prefix)
    _on_slices(store2, lambda n: client.delete(state) if n else None)
    with pytest.raises(InvalidUsageError, match=r"rebuild of bucket \d+ was taken over 3 times"):
        store2.rebuild()
    assert _indexes(client, keys) == expected
