"""Maintenance of many threads at once: rebuild and verify by replay (``threads``), and the
checks of ``streamsaver doctor`` (``doctor``).

What it may import: the checkpointer, core and transport. Never presentation
(tests/test_layers.py): progress bars and tables are the command line's.
"""

from .threads import Report, rebuild_threads, verify_threads

__all__ = ["Report", "rebuild_threads", "verify_threads"]
