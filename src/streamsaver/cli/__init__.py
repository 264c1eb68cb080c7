"""The ``streamsaver`` command line, on typer (click) with rich help, tables and progress.

Each command lives beside what it shows: ``maintain`` (threads, rebuild, verify, migrate-keys),
``tail``, ``audit`` (history, audit), ``store``, ``projector``, ``doctor``, ``demo``; ``app``
assembles them. ``common`` holds the shared options and the one place an exception becomes a
one-line error and an exit code; ``render`` and ``progress`` what people see.

What it may import: everything below it. Nothing imports it but ``streamsaver.__main__``
(tests/test_layers.py).
"""

from .app import *  # noqa: F403
from .app import __all__ as __all__
