"""``python -m projector run|status|rebuild|verify``: ``streamsaver projector ...``."""

from __future__ import annotations

from streamsaver.cli import projector_main

raise SystemExit(projector_main())
