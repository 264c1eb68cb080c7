"""The least privilege a saver needs: ACL users limited to one key prefix and to the commands
streamsaver sends. No I/O.

``acl_rules("myapp", (7, 0))`` gives the rules for ``ACL SETUSER <name> on ><password>
<rules...>``; ``streamsaver acl --prefix myapp --server-version 7.0`` prints the whole command.
Three runtime roles, and the admin's loader:

- ``saver``: everything a tenant's application does (graphs, tails, consumer groups, audit,
  rebuild, delete, prune, copy, listing) on its prefix's keys, and nothing else;
- ``reader``: read-only (tail, history, audit verify, get/list/threads for a dashboard):
  ``%R~`` keys, no command that writes;
- ``projector``: reads every key of the prefix, writes only the per-slot keys (feeds, for its
  consumer group; parked entries; thread indexes; its projections), never a thread's log;
- ``loader``: loads streamsaver's Redis Functions library (``streamsaver functions load``) and
  touches no key. Not a tenant's: whoever may ``FUNCTION LOAD`` may run any code.

No runtime role runs code streamsaver does not ship: they call the library's functions
(``FCALL``, ``FCALL_RO``), which only a loader or an admin loads, and never ``EVAL``,
``EVALSHA`` or ``SCRIPT LOAD`` (with those, a tenant's busy loop held every tenant's server, and
``SCRIPT KILL`` could not end it once it had written). So the roles need Functions: Redis 7.0
or later, or Valkey.

Every key of a prefix starts with ``<prefix>:{`` and a prefix cannot hold ``{`` (``core/keys.py``),
so the one pattern ``<prefix>:{*`` (glob characters escaped) matches exactly that prefix's keys:
``app``'s user reaches nothing of ``app:tenant2``, ``app2`` or ``ap``. No role has ``SCAN``,
``KEYS`` (listing reads the per-slot thread indexes), ``CLIENT UNBLOCK`` or ``KILL`` (a tail's
``stop()`` closes its own connection), ``FLUSH*``, ``CONFIG`` or ``DEBUG``; and no pub/sub channel.
"""

from __future__ import annotations

from .core.errors import InvalidInputError, UnsupportedServerError
from .core.feeds import SLOT_KINDS
from .core.keys import key_pattern, validate_prefix

__all__ = [
    "LOADER_COMMANDS",
    "PROJECTOR_COMMANDS",
    "READER_COMMANDS",
    "ROLES",
    "SAVER_COMMANDS",
    "SEARCH_COMMANDS",
    "acl_rules",
]

# every role: server version and topology (redis-py's cluster client asks for the slots and
# the command table), liveness
_BASE: tuple[str, ...] = (
    "ping", "info", "time", "command", "cluster|slots", "cluster|shards", "asking", "readonly",
    # redis-py names its own connection's library (7.2+); refused, it would only fill ACL LOG
    "client|setinfo",
)  # fmt: skip

# every runtime role: the library's functions, and nothing else that runs Lua
_CONNECTION: tuple[str, ...] = (*_BASE, "fcall", "fcall_ro")

# the admin's: load the library (every primary: a cluster client sends it to each), and see
# which versions are there; no key
LOADER_COMMANDS: tuple[str, ...] = (*_BASE, "function|load", "function|list")

READER_COMMANDS: tuple[str, ...] = (
    *_CONNECTION,
    # what the client sends: log pages, feed probes and tails
    "xrange", "xrevrange", "xread", "exists",
    # what the read scripts call (a script runs with its caller's permissions)
    "xlen", "xinfo|stream", "zrange", "zrangebylex", "zrevrangebylex", "zrevrangebyscore",
    "zscore", "zlexcount", "hget", "hmget", "hgetall", "hkeys", "hlen", "pttl", "smembers",
    "sismember",
    "hexists", "hscan", "zscan",
    # the Store's read scripts (lua/store*.lua)
    "zrevrange", "zrangebyscore",
)  # fmt: skip

# consumer groups (docs/tailing.md): XREADGROUP, XACK and their housekeeping write the feeds
_GROUPS: tuple[str, ...] = (
    "xreadgroup", "xack", "xautoclaim", "xpending", "xgroup|create", "xgroup|destroy",
    "xgroup|delconsumer", "xinfo|consumers", "xadd",
)  # fmt: skip

PROJECTOR_COMMANDS: tuple[str, ...] = (
    *READER_COMMANDS, *_GROUPS, "hset", "hdel", "hincrby", "zadd", "zrem", "del", "srem",
    # a seed's slices build in scratch keys (lua/projector/seed.lua), which expire if it is
    # abandoned, and
    # swap them in
    "pexpire", "persist", "rename", "unlink",
)  # fmt: skip

SAVER_COMMANDS: tuple[str, ...] = (
    *PROJECTOR_COMMANDS,
    # durability modes (WAITAOF only on servers that have it: see acl_rules)
    "wait", "waitaof",
    # what the write scripts call
    "xtrim", "hsetnx", "pexpireat", "sadd",
    # sliced rebuilds and compactions swap their scratch keys in, as seeds do (a compacted
    # log's ids go on after the live one's: XSETID); deletions free in the background; a log
    # delete_for_runs leaves with only its records is copied down to their size (COPY)
    "xsetid", "copy",
    # the Store's vector index: whether a bucket keeps its documents (lua/store/store.lua's mft)
    "get", "set",
)  # fmt: skip

# the Store's search through the server's vector index (``search=True``): the index's name is
# under the prefix's key pattern, which FT.SEARCH and FT.INFO check. Never FT.CREATE, FT.ALTER
# or FT._LIST: FT.CREATE's PREFIX is not checked against the user's patterns, so a tenant able
# to create an index could index, and read, another tenant's keys; the index is created by the
# store's setup() run once as a user that may (docs/security.md)
SEARCH_COMMANDS: tuple[str, ...] = ("ft.search", "ft.info")

ROLES = ("saver", "reader", "projector", "loader")
_WAITAOF = (7, 2)
_FUNCTIONS = (7, 0)  # FCALL, and %R~ key permissions
_SPACES = " \t\n\v\f\r"  # what the server's isspace() refuses in a rule


def acl_rules(
    prefix: str,
    server_version: tuple[int, ...] = (7, 2),
    role: str = "saver",
    *,
    search: bool = False,
) -> list[str]:
    """ACL rules allowing exactly what ``role`` does under ``prefix``, on its keys only.
    Servers before 7.2 reject rules for commands they lack (WAITAOF), and only 7.0 and later
    know read-only key patterns (the reader and projector roles): give the server's version.
    ``search``: also the Store's search through the server's vector index, for the saver
    role (a server with RediSearch or Redis 8's Query Engine; others reject rules for the FT
    commands). Every role needs Redis Functions (7.0+): before them, a user who may run
    streamsaver's scripts may run any script."""
    prefix = validate_prefix(prefix)
    if any(c in prefix for c in _SPACES):
        # the server refuses a rule holding whitespace (ACL files are split on it), and no
        # glob spelling of a space matches only a space
        raise InvalidInputError(
            f"prefix={prefix!r} holds whitespace, which no ACL key pattern can express: "
            f"give its saver a prefix without spaces, e.g. {prefix.split()[0] or 'app'!r}"
        )
    if role not in ROLES:
        raise InvalidInputError(f"role={role!r} is unknown; use one of {', '.join(ROLES)}")
    if tuple(server_version) < _FUNCTIONS:
        raise UnsupportedServerError(
            f"the {role} role needs Redis Functions (and the reader read-only key patterns), "
            f"which Redis {'.'.join(map(str, server_version))} lacks: a user of it who may run "
            f"streamsaver's scripts may run any script (EVAL, SCRIPT LOAD). Use Redis 7.0 or "
            f"later, or Valkey"
        )
    keys = key_pattern(prefix)
    if role == "loader":
        patterns, commands = [], LOADER_COMMANDS
    elif role == "saver":
        patterns, commands = [f"~{keys}"], SAVER_COMMANDS
    elif role == "reader":
        patterns, commands = [f"%R~{keys}"], READER_COMMANDS
    else:
        # reads everything of the prefix; writes only per-slot keys, never a thread's
        base = keys[: -len("*")]
        writable = [f"~{base}*}}:{kind}" for kind in SLOT_KINDS if kind != "audit"]
        patterns, commands = [f"%R~{keys}", *writable], PROJECTOR_COMMANDS
    if search and role == "saver":
        # not the reader's: FT.SEARCH declares its index name read-write, which %R~ refuses
        commands = (*commands, *SEARCH_COMMANDS)
    if tuple(server_version) < _WAITAOF:
        commands = tuple(c for c in commands if c not in ("waitaof", "client|setinfo"))
    return ["resetkeys", *patterns, "resetchannels", "-@all", *(f"+{c}" for c in commands)]
