"""The operator console: a read-only web view of a prefix's threads, with a JSON and
Server-Sent Events API (docs/console.md). Needs the ``web`` extra (``streamsaver[web]``).

``create_app`` returns an ASGI app to run or mount in your own; ``serve`` runs it with uvicorn,
as ``streamsaver serve`` does.

What it may import: the services (an ``AsyncRedisStreamSaver`` reads for it, through the same
operations as any caller), core and events. Nothing below it imports it (tests/test_layers.py).
"""

from __future__ import annotations

from ._app import TOKEN_ENV, create_app, serve

__all__ = ["TOKEN_ENV", "create_app", "serve"]
