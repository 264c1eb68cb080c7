"""Loading streamsaver's Redis Functions library (``lua.LIBRARY``): what an admin runs once per
server or cluster (``streamsaver functions load``), so that tenants' users, whose roles
(``acl.py``) may call the library's functions and never load code, can run.

Functions are persisted (RDB, AOF) and replicated, unlike the script cache: a restart or a
failover keeps them. A node added to a cluster gets them from ``redis-cli --cluster
add-node``, or from this command run again. Each version of streamsaver has its own library
(its name holds a digest of the scripts), so during a rolling upgrade both versions' libraries
are loaded side by side; ``stale`` lists the other versions, for an admin to delete
(``FUNCTION DELETE``) once no client runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from ..core.errors import UnsupportedServerError
from ..core.server import server_version
from ..lua import LIBRARY, LIBRARY_NAME
from ..transport.clients import DEFAULT_CONNECT_TIMEOUT_S, client_options, probe_options
from ..transport.opening import connecting

__all__ = ["Loaded", "load_library", "nodes_holding"]

_PREFIX = "streamsaver_"


@dataclass
class Loaded:
    """What ``load_library`` did on each primary: ``loaded`` (was missing), ``present``
    (already there), and the other streamsaver libraries each primary holds."""

    library: str
    loaded: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    stale: dict[str, list[str]] = field(default_factory=dict)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _libraries(node: Any) -> list[str]:
    """The names of the streamsaver libraries ``node`` holds."""
    found = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", _PREFIX + "*")
    names = []
    for library in found:
        fields = (
            dict(zip(library[::2], library[1::2], strict=False))
            if isinstance(library, list)
            else library
        )
        name = fields.get(b"library_name", fields.get("library_name"))
        if name is not None and _text(name).startswith(_PREFIX):
            names.append(_text(name))
    return names


def nodes_holding(client: Any) -> dict[str, list[str]]:
    """Each primary's streamsaver libraries (``client``: a ``redis.Redis`` or a
    ``RedisCluster``), by node name."""
    return {name: _libraries(node) for name, node in _primaries(client).items()}


def _primaries(client: Any) -> dict[str, Any]:
    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py leaves these untyped
        return {node.name: cluster.get_redis_connection(node) for node in cluster.get_primaries()}
    kwargs = client.get_connection_kwargs()
    return {f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}": client}


def load_library(url: str, timeout: float | None = DEFAULT_CONNECT_TIMEOUT_S) -> Loaded:
    """Load this version's library on every primary of the server or cluster at ``url``
    where it is missing (as a user that may ``FUNCTION LOAD``: ``streamsaver acl --role
    loader``, or an admin). Idempotent."""
    options = client_options(timeout, None, 0, sync=True)
    with connecting(url), redis.Redis.from_url(url, **probe_options(options, sync=True)) as probe:
        info = probe.info()
    version = server_version(info)
    if version < (7, 0):
        raise UnsupportedServerError(
            f"Redis {'.'.join(map(str, version))} has no Functions (7.0+): without them "
            f"streamsaver runs its scripts by EVALSHA, loading them itself, and tenants' users "
            f"cannot be kept from running scripts of their own"
        )
    kind: Any = RedisCluster if int(info.get("cluster_enabled", 0)) else redis.Redis
    done = Loaded(LIBRARY_NAME)
    with connecting(url), kind.from_url(url, **options) as client:
        for name, node in _primaries(client).items():
            held = _libraries(node)
            if LIBRARY_NAME in held:
                done.present.append(name)
            else:
                try:
                    node.execute_command("FUNCTION", "LOAD", LIBRARY)
                except ResponseError as exc:
                    if "already exists" not in str(exc):
                        raise
                done.loaded.append(name)
            others = [n for n in held if n != LIBRARY_NAME]
            if others:
                done.stale[name] = others
    return done
