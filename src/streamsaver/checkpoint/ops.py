"""Every saver operation, written once, as a generator of Redis operations.

An operation yields ``Eval`` / ``Call`` / ``ScanLogs`` values and is sent back their replies; list
operations also yield ``Emit`` items for the caller (the steps and the loops that drive them:
``core.flow``). The sync and async savers only drive these generators, so key building,
encoding, validation and decoding live in them, free of I/O. A generator runs nothing until first
driven, and validates before its first yield: bad input raises before anything reaches Redis.

``Operations`` is one class put together from a mixin per concern, over the state they share:

- ``state``: the options the savers set, key and append helpers, slices, the threads listing;
- ``hotpath``: what a graph runs every step (``put``, ``put_writes``, ``get_tuple``, ``list``)
  and ``setup``;
- ``compaction``: ``compact`` in slices, which a put past ``keep_last`` runs too;
- ``lifecycle``: ``delete_thread``, ``delete_for_runs``, ``prune``, ``copy_thread``;
- ``replay``: ``rebuild``, ``verify`` and the log's entries as stored.
"""

from __future__ import annotations

from .hotpath import HotPath
from .lifecycle import Lifecycle
from .replay import Replaying

__all__ = [
    "Operations",
]


class Operations(HotPath, Lifecycle, Replaying):
    """The I/O-free core shared by ``RedisStreamSaver`` and ``AsyncRedisStreamSaver``."""
