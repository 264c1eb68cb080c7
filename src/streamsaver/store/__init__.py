"""The Store: ``RedisStreamStore`` and ``AsyncRedisStreamStore``, LangGraph Stores whose every
put and delete is an event in a Redis stream (docs/store.md).

What lives here: the two shells (``stores``), every Store operation written once (``ops``), its
searches (``scan``, ``index`` for semantic search, ``vectors`` for the server's vector index)
and its rebuild and verify in slices (``slices``). The Lua is ``lua/store/``.

What it may import: core, transport, lua, memory_events and the checkpointer (a store sends
through a saver of its prefix). Never presentation (tests/test_layers.py).
"""

from .stores import AsyncRedisStreamStore, RedisStreamStore

__all__ = ["AsyncRedisStreamStore", "RedisStreamStore"]
