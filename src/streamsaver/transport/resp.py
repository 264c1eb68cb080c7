"""Streamsaver's own commands in the Redis protocol, packed in one pass.

redis-py's asyncio connection packs every argument through its encoder in Python, one join per
argument: a profile of 64 concurrent agent threads found ~26 of them per ``EVALSHA`` (50,560
``encode`` calls for 1,920 commands) and its packing at a sixth of the client's time. Here a
batch of commands becomes one ``bytes``: by hiredis's C packer when hiredis is installed (what
redis-py's sync connection already uses), else by one join of the arguments' bytes.

Only on a connection that would have sent the same bytes: a stock ``pack_command`` and a
UTF-8, strict encoder. Any other connection (a custom class, another encoding) packs its own
way, as before. Our commands name every word of a verb apart (``"SCRIPT", "LOAD"``), so the
splitting redis-py does on a first argument with spaces is never needed.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import redis.asyncio.connection
import redis.connection
from redis.exceptions import DataError

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is an optional extra
    _hiredis_pack = None

__all__ = ["by_bytes", "lean", "pack", "pack_python", "packed"]

Command = Sequence[Any]

_STOCK = (
    redis.connection.AbstractConnection.pack_command,
    redis.asyncio.connection.AbstractConnection.pack_command,
)


def lean(conn: Any) -> bool:
    """Whether ``pack`` gives the bytes ``conn``'s own packing would."""
    encoder = conn.encoder
    cls: Any = type(conn)
    return _same(cls, encoder.encoding, encoder.encoding_errors)


@lru_cache(maxsize=64)
def _same(cls: Any, encoding: str, errors: str) -> bool:
    return (
        cls.pack_command in _STOCK
        and errors == "strict"
        and codecs.lookup(encoding).name == "utf-8"
    )


def pack_python(commands: Iterable[Command]) -> bytes:
    """``commands`` in the Redis protocol, without hiredis."""
    parts: list[bytes] = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, str):
                data = arg.encode()
            elif isinstance(arg, memoryview):
                data = arg.tobytes()
            elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
                data = repr(arg).encode()
            else:
                raise DataError(
                    f"Invalid input of type: '{type(arg).__name__}'. "
                    "Convert to a bytes, string, int or float first."
                )
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _pack_hiredis(commands: Iterable[Command]) -> bytes:
    try:
        return b"".join([_hiredis_pack(tuple(command)) for command in commands])
    except TypeError as exc:
        raise DataError(str(exc)) from exc


pack = pack_python if _hiredis_pack is None else _pack_hiredis
"""``commands`` in the Redis protocol: one ``bytes`` for ``send_packed_command``."""


def packed(conn: Any, commands: Sequence[Any]) -> list[bytes]:
    """What to pass ``conn.send_packed_command`` for ``commands``: our packing where it gives
    the same bytes, the connection's own otherwise."""
    if lean(conn):
        return [pack(commands)]
    return conn.pack_commands(commands)  # type: ignore[no-any-return]


def by_bytes(groups: Sequence[Sequence[Command]], limit: int) -> int:
    """How many of ``groups`` (each a caller's commands) fit in about ``limit`` bytes of
    arguments: one at least."""
    size = 0
    for i, commands in enumerate(groups):
        size += sum(
            len(arg) if isinstance(arg, (bytes, str, memoryview)) else 8
            for command in commands
            for arg in command
        )
        if i and size > limit:
            return i
    return len(groups)
