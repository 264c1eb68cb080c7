"""Workload 3: do reads slow down as a thread's history grows?

Each peer gets one thread per depth, filled with small checkpoints (one ``counter`` channel, so
the fill measures depth, not payload); ``get_tuple(latest)`` and one ``list(limit=10)`` page are
then timed with every (peer, depth) pair taking turns sample by sample.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointMetadata,
    copy_checkpoint,
    create_checkpoint,
    empty_checkpoint,
)

from ..conversation import thread_config
from ..floors import Op, RawFloor, RecordingSaver
from ..harness import Context, Failures, Opened, open_sync, rotated
from ..peers import SyncTarget
from ..results import Metric, Section, Series, Table
from ..stats import NS_PER_MS, median, settle

__all__ = ["run"]

KEY = "history"
PAGE = 10
CHANNEL = "counter"

Saver = BaseCheckpointSaver[Any]


@dataclass
class Chain:
    """Where a peer's thread has got to: the config and checkpoint the next put extends."""

    thread: str
    config: RunnableConfig
    checkpoint: Checkpoint
    depth: int = 0


def _extend(saver: Saver, chain: Chain) -> None:
    base = copy_checkpoint(chain.checkpoint)
    version = saver.get_next_version(base["channel_versions"].get(CHANNEL), None)
    base["channel_values"][CHANNEL] = chain.depth
    base["channel_versions"][CHANNEL] = version
    checkpoint = create_checkpoint(base, None, chain.depth)
    metadata: CheckpointMetadata = {"source": "loop", "step": chain.depth, "parents": {}}
    chain.config = saver.put(chain.config, checkpoint, metadata, {CHANNEL: version})
    chain.checkpoint = checkpoint
    chain.depth += 1


def _raw_put() -> Op:
    """The bytes of one fill checkpoint, as the raw floor appends it."""
    recorder = RecordingSaver()
    chain = Chain("raw", thread_config("raw"), empty_checkpoint())
    _extend(recorder, chain)
    return recorder.take()[0]


def _grow(
    o: Opened[SyncTarget], chain: Chain, depth: int, raw_put: Op, tick: Callable[[], object]
) -> None:
    target = o.target
    if isinstance(target, RawFloor):
        target.fill(chain.thread, raw_put, depth - chain.depth)
        tick()
        chain.depth = depth
        return
    while chain.depth < depth:
        _extend(target, chain)
        tick()


def _time_get(target: SyncTarget, chain: Chain) -> float:
    if isinstance(target, RawFloor):
        start = perf_counter_ns()
        target.run(chain.thread, [Op("get")])
        return (perf_counter_ns() - start) / NS_PER_MS
    config = thread_config(chain.thread)
    start = perf_counter_ns()
    target.get_tuple(config)
    return (perf_counter_ns() - start) / NS_PER_MS


def _time_page(target: SyncTarget, chain: Chain) -> float:
    if isinstance(target, RawFloor):
        start = perf_counter_ns()
        target.run(chain.thread, [Op("list", count=PAGE)])
        return (perf_counter_ns() - start) / NS_PER_MS
    config = thread_config(chain.thread)
    start = perf_counter_ns()
    page = list(target.list(config, limit=PAGE))
    elapsed = (perf_counter_ns() - start) / NS_PER_MS
    if len(page) != min(PAGE, chain.depth):
        # a short page would make a slow saver look fast
        raise RuntimeError(f"list(limit={PAGE}) returned {len(page)} checkpoints")
    return elapsed


def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    depths = sorted(cfg.history_depths)
    section = Section(
        KEY,
        "History depth",
        f"Each peer gets one thread per depth, filled with small checkpoints (one `{CHANNEL}` "
        f"channel, so the fill grows depth, not payload). Then `get_tuple(latest)` and one "
        f"`list(limit={PAGE})` page are timed {cfg.history_samples} times each after one untimed "
        f"pass, every depth and peer taking turns sample by sample, so a noisy moment on this "
        f"shared machine hits every depth alike instead of whichever was measured then; the "
        f"figure is the median. The last column divides the deepest figure by the shallowest.",
    )
    metrics = [Metric(f"d{d}", f"at {d:,}", "ms") for d in depths]
    growth = Metric("growth", f"{depths[-1]:,} / {depths[0]:,}", "x", ratios=False)
    get_table = Table(f"{KEY}_get", "get_tuple(latest), p50 (ms)", [*metrics, growth])
    page_table = Table(f"{KEY}_list", f"one list(limit={PAGE}) page, p50 (ms)", [*metrics, growth])
    failures = Failures()
    raw_put = _raw_put()
    fills = sum(depths) * len(ctx.peers)
    samples = cfg.history_samples * 2
    with open_sync(ctx.peers, cfg, failures) as opened, ctx.bar("history", fills + samples) as bar:
        chains = {
            (o.name, d): Chain(
                t := f"history-{uuid.uuid4().hex}", thread_config(t), empty_checkpoint()
            )
            for o in opened
            for d in depths
        }
        for (name, depth), chain in chains.items():
            o = next(o for o in opened if o.name == name)
            with failures.guard(name):
                _grow(o, chain, depth, raw_put, bar.update)
        settle()
        turns = [(o, d) for d in depths for o in opened]
        for table, timer in ((get_table, _time_get), (page_table, _time_page)):
            times: dict[tuple[str, int], list[float]] = {(o.name, d): [] for o, d in turns}
            # the first pass warms caches and connections after the fill; it is not kept
            for sample in range(-1, cfg.history_samples):
                for o, depth in rotated(turns, sample):
                    if failures.ok(o.name):
                        with failures.guard(o.name):
                            elapsed = timer(o.target, chains[o.name, depth])
                            if sample >= 0:
                                times[o.name, depth].append(elapsed)
                if sample >= 0:
                    bar.update()
            for (name, depth), values in times.items():
                if failures.ok(name) and values:
                    table.set(name, f"d{depth}", median(values))
    series = []
    for table in (get_table, page_table):
        lines = {}
        for name, row in table.rows.items():
            first, last = row.get(f"d{depths[0]}"), row.get(f"d{depths[-1]}")
            if isinstance(first, float) and isinstance(last, float):
                table.set(name, "growth", last / first)
            points = [(float(d), row.get(f"d{d}")) for d in depths]
            kept = [(x, y) for x, y in points if isinstance(y, float)]
            lines[name] = ([x for x, _ in kept], [y for _, y in kept])
        series.append(
            Series(
                f"{table.key}_by_depth",
                table.title,
                "checkpoints on the thread",
                "ms",
                lines,
                log_x=True,
            )
        )
    for name, reason in failures.reasons.items():
        get_table.set(name, metrics[0].key, reason)
        page_table.set(name, metrics[0].key, reason)
    section.tables += [get_table, page_table]
    section.series += series
    return section
