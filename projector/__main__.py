"""``python -m projector run|status|rebuild|verify`` (see projector/cli.py)."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
