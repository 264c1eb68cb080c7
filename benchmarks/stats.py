"""Percentiles and timing helpers shared by the workloads."""

from __future__ import annotations

import gc
import math
from collections.abc import Sequence

__all__ = ["NS_PER_MS", "median", "percentile", "settle"]

NS_PER_MS = 1_000_000


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: a value that was actually measured, never an interpolation."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


def settle() -> None:
    """Collect the previous peer's garbage so its GC pauses are not charged to the next peer."""
    gc.collect()
