"""What one run measures: sizes, repeats and which workloads, as presets the command line tunes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_OUT", "WORKLOADS", "Config", "full", "quick", "replace"]

DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# Names accepted by --only, in the order the run executes them.
WORKLOADS = ("agent_step", "storage", "history", "graph", "concurrency", "tail")


@dataclass(frozen=True)
class Config:
    out: Path = DEFAULT_OUT
    workloads: tuple[str, ...] = WORKLOADS
    # peers whose name contains one of these (case-insensitive); empty means all
    peers: tuple[str, ...] = ()
    postgres_url: str = "postgresql://postgres@127.0.0.1:5432/postgres"
    # Each timed workload repeats its peers this many times, in a rotated order, so that a noisy
    # moment on a shared machine lands on different peers rather than on one.
    rounds: int = 3
    agent_steps: int = 300
    warmup_steps: int = 20
    storage_steps: tuple[int, ...] = (300, 1000)
    history_depths: tuple[int, ...] = (10, 1_000, 10_000)
    history_samples: int = 100
    graph_invokes: int = 50
    concurrency_threads: int = 64
    concurrency_steps: int = 10
    tail_events: int = 1000
    quick: bool = False

    @property
    def trace_steps(self) -> int:
        """The longest conversation any workload replays on the raw floor."""
        return max(self.agent_steps, self.concurrency_steps, *self.storage_steps)

    def with_steps(self, steps: int) -> Config:
        # the storage checkpoints follow the conversation length so --steps scales both
        storage = tuple(sorted({steps, *(s for s in self.storage_steps if s > steps)}))
        return dataclasses.replace(self, agent_steps=steps, storage_steps=storage)


def full() -> Config:
    return Config()


def quick() -> Config:
    """Small enough to finish in well under a minute: a smoke run, not a measurement."""
    return Config(
        rounds=1,
        agent_steps=40,
        warmup_steps=3,
        storage_steps=(40, 100),
        history_depths=(10, 200),
        history_samples=20,
        graph_invokes=5,
        concurrency_threads=64,
        concurrency_steps=2,
        tail_events=100,
        quick=True,
    )


def replace(cfg: Config, **changes: object) -> Config:
    return dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]
