"""``streamsaver doctor``'s checks: is this server fit to hold threads? One ``Check`` each, ok,
warn or fail with the remedy (``cli.doctor`` shows them). The persistence and eviction checks
are ``setup()``'s own (``core.server``: ``check_eviction``, ``aof_everywhere``,
``save_points``), not a second copy."""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import (
    AuthenticationFailedError,
    ServerUnavailableError,
    TLSError,
    UnsupportedServerError,
    connect_error,
)
from ..core.server import MIN_SERVER, aof_everywhere, check_eviction, save_points, server_version
from ..lua import LIBRARY_NAME, function_name
from ..transport.clients import DEFAULT_CONNECT_TIMEOUT_S, client_options, probe_options

__all__ = ["Check", "diagnose"]

Status = Literal["ok", "warn", "fail"]
_LATENCY_WARN_MS = 5.0
_LAG_WARN_S = 60.0
# Redis 7+ and Valkey allocate a stream's newest node at stream-node-max-bytes, capped at
# 4096 (t_stream.c, STREAM_LISTPACK_MAX_PRE_ALLOCATE): every thread's log holds that much
_NODE_PREALLOC_CAP = 4096
_NODE_ADVISED = 1024
# keys at which short threads' fixed cost is worth the advice (docs/cost.md, "A short thread")
_NODE_ADVICE_KEYS = 10_000


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    remedy: str = ""


def diagnose(url: str, prefix: str, timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> list[Check]:
    """Every check against ``url``, in order; stops after the first that leaves no connection."""
    checks: list[Check] = []
    options = probe_options(client_options(timeout, None, 0, sync=True), sync=True)
    client = redis.Redis.from_url(url, **options)
    secure = url.lower().startswith(("rediss://", "valkeys://"))
    try:
        started = time.perf_counter()
        info: dict[str, Any] = client.info()
    except (RedisConnectionError, RedisTimeoutError) as exc:
        error = connect_error(exc, url)
        if isinstance(error, AuthenticationFailedError):
            checks.append(Check("reachable", "ok", "the server answered"))
            checks.append(Check("auth", "fail", str(error)))
        elif isinstance(error, TLSError):
            checks.append(Check("tls", "fail", str(error)))
        else:
            checks.append(Check("reachable", "fail", str(error)))
        client.close()
        return checks
    first_ms = (time.perf_counter() - started) * 1000
    try:
        checks.append(Check("reachable", "ok", f"{_where(url)} answered in {first_ms:.1f} ms"))
        checks.append(Check("auth", "ok", f"as user {_whoami(client)!r}"))
        checks.append(_tls(url, secure))
        checks.append(_server(info))
        checks.append(_persistence(client, info))
        checks.append(_memory(info))
        checks.append(_stream_nodes(client, server_version(info)))
        checks.append(_cluster(client, info))
        checks.append(_permissions(client, prefix))
        checks.append(_scripts(client, url, server_version(info)))
        checks.append(_latency(client))
        checks.append(_lag(url, prefix, bool(int(info.get("cluster_enabled", 0)))))
    finally:
        client.close()
    return checks


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def _whoami(client: redis.Redis) -> str:
    try:
        return str(client.acl_whoami())
    except ResponseError:
        return "default"


def _tls(url: str, secure: bool) -> Check:
    host = urlsplit(url).hostname or "localhost"
    if secure:
        return Check("tls", "ok", "the connection is encrypted (rediss://)")
    if host in ("localhost", "127.0.0.1", "::1"):
        return Check("tls", "ok", "plain text, on the loopback interface")
    return Check(
        "tls",
        "warn",
        f"plain text to {host}: passwords and checkpoints cross the network unencrypted",
        "serve TLS (tls-port) and connect with rediss://",
    )


def _server(info: dict[str, Any]) -> Check:
    kind = "Valkey" if "valkey_version" in info or info.get("server_name") == "valkey" else "Redis"
    shown = info.get("valkey_version", info.get("redis_version"))
    version = server_version(info)
    if version < MIN_SERVER:
        needed = ".".join(map(str, MIN_SERVER))
        return Check("server", "fail", f"{kind} {shown}", f"upgrade to Redis {needed} or later")
    return Check("server", "ok", f"{kind} {shown} (redis_version {info.get('redis_version')})")


def _config(client: redis.Redis, name: str) -> str | None:
    try:
        reply = client.config_get(name)
    except (NoPermissionError, ResponseError):
        return None  # a least-privilege user has no CONFIG
    value = reply.get(name)
    return None if value is None else str(value)


def _persistence(client: redis.Redis, info: dict[str, Any]) -> Check:
    # severities follow setup(): it warns (NoPersistenceWarning) and refuses only eviction
    if aof_everywhere(info):
        fsync = _config(client, "appendfsync") or "unknown (no CONFIG permission)"
        if fsync == "no":
            return Check(
                "persistence",
                "warn",
                "AOF on, appendfsync no: the OS decides when writes reach the disk",
                "CONFIG SET appendfsync everysec",
            )
        return Check("persistence", "ok", f"AOF on, appendfsync {fsync}")
    raw = _config(client, "save")
    save = None if raw is None else save_points({"save": raw})
    if save is None:
        return Check("persistence", "warn", "AOF off; RDB save points unknown (no CONFIG)")
    if save:
        return Check(
            "persistence",
            "warn",
            f"RDB snapshots only (save {save!r}): a crash loses the writes since the last one",
            "CONFIG SET appendonly yes",
        )
    return Check(
        "persistence",
        "warn",
        "neither AOF nor RDB snapshots: a restart loses every thread",
        "CONFIG SET appendonly yes (and in redis.conf), unless the data is throwaway",
    )


def _memory(info: dict[str, Any]) -> Check:
    limit = int(info.get("maxmemory", 0))
    shown = "no maxmemory" if not limit else f"maxmemory {limit // (1024 * 1024)} MB"
    policy = info.get("maxmemory_policy", "noeviction")
    try:
        check_eviction(info, False)
    except UnsupportedServerError as exc:
        return Check(
            "memory",
            "fail",
            f"{shown}, policy {policy}: {exc}",
            "CONFIG SET maxmemory-policy noeviction",
        )
    return Check("memory", "ok", f"{shown}, maxmemory-policy {policy}")


def _stream_nodes(client: redis.Redis, version: tuple[int, ...]) -> Check:
    """What every stream's newest node takes, which a short thread pays in full (its log),
    and whether to lower it: worth it where the server holds many threads."""
    raw = _config(client, "stream-node-max-bytes")
    if raw is None:
        return Check("stream nodes", "ok", "stream-node-max-bytes unknown (no CONFIG permission)")
    setting = int(raw)
    if version < (7, 0):
        return Check("stream nodes", "ok", f"stream-node-max-bytes {setting}: no preallocation")
    held = min(setting or _NODE_PREALLOC_CAP, _NODE_PREALLOC_CAP)
    found = (
        f"stream-node-max-bytes {setting}: every stream's newest node takes {held:,} bytes, "
        "so each thread's log holds at least that"
    )
    if held <= _NODE_ADVISED:
        return Check("stream nodes", "ok", found)
    keys = int(client.dbsize())
    if keys < _NODE_ADVICE_KEYS:
        return Check("stream nodes", "ok", f"{found} ({keys:,} keys: little to save)")
    return Check(
        "stream nodes",
        "warn",
        f"{found}; {keys:,} keys here: a one-checkpoint thread takes ~9 KB at 4096, ~3 KB at "
        f"{_NODE_ADVISED} (docs/cost.md, 'A short thread')",
        f"if most threads hold a few checkpoints: CONFIG SET stream-node-max-bytes "
        f"{_NODE_ADVISED} (2048 for chats of a few turns; a long conversation then costs ~13% "
        "or ~2% more a step), and the same in the config file",
    )


def _cluster(client: redis.Redis, info: dict[str, Any]) -> Check:
    if not int(info.get("cluster_enabled", 0)):
        return Check("cluster", "ok", "standalone server")
    state = client.execute_command(  # type: ignore[no-untyped-call]
        "CLUSTER", "INFO"
    )
    text = state.decode() if isinstance(state, bytes) else str(state)
    fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
    covered = int(fields.get("cluster_slots_ok", 0))
    if fields.get("cluster_state") != "ok" or covered < 16384:
        return Check(
            "cluster",
            "fail",
            f"cluster state {fields.get('cluster_state')}, {covered}/16384 slots served",
            "assign every slot to a reachable primary (redis-cli --cluster fix)",
        )
    return Check("cluster", "ok", "cluster mode, 16384/16384 slots served")


def _permissions(client: redis.Redis, prefix: str) -> Check:
    # ACL DRYRUN needs admin rights a tenant's user lacks: try the saver's own commands on a
    # probe key under the prefix instead, the way the saver would meet a NOPERM
    key = f"{prefix}:{{doctor-probe}}:log"
    tried: list[str] = []
    try:
        # (whether it may call streamsaver's functions is the scripts check's)
        for name, command in (
            ("XRANGE", ("XRANGE", key, "-", "+", "COUNT", "1")),
            ("XADD", ("XADD", key, "MAXLEN", "0", "*", "probe", "1")),
            ("DEL", ("DEL", key)),
        ):
            client.execute_command(  # type: ignore[no-untyped-call]
                *command
            )
            tried.append(name)
    except ResponseError as exc:
        if not isinstance(exc, NoPermissionError):
            # e.g. MOVED on a cluster node that does not serve the probe key's slot
            return Check("permissions", "warn", f"could not probe under {prefix!r}: {exc}")
        if "XRANGE" in tried:
            return Check(
                "permissions",
                "warn",
                f"read-only under {prefix!r}: {exc}",
                "fine for a reader; a saver needs `streamsaver acl --role saver`",
            )
        return Check(
            "permissions",
            "fail",
            f"this user may not read {prefix!r}'s keys: {exc}",
            f"apply `streamsaver acl --prefix {prefix}` as an admin",
        )
    finally:
        with contextlib.suppress(ResponseError):
            client.delete(key)
    return Check("permissions", "ok", f"read and write under {prefix!r}:{{...}}")


def _scripts(client: redis.Redis, url: str, version: tuple[int, ...]) -> Check:
    """Whether this server holds this version's functions library (lua.LIBRARY), and if not,
    whether this user loads it on first use or an admin must."""
    if version < (7, 0):
        return Check("scripts", "ok", "loaded by the client on first use (EVALSHA: no Functions)")
    remedy = f"as an admin: streamsaver functions load {_redacted(url)}"
    send: Any = client.execute_command  # redis-py leaves it untyped
    try:
        held = bool(send("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_NAME))
    except NoPermissionError:
        # a tenant's user (acl.py's roles): a call of a function that never writes tells
        try:
            send("FCALL_RO", function_name("lag"), "0")
        except NoPermissionError as exc:
            return Check("scripts", "fail", f"this user may not call functions: {exc}", _ACL)
        except ResponseError as exc:
            if "function not found" in str(exc).lower():
                return Check("scripts", "fail", f"{LIBRARY_NAME} is not loaded", remedy)
        held = True
    if held:
        return Check("scripts", "ok", f"functions library {LIBRARY_NAME} loaded")
    try:
        may = send("ACL", "DRYRUN", _whoami(client), "FUNCTION", "LOAD", "x") in (b"OK", "OK")
    except ResponseError:
        may = False
    if may:
        return Check("scripts", "ok", f"{LIBRARY_NAME} not loaded yet: this user loads it on use")
    return Check(
        "scripts",
        "warn",
        f"{LIBRARY_NAME} is not loaded; tenants' users (streamsaver acl) cannot load it",
        remedy,
    )


_ACL = "apply `streamsaver acl --prefix <prefix>` as an admin"


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://<admin>:<password>@{host}:{parts.port or 6379}{parts.path}"


def _latency(client: redis.Redis) -> Check:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        client.ping()
        times.append((time.perf_counter() - started) * 1000)
    median = sorted(times)[2]
    if median > _LATENCY_WARN_MS:
        return Check(
            "latency",
            "warn",
            f"PING round trip {median:.2f} ms (median of 5): every checkpoint call pays it",
            "run the graphs near the server (same host or zone)",
        )
    return Check("latency", "ok", f"PING round trip {median:.2f} ms (median of 5)")


def _lag(url: str, prefix: str, clustered: bool) -> Check:
    from ..checkpoint.saver import RedisStreamSaver

    options = client_options(DEFAULT_CONNECT_TIMEOUT_S, None, 0, sync=True)
    client: Any = (
        RedisCluster.from_url(url, **options) if clustered else redis.Redis.from_url(url, **options)
    )
    try:
        saver = RedisStreamSaver(client, prefix=prefix, allow_eviction=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seeded = saver.projector_seeded()
            lag = saver.projector_lag()
    except (NoPermissionError, ServerUnavailableError) as exc:
        return Check("projector", "warn", f"cannot read its lag: {exc}")
    finally:
        client.close()
    if not seeded:
        return Check(
            "projector",
            "warn",
            "no projector has run for this prefix: threads and metadata search read every index",
            "run `streamsaver projector run` (or docker compose up projector)",
        )
    if lag.oldest_age_s > _LAG_WARN_S:
        return Check(
            "projector",
            "warn",
            f"{lag.pending} events pending, oldest {lag.oldest_age_s:.0f} s",
            "is `streamsaver projector run` running? `streamsaver projector status` shows "
            "the slots",
        )
    return Check(
        "projector", "ok", f"{lag.pending} events pending, oldest {lag.oldest_age_s:.1f} s"
    )
