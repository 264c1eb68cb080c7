"""The transport: one core that turns the Redis work operations yield into what goes on the
wire, and the thin sync and asyncio shells that send it.

What lives here: the I/O-free core (``core``: a batch of operations to commands and replies back,
``exchange``: one operation's whole exchange, ``moves``: a cluster's slot moves), the protocol
(``resp``), the client options (``clients``), and the shells' sending (``sending``; the sync
``connection``; the asyncio ``multiplex`` and ``pipelining``, which auto-pipeline concurrent
calls on one connection).

What it may import: ``streamsaver.core``, ``streamsaver.lua`` and redis-py. Never a service or
presentation (tests/test_layers.py).
"""
