"""Racing writers and late writes, with real worker processes: fencing refuses the second
writer of a forked history (deliberate forks still work), and a worker still running after its
thread was deleted cannot bring the thread back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import FencedError, RedisStreamSaver, ThreadDeletedError
from streamsaver.core.keys import thread_keys
from tests.test_crash import _graph

ROOT = Path(__file__).resolve().parent.parent

WORKER = """
import os, sys, time, pathlib
import redis
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict
from streamsaver import RedisStreamSaver

class S(TypedDict):
    n: int

gate = pathlib.Path(sys.argv[2])

def slow(state):
    pathlib.Path(sys.argv[3]).write_text("started")
    while not gate.exists():
        time.sleep(0.01)
    return {"n": state["n"] + 1}

builder = StateGraph(S)
builder.add_node("slow", slow)
builder.add_edge(START, "slow")
builder.add_edge("slow", END)
saver = RedisStreamSaver(redis.Redis.from_url(os.environ["URL"]), prefix=sys.argv[1],
                         fencing=os.environ.get("FENCING") == "1")
graph = builder.compile(checkpointer=saver)
config = {"configurable": {"thread_id": "t"}}
try:
    if sys.argv[4] == "prepare":  # stop before the slow node: the checkpoint both resume
        graph.invoke({"n": 0}, config, interrupt_before=["slow"])
    else:
        graph.invoke({"n": 0} if sys.argv[4] == "run" else None, config, durability="sync")
    print("COMPLETED")
except Exception as exc:
    print("REFUSED", type(exc).__name__)
"""


def _worker(url: str, prefix: str, tmp: Path, name: str, fencing: bool, mode: str) -> Any:
    env = {**os.environ, "URL": url, "FENCING": "1" if fencing else ""}
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, prefix, str(tmp / "go"), str(tmp / name), mode],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _started.append(worker)
    return worker


_started: list[Any] = []


@pytest.fixture(autouse=True)
def _no_stray_workers() -> Iterator[None]:
    yield
    while _started:
        worker = _started.pop()
        if worker.poll() is None:
            worker.kill()
        worker.communicate()


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def test_a_worker_cannot_resurrect_a_thread_deleted_under_it(
    redis_url: str, prefix: str, tmp_path: Path, redis_client: redis.Redis
) -> None:
    worker = _worker(redis_url, prefix, tmp_path, "w1", fencing=False, mode="run")
    _wait_for(tmp_path / "w1")  # the worker's node is running; its thread has checkpoints
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None
    saver.delete_thread("t")
    (tmp_path / "go").write_text("")
    out, err = worker.communicate(timeout=60)
    assert out.strip() == "REFUSED ThreadDeletedError", err
    # nothing of the thread came back: its log is gone, its deletion's mark expires
    keys = thread_keys(prefix, "t")
    assert [k for k in keys if redis_client.exists(k)] == [keys.ptr]
    assert redis_client.pttl(keys.ptr) > 0
    assert [e.kind for e in saver.history("t")] == ["thread_deleted"]
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
    # a fresh start on the same thread id is a new thread, not a late write
    graph = _graph(saver)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 100}
    assert graph.invoke({"count": 995, "seen": []}, config)["count"] == 1000
    assert all(redis_client.pttl(k) == -1 for k in thread_keys(prefix, "t"))


def test_fencing_refuses_the_second_of_two_writers_resuming_one_thread(
    redis_url: str, prefix: str, tmp_path: Path, redis_client: redis.Redis
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix, fencing=True)
    prepare = _worker(redis_url, prefix, tmp_path, "w0", fencing=True, mode="prepare")
    assert prepare.communicate(timeout=60)[0].strip() == "COMPLETED"
    first = _worker(redis_url, prefix, tmp_path, "w1", fencing=True, mode="resume")
    second = _worker(redis_url, prefix, tmp_path, "w2", fencing=True, mode="resume")
    _wait_for(tmp_path / "w1")
    _wait_for(tmp_path / "w2")  # both loaded the same latest checkpoint and are mid-step
    (tmp_path / "go").write_text("")
    outcomes = sorted(w.communicate(timeout=60)[0].strip() for w in (first, second))
    assert outcomes == ["COMPLETED", "REFUSED FencedError"]
    history = list(saver.list({"configurable": {"thread_id": "t"}}))
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in history if t.parent_config]
    assert len(parents) == len(set(parents)), "the history forked"


def test_deliberate_forks_still_work_with_fencing(sync_saver: RedisStreamSaver) -> None:
    saver = RedisStreamSaver(sync_saver.client, prefix=sync_saver.prefix, fencing=True)
    graph = _graph(saver)
    config: Any = {"configurable": {"thread_id": "f"}, "recursion_limit": 100}
    graph.invoke({"count": 990, "seen": []}, config)
    old = list(graph.get_state_history(config))[5].config
    forked = graph.update_state(old, {"count": 995})  # update_state on an old checkpoint
    assert graph.invoke(None, forked)["count"] == 1000
    assert graph.invoke(None, old)["count"] == 1000  # time travel: replay from an old one
    stale = {"configurable": {**old["configurable"]}}
    cp = generate_checkpoint(channel_values={"count": 1}, channel_versions={"count": "x"})
    try:
        saver.put(stale, cp, generate_metadata(source="loop", step=99), {"count": "x"})
    except FencedError as exc:
        assert "another writer got there first" in str(exc)
    else:
        raise AssertionError("a loop checkpoint continuing an old parent was accepted")


def test_late_put_writes_after_delete_are_refused_and_write_nothing(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"n": 0}, channel_versions={"n": 1})
    stored = sync_saver.put(config, cp, generate_metadata(), {"n": 1})
    sync_saver.delete_thread("t")
    try:
        sync_saver.put_writes(stored, [("n", 1)], "task")
    except ThreadDeletedError as exc:
        assert "start the thread afresh" in str(exc)
    else:
        raise AssertionError("a late put_writes was accepted")
    log = thread_keys(sync_saver.prefix, "t").log
    assert not redis_client.exists(log)
    assert [e.kind for e in sync_saver.history("t")] == ["thread_deleted"]
