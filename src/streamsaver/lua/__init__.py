"""The Lua scripts, assembled from the ``.lua`` files beside this module. Each entry script is
preceded by the shared files it needs, so the projection (checkpoint/projection.lua) exists
exactly once.

The files are grouped as the Python is: ``shared/`` (every script's helpers: common.lua,
the slice clock, metadata forms), ``checkpoint/`` (a thread's log and indexes: append, reads,
compaction, deletion, replay, verify), ``store/`` (the Store's log and indexes), ``projector/``
(the cross-thread projections) and ``tailing/`` (consumer groups). A file's name is unique
across the folders, so an entry names its parts by file name alone.

What it may import: the standard library only; everything that calls a script imports it
(tests/test_layers.py)."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

__all__ = ["READ_ONLY", "SOURCES", "source"]

# Scripts that only read: a read-only ACL user (``%R~`` keys, acl.py) may run them only as
# EVALSHA_RO, since EVALSHA declares its keys read-write (see transport.core.Scripts.verb).
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
