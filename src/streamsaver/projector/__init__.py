"""The projector service (``streamsaver projector run``, ``python -m projector``): consumer-group
members that keep the cross-thread projections (thread registry, run index, metadata search)
current. The projections' operations are ``checkpoint.projections``; their Lua,
``lua/projector/``.

What it may import: the checkpointer, tailing, core and events. Never presentation
(tests/test_layers.py).
"""

from .service import DEFAULT_GROUP, Projector, Totals

__all__ = ["DEFAULT_GROUP", "Projector", "Totals"]
