"""A checkout's ``python -m projector``: the service lives in ``streamsaver.projector`` and its
commands in ``streamsaver projector``; this folder is not part of the wheel (another project
owns the import name ``projector`` on PyPI)."""

from streamsaver.projector import DEFAULT_GROUP, Projector, Totals

__all__ = ["DEFAULT_GROUP", "Projector", "Totals"]
