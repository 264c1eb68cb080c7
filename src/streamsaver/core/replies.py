"""What the server's replies hold, as Python: text, and decoded values as JSON. No I/O."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic_core import to_jsonable_python

__all__ = ["as_text", "finite", "json_line", "jsonable"]


def as_text(value: Any) -> str:
    """A reply (bytes, or an int, or text already) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def jsonable(value: object) -> object:
    """``json.dumps(default=...)`` for decoded values: what JSON cannot hold becomes its repr."""
    try:
        return to_jsonable_python(value)
    except Exception:  # anything a serializer gave back that JSON cannot hold
        return repr(value)


def json_line(value: object, *, ensure_ascii: bool = True) -> str:
    """``value`` as one line of JSON, decoded values as ``jsonable`` makes them. NaN and
    ±Infinity, which JSON cannot hold (``json.dumps`` would write ``NaN``, which JSON parsers
    refuse), become null, as pydantic writes them. ``ensure_ascii``: non-ASCII text escaped,
    so a string holding a lone surrogate prints too."""
    return json.dumps(
        finite(value),
        default=lambda o: finite(jsonable(o)),
        allow_nan=False,
        ensure_ascii=ensure_ascii,
    )


def finite(value: object) -> object:
    """``value`` with every NaN and ±Infinity, in its dicts, lists and tuples, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
