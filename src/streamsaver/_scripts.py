"""The Lua scripts, assembled from src/streamsaver/lua. Each entry script is preceded by the
shared files it needs, so the projection (projection.lua) exists exactly once."""

from __future__ import annotations

from importlib.resources import files

__all__ = ["SOURCES"]

# Redis runs a script's whole chunk on every call, defining each function again: every entry
# takes only the files it calls.
_WRITE = ("common.lua", "projection.lua")
_READ = ("common.lua", "read.lua")
_ENTRIES: dict[str, tuple[str, ...]] = {
    "append": _WRITE,
    "get": _READ,
    "list": _READ,
    "delete_runs": _WRITE,
    "delete_thread": ("common.lua", "delete_thread.lua"),
    "replay": _WRITE,
    "verify": _WRITE,
    "import": _WRITE,
    "compact": (*_WRITE, "read.lua"),
    # the projector's (registry.lua)
    "project": ("common.lua", "registry.lua"),
    "seed": ("common.lua", "registry.lua"),
    "sweep": ("common.lua", "registry.lua"),
    "lag": ("common.lua", "registry.lua"),
    "thread_row": ("common.lua", "registry.lua"),
    "threads_page": ("common.lua", "registry.lua"),
    "candidates": ("common.lua", "registry.lua"),
}


def _read(name: str) -> str:
    return (files("streamsaver") / "lua" / name).read_text(encoding="utf-8")


SOURCES: dict[str, str] = {
    name: "\n".join(_read(part) for part in dict.fromkeys((*parts, f"{name}.lua")))
    for name, parts in _ENTRIES.items()
}
