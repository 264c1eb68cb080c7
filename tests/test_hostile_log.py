"""Hand-written, truncated or garbage entries in a thread's log: replay reports and skips them,
never half-applies one, and other threads never notice (fuzzed with Hypothesis)."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import ormsgpack
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import IntegrityError, InvalidInputError, RedisStreamSaver, StreamSaverError
from streamsaver.core.flow import Eval
from streamsaver.core.keys import thread_keys
from tests.strategies import sharing_fixtures

FIELD_NAMES = ["k", "sv", "ns", "id", "parent", "run", "meta", "cp", "cv", "nv", "b0", "b1",
               "task", "path", "wi", "w0", "items", "thread"]  # fmt: skip


def _valid_events(saver: RedisStreamSaver, thread_id: str) -> None:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"a": [1, 2]}, channel_versions={"a": 1})
    stored = saver.put(config, cp, generate_metadata(run_id="r"), {"a": 1})
    saver.put_writes(stored, [("a", 3)], "task")


field_values = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"checkpoint", b"writes", b"delete", b"1", b"0", b"", b"\xff"]),
    st.builds(
        ormsgpack.packb,
        st.recursive(
            st.one_of(st.text(max_size=5), st.integers(-5, 5), st.none(), st.booleans()),
            lambda inner: st.lists(inner, max_size=4),
            max_leaves=8,
        ),
    ),
)
entries = st.lists(
    st.dictionaries(st.sampled_from(FIELD_NAMES), field_values, min_size=1, max_size=10),
    min_size=1,
    max_size=6,
)


@sharing_fixtures(60)
@given(entries)
def test_replay_skips_what_it_cannot_project_and_keeps_the_rest(
    redis_client: redis.Redis, prefix: str, garbage: list[dict[str, bytes]]
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    victim, bystander = f"v{uuid4().hex[:6]}", f"b{uuid4().hex[:6]}"
    _valid_events(saver, victim)
    _valid_events(saver, bystander)
    bystander_before = list(saver.list({"configurable": {"thread_id": bystander}}))
    victim_before = saver.get_tuple({"configurable": {"thread_id": victim}})
    log = thread_keys(prefix, victim).log
    for entry in garbage:
        redis_client.xadd(log, entry)  # type: ignore[arg-type]

    replay = saver.rebuild(victim)
    assert replay.applied + replay.skipped == 2 + len(garbage)
    assert len(replay.problems) == replay.skipped
    # whatever garbage was projected is consistent: verify replays it the same way (what the
    # garbage references is another matter: verify names it, "ref <event id> ...")
    assert [line for line in saver.verify(victim)[2] if not line.startswith("ref ")] == []
    assert list(saver.list({"configurable": {"thread_id": bystander}})) == bystander_before
    # reading what was projected either works or says which event is corrupt
    try:
        list(saver.list({"configurable": {"thread_id": victim}}))
        saver.get_tuple({"configurable": {"thread_id": victim}})
    except IntegrityError as exc:
        assert "cannot be decoded" in str(exc) or "missing" in str(exc)
    if replay.skipped == len(garbage):
        assert saver.get_tuple({"configurable": {"thread_id": victim}}) == victim_before


def test_a_truncated_entry_is_reported_with_its_id(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    _valid_events(sync_saver, "t")
    log = thread_keys(sync_saver.prefix, "t").log
    eid = redis_client.xadd(
        log, {"k": "checkpoint", "sv": "1", "ns": "", "id": "x", "cv": b"\x92\xa1"}
    )
    replay = sync_saver.rebuild("t")
    assert replay[:2] == (2, 1)
    assert replay.problems == [f"{eid.decode()} bad cp or meta"]


def _by_hand(saver: RedisStreamSaver, thread_id: str, fields: dict[bytes, bytes]) -> Any:
    """``fields`` sent through the append script with the tenant's credentials, as a writer
    other than streamsaver's could (its own digest included)."""
    keys = saver._ops.keys(thread_id)
    flat = [part for pair in fields.items() for part in pair]

    def flow() -> Any:
        reply = yield Eval("append", saver._ops.appending(keys), saver._ops._append_args("", flat))
        return reply

    return saver._run(flow())


def _stored(client: redis.Redis, prefix: str, thread_id: str) -> tuple[Any, ...]:
    keys = thread_keys(prefix, thread_id)
    return (client.xrange(keys.log), client.zrange(keys.ix, 0, -1), client.hgetall(keys.ptr))


def _last_event(
    client: redis.Redis, prefix: str, thread_id: str, kind: bytes
) -> dict[bytes, bytes]:
    entries: Any = client.xrange(thread_keys(prefix, thread_id).log)
    fields = [f for _, f in entries if f[b"k"] == kind][-1]
    return {k: v for k, v in fields.items() if k not in (b"ch", b"dg")}


@pytest.mark.parametrize(
    ("kind", "field", "value", "why"),
    [
        (b"checkpoint", b"nv", b"\xff", "bad nv"),
        (b"checkpoint", b"cv", ormsgpack.packb(["a"]), "bad cv"),
        (b"checkpoint", b"meta", b"\xc1", "bad cp or meta"),
        (b"checkpoint", b"b0", ormsgpack.packb(["shared", "1-1 w0", 0, 1]), "1-1 w0"),
        (b"writes", b"wi", ormsgpack.packb(["a", "not a number"]), "bad write 0"),
        (b"writes", b"sv", b"99", "schema version 99"),
    ],
)
def test_the_writer_refuses_what_replay_would_skip_and_writes_nothing(
    sync_saver: RedisStreamSaver,
    redis_client: redis.Redis,
    kind: bytes,
    field: bytes,
    value: bytes,
    why: str,
) -> None:
    _valid_events(sync_saver, "t")
    event = _last_event(redis_client, sync_saver.prefix, "t", kind)
    event[field] = value
    if kind == b"checkpoint":
        event[b"id"] = b"another"
    before = _stored(redis_client, sync_saver.prefix, "t")
    with pytest.raises(InvalidInputError, match=why) as refused:
        _by_hand(sync_saver, "t", event)
    assert "nothing written" in str(refused.value)
    assert _stored(redis_client, sync_saver.prefix, "t") == before
    assert sync_saver.rebuild("t").skipped == 0


@sharing_fixtures(60)
@given(st.sampled_from([b"checkpoint", b"writes"]), st.sampled_from(FIELD_NAMES), field_values)
def test_whatever_the_writer_appends_replay_projects(
    redis_client: redis.Redis, prefix: str, kind: bytes, name: str, value: bytes
) -> None:
    """A valid event with one field replaced by garbage, through the append script: refused
    whole (nothing written) or appended, and then a replay projects every event of the log."""
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    thread_id = f"h{uuid4().hex[:6]}"
    _valid_events(saver, thread_id)
    event = _last_event(redis_client, prefix, thread_id, kind)
    event[name.encode()] = value
    before = _stored(redis_client, prefix, thread_id)
    try:
        _by_hand(saver, thread_id, event)
    except StreamSaverError:
        assert _stored(redis_client, prefix, thread_id) == before
    replay = saver.rebuild(thread_id)
    assert replay.skipped == 0, replay.problems
