"""benchmarks.server_cpu's floor replays exactly what the scripts wrote, binary values included:
otherwise the ratio it reports would compare streamsaver with some other work."""

from __future__ import annotations

from typing import Any

import redis
from benchmarks import server_cpu

from streamsaver.embedded import EmbeddedRedis


def _contents(client: redis.Redis) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"stream":
            entries: Any = client.xrange(key)
            # the feed's ids are the server's own in both runs: compare its entries' fields
            out[key] = entries if key.endswith(b":log") else [f for _, f in entries]
        elif kind == b"hash":
            out[key] = client.hgetall(key)
        elif kind == b"zset":
            out[key] = client.zrange(key, 0, -1)
        elif kind == b"set":
            out[key] = client.smembers(key)
        else:
            out[key] = kind
    return out


def test_the_floor_writes_what_the_scripts_wrote() -> None:
    with EmbeddedRedis() as server, redis.Redis.from_url(server.url) as client:
        run = server_cpu.peers(6)["streamsaver"]
        trace = server_cpu.floor_trace(client, run)
        written = _contents(client)
        client.flushall()
        server_cpu._replay(trace)(client)
        assert _contents(client) == written
        assert any(key.endswith(b":log") for key in written)
        # reads too: a get_tuple's script reads the index and the log
        commands = {args[0].upper() for call in trace for args in call}
        assert {b"XADD", b"HSET", b"ZADD", b"XRANGE", b"ZREVRANGEBYLEX"} <= commands


def test_monitor_quoting_is_undone_byte_for_byte() -> None:
    line = b'1.0 [0 lua] "XADD" "k" "a\\x00\\xff\\"\\\\\\n\\r\\t" "" "\\a\\b\\x07"'
    from_lua, args = server_cpu._parse_monitor(line)
    assert from_lua
    assert args == [b"XADD", b"k", b'a\x00\xff"\\\n\r\t', b"", b"\x07\x08\x07"]
    from_lua, args = server_cpu._parse_monitor(b'1.0 [0 127.0.0.1:5] "EVALSHA" "x"')
    assert not from_lua and args == [b"EVALSHA", b"x"]
