"""The Lua scripts, assembled from the ``.lua`` files beside this module. Each entry script is
preceded by the shared files it needs, so the projection (checkpoint/projection.lua) exists
exactly once.

The files are grouped as the Python is: ``shared/`` (every script's helpers: common.lua,
the slice clock, metadata forms), ``checkpoint/`` (a thread's log and indexes: append, reads,
compaction, deletion, replay, verify), ``store/`` (the Store's log and indexes), ``projector/``
(the cross-thread projections) and ``tailing/`` (consumer groups). A file's name is unique
across the folders, so an entry names its parts by file name alone.

The same entries are one Redis Functions library (``LIBRARY``, Redis 7.0+ and Valkey): loaded
once by an admin (``streamsaver functions load``), it is all a tenant's user runs (``FCALL``),
so no tenant runs code the library does not ship (docs/security.md). Each entry is wrapped, as
its text, in a function whose ``KEYS`` and ``ARGV`` are its arguments: the files are unchanged
and every call still runs the whole entry, as ``EVALSHA`` runs its script. The library's name
and its functions' names hold a digest of what it holds, so two versions of streamsaver, each
with its own library, run side by side during a rolling upgrade.

What it may import: the standard library only; everything that calls a script imports it
(tests/test_layers.py)."""

from __future__ import annotations

import hashlib
from importlib.resources import files
from typing import Any

__all__ = [
    "ALLOW_OOM",
    "FULL_TWINS",
    "LIBRARY",
    "LIBRARY_NAME",
    "NO_WRITES",
    "OOM_ANSWERED",
    "READ_ONLY",
    "SOURCES",
    "function_name",
    "source",
]

# Scripts that only read: a read-only ACL user (``%R~`` keys, acl.py) may run them only as
# FCALL_RO (EVALSHA_RO by the script cache), since FCALL and EVALSHA declare their keys
# read-write (see transport.core.Scripts.verb).
READ_ONLY = frozenset(
    {"get", "list", "thread_row", "threads_page", "candidates", "lag", "slot_threads"}
)

# Redis runs a script's whole chunk on every call, defining each function again: every entry takes
# only the files it calls. The last file is the entry's body. shared/slice.lua comes first where it
# is used: its clock then counts those definitions (tens of microseconds) in the slice.
_WRITE = ("common.lua", "projection.lua")
_READ = ("common.lua", "read.lua")
_COMPACT = (*_WRITE, "read.lua", "delta.lua", "compact.lua")
_ENTRIES: dict[str, tuple[str, ...]] = {
    # a saver without keep_last never compacts in a put: its appends skip checkpoint/compact.lua's
    # definitions, a few microseconds of server time each
    "append": (*_WRITE, "append.lua"),
    "append_compacting": (*_COMPACT, "append.lua"),
    "get": (*_READ, "get.lua"),
    "list": (*_READ, "meta.lua", "list.lua"),
    "delta_history": (*_READ, "delta.lua", "delta_history.lua"),
    "delete_runs": ("slice.lua", *_COMPACT, "delete_runs.lua"),
    "delete_thread": (*_WRITE, "delete_thread.lua"),
    "replay": (*_WRITE, "replay.lua"),
    "replay_slice": ("slice.lua", *_WRITE, "replay_slice.lua"),
    "verify": (*_WRITE, "refs.lua", "verify.lua"),
    "verify_slice": (
        "slice.lua",
        *_WRITE,
        "refs.lua",
        "verify_slice.lua",
    ),
    "import": ("slice.lua", *_WRITE, "import.lua"),
    "copy_land": ("slice.lua", "common.lua", "copy_land.lua"),
    "prune": (*_COMPACT, "prune.lua"),
    "compact_slice": ("slice.lua", *_COMPACT, "compact_slice.lua"),
    # the Store's (store/store.lua holds its one projection)
    **{
        name: ("common.lua", "store.lua", f"{name}.lua")
        for name in ("store_write", "store_read", "store_expire")
    },
    **{
        name: ("slice.lua", "common.lua", "store.lua", f"{name}.lua")
        for name in ("store_slice", "store_scan")
    },
    # consumer groups' (tailing/)
    "group_claim": ("group_claim.lua",),
    "group_leave": ("group_leave.lua",),
    # the projector's (projector/registry.lua)
    **{
        name: (
            "slice.lua",
            "common.lua",
            "meta.lua",
            "registry.lua",
            f"{name}.lua",
        )
        for name in ("project", "seed")
    },
    **{
        name: ("common.lua", "meta.lua", "registry.lua", f"{name}.lua")
        for name in (
            "sweep",
            "lag",
            "thread_row",
            "threads_page",
            "candidates",
            "slot_threads",
        )
    },
}


_FOLDERS = ("shared", "checkpoint", "store", "projector", "tailing")


def _where() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for folder in _FOLDERS:
        for path in (files(__name__) / folder).iterdir():
            if path.name.endswith(".lua"):
                if path.name in found:  # pragma: no cover - a packaging mistake
                    raise AssertionError(f"two Lua files named {path.name}")
                found[path.name] = path
    return found


_FILES = _where()


def source(name: str) -> str:
    """The text of one Lua file, by its name (``"common.lua"``), whichever folder holds
    it."""
    text: str = _FILES[name].read_text(encoding="utf-8")
    return text


SOURCES: dict[str, str] = {
    name: "\n".join(source(part) for part in dict.fromkeys(parts))
    for name, parts in _ENTRIES.items()
}

# Flags of the library's functions. Without a flag a function may write, and a server out of
# memory refuses it before it starts. A script sent by EVALSHA was refused only at its first
# write that may grow memory, so the deletions, which free before they append, ran on a full
# server: as functions they say so (``allow-oom``), and the server lets them. Those that never
# write say ``no-writes``: they run on a full server, and as ``FCALL_RO`` for a read-only user.
NO_WRITES = READ_ONLY | {"delta_history", "store_read", "store_scan"}
ALLOW_OOM = frozenset({"delete_thread", "delete_runs", "prune"})
# Scripts whose first write probes for room and answer {'oom', error} on a full server (a
# compaction's slice: its caller then runs the one script that frees first). As functions the
# server refuses them before they start; the client answers for them as they would have
# (transport.core.Scripts.answer).
OOM_ANSWERED = frozenset({"compact_slice"})
# Scripts that free before they write when they can (a keep_last saver's put that compacts):
# refused on a full server, each is sent again as its twin (``function_name(name, full=True)``),
# which may run there and decides as a script sent by EVALSHA did: by its first write, refused
# if that write may grow memory (``_FIRST_WRITE_DECIDES``).
FULL_TWINS = frozenset({"append_compacting"})

_FIRST_WRITE_DECIDES = """
local redis = (function(real)
  local frees = {DEL = 1, UNLINK = 1, XTRIM = 1, XDEL = 1, HDEL = 1, ZREM = 1, SREM = 1,
    ZREMRANGEBYLEX = 1, ZREMRANGEBYSCORE = 1, ZREMRANGEBYRANK = 1, PEXPIRE = 1, PEXPIREAT = 1,
    EXPIRE = 1, PERSIST = 1, RENAME = 1}
  local grows = {XADD = 1, HSET = 1, HSETNX = 1, HMSET = 1, HINCRBY = 1, ZADD = 1, SADD = 1,
    SET = 1, SETNX = 1, XSETID = 1, XGROUP = 1, COPY = 1, INCR = 1, INCRBY = 1}
  local decided = false
  local refusal = "OOM command not allowed when used memory > 'maxmemory'."
  local function refused(cmd)
    if decided then
      return false
    end
    local c = string.upper(cmd)
    decided = frees[c] ~= nil
    return grows[c] ~= nil
  end
  local twin = {}
  function twin.call(cmd, ...)
    if refused(cmd) then
      error({err = refusal})
    end
    return real.call(cmd, ...)
  end
  function twin.pcall(cmd, ...)
    if refused(cmd) then
      return {err = refusal}
    end
    return real.pcall(cmd, ...)
  end
  return setmetatable(twin, {__index = real})
end)(redis)
"""


def _flags(name: str) -> str:
    if name in NO_WRITES:
        return "'no-writes'"
    return "'allow-oom'" if name in ALLOW_OOM else ""


_DIGEST = hashlib.sha1(
    repr(
        (
            sorted((n, _flags(n), s) for n, s in SOURCES.items()),
            sorted(FULL_TWINS),
            _FIRST_WRITE_DECIDES,
        )
    ).encode(),
    usedforsecurity=False,
).hexdigest()[:12]
LIBRARY_NAME = f"streamsaver_{_DIGEST}"


def function_name(entry: str, full: bool = False) -> str:
    """The library's function that runs ``entry`` (a name of ``SOURCES``); ``full``: its twin
    for a server out of memory (``FULL_TWINS``)."""
    return f"{LIBRARY_NAME}_{entry}{'__full' if full else ''}"


LIBRARY = "\n".join(
    [
        f"#!lua name={LIBRARY_NAME}",
        *(
            f"redis.register_function{{function_name='{function_name(name)}', "
            f"flags={{{_flags(name)}}}, callback=function(KEYS, ARGV)\n{text}\nend}}"
            for name, text in SOURCES.items()
        ),
        *(
            f"redis.register_function{{function_name='{function_name(name, True)}', "
            f"flags={{'allow-oom'}}, callback=function(KEYS, ARGV)\n"
            f"{_FIRST_WRITE_DECIDES}\n{SOURCES[name]}\nend}}"
            for name in sorted(FULL_TWINS)
        ),
    ]
)
"""Every entry as one function of one library (``FUNCTION LOAD``)."""
