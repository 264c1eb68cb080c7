"""The core: the I/O-free vocabulary every other package speaks.

What lives here: the exceptions (``errors``), the keyspace (``keys``, ``feeds``, ``slots``),
reading a ``RunnableConfig`` (``config``), events as stream fields and back (``codec``, with
``delta`` for append-only channels and ``chain`` for the digest chain), the steps an operation
yields and the loops that drive them (``flow``, ``pages``, ``slicing``), durability modes, and
what a server's replies and ``INFO`` say (``replies``, ``server``).

What it may import: the standard library, redis-py's exception types, LangGraph's checkpoint
types, and ``streamsaver.core`` itself. Never transport, a service (checkpoint, store, tailing,
audit, projector, maintenance) or presentation (cli, web): tests/test_layers.py fails CI if it does.
"""
