"""Workload 5: live tailing, from a write in one process to a tailer in another holding it.

The measurement is ``benchmarks.tail_latency`` (also a command of its own); here it runs on a
dedicated server and lands in the report as a table with ratios to its raw floor.
"""

from __future__ import annotations

from ..backends import RedisBackend, open_backend
from ..harness import Context
from ..results import Section
from ..tail_latency import PATHS, Settings, latency_table, measure

__all__ = ["run"]

KEY = "tail"


def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    settings = Settings(events=cfg.tail_events, rounds=cfg.rounds)
    section = Section(
        KEY,
        "Live tailing",
        f"{settings.events} events per path and round, {settings.interval_ms:g} ms apart, "
        f"{settings.rounds} round(s) in rotated order: a bare `XADD` read by a bare `XREAD BLOCK` "
        f"in another process (the raw floor), and a `put` read by `saver.tail(thread_id)` and "
        f"by `saver.tail_all()` in another process. *From sent*: from the writer's connection "
        f"starting to send the command (after `put` has encoded the checkpoint) to the tailer "
        f"holding the decoded event. *From return*: from the write returning; Redis "
        f"sends the waiting reader its reply before the writer's, so that floor is about zero "
        f"and those figures compare by difference, not by ratio.",
    )
    with open_backend("redis", cfg.postgres_url) as backend:
        assert isinstance(backend, RedisBackend)
        with ctx.bar("tail", settings.rounds * len(PATHS)) as bar:
            samples = measure(backend.url, settings, bar.update)
    section.tables.append(latency_table(samples, "Tail latency"))
    return section
