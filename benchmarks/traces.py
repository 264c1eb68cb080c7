"""What the raw floor sends: the calls of each workload, recorded once on ``InMemorySaver``."""

from __future__ import annotations

import functools
import uuid

from .conversation import agent_step, start_thread, thread_config
from .floors import Op, RecordingSaver
from .graphs import GraphSpec, graph_input

__all__ = ["Trace", "agent_trace", "graph_trace"]

# the calls of one step (or one invoke), in the order the saver got them
Trace = tuple[tuple[Op, ...], ...]


@functools.lru_cache(maxsize=1)
def agent_trace(steps: int) -> Trace:
    """Ask for the longest conversation the run needs and slice it: recording is not free."""
    saver = RecordingSaver()
    thread = f"trace-{uuid.uuid4().hex}"
    start_thread(saver, thread)
    saver.take()
    trace = []
    for step in range(steps):
        agent_step(saver, thread, step)
        trace.append(tuple(saver.take()))
    return tuple(trace)


def graph_trace(spec: GraphSpec, invokes: int) -> Trace:
    saver = RecordingSaver()
    graph = spec.build(saver)
    config = thread_config(f"trace-{uuid.uuid4().hex}")
    trace = []
    for invoke in range(invokes):
        graph.invoke(graph_input(invoke), config)
        trace.append(tuple(saver.take()))
    return tuple(trace)
