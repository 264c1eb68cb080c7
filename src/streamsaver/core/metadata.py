"""Checkpoint metadata: the checks every put makes (JSON-like, UTF-8, ints msgpack holds) and
the forms lua/shared/meta.lua compares when ``list(filter=...)`` filters on it. No I/O."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .errors import InvalidInputError

__all__ = ["check_metadata", "metadata_form"]

_JSON_SCALARS = (str, int, float, bool, type(None))
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack holds
_TWO64 = 2**64
# a filter value no stored value equals (NaN; an int beyond 64 bits no float equals): no form
# lua/shared/meta.lua builds contains it
_NEVER = "~"


def _path(at: tuple[object, ...]) -> str:
    return str(at[0]) + "".join(f"[{step!r}]" for step in at[1:])


def _check_text_at(text: str, what: str, at: tuple[object, ...]) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        _check_text(text, what, _path(at))


def _check_text(text: str, what: str, path: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{what} {text!r} at {path} holds a lone surrogate, which UTF-8 cannot store; "
            f"remove it or replace it (text.encode('utf-8', 'replace').decode())"
        ) from None


def check_metadata(value: object, path: str, *, stored: bool = True) -> None:
    """``stored``: metadata to put, whose ints must fit in msgpack's 64 bits; a filter's may
    be any size (metadata_form())."""
    # Metadata is stored as plain msgpack so list(filter=...) can compare it inside Redis.
    _check_metadata_at(value, (path,), stored)


def _check_metadata_at(value: object, at: tuple[object, ...], stored: bool) -> None:
    """``at``: the path's root name, then each key and index below it; made into text only
    for an error (every put checks its metadata, every key of it)."""
    kind = type(value)
    if kind is str:
        _check_text_at(value, "metadata string", at)  # type: ignore[arg-type]
        return
    if kind is dict:
        for k, item in value.items():  # type: ignore[attr-defined]
            if not isinstance(k, str):
                raise InvalidInputError(f"metadata key {k!r} at {_path(at)} must be a string")
            _check_text_at(k, "metadata key", at)
            _check_metadata_at(item, (*at, k), stored)
        return
    if isinstance(value, str):
        _check_text_at(value, "metadata string", at)
        return
    if isinstance(value, int) and not isinstance(value, bool):
        if stored and not _INT_MIN <= value <= _INT_MAX:
            raise InvalidInputError(
                f"metadata value at {_path(at)} is the integer {value}, beyond the 64 bits "
                f"msgpack stores ({_INT_MIN} to {_INT_MAX}); store it as a string"
            )
        return
    if isinstance(value, _JSON_SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_metadata_at(item, (*at, i), stored)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidInputError(f"metadata key {k!r} at {_path(at)} must be a string")
            _check_text_at(k, "metadata key", at)
            _check_metadata_at(item, (*at, k), stored)
        return
    path = _path(at)
    raise InvalidInputError(
        f"metadata value at {path} is a {type(value).__name__} ({value!r}); metadata holds "
        f"JSON-like values (str, int, float, bool, None, lists, dicts) so it can be filtered; "
        f"put other data in the graph state"
    )


def _int_form(n: int) -> str:
    return "i0;" if n == 0 else f"{'i-' if n < 0 else 'i'}{abs(n):x};"


def _float_form(f: float) -> str:
    if math.isnan(f):
        return _NEVER
    if f.is_integer() and -_TWO64 < f < _TWO64:
        return _int_form(int(f))
    return f"f{f:.17g};"


def metadata_form(value: object) -> str:
    """A checked (check_metadata) metadata value as lua/shared/meta.lua reads it from the stored
    bytes: equal forms exactly when Python's == holds (1 == 1.0 == True, [] != {}, NaN equals
    nothing), as InMemorySaver compares. Tuples are lists, as msgpack stores them."""
    if value is None:
        return "z"
    if isinstance(value, bool):
        return "i1;" if value else "i0;"
    if isinstance(value, int):
        if -_TWO64 < value < _TWO64:
            return _int_form(value)
        try:
            f = float(value)
        except OverflowError:
            return _NEVER
        return _float_form(f) if f == value else _NEVER
    if isinstance(value, float):
        return _float_form(value)
    if isinstance(value, str):
        return f"s{len(value.encode())}:{value}"
    if isinstance(value, (list, tuple)):
        return f"l{len(value)}:" + "".join(map(metadata_form, value))
    if isinstance(value, Mapping):
        entries = sorted(
            ((metadata_form(k), metadata_form(v)) for k, v in value.items()),
            key=lambda e: e[0].encode(),
        )
        return f"m{len(entries)}:" + "".join(k + v for k, v in entries)
    raise InvalidInputError(f"metadata value {value!r} is not JSON-like")
