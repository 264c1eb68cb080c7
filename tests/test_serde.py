"""A serde assigned after construction takes effect everywhere values pass through it: no
plaintext reaches Redis once a user asked for encryption, and reads still round-trip."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from streamsaver import AsyncRedisStreamSaver, InvalidInputError, RedisStreamSaver
from streamsaver.core.keys import thread_keys

SECRETS = (b"attack at dawn", b"retreat at dusk", b"the eagle lands")


def _encrypted() -> EncryptedSerializer:
    return EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")


def _config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _checkpoint(values: dict[str, Any], previous: Any = None) -> tuple[Any, dict[str, str]]:
    versions = {ch: f"{2 if previous else 1:010d}.0" for ch in values}
    return generate_checkpoint(channel_values=values, channel_versions=versions), versions


def _raw_log(client: redis.Redis, prefix: str, thread_id: str) -> bytes:
    return b"".join(
        v for _, f in client.xrange(thread_keys(prefix, thread_id).log) for v in f.values()
    )


def _plaintext_first(saver: RedisStreamSaver) -> dict[str, Any]:
    """A list value stored in plaintext before encryption is asked for: the delta cache now
    holds it, ready to store a longer list as an append to it."""
    cp, versions = _checkpoint({"messages": ["hello"]})
    return dict(saver.put(_config("t"), cp, generate_metadata(step=0), versions))


def test_serde_assigned_after_construction_encrypts_writes_and_reads(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    first = _plaintext_first(saver)
    early = saver.tail("t", after="0", block_ms=100)
    saver.serde = _encrypted()
    before = redis_client.xlen(thread_keys(prefix, "t").log)

    values = {"messages": ["hello", SECRETS[0].decode()], "secret": SECRETS[1].decode()}
    cp, versions = _checkpoint(values, first)
    stored = saver.put(_config("t", first["configurable"]["checkpoint_id"]), cp, {}, versions)
    saver.put_writes(stored, [("secret", SECRETS[2].decode())], "task")

    new = redis_client.xrange(thread_keys(prefix, "t").log)[before:]
    raw = b"".join(v for _, f in new for v in f.values())
    assert len(new) == 2
    assert not [s for s in SECRETS if s in raw]
    got = saver.get_tuple(stored)
    assert got is not None and got.checkpoint["channel_values"] == values
    assert got.pending_writes == [("task", "secret", SECRETS[2].decode())]
    listed = [t.checkpoint["channel_values"] for t in saver.list(_config("t"))]
    assert listed == [values, {"messages": ["hello"]}]
    # a fresh saver with the same key reads it; a tail opened before the assignment too
    again = RedisStreamSaver(redis_client, prefix=prefix, serde=_encrypted()).get_tuple(stored)
    assert again is not None and again.checkpoint["channel_values"] == values
    writes = []
    with early:
        for event in early:
            if event.kind == "writes":
                writes.append(event.writes)
                early.stop()
    assert writes == [(("secret", SECRETS[2].decode()),)]
    assert [e.writes for e in saver.tail("t", after="0", follow=False) if e.writes] == writes


async def test_async_serde_assigned_after_construction_encrypts(
    redis_client: redis.Redis, redis_url: str, prefix: str
) -> None:
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(redis_url)
    try:
        saver = AsyncRedisStreamSaver(client, prefix=prefix)
        cp, versions = _checkpoint({"messages": ["hello"]})
        first = await saver.aput(_config("t"), cp, generate_metadata(step=0), versions)
        saver.serde = _encrypted()
        before = redis_client.xlen(thread_keys(prefix, "t").log)
        values = {"messages": ["hello", SECRETS[0].decode()], "secret": SECRETS[1].decode()}
        cp, versions = _checkpoint(values, first)
        parent = _config("t", first["configurable"]["checkpoint_id"])
        stored = await saver.aput(parent, cp, {}, versions)
        await saver.aput_writes(stored, [("secret", SECRETS[2].decode())], "task")

        new = redis_client.xrange(thread_keys(prefix, "t").log)[before:]
        raw = b"".join(v for _, f in new for v in f.values())
        assert len(new) == 2
        assert not [s for s in SECRETS if s in raw]
        got = await saver.aget_tuple(stored)
        assert got is not None and got.checkpoint["channel_values"] == values
        assert got.pending_writes == [("task", "secret", SECRETS[2].decode())]
        events = [e async for e in saver.atail("t", after="0", follow=False)]
        assert [e.writes for e in events if e.writes] == [(("secret", SECRETS[2].decode()),)]
    finally:
        await client.aclose()


def test_with_allowlist_clone_keeps_the_original_serde_apart(
    redis_client: redis.Redis, prefix: str
) -> None:
    strict = JsonPlusSerializer(allowed_msgpack_modules=None)
    plain = RedisStreamSaver(redis_client, prefix=prefix, serde=strict)
    plain_clone = plain.with_allowlist([("tests", "test_serde", "Nothing")])
    assert plain_clone is not plain
    # encryption asked of the clone only: the original keeps writing plaintext, and the
    # other way round
    plain_clone.serde = _encrypted()
    cp, versions = _checkpoint({"secret": SECRETS[0].decode()})
    plain.put(_config("p"), cp, {}, versions)
    cp, versions = _checkpoint({"secret": SECRETS[1].decode()})
    plain_clone.put(_config("c"), cp, {}, versions)
    assert SECRETS[0] in _raw_log(redis_client, prefix, "p")
    assert SECRETS[1] not in _raw_log(redis_client, prefix, "c")
    got = plain_clone.get_tuple(_config("c"))
    assert got is not None and got.checkpoint["channel_values"] == {"secret": SECRETS[1].decode()}


@pytest.mark.parametrize("serde", [None, "aes", object()])
def test_assigning_what_is_not_a_serializer_is_refused(
    sync_saver: RedisStreamSaver, serde: Any
) -> None:
    with pytest.raises(InvalidInputError, match="serde="):
        sync_saver.serde = serde
    assert isinstance(sync_saver.serde, JsonPlusSerializer)
    with pytest.raises(InvalidInputError, match="serde="):
        RedisStreamSaver(sync_saver.client, prefix=sync_saver.prefix, serde=serde or object())
