"""The Store: ``RedisStreamStore`` and ``AsyncRedisStreamStore``, LangGraph Stores whose every
put and delete is an event in a Redis stream (docs/store.md).

What lives here: the two shells (``stores``) and what they share, written once (``shell``:
the constructor, each operation's signature and docstring); every Store operation written once
as a generator of Redis work (``ops``: the batch and its writes, on ``base``: the options and
keys), by concern: a batch's reads (``reads``), its searches (``scan``, ``index`` for semantic
search, ``vectors`` for the server's vector index), and what reads or replays the logs whole
(``logs``: history, changes and tail, TTL sweep, rebuild and verify in slices by ``slices``).
The Lua is ``lua/store/``.

What it may import: core, transport, lua, memory_events and the checkpointer (a store sends
through a saver of its prefix). Never presentation (tests/test_layers.py).
"""

from .stores import AsyncRedisStreamStore, RedisStreamStore

__all__ = ["AsyncRedisStreamStore", "RedisStreamStore"]
