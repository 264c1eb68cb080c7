"""What the server's replies hold, as Python: text, and decoded values as JSON. No I/O."""

from __future__ import annotations

from typing import Any

from pydantic_core import to_jsonable_python

__all__ = ["as_text", "jsonable"]


def as_text(value: Any) -> str:
    """A reply (bytes, or an int, or text already) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def jsonable(value: object) -> object:
    """``json.dumps(default=...)`` for decoded values: what JSON cannot hold becomes its repr."""
    try:
        return to_jsonable_python(value)
    except Exception:  # anything a serializer gave back that JSON cannot hold
        return repr(value)
