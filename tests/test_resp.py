"""The packer of our own commands (transport/resp.py): the bytes redis-py's own packing would send,
and
redis-py's packing wherever ours would differ."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.exceptions import DataError

from streamsaver.transport.pipelining import AutoPipeline
from streamsaver.transport.resp import lean, pack, pack_python, packed

COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "p:{\u00e9t}:log", "p:{\u00e9t}:ptr", b"\x00\xff\r\n", -7, 0.1, 1e20),
    ("SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])\n" * 400),  # past redis-py's chunking
    ("XRANGE", "k", "-", "+", "COUNT", 2**70),
    ("SET", "k", memoryview(b"view"), ""),
]


def _theirs(conn: Any, commands: Sequence[tuple[Any, ...]]) -> bytes:
    return b"".join(bytes(chunk) for chunk in conn.pack_commands(commands))


@pytest.mark.parametrize("make", [redis.Redis, aredis.Redis])
def test_our_packing_is_byte_for_byte_what_redis_py_sends(make: Any) -> None:
    conn = make().connection_pool.make_connection()
    assert lean(conn)
    assert pack(COMMANDS) == pack_python(COMMANDS) == _theirs(conn, COMMANDS)


@pytest.mark.parametrize("pack_with", [pack, pack_python])
@pytest.mark.parametrize("bad", [None, True, 1j, bytearray(b"x")])
def test_what_redis_py_refuses_to_encode_is_refused_too(pack_with: Any, bad: object) -> None:
    with pytest.raises(DataError):
        pack_with([("SET", "k", bad)])


def test_a_connection_that_packs_otherwise_packs_its_own_way() -> None:
    # the asyncio connection: redis-py's sync one packs with hiredis, in UTF-8 whatever encoding
    latin = aredis.Redis(encoding="latin-1").connection_pool.make_connection()
    lenient = redis.Redis(encoding_errors="replace").connection_pool.make_connection()

    class Custom(aredis.Connection):
        def pack_command(self, *args: Any) -> list[bytes]:
            return super().pack_command(*args)

    custom = Custom()
    for conn in (latin, lenient, custom):
        assert not lean(conn)
        assert b"".join(packed(conn, COMMANDS)) == _theirs(conn, COMMANDS)
    assert b"".join(packed(latin, [("GET", "\u00e9")])) != pack([("GET", "\u00e9")])


async def test_a_latin1_client_writes_the_keys_its_own_calls_read(
    redis_url: str, prefix: str
) -> None:
    client = aredis.Redis.from_url(redis_url, encoding="latin-1")
    try:
        key = f"{prefix}:\u00e9"
        assert await AutoPipeline(client).send([("SET", key, "v")]) == [True]
        assert await client.get(key) == b"v"
    finally:
        await client.aclose()
