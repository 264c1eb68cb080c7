"""The workloads, by the name ``--only`` takes: each runs every peer and returns a Section."""

from __future__ import annotations

from collections.abc import Callable

from ..harness import Context
from ..results import Section
from . import agent_step, concurrency, graph_invoke, history, storage, tail

__all__ = ["REGISTRY"]

REGISTRY: dict[str, Callable[[Context], Section]] = {
    "agent_step": agent_step.run,
    "storage": storage.run,
    "history": history.run,
    "graph": graph_invoke.run,
    "concurrency": concurrency.run,
    "tail": tail.run,
}
