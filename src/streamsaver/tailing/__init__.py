"""Tailing and consumer groups: readers written once, free of I/O, and their sync and asyncio
shells (``shells``: ``Tail``, ``TailAll``, ``ConsumerGroup`` and their async twins).

As in ``checkpoint.ops``, each reader is a generator: it yields the Redis work it needs
(``Batch`` of non-blocking commands on the saver's client, ``Block`` for one blocking read on
the reader's own connection, ``Pause``) and is sent the replies; it yields ``Deliver`` for each
event the caller gets. The shells drive these generators with a sync or an asyncio client; they
only send and receive. Decoding events into ``ThreadEvent`` happens here, once.

- ``ThreadTail``: one thread's log, by stream id (``XREAD BLOCK`` on that one key).
- ``FeedTail``: every thread, through the per-slot feeds (``core.feeds``): the pointers say which
  thread event to fetch. Standalone: one ``XREAD BLOCK`` over every known feed. Cluster: a
  command may not span slots, so each round is one pipelined non-blocking ``XREAD`` per known
  feed (one round trip per node), and an idle round waits ``poll_ms``. Feeds that appear later
  are found by probing the 16384 possible feed names, a slice at a time, never by ``SCAN`` or
  ``KEYS``. The events a round's pointers name are fetched in one more round trip.
- ``GroupReader``: a consumer group on the feeds (``XREADGROUP``), with claiming, parking and
  reaping in one script per feed (lua/tailing/group_claim.lua).

Modules: ``steps`` (what a core yields: ``Batch``, ``Block``, ``Pause``, ``Deliver``; the
tail scripts), ``decode`` (replies to ``ThreadEvent``), ``thread`` (``ThreadTail`` and the
options every reader shares), ``feeds`` (``FeedTail``), ``groups`` (``GroupReader``). The
shells: ``sync`` and ``aio``, re-exported by ``shells``; what they share, free of I/O, is
``base`` (the flow of each step), ``blocking`` (what goes down a tail's own connection) and
``views`` (what a public tail tells of where it is). The transport that sends a ``Batch`` is
``transport.core``'s, as for the savers.

What it may import: core, transport, lua and events. Never a saver (a tail takes its saver as
an argument, typed by a Protocol), nor presentation (tests/test_layers.py).
"""

from . import shells
from .shells import *  # noqa: F403 (the names are shells.__all__)

__all__ = shells.__all__
