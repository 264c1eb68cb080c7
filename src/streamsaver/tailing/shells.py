"""The sync and asyncio shells of tailing: they only send what the reader cores yield. The
sync ones are ``sync``'s, the asyncio ones ``aio``'s; what they share, free of I/O, is
``base``'s, and what they send down a connection of their own ``blocking``'s.

Blocking reads (``XREAD BLOCK``, ``XREADGROUP BLOCK``) go down a connection of their own, made
from the saver client's connection settings and closed with the tail: they never hold a
connection of the saver's pool, and they wait with a read timeout of the block time plus a
grace period, whatever ``socket_timeout`` the client has. On a standalone server the events
that feed pointers name are fetched down that connection too (it idles between blocking reads,
and it skips the pool on the way from a reply to its events). Everything else (probes,
acknowledgements, group scripts; pointer fetches on a cluster) is pipelined on the saver's
client.

Stopping: leaving a ``for`` loop (or ``close()`` / ``aclose()``) ends a tail at once; its
connection is closed. ``stop()`` from another thread ends a blocked read at once by shutting
that connection down: it needs no ``CLIENT UNBLOCK``, a permission that would let any user
abort any other's blocking reads. An asyncio tail also ends when its task is cancelled.
"""

from __future__ import annotations

from .aio import AsyncConsumerGroup, AsyncTail, AsyncTailAll
from .base import default_consumer_name
from .sync import ConsumerGroup, Tail, TailAll

__all__ = [
    "AsyncConsumerGroup",
    "AsyncTail",
    "AsyncTailAll",
    "ConsumerGroup",
    "Tail",
    "TailAll",
    "default_consumer_name",
]
