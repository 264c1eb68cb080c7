"""The audit trail: a thread's history as a person reads it, its export, and the verification of
both (docs/audit.md). I/O-free: the savers feed it their log pages.

What it may import: core, events and tailing's decoding. Never a saver (it reads through the
``LogSource`` the saver's operations provide) nor presentation (tests/test_layers.py).
"""

from . import exports, timeline, trail
from .exports import *  # noqa: F403
from .timeline import *  # noqa: F403
from .trail import *  # noqa: F403

__all__ = [*exports.__all__, *timeline.__all__, *trail.__all__]
