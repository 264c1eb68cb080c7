"""The Markdown report: a summary, the peers and why any are absent, then every table in full."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .peers import FLOOR, MEMORY, RAW, SOCKET, Absent, Peer
from .results import Cell, Metric, Section, Table

__all__ = ["Environment", "SummaryColumn", "render", "write"]

TIMES = "\N{MULTIPLICATION SIGN}"
NONE = "\N{EN DASH}"

_SHORT = {RAW: "raw", MEMORY: "mem", FLOOR: "floor", SOCKET: "socket"}


@dataclass(frozen=True)
class Environment:
    command: str
    started: str
    duration_s: float
    facts: list[tuple[str, str]]


@dataclass(frozen=True)
class SummaryColumn:
    table: str
    metric: str
    header: str


def fmt(value: float, unit: str) -> str:
    if unit == "B":
        return _bytes(value)
    if unit == "ckpt/s":
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:.2f}{TIMES}"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _bytes(value: float) -> str:
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def _ratio(value: Cell | None, reference: Cell | None) -> str:
    if not isinstance(value, float) or not isinstance(reference, float) or reference <= 0:
        return NONE
    return f"{value / reference:.2f}{TIMES}"


def _cell(value: Cell | None, metric: Metric) -> str:
    if value is None:
        return NONE
    if isinstance(value, str):
        return value.replace("|", "\\|")
    return fmt(value, metric.unit)


def _references(table: Table) -> list[str]:
    return [ref for ref in table.references if ref in table.rows]


def render_table(table: Table, peer_order: Sequence[str]) -> list[str]:
    refs = _references(table)
    header = ["peer"]
    for metric in table.metrics:
        header.append(f"{metric.label} ({metric.unit})" if metric.unit != "x" else metric.label)
        if metric.ratios:
            header += [f"{TIMES} {_SHORT[ref]}" for ref in refs]
    lines = [f"**{table.title}**", "", _row(header), _row(["---"] * len(header))]
    names = [n for n in peer_order if n in table.rows]
    names += [n for n in table.rows if n not in names]
    for name in names:
        cells = [name]
        for metric in table.metrics:
            value = table.value(name, metric.key)
            cells.append(_cell(value, metric))
            if metric.ratios:
                cells += [_ratio(value, table.value(ref, metric.key)) for ref in refs]
        lines.append(_row(cells))
    if table.note:
        lines += ["", table.note]
    return [*lines, ""]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _summary(
    sections: Sequence[Section], columns: Sequence[SummaryColumn], peer_order: Sequence[str]
) -> list[str]:
    tables = {t.key: t for s in sections for t in s.tables}
    present = [c for c in columns if c.table in tables]
    if not present:
        return []
    lines = [
        "## Summary",
        "",
        "Each cell: the figure, then its ratio to each reference measured in this run: raw = "
        "the raw floor, mem = InMemorySaver, floor = the floor saver, socket = the socket "
        "floor. Lower is better except checkpoints per second.",
        "",
        _row(["peer", *(c.header for c in present)]),
        _row(["---"] * (len(present) + 1)),
    ]
    for name in peer_order:
        cells = [name]
        for column in present:
            table = tables[column.table]
            metric = next(m for m in table.metrics if m.key == column.metric)
            value = table.value(name, column.metric)
            text = _cell(value, metric)
            if isinstance(value, float) and metric.ratios:
                refs = _references(table)
                ratios = " / ".join(
                    f"{_ratio(value, table.value(r, metric.key))} {_SHORT[r]}" for r in refs
                )
                text += f" ({ratios})"
            cells.append(text)
        lines.append(_row(cells))
    return [*lines, ""]


def render(
    env: Environment,
    peers: Sequence[Peer],
    absent: Sequence[Absent],
    sections: Sequence[Section],
    summary: Sequence[SummaryColumn],
    plots: dict[str, list[str]],
) -> str:
    order = [p.name for p in peers] + [a.name for a in absent if "(async)" not in a.name]
    lines = ["# streamsaver benchmarks", ""]
    lines += [f"Command: `{env.command}`  ", f"Started {env.started}, took {env.duration_s:.0f} s."]
    lines += ["", "| | |", "| --- | --- |"] + [_row([k, v]) for k, v in env.facts] + [""]
    lines += _summary(sections, summary, order)
    lines += ["## Peers", "", _row(["peer", "status", "set-up"]), _row(["---"] * 3)]
    for peer in peers:
        lines.append(_row([peer.name, "measured", peer.setup]))
    for gone in absent:
        lines.append(_row([gone.name, "**ABSENT**", gone.reason.replace("|", "\\|")]))
    lines.append("")
    for section in sections:
        lines += [f"## {section.title}", "", section.description, ""]
        for table in section.tables:
            lines += render_table(table, order)
        for name, reason in section.skipped.items():
            lines.append(f"- {name}: {reason}")
        if section.skipped:
            lines.append("")
        for plot in plots.get(section.key, []):
            lines += [f"![{plot}]({plot})", ""]
    lines += _method_notes()
    return "\n".join(lines)


def _method_notes() -> list[str]:
    return [
        "## How these were measured",
        "",
        "- **raw floor**: the bytes `InMemorySaver` stores for each call (checkpoint, metadata "
        "and changed channel values for `put`; the serialized writes for `put_writes`), "
        "recorded beforehand and sent as one bare redis-py command per call: `XADD` for "
        "`put`/`put_writes`, `XREVRANGE … COUNT 1` for `get_tuple`, `COUNT 10` for a `list` "
        "page. No serialization is timed: it is the cost of Redis and the network alone.",
        "- **floor saver**: `InMemorySaver` plus one redis-py `PING` in each `get_tuple`, `put`, "
        "`put_writes` and `list`: serialization plus one round trip per call.",
        "- **socket floor**: the same `PING` written to a bare socket and `+PONG` read back, no "
        "client library (async: concurrent calls pipelined on one connection): serialization "
        "plus the physical round trip, the floor no network checkpointer can go under.",
        "- **client CPU**: the benchmark process's CPU time (`time.process_time`, every thread) "
        "over the same calls; the servers run in other processes and are not counted.",
        "- Each Redis peer gets its own `redis-server` (Redis Stack for "
        "langgraph-checkpoint-redis), PostgresSaver a fresh database, SqliteSaver a file in a "
        "temporary directory; all on loopback, all from this one process.",
        "- Times are `time.perf_counter_ns` around the call(s) only; percentiles are nearest-rank "
        "over every timed sample of every round. Garbage is collected before each peer's run.",
        "- Ratios divide a peer's figure by the reference peer's figure for the same metric in "
        "the same table (sync by sync, async by async).",
        "",
    ]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
