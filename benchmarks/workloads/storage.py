"""Workload 5: what a growing conversation costs to keep, and to send, per step."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from ..backends import Usage, open_backend
from ..conversation import agent_step, start_thread
from ..floors import RawFloor
from ..harness import Context, Failures
from ..peers import FLOOR, MEMORY, RAW, SOCKET, Peer
from ..results import Metric, Section, Series, Table
from ..traces import agent_trace

__all__ = ["run"]

KEY = "storage"


DESCRIPTION = (
    "Each peer runs the agent-step conversation alone, on a fresh store, and at each mark the "
    "store's growth since the saver was opened is divided by the steps so far. Redis peers: "
    "`INFO memory` `used_memory` growth (this counts module indexes too; each peer has its own "
    "server) and, as *keys*, `MEMORY USAGE … SAMPLES 0` summed over every key; bytes sent and "
    "received per step from `INFO stats` `total_net_input_bytes`/`total_net_output_bytes`, with "
    "the measuring commands' own traffic taken out. PostgresSaver: growth of its tables "
    "(`pg_total_relation_size`, TOAST included). SqliteSaver: growth of the database file and "
    "its WAL. InMemorySaver: the serialized bytes it holds."
)


def run(ctx: Context) -> Section:
    cfg = ctx.cfg
    marks = sorted(cfg.storage_steps)
    last = marks[-1]
    section = Section(KEY, "Storage per step", DESCRIPTION)
    stored_metrics = [Metric(f"mem_{m}", f"stored/step at {m:,}", "B") for m in marks]
    stored_metrics.append(Metric(f"keys_{last}", f"keys/step at {last:,}", "B"))
    stored = Table(KEY, "Stored bytes per step", stored_metrics, references=(RAW, MEMORY))
    traffic = Table(
        f"{KEY}_traffic",
        f"Network bytes per step over {last:,} steps",
        [Metric(f"in_{last}", "sent/step", "B"), Metric(f"out_{last}", "received/step", "B")],
        references=(RAW,),
    )
    lines: dict[str, tuple[list[float], list[float]]] = {}
    failures = Failures()
    measured = [p for p in ctx.peers if p.name not in (FLOOR, SOCKET)]
    for floor in (FLOOR, SOCKET):
        section.skipped[floor] = "n/a: it stores what InMemorySaver stores, in process"
    with ctx.bar("storage", len(measured) * last) as bar:
        for peer in measured:
            with failures.guard(peer.name):
                points = _measure(ctx, peer, marks, bar.update)
                for mark, growth in points.items():
                    _fill(stored, traffic, peer.name, mark, growth, last=mark == last)
                xs = [float(m) for m in points]
                ys = [float(g.stored_bytes or 0) / m for m, g in points.items()]
                lines[peer.name] = (xs, ys)
    for name, reason in failures.reasons.items():
        stored.set(name, stored_metrics[0].key, reason)
    section.tables += [stored, traffic]
    section.series.append(
        Series(
            f"{KEY}_by_steps",
            "Stored bytes per step against conversation length",
            "steps",
            "stored bytes / step",
            lines,
        )
    )
    return section


def _fill(
    stored: Table, traffic: Table, name: str, mark: int, growth: Usage, *, last: bool
) -> None:
    def per_step(value: int | None) -> float | str:
        return value / mark if value is not None else "n/a"

    stored.set(name, f"mem_{mark}", per_step(growth.stored_bytes))
    if last:
        stored.set(name, f"keys_{mark}", per_step(growth.key_bytes))
        if growth.bytes_in is not None:
            traffic.set(name, f"in_{mark}", per_step(growth.bytes_in))
            traffic.set(name, f"out_{mark}", per_step(growth.bytes_out))


def _delta(after: Usage, before: Usage) -> Usage:
    def minus(a: int | None, b: int | None) -> int | None:
        return a - b if a is not None and b is not None else None

    return Usage(
        stored_bytes=minus(after.stored_bytes, before.stored_bytes),
        key_bytes=minus(after.key_bytes, before.key_bytes),
        bytes_in=minus(after.bytes_in, before.bytes_in),
        bytes_out=minus(after.bytes_out, before.bytes_out),
    )


def _measure(
    ctx: Context, peer: Peer, marks: list[int], tick: Callable[[], object]
) -> dict[int, Usage]:
    trace = agent_trace(ctx.cfg.trace_steps)
    thread = f"storage-{uuid.uuid4().hex}"
    points: dict[int, Usage] = {}
    with (
        open_backend(peer.backend, ctx.cfg.postgres_url) as backend,
        peer.open_sync(backend) as target,
    ):
        before = backend.usage(target)
        if not isinstance(target, RawFloor):
            start_thread(target, thread)
        for step in range(marks[-1]):
            if isinstance(target, RawFloor):
                target.run(thread, trace[step])
            else:
                agent_step(target, thread, step)
            tick()
            if step + 1 in marks:
                points[step + 1] = _delta(backend.usage(target), before)
    return points
