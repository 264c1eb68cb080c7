"""Tailing and consumer groups, written once, free of I/O.

As in ``_ops``, each reader is a generator: it yields the Redis work it needs (``Batch`` of
non-blocking commands on the saver's client, ``Block`` for one blocking read on the reader's
own connection, ``Pause``) and is sent the replies; it yields ``Deliver`` for each event the
caller gets. ``tailing.py`` drives these generators with a sync or an asyncio client; they only
send and receive. Decoding events into ``ThreadEvent`` happens here, once.

- ``ThreadTail``: one thread's log, by stream id (``XREAD BLOCK`` on that one key).
- ``FeedTail``: every thread, through the per-slot feeds (``_feed.py``): the pointers say which
  thread event to fetch. Standalone: one ``XREAD BLOCK`` over every known feed. Cluster: a
  command may not span slots, so each round is one pipelined non-blocking ``XREAD`` per known
  feed (one round trip per node), and an idle round waits ``poll_ms``. Feeds that appear later
  are found by probing the 16384 possible feed names, a slice at a time, never by ``SCAN`` or
  ``KEYS``. The events a round's pointers name are fetched in one more round trip.
- ``GroupReader``: a consumer group on the feeds (``XREADGROUP``), with claiming, parking and
  reaping in one script per feed (lua/group_claim.lua).

Modules: ``steps`` (what a core yields: ``Batch``, ``Block``, ``Pause``, ``Deliver``; the
tail scripts), ``decode`` (replies to ``ThreadEvent``), ``thread`` (``ThreadTail`` and the
options every reader shares), ``feeds`` (``FeedTail``), ``groups`` (``GroupReader``). The
transport that sends a ``Batch`` is ``_transport.py``'s, as for the savers.
"""

from __future__ import annotations

from .decode import Entry, decode_event, entries, streams

# the console (streamsaver.web) orders stream ids with it, imported from here
from .decode import _id_key as _id_key
from .feeds import FeedTail
from .groups import GroupReader
from .steps import (
    DEFAULT_BLOCK_MS,
    DEFAULT_COUNT,
    DEFAULT_DISCOVER_MS,
    DEFAULT_POLL_MS,
    SCRIPTS,
    SWEEP_SLICES,
    TAIL_COMMANDS,
    Batch,
    Block,
    Command,
    Deliver,
    Pause,
    Report,
    ScriptCall,
    Step,
    TailFlow,
    TailOp,
    script_source,
)
from .thread import ThreadTail

__all__ = [
    "DEFAULT_BLOCK_MS",
    "DEFAULT_COUNT",
    "DEFAULT_DISCOVER_MS",
    "DEFAULT_POLL_MS",
    "SCRIPTS",
    "SWEEP_SLICES",
    "TAIL_COMMANDS",
    "Batch",
    "Block",
    "Command",
    "Deliver",
    "Entry",
    "FeedTail",
    "GroupReader",
    "Pause",
    "Report",
    "ScriptCall",
    "Step",
    "TailFlow",
    "TailOp",
    "ThreadTail",
    "decode_event",
    "entries",
    "script_source",
    "streams",
]
