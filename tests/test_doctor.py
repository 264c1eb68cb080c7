"""``streamsaver doctor`` against servers that are fit, evicting, without persistence, locked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from streamsaver.embedded import EmbeddedRedis
from tests.test_cli import _cli


def _checks(out: Any) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in json.loads(out.stdout)}


@pytest.fixture
def server() -> Iterator[tuple[str, redis.Redis]]:
    # a server of the test's own: these tests change its configuration
    with EmbeddedRedis() as embedded:
        admin = redis.Redis.from_url(embedded.url)
        admin.config_set("appendonly", "yes")
        yield embedded.url, admin
        admin.close()


def test_a_healthy_server_passes_every_check(server: tuple[str, redis.Redis]) -> None:
    url, _ = server
    out = _cli("doctor", url, "--json")
    assert out.returncode == 0, out.stderr
    checks = _checks(out)
    for name in ("reachable", "auth", "tls", "server", "persistence", "memory", "stream nodes",
                 "cluster"):  # fmt: skip
        assert checks[name]["status"] == "ok", checks[name]
    for name in ("permissions", "scripts", "latency"):
        assert checks[name]["status"] == "ok", checks[name]
    assert "AOF on, appendfsync everysec" in checks["persistence"]["detail"]
    assert checks["server"]["detail"].startswith(("Redis ", "Valkey "))
    # no projector ran against a fresh server: a warning with the remedy, not a failure
    assert checks["projector"]["status"] == "warn"
    assert "streamsaver projector run" in checks["projector"]["remedy"]
    text = _cli("doctor", url)
    assert text.returncode == 0
    assert text.stdout.splitlines()[0].startswith("ok   reachable")


def test_an_evicting_server_fails_with_the_remedy(server: tuple[str, redis.Redis]) -> None:
    url, admin = server
    admin.config_set("maxmemory", "100mb")
    admin.config_set("maxmemory-policy", "allkeys-lru")
    out = _cli("doctor", url, "--json")
    assert out.returncode == 1
    memory = _checks(out)["memory"]
    assert memory["status"] == "fail"
    assert "allkeys-lru" in memory["detail"]
    assert memory["remedy"] == "CONFIG SET maxmemory-policy noeviction"


def test_stream_node_size_is_advised_on_a_server_holding_many_keys(
    server: tuple[str, redis.Redis],
) -> None:
    url, admin = server
    nodes = _checks(_cli("doctor", url, "--json"))["stream nodes"]
    # the default: each stream's newest node takes 4 KB, but a few keys leave little to save
    assert nodes["status"] == "ok", nodes
    assert "stream-node-max-bytes 4096" in nodes["detail"]
    for start in range(0, 10_000, 1_000):
        admin.mset({f"other:{n}": "x" for n in range(start, start + 1_000)})
    out = _cli("doctor", url, "--json")
    assert out.returncode == 0, out.stderr  # advice, not a failure
    nodes = _checks(out)["stream nodes"]
    assert nodes["status"] == "warn", nodes
    assert "10,000 keys" in nodes["detail"]
    assert nodes["remedy"].startswith("if most threads hold a few checkpoints")
    assert "CONFIG SET stream-node-max-bytes 1024" in nodes["remedy"]
    admin.config_set("stream-node-max-bytes", 1024)
    nodes = _checks(_cli("doctor", url, "--json"))["stream nodes"]
    assert nodes["status"] == "ok", nodes
    assert "takes 1,024 bytes" in nodes["detail"]
    # 0 (no limit) still preallocates the 4,096 bytes a node is capped at
    admin.config_set("stream-node-max-bytes", 0)
    assert _checks(_cli("doctor", url, "--json"))["stream nodes"]["status"] == "warn"


def test_a_server_without_persistence_is_warned_about(server: tuple[str, redis.Redis]) -> None:
    url, admin = server
    admin.config_set("appendonly", "no")
    admin.config_set("save", "")
    out = _cli("doctor", url, "--json")
    # setup() warns here and refuses nothing: doctor keeps that severity
    assert out.returncode == 0, out.stderr
    persistence = _checks(out)["persistence"]
    assert persistence["status"] == "warn"
    assert "a restart loses every thread" in persistence["detail"]
    assert "appendonly yes" in persistence["remedy"]


def test_a_wrong_password_fails_the_auth_check(server: tuple[str, redis.Redis]) -> None:
    url, admin = server
    admin.config_set("requirepass", "right")
    out = _cli("doctor", url.replace("redis://", "redis://:wrong@"), "--json")
    assert out.returncode == 4
    checks = _checks(out)
    assert checks["auth"]["status"] == "fail"
    assert "refused the credentials" in checks["auth"]["detail"]
    assert "wrong" not in out.stdout
    ok = _cli("doctor", url.replace("redis://", "redis://:right@"), "--json")
    assert _checks(ok)["auth"]["status"] == "ok"


def test_a_read_only_user_is_told_what_it_may_not_do(server: tuple[str, redis.Redis]) -> None:
    url, admin = server
    admin.execute_command(
        "ACL", "SETUSER", "ro", "on", ">pw", "~streamsaver:{*", "+@read", "+eval_ro", "+ping",
        "+info", "+acl|whoami", "+script|exists", "+config|get",
    )  # fmt: skip
    out = _cli("doctor", url.replace("redis://", "redis://ro:pw@"), "--json")
    permissions = _checks(out)["permissions"]
    assert permissions["status"] == "warn", permissions
    assert "read-only" in permissions["detail"]
