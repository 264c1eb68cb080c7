"""Rebuild and verify many threads: the code behind ``streamsaver rebuild|verify`` and
``python -m projector rebuild|verify``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..checkpoint.saver import RedisStreamSaver

__all__ = ["Report", "rebuild_threads", "verify_threads"]

Progress = Callable[[int, int], None]
# threads per rebuild_many call: how often progress is reported
REBUILD_BATCH = 64


@dataclass
class Report:
    threads: int = 0
    applied: int = 0
    skipped: int = 0
    differences: dict[str, list[str]] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)  # skipped events, and why


def _each(
    thread_ids: Sequence[str],
    step: Callable[[str, Report], None],
    progress: Progress | None,
) -> Report:
    report = Report()
    for report.threads, thread_id in enumerate(thread_ids, 1):
        step(thread_id, report)
        if progress:
            progress(report.threads, len(thread_ids))
    return report


def rebuild_threads(
    saver: RedisStreamSaver,
    thread_ids: Sequence[str],
    progress: Progress | None = None,
    batch: int = REBUILD_BATCH,
) -> Report:
    """Rebuild each thread, ``batch`` threads at a time (``progress`` after each batch; the
    slices of a few of them share each round trip: Operations.rebuild_many)."""
    report = Report()
    for start in range(0, len(thread_ids), batch):
        chunk = thread_ids[start : start + batch]
        for thread_id, replay in zip(chunk, saver.rebuild_many(chunk), strict=True):
            report.applied += replay.applied
            report.skipped += replay.skipped
            if replay.problems:
                report.problems[thread_id] = replay.problems
        report.threads += len(chunk)
        if progress:
            progress(report.threads, len(thread_ids))
    return report


def verify_threads(
    saver: RedisStreamSaver, thread_ids: Sequence[str], progress: Progress | None = None
) -> Report:
    def verify(thread_id: str, report: Report) -> None:
        applied, skipped, differences = saver.verify(thread_id)
        report.applied += applied
        report.skipped += skipped
        if differences:
            report.differences[thread_id] = differences

    return _each(thread_ids, verify, progress)
