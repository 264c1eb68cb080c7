"""Connection faults against servers started for the purpose: dropped connections, a server
that stalls past the socket timeout, a server that is down and comes back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import RedisStreamSaver, ServerTimeoutError, ServerUnavailableError
from streamsaver.core.keys import thread_keys
from streamsaver.embedded import EmbeddedRedis


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as started:
        yield started


def _put(saver: RedisStreamSaver, n: int, parent: Any = None) -> Any:
    configurable = {"thread_id": "t", "checkpoint_ns": ""}
    if parent:
        configurable["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    cp = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
    return saver.put({"configurable": configurable}, cp, generate_metadata(step=n), {"n": n + 1})


def test_dropped_connections_are_replaced_transparently(server: EmbeddedRedis) -> None:
    admin = redis.Redis.from_url(server.url)
    saver = RedisStreamSaver(redis.Redis.from_url(server.url), prefix="f")
    stored = _put(saver, 0)
    for n in range(1, 4):
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        stored = _put(saver, n, stored)
        assert saver.get_tuple(stored) is not None
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 4
    admin.close()


def test_a_stalled_server_gives_a_typed_timeout_and_a_retry_is_safe(server: EmbeddedRedis) -> None:
    admin = redis.Redis.from_url(server.url)
    client = redis.Redis.from_url(server.url, socket_timeout=0.3, retry=None)
    saver = RedisStreamSaver(client, prefix="f")
    parent = _put(saver, 0)
    # from here on the server holds every other client's commands for 1 s
    assert admin.client_pause(1000, all=True)
    with pytest.raises(ServerTimeoutError, match="calling again is safe") as err:
        _put(saver, 1, parent)
    assert isinstance(err.value, redis.TimeoutError)  # redis-py handlers still catch it
    admin.client_unpause()
    # the stalled call may have landed once the server woke; calling again must not matter
    stored = _put(saver, 1, parent)
    got = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert got is not None and got.config == stored and got.checkpoint["channel_values"] == {"n": 1}
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 2
    assert client.xlen(thread_keys("f", "t").log) in (2, 3)
    assert saver.verify("t")[2] == []
    admin.close()
    client.close()


def test_a_server_that_is_down_raises_and_one_that_restarts_works(server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url, retry=None, socket_connect_timeout=0.5)
    saver = RedisStreamSaver(client, prefix="f")
    stored = _put(saver, 0)
    server.kill()
    with pytest.raises(ServerUnavailableError, match="Redis is unavailable"):
        saver.get_tuple(stored)
    with pytest.raises(ServerUnavailableError):
        _put(saver, 1, stored)
    server.restart()  # an empty server: nothing was persisted, and no script is cached
    assert saver.get_tuple(stored) is None
    stored = _put(saver, 0)
    assert saver.get_tuple(stored) is not None
    client.close()
