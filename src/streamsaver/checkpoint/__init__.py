"""The checkpointer: ``RedisStreamSaver`` (sync, ``saver``) and ``AsyncRedisStreamSaver``
(asyncio, ``aio``), and the I/O-free operations both shells drive.

What lives here:

- the shells: ``saver`` and ``aio`` (they only send), ``bridges`` (each saver's other-colour
  half of LangGraph's interface), ``calls`` (what they ask a cluster's nodes for);
- what both shells share, free of I/O: ``base`` (the one constructor and its checks, the tail
  and consumer-group factories), ``options`` (the keyword options passed on, typed once);
- the operations, each a generator of Redis work: ``ops`` puts ``Operations`` together from
  ``state`` (what they share), ``hotpath`` (put, put_writes, get_tuple, list), ``compaction``,
  ``lifecycle`` (delete, copy, prune) and ``replay`` (rebuild, verify, reading the log back);
  ``history`` (``get_delta_channel_history``); ``projections`` (the cross-thread projections
  the savers read and the projector maintains); ``migrate`` (``migrate-keys``).

The Lua these operations call is ``lua/checkpoint/``.

What it may import: core, transport, lua, events, and the services after it: audit (a saver
reads its history) and tailing (a saver hands out tails). Never presentation
(tests/test_layers.py). The public names are re-exported by ``streamsaver``.
"""
