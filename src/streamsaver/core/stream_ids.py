"""What a Redis stream entry id looks like: ``<ms>-<seq>``, each part an unsigned 64-bit integer.
One definition for every place that takes an id from outside (a tail's event, an audit page's
``before``, a shared part's reference, the console's cursors)."""

from __future__ import annotations

import re
from typing import TypeGuard

__all__ = ["ENTRY_ID", "id_key", "is_entry_id"]

_PART = r"\d{1,20}"
ENTRY_ID = f"{_PART}-{_PART}"  # for patterns that embed it; is_entry_id also bounds the parts
_ENTRY_ID = re.compile(f"({_PART})-({_PART})")
_MAX = 2**64


def id_key(entry_id: str) -> tuple[int, int]:
    """An entry id as a sort key: ids order by (ms, seq) as numbers, not as strings."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def is_entry_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string a stream could hold as an entry id."""
    if not isinstance(value, str):
        return False
    match = _ENTRY_ID.fullmatch(value)
    return match is not None and all(int(part) < _MAX for part in match.groups())
