"""What a server's ``INFO`` says about it: its version, its eviction policy, its persistence.
The savers refuse what cannot hold a thread with these; ``streamsaver doctor`` reports them.
No I/O."""

from __future__ import annotations

import re
from typing import Any

from .errors import UnsupportedServerError

__all__ = [
    "MIN_SERVER",
    "aof_everywhere",
    "check_eviction",
    "clustered",
    "save_points",
    "server_version",
]


MIN_SERVER = (6, 2)


def _nodes(info: Any) -> dict[str, Any]:
    # A cluster client answers INFO per node; a standalone one with the server's own.
    return {"the server": info} if "redis_version" in info else dict(info)


def _primaries(info: Any) -> dict[str, Any]:
    # replicas do not evict on their own (replica-ignore-maxmemory): they follow the primary
    return {name: n for name, n in _nodes(info).items() if n.get("role", "master") == "master"}


def check_eviction(info: Any, ttl: bool) -> None:
    """Refuse a server that may evict the saver's keys: a thread would lose its log or its
    indexes, i.e. its history. ``volatile-*`` policies evict only keys with a TTL, which the
    saver's keys get only with ``ttl_seconds`` (``ttl``)."""
    for name, node in _primaries(info).items():
        policy = str(node.get("maxmemory_policy", "noeviction"))
        if policy == "noeviction" or (policy.startswith("volatile-") and not ttl):
            continue
        which = "keys with a TTL, which ttl_seconds gives the saver's" if ttl else "any key"
        raise UnsupportedServerError(
            f"{name} has maxmemory-policy {policy!r}: when memory runs short it evicts "
            f"{which}, so a thread could lose its log or its indexes, i.e. its history. Run "
            f"`CONFIG SET maxmemory-policy noeviction` (and set it in redis.conf) so that writes "
            f"fail instead, or pass allow_eviction=True to accept evictions (reads of a thread "
            f"that lost keys then raise IntegrityError)"
        )


def aof_everywhere(info: Any) -> bool:
    return all(int(n.get("aof_enabled", 0)) for n in _primaries(info).values())


def clustered(info: Any) -> bool:
    return any(int(n.get("cluster_enabled", 0)) for n in _nodes(info).values())


def save_points(reply: Any) -> str | None:
    """The ``save`` setting from a CONFIG GET reply; None when it could not be read (no
    permission: a least-privilege user has no CONFIG)."""
    if isinstance(reply, Exception):
        return None
    if isinstance(reply, dict):
        values = list(reply.values())
    elif isinstance(reply, (list, tuple)):
        values = list(reply[1::2])
    else:
        return None
    if not values:
        return None
    value = values[0]
    return value.decode() if isinstance(value, bytes) else str(value)


def server_version(info: Any) -> tuple[int, ...]:
    # A cluster client answers INFO per node; every node must qualify.
    if "redis_version" not in info:
        return min(server_version(node) for node in info.values())
    return tuple(int(x) for x in re.findall(r"\d+", str(info["redis_version"]))[:3])
