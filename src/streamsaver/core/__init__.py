"""The core: the I/O-free vocabulary every other package speaks.

What lives here: the exceptions (``errors``); the keyspace (``keys``, with ``feeds`` for the
per-slot keys and ``slots`` for cluster slot tags); reading a ``RunnableConfig`` (``config``);
events as stream fields and back (``codec`` puts together ``encoding``, ``decoding``,
``values`` and the format's vocabulary ``fields``; ``metadata`` for metadata checks and filter
forms; ``delta`` for append-only channels; ``chain`` for the digest chain; ``nodes`` for which
node a task ran; ``stream_ids``); the steps an operation yields and the loops that drive them
(``flow``, ``pages``, ``slicing``); durability modes (``durability``); and what a server's
replies and ``INFO`` say (``replies``, ``server``).

What it may import: the standard library, redis-py's exception types, LangGraph's checkpoint
types, and ``streamsaver.core`` itself. Never transport, a service (checkpoint, store, tailing,
audit, projector, maintenance) or presentation (cli, web): tests/test_layers.py fails CI if it does.
"""
