"""PNG plots: a grouped bar chart per table and a line chart per series."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt

from .results import Section, Series, Table

__all__ = ["draw_section"]

# a log axis once the spread is this wide, or the small bars vanish
_LOG_SPREAD = 20.0


def _bars(table: Table, peer_order: Sequence[str], path: Path) -> bool:
    metrics = [m for m in table.metrics if m.ratios]
    names = [
        n for n in peer_order if any(isinstance(v, float) for v in table.rows.get(n, {}).values())
    ]
    if not metrics or not names:
        return False
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(names) + 2), 4.5))
    width = 0.8 / len(metrics)
    values: list[float] = []
    for i, metric in enumerate(metrics):
        heights = []
        for name in names:
            value = table.value(name, metric.key)
            heights.append(value if isinstance(value, float) else 0.0)
        values += [h for h in heights if h > 0]
        xs = [x + (i - (len(metrics) - 1) / 2) * width for x in range(len(names))]
        ax.bar(xs, heights, width, label=metric.label)
    if values and max(values) / min(values) > _LOG_SPREAD:
        ax.set_yscale("log")
    units = sorted({m.unit for m in metrics})
    ax.set_ylabel(", ".join(units))
    ax.set_title(table.title)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace("langgraph-checkpoint-", "lgc-") for n in names], rotation=25)
    if len(metrics) > 1:
        ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _lines(series: Series, peer_order: Sequence[str], path: Path) -> bool:
    names = [n for n in peer_order if n in series.lines]
    if not names:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name in names:
        xs, ys = series.lines[name]
        ax.plot(xs, ys, label=name, marker="o" if len(xs) < 10 else None, linewidth=1.2)
    if series.log_y:
        ax.set_yscale("log")
    if series.log_x:
        ax.set_xscale("log")
    ax.set_xlabel(series.x_label)
    ax.set_ylabel(series.y_label)
    ax.set_title(series.title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def draw_section(section: Section, peer_order: Sequence[str], out: Path) -> list[str]:
    """Draw the section's plots into ``out``; the file names, for the report to embed."""
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    for table in section.tables:
        if _bars(table, peer_order, out / f"{table.key}.png"):
            files.append(f"{table.key}.png")
    for series in section.series:
        if _lines(series, peer_order, out / f"{series.key}.png"):
            files.append(f"{series.key}.png")
    return files
