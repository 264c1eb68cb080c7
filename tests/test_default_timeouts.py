"""What ``from_conn_string`` makes waits a bounded time for every reply by default: the savers',
the stores', the command line's and the console's calls on a server that stops answering
(SIGSTOP, as a black-holed path) raise a typed error instead of waiting forever."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from streamsaver import (
    AsyncRedisStreamSaver,
    AsyncRedisStreamStore,
    RedisStreamSaver,
    RedisStreamStore,
    ServerUnavailableError,
)
from streamsaver.embedded import EmbeddedRedis
from streamsaver.transport.clients import DEFAULT_SOCKET_TIMEOUT_S


def _timeout(client: Any) -> object:
    return client.connection_pool.connection_kwargs.get("socket_timeout")


def test_every_from_conn_string_bounds_each_reply(redis_url: str, prefix: str) -> None:
    with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix) as saver:
        assert _timeout(saver.client) == DEFAULT_SOCKET_TIMEOUT_S
    with RedisStreamStore.from_conn_string(redis_url, prefix=prefix) as store:
        assert _timeout(store._saver.client) == DEFAULT_SOCKET_TIMEOUT_S


async def test_every_async_from_conn_string_bounds_each_reply(redis_url: str, prefix: str) -> None:
    async with AsyncRedisStreamSaver.from_conn_string(redis_url, prefix=prefix) as saver:
        assert _timeout(saver.client) == DEFAULT_SOCKET_TIMEOUT_S
    async with AsyncRedisStreamStore.from_conn_string(redis_url, prefix=prefix) as store:
        assert _timeout(store._saver.client) == DEFAULT_SOCKET_TIMEOUT_S


def test_a_durability_wait_longer_than_the_default_keeps_its_reply(
    redis_url: str, prefix: str
) -> None:
    # a WAIT may take durability_timeout_ms: the socket must not give up on it first
    with RedisStreamSaver.from_conn_string(
        redis_url, prefix=prefix, durability="replicated", durability_timeout_ms=30_000
    ) as saver:
        timeout = _timeout(saver.client)
        assert isinstance(timeout, float) and timeout > 30


def test_the_default_saver_on_a_silent_server_raises_in_bounded_time(
    stoppable_server: EmbeddedRedis,
) -> None:
    with RedisStreamSaver.from_conn_string(stoppable_server.url, retries=0) as saver:
        saver.get_tuple({"configurable": {"thread_id": "t"}})
        os.kill(stoppable_server.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(ServerUnavailableError):
            saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert time.monotonic() - started < 3 * DEFAULT_SOCKET_TIMEOUT_S
        os.kill(stoppable_server.process.pid, signal.SIGCONT)


def test_the_store_takes_the_savers_connection_options(stoppable_server: EmbeddedRedis) -> None:
    with RedisStreamStore.from_conn_string(
        stoppable_server.url, socket_timeout=0.5, retries=0
    ) as store:
        store.put(("a",), "k", {"v": 1})
        os.kill(stoppable_server.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(ServerUnavailableError):
            store.get(("a",), "k")
        assert time.monotonic() - started < 5
        os.kill(stoppable_server.process.pid, signal.SIGCONT)
