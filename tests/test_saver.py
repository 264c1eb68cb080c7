"""Behaviour of the savers on a real Redis beyond the conformance suite."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import ormsgpack
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from streamsaver import (
    AsyncRedisStreamSaver,
    InvalidConfigError,
    InvalidInputError,
    InvalidUsageError,
    MissingIndexError,
    PayloadTooLargeError,
    RedisStreamSaver,
)
from streamsaver.core.keys import thread_keys
from streamsaver.lua import LIBRARY_NAME
from tests.keyspace import drop_keys
from tests.strategies import hostile_text, sharing_fixtures


def generate_config(
    thread_id: str, *, checkpoint_ns: str = "", checkpoint_id: str | None = None
) -> Any:
    # not the conformance helper: it swaps a falsy thread id ("") for a random one
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _put(
    saver: RedisStreamSaver,
    thread_id: str,
    ns: str = "",
    parent: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    config = generate_config(thread_id, checkpoint_ns=ns)
    if parent:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    values = values or {}
    versions = {ch: saver.get_next_version(None, None) for ch in values}
    cp = generate_checkpoint(channel_values=values, channel_versions=versions)
    return dict(saver.put(config, cp, generate_metadata(**metadata), versions))


def _all_keys(client: redis.Redis, prefix: str) -> dict[bytes, Any]:
    """A dump of every key under the prefix, to prove a failed call wrote nothing."""
    return {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}:*", count=1000)}


@pytest.fixture(scope="module")
def module_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@sharing_fixtures(40)
@given(st.lists(st.tuples(hostile_text, hostile_text, hostile_text), min_size=2, max_size=4))
def test_hostile_ids_never_collide_or_leak(
    module_client: redis.Redis, ids: list[tuple[str, str, str]]
) -> None:
    prefix = f"h{uuid4().hex[:10]}"
    saver = RedisStreamSaver(module_client, prefix=prefix)
    try:
        # the model: per (thread, namespace), the ids put so far and the latest one's write
        ids_put: dict[tuple[str, str], list[str]] = {}
        latest: dict[tuple[str, str], tuple[int, list[tuple[str, str, Any]]]] = {}
        for n, (thread_id, ns, task_id) in enumerate(ids):
            stored = _put(saver, thread_id, ns, values={"v": n})
            saver.put_writes(stored, [("ch", f"w{n}")], task_id)
            ids_put.setdefault((thread_id, ns), []).append(stored["configurable"]["checkpoint_id"])
            latest[(thread_id, ns)] = (n, [(task_id, "ch", f"w{n}")])
        for (thread_id, ns), (n, writes) in latest.items():
            got = saver.get_tuple(generate_config(thread_id, checkpoint_ns=ns))
            assert got is not None
            assert got.config["configurable"]["thread_id"] == thread_id
            assert got.config["configurable"]["checkpoint_ns"] == ns
            assert got.checkpoint["channel_values"] == {"v": n}
            assert got.pending_writes == writes
            listed = list(saver.list(generate_config(thread_id, checkpoint_ns=ns)))
            assert [t.checkpoint["id"] for t in listed] == ids_put[(thread_id, ns)][::-1]
        assert set(saver.thread_ids()) == {t for t, _, _ in ids}
    finally:
        drop_keys(module_client, prefix)


def test_each_call_appends_exactly_one_event_in_call_order(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    thread_id = "t1"
    calls: list[tuple[str, str]] = []
    parent = None
    for step in range(5):
        parent = _put(sync_saver, thread_id, parent=parent, values={"x": step}, step=step)
        calls.append(("checkpoint", parent["configurable"]["checkpoint_id"]))
        for task in range(step % 3):
            sync_saver.put_writes(parent, [("x", task), ("y", task)], f"task{task}")
            calls.append(("writes", parent["configurable"]["checkpoint_id"]))
    sync_saver.put_writes(parent, [("x", 0)], "task0")  # a retried duplicate: still one event
    calls.append(("writes", parent["configurable"]["checkpoint_id"]))
    log = redis_client.xrange(thread_keys(sync_saver.prefix, thread_id).log)
    assert [(f[b"k"].decode(), f[b"id"].decode()) for _, f in log] == calls


def test_unchanged_channel_values_are_not_stored_again(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    big = "x" * 10_000
    versions = {"big": sync_saver.get_next_version(None, None), "n": 1}
    cfg = generate_config("t")
    cp = generate_checkpoint(channel_values={"big": big, "n": 0}, channel_versions=versions)
    parent = sync_saver.put(cfg, cp, generate_metadata(), versions)
    for n in range(1, 4):
        cfg = generate_config("t", checkpoint_id=parent["configurable"]["checkpoint_id"])
        versions = {**versions, "n": n + 1}
        cp = generate_checkpoint(channel_values={"big": big, "n": n}, channel_versions=versions)
        parent = sync_saver.put(cfg, cp, generate_metadata(step=n), {"n": n + 1})
    log = redis_client.xrange(thread_keys(sync_saver.prefix, "t").log)
    stored_big = sum(1 for _, f in log for v in f.values() if big.encode() in v)
    assert stored_big == 1
    latest = sync_saver.get_tuple(generate_config("t"))
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {"big": big, "n": 3}


def test_replay_rebuilds_byte_identical_reads(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    threads = ["a", "b:{x}", ""]
    for t in threads:
        parent = None
        for step in range(4):
            for ns in ("", "sub:1"):
                parent = _put(
                    sync_saver, t, ns, parent=parent, values={"s": step}, run_id=f"r{step}"
                )
                sync_saver.put_writes(parent, [("c", step), ("__interrupt__", "i")], "task")
                sync_saver.put_writes(parent, [("__interrupt__", "j")], "task")
    sync_saver.delete_for_runs(["r1"])
    sync_saver.copy_thread("a", "copy")

    def reads() -> list[Any]:
        out: list[Any] = []
        for t in [*threads, "copy"]:
            out += list(sync_saver.list(generate_config(t)))
            out += list(sync_saver.list({"configurable": {"thread_id": t}}, filter={"step": 0}))
            out.append(sync_saver.get_tuple(generate_config(t, checkpoint_ns="sub:1")))
        return out

    before = reads()
    assert len(before) > 20
    derived = [k for t in [*threads, "copy"] for k in thread_keys(sync_saver.prefix, t)[1:]]
    assert redis_client.delete(*derived) == len(derived)
    with pytest.raises(MissingIndexError, match="streamsaver rebuild a"):
        reads()  # the indexes really were gone, and a read says so rather than find nothing
    for t in [*threads, "copy"]:
        applied, skipped, _ = sync_saver.rebuild(t)
        assert applied > 0 and skipped == 0
    assert reads() == before


def test_unknown_event_kinds_are_skipped_by_replay(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _put(sync_saver, "t", values={"a": 1})
    log = thread_keys(sync_saver.prefix, "t").log
    redis_client.xadd(log, {"k": "from-the-future", "sv": "1"})
    redis_client.xadd(log, {"k": "checkpoint", "sv": "99"})
    replay = sync_saver.rebuild("t")
    assert replay[:2] == (1, 2)
    assert [p.split(" ", 1)[1] for p in replay.problems] == [
        "unknown kind from-the-future",
        "schema version 99",
    ]
    got = sync_saver.get_tuple(generate_config("t"))
    assert got is not None and got.config == stored


def test_special_writes_overwrite_and_ordinary_ones_keep_the_first(
    sync_saver: RedisStreamSaver,
) -> None:
    stored = _put(sync_saver, "t")
    sync_saver.put_writes(stored, [("a", 1), ("__error__", "first")], "task", "~")
    sync_saver.put_writes(stored, [("a", 2), ("__error__", "second")], "task", "~")
    sync_saver.put_writes(stored, [("b", 3)], "other", "")
    got = sync_saver.get_tuple(stored)
    assert got is not None
    # writes_sort_key order: (task_path, task_id, idx), special writes have negative idx
    assert got.pending_writes == [
        ("other", "b", 3),
        ("task", "__error__", "second"),
        ("task", "a", 1),
    ]


def test_prune_keep_latest_keeps_values_first_written_by_pruned_checkpoints(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    versions = {"old": 1, "n": 1}
    cfg = generate_config("t")
    cp = generate_checkpoint(channel_values={"old": "kept", "n": 0}, channel_versions=versions)
    parent = sync_saver.put(cfg, cp, generate_metadata(), versions)
    for n in range(1, 5):
        cfg = generate_config("t", checkpoint_id=parent["configurable"]["checkpoint_id"])
        versions = {**versions, "n": n + 1}
        cp = generate_checkpoint(channel_values={"old": "kept", "n": n}, channel_versions=versions)
        parent = sync_saver.put(cfg, cp, generate_metadata(step=n), {"n": n + 1})
    sync_saver.put_writes(parent, [("n", 99)], "task")
    before = sync_saver.get_tuple(generate_config("t"))
    sync_saver.prune(["t"], strategy="keep_latest")
    after = sync_saver.get_tuple(generate_config("t"))
    assert after == before
    assert after is not None and after.checkpoint["channel_values"] == {"old": "kept", "n": 4}
    assert len(list(sync_saver.list(generate_config("t")))) == 1
    log = thread_keys(sync_saver.prefix, "t").log
    # the 'pruned' tombstone, the self-contained checkpoint and its writes
    assert redis_client.xlen(log) == 3
    assert sync_saver.rebuild("t")[:2] == (3, 0)
    assert sync_saver.get_tuple(generate_config("t")) == before


def test_works_with_encrypted_serializer(redis_client: redis.Redis, prefix: str) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    saver = RedisStreamSaver(redis_client, prefix=prefix, serde=serde)
    stored = _put(saver, "t", values={"secret": "attack at dawn"})
    saver.put_writes(stored, [("secret", "retreat")], "task")
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"secret": "attack at dawn"}
    assert got.pending_writes == [("task", "secret", "retreat")]
    raw = b"".join(
        v for _, f in redis_client.xrange(thread_keys(prefix, "t").log) for v in f.values()
    )
    assert b"attack at dawn" not in raw and b"retreat" not in raw


# --- bad input: a typed error naming the value, and nothing written ---------------------------


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({}, "configurable"),
        ({"configurable": {}}, "thread_id"),
        ({"configurable": {"thread_id": None}}, "thread_id"),
        ({"configurable": {"thread_id": ["a"]}}, "list"),
        ({"configurable": {"thread_id": "t", "checkpoint_ns": 3}}, "checkpoint_ns"),
        ("thread-1", "mapping"),
    ],
)
def test_malformed_configs_raise_and_write_nothing(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, config: Any, match: str
) -> None:
    before = _all_keys(redis_client, sync_saver.prefix)
    cp = generate_checkpoint()
    with pytest.raises(InvalidConfigError, match=match):
        sync_saver.put(config, cp, generate_metadata(), {})
    with pytest.raises(InvalidConfigError, match=match):
        sync_saver.get_tuple(config)
    assert _all_keys(redis_client, sync_saver.prefix) == before


def test_put_writes_without_a_checkpoint_raises_and_writes_nothing(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    with pytest.raises(InvalidConfigError, match="put a checkpoint first"):
        sync_saver.put_writes(generate_config("t"), [("a", 1)], "task")
    assert _all_keys(redis_client, sync_saver.prefix) == {}


@pytest.mark.parametrize(
    ("writes", "task_id", "match"),
    [
        ([("a",)], "task", "pair"),
        ([(1, "x")], "task", "channel"),
        ([("a", 1)], 7, "task_id"),
    ],
)
def test_malformed_writes_raise_and_write_nothing(
    sync_saver: RedisStreamSaver,
    redis_client: redis.Redis,
    writes: Any,
    task_id: Any,
    match: str,
) -> None:
    stored = _put(sync_saver, "t")
    before = _all_keys(redis_client, sync_saver.prefix)
    with pytest.raises(InvalidInputError, match=match):
        sync_saver.put_writes(stored, writes, task_id)
    assert _all_keys(redis_client, sync_saver.prefix) == before


def test_oversized_payload_raises_and_writes_nothing(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, max_payload_bytes=50_000)
    stored = _put(saver, "t", values={"small": "ok"})
    before = _all_keys(redis_client, prefix)
    with pytest.raises(PayloadTooLargeError, match="max_payload_bytes=50000") as err:
        _put(saver, "t", parent=stored, values={"huge": "x" * 60_000})
    assert err.value.size > 60_000
    with pytest.raises(PayloadTooLargeError):
        saver.put_writes(stored, [("huge", b"x" * 60_000)], "task")
    assert _all_keys(redis_client, prefix) == before


def test_values_the_serializer_cannot_encode_raise_and_write_nothing(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _put(sync_saver, "t", values={"a": 1})
    before = _all_keys(redis_client, sync_saver.prefix)
    with pytest.raises(InvalidInputError, match="value of channel 'big' cannot be serialized"):
        _put(sync_saver, "t", parent=stored, values={"big": [2**70]})
    with pytest.raises(InvalidInputError, match="write to channel 'big' cannot be serialized"):
        sync_saver.put_writes(stored, [("big", 2**70)], "task")
    assert _all_keys(redis_client, sync_saver.prefix) == before


def test_metadata_that_cannot_be_filtered_is_refused(sync_saver: RedisStreamSaver) -> None:
    with pytest.raises(InvalidInputError, match=r"metadata value at metadata\['blob'\]"):
        _put(sync_saver, "t", blob=b"bytes")


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({"a": [1, {"b": b"x"}]}, r"metadata value at metadata\['a'\]\[1\]\['b'\] is a bytes"),
        ({"a": {1: "x"}}, r"metadata key 1 at metadata\['a'\] must be a string"),
        ({"a": ["\ud800"]}, r"metadata string .* at metadata\['a'\]\[0\] holds a lone surrogate"),
        ({"a": {"\ud800": 1}}, r"metadata key .* at metadata\['a'\] holds a lone surrogate"),
        (
            {"a": (0, 2**64)},
            r"metadata value at metadata\['a'\]\[1\] is the integer 18446744073709551616, beyond",
        ),
    ],
)
def test_bad_metadata_is_named_by_its_path_and_writes_nothing(
    sync_saver: RedisStreamSaver,
    redis_client: redis.Redis,
    metadata: dict[str, Any],
    match: str,
) -> None:
    before = _all_keys(redis_client, sync_saver.prefix)
    with pytest.raises(InvalidInputError, match=match):
        _put(sync_saver, "t", **metadata)
    assert _all_keys(redis_client, sync_saver.prefix) == before


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.prune(["t"], strategy="keep_some"), "keep_latest"),
        (lambda s: s.delete_for_runs("run-1"), "list of strings"),
        (lambda s: s.copy_thread("t", "t"), "names one thread twice"),
        (lambda s: list(s.list(generate_config("t"), limit="3")), "limit"),
        (lambda s: list(s.list(generate_config("t"), filter=["step"])), "filter"),
    ],
)
def test_bad_arguments_raise_typed_errors(
    sync_saver: RedisStreamSaver, call: Any, match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        call(sync_saver)


def test_clients_that_decode_responses_are_refused(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(InvalidInputError, match="decode_responses=False"):
        RedisStreamSaver(client)
    client.close()


# --- lifecycle -----------------------------------------------------------------------------------


def test_scripts_reload_after_the_server_forgets_them(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _put(sync_saver, "t", values={"a": 1})
    redis_client.script_flush()
    # and the functions (a new server: they outlive a restart), which the default user loads
    redis_client.execute_command("FUNCTION", "DELETE", LIBRARY_NAME)
    sync_saver.put_writes(stored, [("a", 2)], "task")
    got = sync_saver.get_tuple(stored)
    assert got is not None and got.pending_writes == [("task", "a", 2)]


def test_from_conn_string_owns_and_closes_its_client(redis_url: str, prefix: str) -> None:
    with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix) as saver:
        saver.setup()
        saver.setup()  # idempotent
        assert saver.server_version is not None and saver.server_version >= (6, 2)
        stored = _put(saver, "t", values={"a": 1})
        assert saver.get_tuple(stored) is not None
        pool = saver.client.connection_pool
    assert all(c._sock is None for c in pool._available_connections)  # closed with the saver


async def test_async_from_conn_string(redis_url: str, prefix: str) -> None:
    async with AsyncRedisStreamSaver.from_conn_string(redis_url, prefix=prefix) as saver:
        cfg = generate_config("t")
        cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
        stored = await saver.aput(cfg, cp, generate_metadata(), {"a": 1})
        got = await saver.aget_tuple(stored)
        assert got is not None and got.checkpoint["channel_values"] == {"a": 1}
        assert [t.config async for t in saver.alist(None)] == [stored]


async def test_async_saver_sync_calls_work_off_the_loop_and_refuse_on_it(
    async_saver: AsyncRedisStreamSaver,
) -> None:
    cfg = generate_config("t")
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    stored = await async_saver.aput(cfg, cp, generate_metadata(), {"a": 1})
    with pytest.raises(InvalidUsageError, match="aget_tuple"):
        async_saver.get_tuple(stored)
    result: list[CheckpointTuple | None] = []
    worker = threading.Thread(target=lambda: result.append(async_saver.get_tuple(stored)))
    import asyncio

    await asyncio.to_thread(worker.start)
    while worker.is_alive():
        await asyncio.sleep(0.01)
    assert result and result[0] is not None and result[0].config == stored


def test_events_are_documented_msgpack_fields(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    stored = _put(sync_saver, "t", values={"a": [1, 2]}, run_id="run-1")
    sync_saver.put_writes(stored, [("a", 3)], "task-1", "path")
    (_, cp), (_, w) = redis_client.xrange(thread_keys(sync_saver.prefix, "t").log)
    assert {k.decode() for k in cp} >= {"k", "sv", "thread", "ns", "id", "parent", "run", "meta"}
    assert cp[b"k"] == b"checkpoint" and cp[b"sv"] == b"2" and cp[b"run"] == b"run-1"
    assert ormsgpack.unpackb(cp[b"meta"])["run_id"] == "run-1"
    assert ormsgpack.unpackb(cp[b"nv"])[0] == "a"
    assert w[b"k"] == b"writes" and w[b"task"] == b"task-1" and w[b"path"] == b"path"
    assert ormsgpack.unpackb(w[b"wi"]) == ["a", 0]
    assert sync_saver.serde.loads_typed(tuple(ormsgpack.unpackb(w[b"w0"]))) == 3


def test_re_putting_a_checkpoint_id_keeps_one_checkpoint_and_the_last_record(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    config = generate_config("t")
    first = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    second = {**first, "channel_values": {"a": 2}}
    stored = sync_saver.put(config, first, generate_metadata(step=1), {"a": 1})
    assert sync_saver.put(config, second, generate_metadata(step=2), {"a": 1}) == stored
    listed = list(sync_saver.list(generate_config("t")))
    assert len(listed) == 1
    assert listed[0].metadata["step"] == 2
    # a channel version names one value: the first stored stays (append parts build on it)
    assert listed[0].checkpoint["channel_values"] == {"a": 1}
    # the log keeps both puts: it records what happened, the index what is current
    assert redis_client.xlen(thread_keys(sync_saver.prefix, "t").log) == 2


def test_before_is_an_id_bound_from_any_namespace(sync_saver: RedisStreamSaver) -> None:
    # LangGraph's subgraph replay lists a subgraph namespace before a parent checkpoint's id,
    # with no thread_id in the bound (langgraph/_internal/_replay.py)
    first = _put(sync_saver, "t", "sub")
    parent = _put(sync_saver, "t")
    _put(sync_saver, "t", "sub", parent=first)
    bound = {"configurable": {"checkpoint_id": parent["configurable"]["checkpoint_id"]}}
    found = list(sync_saver.list(generate_config("t", checkpoint_ns="sub"), before=bound, limit=1))
    assert [c.config for c in found] == [first]


@pytest.mark.parametrize(
    "before",
    [
        {"configurable": {}},
        {"configurable": {"checkpoint_id": ""}},
        {},
        "id-1",
        {"configurable": 1},
    ],
)
def test_a_before_without_a_checkpoint_id_is_refused(
    sync_saver: RedisStreamSaver, before: Any
) -> None:
    with pytest.raises(InvalidConfigError, match="before names no checkpoint_id"):
        list(sync_saver.list(generate_config("t"), before=before))
