"""The Lua scripts, assembled from src/streamsaver/lua. Each entry script is preceded by the
shared files it needs, so the projection (projection.lua) exists exactly once."""

from __future__ import annotations

from importlib.resources import files

__all__ = ["READ_ONLY", "SOURCES"]

# Scripts that only read: a read-only ACL user (``%R~`` keys, acl.py) may run them only as
# EVALSHA_RO, since EVALSHA declares its keys read-write (see _base.script_command).
READ_ONLY = frozenset(
    {"get", "list", "thread_row", "threads_page", "candidates", "lag", "slot_threads"}
)

# Redis runs a script's whole chunk on every call, defining each function again: every entry
# takes only the files it calls. The last file is the entry's body. slice.lua comes first where
# it is used: its clock then counts those definitions (tens of microseconds) in the slice.
_WRITE = ("common.lua", "projection.lua")
_READ = ("common.lua", "read.lua")
_COMPACT = (*_WRITE, "read.lua", "delta.lua", "compact.lua")
_ENTRIES: dict[str, tuple[str, ...]] = {
    # a saver without keep_last never compacts in a put: its appends skip compact.lua's
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
    "verify_slice": ("slice.lua", *_WRITE, "refs.lua", "verify_slice.lua"),
    "import": ("slice.lua", *_WRITE, "import.lua"),
    "prune": (*_COMPACT, "prune.lua"),
    "compact_slice": ("slice.lua", *_COMPACT, "compact_slice.lua"),
    # the Store's (store.lua holds its one projection)
    **{
        name: ("common.lua", "store.lua", f"{name}.lua")
        for name in ("store_write", "store_read", "store_expire")
    },
    **{
        name: ("slice.lua", "common.lua", "store.lua", f"{name}.lua")
        for name in ("store_slice", "store_scan")
    },
    # the projector's (registry.lua)
    **{
        name: ("slice.lua", "common.lua", "meta.lua", "registry.lua", f"{name}.lua")
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


def _read(name: str) -> str:
    return (files("streamsaver") / "lua" / name).read_text(encoding="utf-8")


SOURCES: dict[str, str] = {
    name: "\n".join(_read(part) for part in dict.fromkeys(parts))
    for name, parts in _ENTRIES.items()
}
