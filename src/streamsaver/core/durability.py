"""Durability modes: what a write waits for before it is acknowledged. No I/O.

- ``"none"``: acknowledged when the primary has it in memory. A crash loses what the server's
  own persistence (AOF/RDB settings) had not written; a failover loses what replicas lacked.
- ``"replicated"``: ``WAIT replicas timeout`` after each write, in the same round trip. A
  failover to a replica that acknowledged loses nothing acknowledged; fewer acks within the
  timeout raise ``DurabilityError`` (the write stays on the primary).
- ``"fsync"``: ``WAITAOF 1 0 timeout`` (Redis >= 7.2, AOF on): acknowledged once the primary's
  AOF is fsynced, so a crash and restart of the primary loses nothing acknowledged.
"""

from __future__ import annotations

from typing import Any, Literal

from .config import bounded_int
from .errors import InvalidInputError, StreamSaverError, UnsupportedServerError

__all__ = ["Durability", "DurabilityError", "DurabilityMode"]

DurabilityMode = Literal["none", "replicated", "fsync"]
_MODES = ("none", "replicated", "fsync")


class DurabilityError(StreamSaverError):
    """A write reached the primary but not the durability asked for within the timeout."""


class Durability:
    def __init__(self, mode: str, replicas: int, timeout_ms: int) -> None:
        if mode not in _MODES:
            raise InvalidInputError(
                f"durability={mode!r} is unknown; use 'none', 'replicated' or 'fsync'"
            )
        for name, value in (("replicas", replicas), ("durability_timeout_ms", timeout_ms)):
            bounded_int(value, name, 1)
        self.mode = mode
        self.replicas = replicas
        self.timeout_ms = timeout_ms

    def command(self) -> tuple[str | int, ...] | None:
        """What to send after each write, on the same connection; None for ``"none"``."""
        if self.mode == "replicated":
            return ("WAIT", self.replicas, self.timeout_ms)
        if self.mode == "fsync":
            return ("WAITAOF", 1, 0, self.timeout_ms)
        return None

    def check_server(self, version: tuple[int, ...], info: Any) -> None:
        if self.mode != "fsync":
            return
        if version < (7, 2):
            raise UnsupportedServerError(
                f"durability='fsync' needs WAITAOF, from Redis 7.2; this server is "
                f"{'.'.join(map(str, version))}: upgrade it, or use durability='replicated'"
            )
        nodes = info.values() if "aof_enabled" not in info else [info]
        if not all(int(node.get("aof_enabled", 0)) for node in nodes):
            raise UnsupportedServerError(
                "durability='fsync' needs the AOF: start Redis with --appendonly yes "
                "(and --appendfsync everysec or always)"
            )

    def check_ack(self, ack: Any) -> None:
        if self.mode == "replicated" and int(ack) < self.replicas:
            raise DurabilityError(
                f"the write reached the primary but only {int(ack)} of {self.replicas} "
                f"replica(s) acknowledged it within {self.timeout_ms} ms: it may be lost if the "
                f"primary fails now. Check the replicas (INFO replication) or raise "
                f"durability_timeout_ms"
            )
        if self.mode == "fsync" and int(ack[0]) < 1:
            raise DurabilityError(
                f"the write reached the primary but its AOF was not fsynced within "
                f"{self.timeout_ms} ms: it may be lost if the server crashes now"
            )
