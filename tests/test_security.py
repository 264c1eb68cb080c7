"""TLS, a least-privilege ACL user, and prefixes that keep tenants apart."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis
import trustme
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.acl import acl_rules
from streamsaver.embedded import EmbeddedRedis
from streamsaver.maintenance.functions import load_library
from tests.keyspace import drop_keys
from tests.strategies import HOSTILE_CHARS
from tests.test_conformance import _assert_all_passed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TlsServer:
    def __init__(self, tmp: Path) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        cert.cert_chain_pems[0].write_to_path(str(tmp / "server.pem"))
        cert.private_key_pem.write_to_path(str(tmp / "server.key"))
        self.tls_port = _free_port()
        self.server = EmbeddedRedis(
            [
                "--tls-port", str(self.tls_port),
                "--tls-cert-file", str(tmp / "server.pem"),
                "--tls-key-file", str(tmp / "server.key"),
                "--tls-ca-cert-file", str(self.ca_file),
                "--tls-auth-clients", "no",
            ]
        )  # fmt: skip
        self.admin = redis.Redis.from_url(self.server.url)

    def url(self, user: str = "", password: str = "") -> str:
        auth = f"{user}:{password}@" if user else ""
        return f"rediss://{auth}127.0.0.1:{self.tls_port}/0?ssl_ca_certs={self.ca_file}"

    def add_user(self, name: str, password: str, prefix: str) -> None:
        version = tuple(int(x) for x in self.admin.info("server")["redis_version"].split("."))
        self.admin.acl_setuser(name, reset=True)
        self.admin.execute_command(
            "ACL", "SETUSER", name, "on", f">{password}", *acl_rules(prefix, version)
        )
        # the functions a tenant's user calls, loaded by an admin (docs/security.md)
        load_library(self.server.url)


def serving_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """A TLS server for one module's tests, stopped after the last of them."""
    server = TlsServer(tmp_path_factory.mktemp("tls"))
    yield server
    server.admin.close()
    server.server.stop()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    yield from serving_tls(tmp_path_factory)


async def test_conformance_over_tls_as_a_least_privilege_user(tls: TlsServer) -> None:
    """The documented ACL command list is all the saver needs: the whole suite passes."""
    tls.add_user("tenant", "s3cret", "tenant")

    async def factory() -> AsyncIterator[AsyncRedisStreamSaver]:
        client = aredis.Redis.from_url(tls.url("tenant", "s3cret"))
        yield AsyncRedisStreamSaver(client, prefix="tenant")
        await client.aclose()

    _assert_all_passed(await validate(checkpointer_test(name="tls+acl")(factory)))


def test_sync_saver_over_tls_and_the_user_cannot_leave_its_prefix(tls: TlsServer) -> None:
    tls.add_user("tenant2", "pw", "tenant2")
    url = tls.url("tenant2", "pw")
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    with RedisStreamSaver.from_conn_string(url, prefix="tenant2") as saver:
        stored = saver.put(config, cp, generate_metadata(), {"a": 1})
        got = saver.get_tuple(stored)
        assert got is not None and got.checkpoint["channel_values"] == {"a": 1}
        # the projector's scripts and the readers of its keys need no more than the rules
        assert saver.seed_projections() == 1
        saver.put_writes(stored, [("a", 2)], "task")
        assert [i.thread_id for i in saver.threads()] == ["t"]
        assert len(list(saver.list(None, filter={"source": "loop", "step": 0}))) == 1
        assert saver.projector_lag().pending == 1
        for slot in saver.projector_lag().slots:
            assert saver.project(slot.slot).status == "ok"
        saver.delete_for_runs(["no-such-run"])
        assert saver.sweep_projections() == 0
    with RedisStreamSaver.from_conn_string(url, prefix="other") as outside:
        with pytest.raises(redis.exceptions.NoPermissionError):
            outside.put(config, cp, generate_metadata(), {"a": 1})
        with pytest.raises(redis.exceptions.NoPermissionError):
            outside.get_tuple(config)
    assert tls.admin.keys("other*") == []


def test_plain_connections_to_the_tls_port_fail(tls: TlsServer) -> None:
    client = redis.Redis(host="127.0.0.1", port=tls.tls_port, socket_timeout=2, retry=None)
    with pytest.raises(redis.exceptions.ConnectionError):
        RedisStreamSaver(client).setup()
    client.close()


@pytest.mark.parametrize("thread_id", ["x", "", *HOSTILE_CHARS, "a:{b}*", "%7B"])
def test_savers_with_other_prefixes_cannot_see_or_touch_each_other(
    redis_client: redis.Redis, thread_id: str
) -> None:
    a = RedisStreamSaver(redis_client, prefix=f"ta{uuid4().hex[:6]}")
    b = RedisStreamSaver(redis_client, prefix=f"{a.prefix}:b")  # nested, the tricky case
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"secret": "a's"}, channel_versions={"secret": 1})
    stored = a.put(config, cp, generate_metadata(run_id="run"), {"secret": 1})
    a.put_writes(stored, [("secret", "a's write")], "task")
    before = a.get_tuple(config)
    try:
        assert b.get_tuple(config) is None
        assert list(b.list(None)) == [] and b.thread_ids() == []
        b.delete_thread(thread_id)
        b.delete_for_runs(["run"])
        b.prune([thread_id], strategy="delete")
        b.copy_thread(thread_id, "stolen")
        assert list(b.list(None)) == []
        assert a.get_tuple(config) == before
        assert a.thread_ids() == [thread_id]
        # the same through the projector's keys
        a.seed_projections()
        b.seed_projections()
        assert b.threads() == [] and list(b.list(None)) == []
        assert [i.thread_id for i in a.threads()] == [thread_id]
    finally:
        drop_keys(redis_client, a.prefix)


def test_nothing_is_logged_by_default(
    sync_saver: RedisStreamSaver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"card": "4111-secret"}, channel_versions={"card": 1})
    stored = sync_saver.put(config, cp, generate_metadata(), {"card": 1})
    sync_saver.put_writes(stored, [("card", "4111-secret")], "task")
    assert sync_saver.get_tuple(stored) is not None
    assert "4111-secret" not in caplog.text
    assert not [r for r in caplog.records if r.name.startswith("streamsaver")]


def test_the_least_privilege_user_can_tail_and_run_a_consumer_group(tls: TlsServer) -> None:
    tls.add_user("tailer", "pw", "tailer")
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    with RedisStreamSaver.from_conn_string(tls.url("tailer", "pw"), prefix="tailer") as saver:
        stored = saver.put(config, cp, generate_metadata(), {"a": 1})
        saver.put_writes(stored, [("a", 2)], "task")
        kinds = [e.kind for e in saver.tail("t", after="0", follow=False)]
        assert kinds == ["checkpoint", "writes"]
        assert len(list(saver.tail_all(after="0", follow=False))) == 2
        with saver.consumer_group("workers", start="0") as group:
            seen = []
            for delivery in group:
                seen.append(delivery.event.kind)
                group.ack(delivery)
                if len(seen) == 2:
                    break
        group.destroy()
        assert seen == ["checkpoint", "writes"]
