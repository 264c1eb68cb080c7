"""The audit trail: a thread's history as a person reads it, its export, and the verification of
both (docs/audit.md). I/O-free: the savers feed it their log pages.

What it may import: core, events and tailing's decoding. Never a saver (it reads through the
``LogSource`` the saver's operations provide) nor presentation (tests/test_layers.py).
"""

from .trail import (
    FORMAT,
    FORMAT_VERSION,
    Break,
    ChainCheck,
    ExportCheck,
    ExportWriter,
    Timeline,
    export,
    latest,
    read_export,
    verify_export,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Break",
    "ChainCheck",
    "ExportCheck",
    "ExportWriter",
    "Timeline",
    "export",
    "latest",
    "read_export",
    "verify_export",
]
