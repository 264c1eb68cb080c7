"""kill -9 of the Redis server mid-run, with appendfsync always: every checkpoint whose put
returned survives, reads back as it was put, and the graph resumes from it."""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
import redis
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from streamsaver import RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

STEPS = 1000


class Counting(TypedDict):
    count: int
    seen: Annotated[list[int], operator.add]


class Recording(RedisStreamSaver):
    """Remembers every checkpoint whose put returned: those were acknowledged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acked: list[tuple[Any, dict[str, Any]]] = []
        self.reached = threading.Event()

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        stored = super().put(config, checkpoint, metadata, new_versions)
        self.acked.append((stored, dict(checkpoint)))
        if len(self.acked) >= STEPS // 3:
            self.reached.set()
        return stored


def _graph(saver: RedisStreamSaver) -> Any:
    def tick(state: Counting) -> dict[str, Any]:
        return {"count": state["count"] + 1, "seen": [state["count"]]}

    builder = StateGraph(Counting)
    builder.add_node("tick", tick)
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", lambda s: END if s["count"] >= STEPS else "tick")
    return builder.compile(checkpointer=saver)


@pytest.fixture
def durable_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(["--appendonly", "yes", "--appendfsync", "always"]) as server:
        yield server


def test_acknowledged_checkpoints_survive_kill_9_and_the_graph_resumes(
    durable_server: EmbeddedRedis,
) -> None:
    # no client-side retries: the run must fail at the crash, not ride over it
    client = redis.Redis.from_url(durable_server.url, retry=None, socket_timeout=5)
    saver = Recording(client, prefix="crash")
    graph = _graph(saver)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 10 * STEPS}
    failure: list[BaseException] = []

    def run() -> None:
        try:
            graph.invoke({"count": 0, "seen": []}, config, durability="sync")
        except BaseException as exc:  # the crash surfaces here as a connection error
            failure.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert saver.reached.wait(60), "the graph did not get going"
    durable_server.kill()
    worker.join(60)
    assert failure and isinstance(failure[0], redis.ConnectionError)
    acked = list(saver.acked)
    assert STEPS // 3 <= len(acked) < STEPS + 2

    durable_server.restart()
    for stored, checkpoint in acked:
        got = saver.get_tuple(stored)
        assert got is not None, f"acknowledged checkpoint {stored} was lost"
        assert got.checkpoint["id"] == checkpoint["id"]
        assert got.checkpoint["channel_values"] == checkpoint["channel_values"]
        assert got.checkpoint["channel_versions"] == checkpoint["channel_versions"]
    assert saver.verify("t")[2] == []

    final = graph.invoke(None, config)
    assert final["count"] == STEPS
    assert final["seen"] == list(range(STEPS))  # nothing lost, nothing done twice
    client.close()
