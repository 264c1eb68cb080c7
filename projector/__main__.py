"""``python -m projector rebuild|verify``: replay event logs into indexes, or check them."""

from __future__ import annotations

import sys

from streamsaver.cli import main

raise SystemExit(main(sys.argv[1:], prog="python -m projector", demo=False))
