"""What a workload hands the report: tables of figures per peer, and series to plot."""

from __future__ import annotations

from dataclasses import dataclass, field

from .peers import FLOOR, MEMORY, RAW, SOCKET

__all__ = ["Cell", "Metric", "Section", "Series", "Table"]

# a measured value, or the reason there is none ("absent: ...", "failed: ...", "n/a: ...")
Cell = float | str


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool = False
    # ratios to the reference peers; off for figures that are themselves ratios
    ratios: bool = True


@dataclass
class Table:
    key: str
    title: str
    metrics: list[Metric]
    rows: dict[str, dict[str, Cell]] = field(default_factory=dict)
    # the peers each figure is divided by, when they are in the table
    references: tuple[str, ...] = (RAW, MEMORY, FLOOR, SOCKET)
    note: str = ""

    def set(self, peer: str, metric: str, value: Cell) -> None:
        self.rows.setdefault(peer, {})[metric] = value

    def value(self, peer: str, metric: str) -> Cell | None:
        return self.rows.get(peer, {}).get(metric)


@dataclass(frozen=True)
class Series:
    """A line per peer, e.g. latency against step number."""

    key: str
    title: str
    x_label: str
    y_label: str
    lines: dict[str, tuple[list[float], list[float]]]
    log_y: bool = True
    log_x: bool = False


@dataclass
class Section:
    key: str
    title: str
    description: str
    tables: list[Table] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    # peer -> why it was not measured here (absent, failed, or not applicable)
    skipped: dict[str, str] = field(default_factory=dict)
