"""list(filter=...) matches exactly what InMemorySaver matches (Python's == on the metadata
values), whatever the values: integers of 64 bits, [] against {}, nested values, floats against
integers. Through every path a filter takes: a thread's own list (lua/checkpoint/list.lua),
list(None)
scanning every log, and list(None) through the projector's metadata index."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import ormsgpack
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.memory import InMemorySaver

from streamsaver import InvalidInputError, RedisStreamSaver
from streamsaver.checkpoint.projections import slot_keys
from streamsaver.core.codec import metadata_form
from streamsaver.core.keys import thread_keys
from streamsaver.core.slots import slot_of
from streamsaver.lua import source
from tests.strategies import sharing_fixtures

from .test_projector import start_projector, stop_projector, wait_caught_up
from .test_rebuild_invariant import scanning

SNOWFLAKE = 80351110224678913  # > 2**53: as a double it equals ...912


def _checkpoint(n: int) -> Any:
    return {
        "v": 1, "id": f"{n:05d}", "ts": "", "channel_values": {}, "channel_versions": {},
        "versions_seen": {}, "updated_channels": None,
    }  # fmt: skip


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _store(savers: list[Any], rows: list[tuple[str, dict[str, Any]]]) -> None:
    """Each (thread, metadata) as one checkpoint, in every saver."""
    for n, (thread_id, metadata) in enumerate(rows):
        for saver in savers:
            saver.put(_config(thread_id), _checkpoint(n), metadata, {})


def _found(saver: Any, config: Any, filter: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_id"])
        for t in saver.list(config, filter=filter)
    }


def _every_path(
    saver: RedisStreamSaver, threads: list[str], filter: dict[str, Any]
) -> Iterator[tuple[str, set[tuple[str, str]]]]:
    yield "scan", _found(scanning(saver), None, filter)
    yield "index", _found(saver, None, filter)
    per_thread: set[tuple[str, str]] = set()
    for t in threads:
        per_thread |= _found(saver, _config(t), filter)
    yield "per thread", per_thread


def test_64_bit_ids_never_match_their_neighbours(sync_saver: RedisStreamSaver) -> None:
    rows = [
        ("a", {"user_id": SNOWFLAKE}),
        ("b", {"user_id": SNOWFLAKE - 1}),
        ("c", {"user_id": 2**63 - 1}),
        ("d", {"user_id": 2**63 - 2}),
        ("e", {"user_id": 2**64 - 1}),
        ("f", {"user_id": 2**64 - 2}),
        ("g", {"user_id": -(2**63)}),
        ("h", {"user_id": -(2**63) + 1}),
        ("i", {"user_id": [SNOWFLAKE]}),
        ("j", {"user_id": {"id": SNOWFLAKE - 1}}),
    ]
    _store([sync_saver], rows)
    sync_saver.seed_projections()
    threads = [t for t, _ in rows]
    for thread_id, metadata in rows:
        for path, found in _every_path(sync_saver, threads, metadata):
            assert {t for t, _ in found} == {thread_id}, (path, metadata)
    # a float equals the integer it is exactly (Python's ==): the double nearest to ...913
    # is ...912
    assert float(SNOWFLAKE) == SNOWFLAKE - 1
    for path, found in _every_path(sync_saver, threads, {"user_id": float(SNOWFLAKE)}):
        assert {t for t, _ in found} == {"b"}, path


def test_64_bit_ids_with_the_projector_running(
    sync_saver: RedisStreamSaver, redis_url: str, prefix: str
) -> None:
    proc = start_projector(redis_url, prefix, "--sweep-every", "3600")
    try:
        _store([sync_saver], [("a", {"user_id": SNOWFLAKE}), ("b", {"user_id": SNOWFLAKE - 1})])
        wait_caught_up(sync_saver)
        for user, thread_id in ((SNOWFLAKE, "a"), (SNOWFLAKE - 1, "b")):
            got = list(sync_saver.list(None, filter={"user_id": user}))
            assert [t.config["configurable"]["thread_id"] for t in got] == [thread_id]
            assert got[0].metadata["user_id"] == user
            mine = sync_saver.list(_config("b"), filter={"user_id": user})
            assert len(list(mine)) == (thread_id == "b")
    finally:
        stop_projector(proc)


async def test_64_bit_ids_on_the_async_saver(async_saver: Any) -> None:
    for n, user in enumerate((SNOWFLAKE, SNOWFLAKE - 1)):
        await async_saver.aput(_config(str(user)), _checkpoint(n), {"user_id": user}, {})
    for user in (SNOWFLAKE, SNOWFLAKE - 1):
        for config in (None, _config(str(SNOWFLAKE - 1))):
            found = [t async for t in async_saver.alist(config, filter={"user_id": user})]
            want = [str(user)] if config is None or user == SNOWFLAKE - 1 else []
            assert [t.config["configurable"]["thread_id"] for t in found] == want


# Values whose pairs InMemorySaver tells apart or not by Python's ==: 0 == False == 0.0 ==
# -0.0, 1 == True == 1.0, [] != {}, [1] == [True], key order does not count, nan never equals.
VALUES: list[Any] = [
    None, 0, False, 0.0, -0.0, 1, True, 1.0, 1.5, -1, "", "1", "é中😀", [], {}, [[]], [{}],
    [1], [True], [1.0], [None], ["1"], {"a": 1}, {"a": True}, {"a": None}, {"a": []},
    {"a": 1, "b": [2, {"c": 3}]}, {"b": [2, {"c": 3}], "a": 1}, 2**53, 2**53 + 1,
    float(2**53), 2**63 - 1, 2**64 - 1, float(2**64), -(2**63), float("inf"), float("-inf"),
    float("nan"), 1e300, 0.1, "a" * 200, ["x" * 100, 2**60],
]  # fmt: skip


def test_each_pair_of_types_matches_as_in_memory_saver(sync_saver: RedisStreamSaver) -> None:
    memory = InMemorySaver()
    long_key = "k" * 40  # beyond msgpack's fixstr: read through its form
    rows = [(f"t{i}", {"v": v}) for i, v in enumerate(VALUES)] + [
        ("absent", {}),
        ("long", {long_key: SNOWFLAKE, "v": None}),
    ]
    _store([sync_saver, memory], rows)
    sync_saver.seed_projections()
    threads = [t for t, _ in rows]
    for value in VALUES:
        expected = _found(memory, None, {"v": value})
        for path, found in _every_path(sync_saver, threads, {"v": value}):
            assert found == expected, (path, value)
    for f in ({long_key: SNOWFLAKE}, {long_key: SNOWFLAKE - 1}, {"v": None, long_key: None}):
        expected = _found(memory, None, f)
        for path, found in _every_path(sync_saver, threads, f):
            assert found == expected, (path, f)


def test_filters_on_a_slot_indexed_by_an_older_version_still_match_exactly(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _store([sync_saver], [("a", {"user_id": SNOWFLAKE}), ("b", {"user_id": SNOWFLAKE - 1})])
    sync_saver.seed_projections()
    # what a projector before exact filters left: a cursor, no format mark, and members that
    # name values otherwise (none of them is what today's forms look up)
    slots = sorted({slot_of(thread_keys(sync_saver.prefix, t).log) for t in "ab"})
    for slot in slots:
        keys = slot_keys(sync_saver.prefix, slot)
        assert redis_client.hdel(keys.state, "meta_form") == 1
        redis_client.delete(keys.meta)
    assert [
        t.config["configurable"]["thread_id"]
        for t in sync_saver.list(None, filter={"user_id": SNOWFLAKE})
    ] == ["a"]
    assert not sync_saver.projector_lag().usable
    # what tells a running projector to seed them again
    assert {sync_saver.project(slot).status for slot in slots} == {"behind"}
    sync_saver.seed_projections(slots)
    assert sync_saver.projector_lag().usable
    assert [
        t.config["configurable"]["thread_id"]
        for t in sync_saver.list(None, filter={"user_id": SNOWFLAKE - 1})
    ] == ["b"]


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({"user_id": 2**64}, "64"),
        ({"user_id": -(2**63) - 1}, "64"),
        ({"nested": [{"deep": 2**70}]}, "64"),
        ({"name": "\ud800"}, "surrogate"),
        ({"\udfff": 1}, "surrogate"),
        ({"nested": {"k\ud800": 1}}, "surrogate"),
    ],
)
def test_metadata_that_cannot_be_stored_exactly_is_refused(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, metadata: Any, match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        sync_saver.put(_config("t"), _checkpoint(0), metadata, {})
    assert not list(redis_client.scan_iter(match=f"{sync_saver.prefix}:*"))


@pytest.mark.parametrize("filter", [{"name": "\ud800"}, {"\ud800": 1}, {"k": ["\udfff"]}])
def test_filters_with_lone_surrogates_are_refused(
    sync_saver: RedisStreamSaver, filter: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError, match="surrogate"):
        list(sync_saver.list(None, filter=filter))
    with pytest.raises(InvalidInputError, match="surrogate"):
        list(sync_saver.list(_config("t"), filter=filter))


def test_a_filter_int_beyond_64_bits_matches_only_the_float_it_equals(
    sync_saver: RedisStreamSaver,
) -> None:
    memory = InMemorySaver()
    rows = [("f", {"v": float(2**70)}), ("i", {"v": 2**64 - 1})]
    _store([sync_saver, memory], rows)
    for value in (2**70, 2**70 + 1, 2**64, 10**400):
        expected = _found(memory, None, {"v": value})
        for path, found in _every_path(sync_saver, ["f", "i"], {"v": value}):
            assert found == expected, (path, value)


# --- the model: InMemorySaver -----------------------------------------------------------------

_ints = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([0, 1, -1, 2**53, 2**53 + 1, 2**63 - 1, 2**64 - 1, -(2**63)]),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    _ints,
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, float(2**53), float(2**64)]),
    st.text(max_size=4),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
_metadata = st.dictionaries(st.sampled_from(["a", "b", "user_id", "é"]), _values, max_size=3)


def _twins(value: Any) -> list[Any]:
    """Values next to ``value`` that a lossy comparison confuses with it: equal or not."""
    if isinstance(value, bool):
        return [value, int(value), float(value), not value]
    if isinstance(value, int):
        return [value, float(value), *(n for n in (value - 1, value + 1) if n < 2**64)]
    if isinstance(value, float):
        return [value, -value, value * (1 + 2**-52)]
    if isinstance(value, list):
        return [value, {}, [*value, None], *([value[:-1]] if value else [])] + [
            [*value[:i], twin, *value[i + 1 :]] for i, v in enumerate(value) for twin in _twins(v)
        ]
    if isinstance(value, dict):
        return [value, [], {**value, "x": None}] + [
            {**value, k: twin} for k, v in value.items() for twin in _twins(v)
        ]
    return [value, None, f"{value}x"]


@sharing_fixtures(60)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["t1", "t2", "t3"]), _metadata), min_size=1, max_size=6
    ),
    data=st.data(),
)
def test_filters_match_what_in_memory_saver_matches(
    redis_client: redis.Redis, rows: list[tuple[str, dict[str, Any]]], data: st.DataObject
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=f"hf{uuid4().hex[:10]}")
    memory = InMemorySaver()
    _store([saver, memory], rows)
    saver.seed_projections()
    # filters that match some rows (a part of a stored row, values equal by == swapped in)
    # and filters that may match none
    stored = data.draw(st.sampled_from(rows))[1]
    picked = data.draw(st.lists(st.sampled_from(sorted(stored)), unique=True)) if stored else []
    part = {k: stored[k] for k in picked}
    near = {k: data.draw(st.sampled_from(_twins(v))) for k, v in part.items()}
    filters = [part, near, data.draw(_metadata)]
    threads = sorted({t for t, _ in rows})
    try:
        for f in filters:
            expected = _found(memory, None, f)
            for path, found in _every_path(saver, threads, f):
                assert found == expected, (path, f)
    finally:
        keys = list(redis_client.scan_iter(match=f"{saver.prefix}:*"))
        if keys:
            redis_client.delete(*keys)


# --- the two definitions of a form: lua/shared/meta.lua (stored bytes) and codec.metadata_form

_FORM_OF = "\n".join(source(name) for name in ("common.lua", "meta.lua")) + (
    "\nreturn meta_form(ARGV[1], 1)"
)


def _lua_form(client: redis.Redis, packed: bytes) -> str:
    form = client.eval(_FORM_OF, 0, packed)
    assert isinstance(form, bytes)
    return form.decode()


@sharing_fixtures(200)
@given(value=_values)
def test_lua_reads_the_form_python_gives(redis_client: redis.Redis, value: Any) -> None:
    assert _lua_form(redis_client, ormsgpack.packb(value)) == metadata_form(value)


@pytest.mark.parametrize(
    ("packed", "value"),
    [
        # encodings ormsgpack does not choose for these values, which other writers may
        (b"\xca" + struct.pack(">f", 1.5), 1.5),
        (b"\xca" + struct.pack(">f", 2.0), 2),
        (b"\xcb" + struct.pack(">d", -0.0), 0),
        (b"\xcf" + (5).to_bytes(8, "big"), 5),
        (b"\xd3" + (-1).to_bytes(8, "big", signed=True), -1),
        (b"\xd3" + (-(2**32)).to_bytes(8, "big", signed=True), -(2**32)),
        (b"\xd2" + (-(2**31)).to_bytes(4, "big", signed=True), -(2**31)),
        (b"\xd0\x05", 5),
        (b"\xcd\x01\x00", 256),
        (b"\xde\x00\x01\xa1a\xc3", {"a": True}),
        (b"\xdc\x00\x02\x90\x80", [[], {}]),
        (b"\xdb\x00\x00\x00\x01x", "x"),
        (b"\x82\xa1b\x01\xa1a\x02", {"a": 2, "b": 1}),
        (ormsgpack.packb(list(range(20))), list(range(20))),
        (ormsgpack.packb({str(i): i for i in range(17)}), {str(i): i for i in range(17)}),
        (ormsgpack.packb("é" * 300), "é" * 300),
    ],
)
def test_lua_reads_any_msgpack_encoding_of_a_value(
    redis_client: redis.Redis, packed: bytes, value: Any
) -> None:
    assert _lua_form(redis_client, packed) == metadata_form(value)


def test_forms_tell_apart_what_cmsgpack_confuses() -> None:
    forms = [metadata_form(v) for v in ([], {}, SNOWFLAKE, SNOWFLAKE - 1, "1", 1, None, [None])]
    assert len(set(forms)) == len(forms)
    assert metadata_form(1) == metadata_form(True) == metadata_form(1.0)
    assert metadata_form({"a": 1, "b": 2}) == metadata_form({"b": 2, "a": 1})
