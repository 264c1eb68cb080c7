"""The event format's vocabulary: its schema version, what a stream field holds, and channel
versions as text. The layout itself is docs/events.md; ``codec`` builds and reads it."""

from __future__ import annotations

import ormsgpack

from .errors import InvalidInputError

__all__ = ["EMPTY", "SCHEMA_VERSION", "SHARED", "Field", "parse_version", "version_key"]

SCHEMA_VERSION = 2
Field = str | bytes
# the value of a channel that new_versions names and channel_values lacks
EMPTY = ormsgpack.packb(("empty", b""))
# how an append part that names a write's bytes starts (core.delta.Written)
SHARED = b"\x94\xa6shared"  # ormsgpack.packb(("shared", ref, offset, n))[:8]


def version_key(version: object) -> str:
    """A channel version as text, typed so that 1, 1.0 and "1" stay distinct."""
    if isinstance(version, str):
        return "s" + version
    if isinstance(version, int) and not isinstance(version, bool):
        return f"i{version}"
    if isinstance(version, float):
        return "f" + repr(version)
    raise InvalidInputError(
        f"channel version {version!r} is a {type(version).__name__}; versions must be str, "
        f"int or float (what get_next_version returns)"
    )


def parse_version(key: str) -> str | int | float:
    kind, text = key[0], key[1:]
    if kind == "i":
        return int(text)
    if kind == "f":
        return float(text)
    return text
