"""The least privilege a saver needs: an ACL user limited to its key prefix and commands.

``acl_rules("myapp")`` gives the rules for ``ACL SETUSER <name> on ><password> <rules...>``;
``streamsaver acl --prefix myapp`` prints the whole command.
"""

from __future__ import annotations

from ._keys import escape_glob, validate_prefix

__all__ = ["SAVER_COMMANDS", "acl_rules"]

SAVER_COMMANDS: tuple[str, ...] = (
    # what the client sends
    "evalsha", "script|load", "info", "scan", "xrange", "del", "wait", "waitaof", "ping",
    # what the scripts call (a script runs with its caller's permissions)
    "xadd", "xtrim", "xlen", "zadd", "zrem", "zrange", "zrangebylex", "zrevrangebylex",
    "hset", "hsetnx", "hget", "hdel", "hgetall", "exists", "pexpire", "pexpireat", "pttl",
    "time", "zlexcount", "zscore", "hkeys", "hmget", "hexists", "persist", "hscan",
    # the projector's scripts and readers of its keys (lua/registry.lua)
    "xinfo|stream", "zrevrangebyscore", "hincrby", "hlen",
    # the Store's scripts (lua/store*.lua)
    "zrevrange", "zrangebyscore",
    # tailing and consumer groups (docs/tailing.md): blocking reads on their own connection,
    # woken with CLIENT UNBLOCK when stopped from another thread
    "xread", "xrevrange", "xreadgroup", "xack", "xautoclaim", "xpending", "xgroup|create",
    "xgroup|destroy", "xgroup|delconsumer", "xinfo|consumers", "client|id", "client|unblock",
)  # fmt: skip


def acl_rules(prefix: str, server_version: tuple[int, ...] = (7, 2)) -> list[str]:
    """ACL rules allowing exactly what a saver under ``prefix`` does, on its keys only.
    Servers before 7.2 reject rules for commands they lack (WAITAOF), so give the version."""
    prefix = validate_prefix(prefix)
    commands = [c for c in SAVER_COMMANDS if c != "waitaof" or server_version >= (7, 2)]
    return [
        "resetkeys",
        f"~{escape_glob(prefix)}:*",
        "resetchannels",
        "-@all",
        *(f"+{c}" for c in commands),
    ]
