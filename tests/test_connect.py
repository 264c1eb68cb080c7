"""Connection failures at the one boundary: typed, fast, never a wrong password retried; and the
README's list of errors against what ``streamsaver`` exports."""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import streamsaver
from streamsaver import (
    AsyncRedisStreamSaver,
    AuthenticationFailedError,
    ConnectionFailedError,
    InvalidInputError,
    RedisStreamSaver,
    ServerUnavailableError,
    StreamSaverError,
    TLSError,
)
from streamsaver.embedded import EmbeddedRedis
from tests.test_security import TlsServer, _free_port, serving_tls

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def locked() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis()
    # set after start: the launcher's readiness PING carries no password
    with redis.Redis.from_url(server.url) as admin:
        admin.config_set("requirepass", "right")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    yield from serving_tls(tmp_path_factory)


def _connect(url: str, **options: Any) -> None:
    with RedisStreamSaver.from_conn_string(url, **options):
        pass


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def test_a_stopped_server_is_a_connection_failure() -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"
    with pytest.raises(ConnectionFailedError, match="is the server running") as caught:
        _connect(url)
    assert isinstance(caught.value, ServerUnavailableError)
    assert isinstance(caught.value, redis.ConnectionError)  # what callers caught before


def test_a_wrong_password_is_refused_on_the_first_attempt(locked: EmbeddedRedis) -> None:
    right = f"redis://:right@127.0.0.1:{_port(locked.url)}/0"
    admin = redis.Redis.from_url(right)
    admin.acl_log_reset()
    url = f"redis://:wrong@127.0.0.1:{_port(locked.url)}/0"
    with pytest.raises(AuthenticationFailedError, match="refused the credentials") as caught:
        _connect(url, retries=5)
    # the server logs every refused AUTH; entries of one client and reason are counted
    assert sum(int(entry["count"]) for entry in admin.acl_log()) == 1
    assert "wrong" not in str(caught.value)  # the password stays out of the message
    admin.close()
    _connect(right)


def test_no_password_on_a_locked_server_is_an_authentication_failure(
    locked: EmbeddedRedis,
) -> None:
    with pytest.raises(AuthenticationFailedError):
        _connect(f"redis://127.0.0.1:{_port(locked.url)}/0")


def test_tls_against_a_plain_port_fails_within_the_connect_timeout(
    redis_url: str,
) -> None:
    url = f"rediss://127.0.0.1:{_port(redis_url)}/0"
    with pytest.raises(TLSError, match="Use redis:// for a plain port"):
        _connect(url, connect_timeout=0.5, retries=3)


async def test_the_async_saver_raises_the_same_types(locked: EmbeddedRedis, redis_url: str) -> None:
    with pytest.raises(AuthenticationFailedError):
        async with AsyncRedisStreamSaver.from_conn_string(
            f"redis://:wrong@127.0.0.1:{_port(locked.url)}/0"
        ):
            pass
    with pytest.raises(TLSError):
        async with AsyncRedisStreamSaver.from_conn_string(
            f"rediss://127.0.0.1:{_port(redis_url)}/0", connect_timeout=0.5
        ):
            pass
    with pytest.raises(ConnectionFailedError):
        async with AsyncRedisStreamSaver.from_conn_string(f"redis://127.0.0.1:{_free_port()}"):
            pass


def test_an_untrusted_certificate_is_a_tls_error(tls: TlsServer) -> None:
    url = tls.url().split("?")[0]  # no ssl_ca_certs: the test CA is not trusted
    with pytest.raises(TLSError):
        _connect(url, connect_timeout=2)
    with RedisStreamSaver.from_conn_string(tls.url()) as saver:
        assert saver.server_version >= (6, 2)


@pytest.mark.parametrize(
    "options",
    [{"connect_timeout": 0}, {"socket_timeout": -1}, {"retries": -1}, {"retries": True}],
)
def test_bad_connection_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        _connect("redis://127.0.0.1:1", **options)  # type: ignore[arg-type]


def test_the_docs_name_every_exported_error_and_only_those() -> None:
    section = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(?:streamsaver\.)?(\w+(?:Error|Warning))`", section)) - set(
        dir(builtins)
    )
    named.discard("ConnectionError")  # redis-py's, named as what the typed errors also are
    exported = {
        name
        for name in streamsaver.__all__
        if isinstance(getattr(streamsaver, name), type)
        and issubclass(getattr(streamsaver, name), StreamSaverError | Warning)
    }
    assert named == exported
    assert "StreamSaverError" in named
