"""The checkpointer: ``RedisStreamSaver`` (sync, ``saver``) and ``AsyncRedisStreamSaver``
(asyncio, ``aio``), and the I/O-free operations both shells drive.

What lives here: the options both savers check (``base``), every saver operation written once
as a generator of Redis work (``ops``), ``get_delta_channel_history`` (``history``), the
cross-thread projections the savers read and the projector maintains (``projections``), and
``migrate-keys`` (``migrate``). The Lua these operations call is ``lua/checkpoint/``.

What it may import: core, transport, lua, events, and the services below it: tailing (a saver
hands out tails) and audit (a saver reads its history). Never presentation (tests/test_layers.py).
The public names are re-exported by ``streamsaver``.
"""
