"""Which node wrote each event, in tail, history and --json, for a graph that fans out with
Send (as a ReAct agent's tool calls do) and waits on an interrupt answered by
Command(resume=...)."""

from __future__ import annotations

import json
import operator
import re
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from streamsaver import RedisStreamSaver
from streamsaver.cli import main


class State(TypedDict):
    calls: list[str]
    results: Annotated[list[str], operator.add]


def _agent(state: State) -> dict[str, Any]:
    return {"calls": ["search", "lookup"]}


def _route(state: State) -> list[Send]:
    return [Send("tools", {"call": call}) for call in state["calls"]]


def _tools(packet: dict[str, str]) -> dict[str, Any]:
    return {"results": [packet["call"] + " done"]}


def _review(state: State) -> dict[str, Any]:
    return {"results": [f"approved={interrupt('ok?')}"]}


def _run(saver: RedisStreamSaver) -> None:
    builder = StateGraph(State)
    builder.add_node("agent", _agent)
    builder.add_node("tools", _tools)  # type: ignore[call-overload]
    builder.add_node("review", _review)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", _route, ["tools"])
    builder.add_edge("tools", "review")
    builder.add_edge("review", END)
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "react"}}
    graph.invoke({"calls": [], "results": []}, config)
    graph.invoke(Command(resume="yes"), config)


def test_push_tasks_and_resume_writes_are_named(
    sync_saver: RedisStreamSaver, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(sync_saver)
    writes = [e for e in sync_saver.history("react") if e.kind == "writes"]
    by_task = {(e.task, e.channels[0]) for e in writes}
    # each Send is its packet's index, never the zero-padded path element it used to show
    assert ("Send #0", "results") in by_task and ("Send #1", "results") in by_task
    assert ("resume", "__resume__") in by_task
    assert ("review resume", "__resume__") in by_task
    assert {"agent", "__start__"} <= {e.node for e in writes}
    assert all(e.node is None for e in writes if (e.task or "").startswith("Send"))

    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    assert main(["tail", "react", *where]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = {m.group(1) for line in lines if (m := re.search(r"step=\S+ (.+?) \S+$", line))}
    assert {"Send #0", "Send #1", "resume", "review resume", "agent"} <= shown
    assert not any("0000000000" in line for line in lines)

    assert main(["history", "react", "--json", *where]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tasks = {e["task"] for e in events if e["kind"] == "writes"}
    assert {"Send #0", "Send #1", "resume", "review resume", "agent"} <= tasks
