"""Which node wrote each event, in tail, history, --json, the audit export and the event models,
for real graphs: a Send fan-out waiting on an interrupt answered by Command(resume=...), a
ReAct agent whose tool calls are Sends (one of them interrupted), Command(goto=Send), a
functional-API task; and for a Send's writes saved before their checkpoint, as LangGraph's
async durability often does."""

from __future__ import annotations

import copy
import io
import json
import operator
import re
import warnings
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base.id import uuid6
from langgraph.func import entrypoint, task
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Send, interrupt

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.audit import read_export, verify_export
from streamsaver.cli import main
from streamsaver.events import ThreadEvent
from streamsaver.tailing.naming import Namer
from tests.graphs import map_reduce


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url) as client:
        yield client


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


def _fan_out(checkpointer: Any) -> Any:
    builder = map_reduce(State, _route, agent=_agent, tools=_tools, review=_review)
    return builder.compile(checkpointer=checkpointer)


def _run(saver: RedisStreamSaver, thread_id: str = "react", durability: Any = None) -> None:
    graph = _fan_out(saver)
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"calls": [], "results": []}, config, durability=durability)
    graph.invoke(Command(resume="yes"), config, durability=durability)


_SENT = {"tools (Send #0)", "tools (Send #1)"}


def _writes(events: Any) -> list[ThreadEvent]:
    return [e for e in events if isinstance(e, ThreadEvent) and e.kind == "writes"]


def test_send_tasks_and_resume_writes_are_named(
    sync_saver: RedisStreamSaver, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(sync_saver)
    writes = _writes(sync_saver.history("react"))
    by_task = {(e.task, e.channels[0]) for e in writes}
    assert ("tools (Send #0)", "results") in by_task and ("tools (Send #1)", "results") in by_task
    assert ("resume", "__resume__") in by_task
    assert ("review resume", "__resume__") in by_task
    assert {"agent", "__start__", "tools", "review"} <= {e.node for e in writes}
    assert all(e.node == "tools" for e in writes if "Send" in (e.task or ""))
    checkpoints = [e for e in sync_saver.history("react") if e.kind == "checkpoint"]
    assert [e.sends for e in checkpoints if e.sends] == [("tools", "tools")]

    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    assert main(["tail", "react", *where]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = {m.group(1) for line in lines if (m := re.search(r"step=\S+ (.+?) \S+$", line))}
    assert _SENT | {"resume", "review resume", "agent", "loop sends=tools,tools"} <= shown
    assert not any("0000000000" in line or "Send #0 " in line for line in lines)

    for command in (["history", "react", "--json"], ["tail", "react", "--json"]):
        assert main([*command, *where]) == 0
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        tasks = {(e["task"], e["node"]) for e in events if e["kind"] == "writes"}
        assert {(t, "tools") for t in _SENT} | {("review resume", "review")} <= tasks
        assert ("resume", None) in tasks

    assert main(["audit", "export", "react", "--out", "-", *where]) == 0
    out = capsys.readouterr().out
    records = [json.loads(line) for line in out.splitlines()]
    exported = {(r["task"], r["node"]) for r in records if r.get("kind") == "writes"}
    assert {(t, "tools") for t in _SENT} <= exported
    assert all(check.problem is None for check in verify_export(out.splitlines(), sync_saver.serde))


def _send_writes_first(saver: RedisStreamSaver, client: redis.Redis, thread_id: str) -> None:
    """What LangGraph's async durability does when a Send's task finishes before the step's
    checkpoint is saved: its writes reach the log first, from a writer that cannot name it."""
    graph = _fan_out(saver)
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"calls": [], "results": []}, config, durability="sync")
    state = graph.get_state(config)
    assert [t.name for t in state.tasks] == ["review"]  # the fan-out ran
    parent = state.parent_config
    assert parent is not None
    fanned = saver.get_tuple(parent)
    assert fanned is not None and fanned.checkpoint["channel_values"]["__pregel_tasks"]
    # a fresh writer, which has not read the checkpoint, saves a Send's writes for a copy of
    # it, then the copy
    writer = RedisStreamSaver(client, prefix=saver.prefix)
    copy = {**fanned.checkpoint, "id": str(uuid6())}
    grandparent = fanned.parent_config or {}
    at = {"configurable": {**grandparent.get("configurable", {}), "checkpoint_id": copy["id"]}}
    writer.put_writes(at, [("results", "late")], "task-x", "~__pregel_push, 0000000001, False")
    versions = copy["channel_versions"]
    writer.put(grandparent, copy, {"source": "loop", "step": 1}, versions)  # type: ignore[arg-type]


def test_a_send_saved_before_its_checkpoint_is_named_by_readers(
    sync_saver: RedisStreamSaver,
    client: redis.Redis,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _send_writes_first(sync_saver, client, "early")
    log = [f for _, f in client.xrange(f"{sync_saver.prefix}:{{early}}:log")]
    early = next(f for f in log if f.get(b"task") == b"task-x")
    assert b"node" not in early  # the writer could not name it
    assert log.index(early) < len(log) - 1  # and its checkpoint comes after it

    late = [e for e in _writes(sync_saver.history("early")) if e.task_id == "task-x"]
    assert [(e.task, e.node) for e in late] == [("tools (Send #1)", "tools")]
    tailed = _writes(sync_saver.tail("early", after="0", follow=False))
    assert ("tools (Send #1)", "tools") in {
        (e.task, e.node) for e in tailed if e.task_id == "task-x"
    }

    out = io.StringIO()
    sync_saver.export_audit(["early"], out)
    lines = out.getvalue().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["task"], r["node"]) for r in records if r.get("task_id") == "task-x"] == [
        ("tools (Send #1)", "tools")
    ]
    assert [c.problem for c in verify_export(lines, sync_saver.serde)] == [None]
    reread = _writes(read_export(lines, sync_saver.serde))
    assert ("tools (Send #1)", "tools") in {(e.task, e.node) for e in reread}

    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    assert main(["history", "early", "--json", *where]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["node"] for e in events if e.get("task_id") == "task-x"] == ["tools"]


def test_the_writer_names_its_sends_so_a_live_tail_needs_no_checkpoint(
    sync_saver: RedisStreamSaver, client: redis.Redis
) -> None:
    # with "sync" durability LangGraph saves each checkpoint before running its tasks, so the
    # writer always holds it (with "async" it usually does)
    _run(sync_saver, "live", durability="sync")
    log = client.xrange(f"{sync_saver.prefix}:{{live}}:log")
    sent = [(i, f) for i, f in log if f.get(b"path", b"").startswith(b"~__pregel_push")]
    assert {f.get(b"node") for _, f in sent} == {b"tools"}
    # a tail starting after the fan-out's checkpoint never reads it, and still names them
    first = min(i for i, _ in sent).decode()
    checkpoint = max(i for i, f in log if f[b"k"] == b"checkpoint" and i.decode() < first)
    after = _writes(sync_saver.tail("live", after=checkpoint.decode(), follow=False))
    assert {e.task for e in after if e.task_id and "Send" in (e.task or "")} == _SENT
    feed = _writes(sync_saver.tail_all(after="0", follow=False))
    assert {e.task for e in feed} >= _SENT
    latest = sync_saver.latest_events(["live"], count=50)["live"]
    assert {e.task for e in _writes(latest)} >= _SENT
    group = sync_saver.consumer_group("workers", "one", start="0", block_ms=100)
    delivered: list[ThreadEvent] = []
    try:
        for delivery in group:
            delivered.append(delivery.event)
            group.ack(delivery)
            if len(delivered) == len(log):
                break
    finally:
        group.close()
    assert {e.task for e in _writes(delivered)} >= _SENT


def test_a_second_process_that_read_the_checkpoint_names_the_sends(
    sync_saver: RedisStreamSaver, client: redis.Redis
) -> None:
    graph = _fan_out(sync_saver)
    config: Any = {"configurable": {"thread_id": "resumed"}}
    # stop before the fan-out runs: another process (a fresh saver) resumes it
    graph.invoke({"calls": [], "results": []}, config, interrupt_before=["tools"])
    other = RedisStreamSaver(client, prefix=sync_saver.prefix)
    _fan_out(other).invoke(None, config)
    log = client.xrange(f"{sync_saver.prefix}:{{resumed}}:log")
    sent = [f for _, f in log if f.get(b"path", b"").startswith(b"~__pregel_push")]
    assert len(sent) == 2 and {f.get(b"node") for f in sent} == {b"tools"}


class _ToolCalling(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> _ToolCalling:
        return self


@tool
def search(query: str) -> str:
    """Search the web."""
    return "found " + query


@tool
def ask_human(question: str) -> str:
    """Ask a person."""
    return "they said " + str(interrupt(question))


def test_react_agent_tool_calls_and_an_interrupted_tool(sync_saver: RedisStreamSaver) -> None:
    from langgraph.prebuilt import create_react_agent

    calls = [
        {"name": "search", "args": {"query": "redis"}, "id": "c1"},
        {"name": "ask_human", "args": {"question": "ok?"}, "id": "c2"},
    ]
    model = _ToolCalling(messages=iter([AIMessage("", tool_calls=calls), AIMessage("done")]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated since LangGraph 1.0
        agent = create_react_agent(model, [search, ask_human], checkpointer=sync_saver)
    config: Any = {"configurable": {"thread_id": "agent"}}
    agent.invoke({"messages": [("user", "hi")]}, config)
    agent.invoke(Command(resume="yes"), config)
    writes = _writes(sync_saver.history("agent"))
    shown = {(e.task, e.node, e.channels[0]) for e in writes}
    assert ("tools (Send #0)", "tools", "messages") in shown
    assert ("tools (Send #1)", "tools", "__interrupt__") in shown
    assert ("tools (Send #1) resume", "tools", "__resume__") in shown
    assert ("resume", None, "__resume__") in shown
    assert not [e for e in writes if e.task is None]


class Branches(TypedDict):
    seen: Annotated[list[str], operator.add]


def _split(state: Branches) -> Command[Any]:
    return Command(goto=[Send("left", {"seen": ["l"]}), Send("right", {"seen": ["r"]})])


def _left(state: Branches) -> dict[str, Any]:
    return {"seen": ["left"]}


def _right(state: Branches) -> dict[str, Any]:
    return {"seen": ["right"]}


async def test_command_goto_sends_name_each_target(async_saver: AsyncRedisStreamSaver) -> None:
    builder = StateGraph(Branches)
    builder.add_node("split", _split)
    builder.add_node("left", _left)
    builder.add_node("right", _right)
    builder.add_edge(START, "split")
    graph = builder.compile(checkpointer=async_saver)
    await graph.ainvoke({"seen": []}, {"configurable": {"thread_id": "goto"}})
    writes = _writes([e async for e in async_saver.ahistory("goto")])
    assert {("left (Send #0)", "left"), ("right (Send #1)", "right")} <= {
        (e.task, e.node) for e in writes
    }


@task
def _double(x: int) -> int:
    return 2 * x


def test_functional_task_calls_name_their_caller(sync_saver: RedisStreamSaver) -> None:
    @entrypoint(checkpointer=sync_saver)
    def workflow(x: int) -> int:
        first = _double(x).result()
        return int(_double(first).result())

    assert workflow.invoke(3, {"configurable": {"thread_id": "fn"}}) == 12
    writes = _writes(sync_saver.history("fn"))
    calls = {(e.task, e.node) for e in writes if e.channels == ("__return__",)}
    # the task's own name reaches no checkpointer: the caller's i-th call is what is known
    assert {("workflow call #0", None), ("workflow call #1", None)} <= calls


def _writes_event(path: str, **extra: Any) -> ThreadEvent:
    return ThreadEvent(
        schema_version=1,
        id="1-0",
        kind="writes",
        thread_id="t",
        checkpoint_id="c",
        task_id="x",
        task_path=path,
        timestamp=0,  # type: ignore[arg-type]
        channels=("results",),
        **extra,
    )


def test_events_written_before_sends_were_recorded_keep_their_index() -> None:
    old = _writes_event("~__pregel_push, 0000000003, 0000000000")
    assert (old.task, old.node) == ("Send #3", None)
    named = _writes_event("~__pregel_push, 0000000003, False", sent_to="tools")
    assert (named.task, named.node) == ("tools (Send #3)", "tools")
    assert named.model_dump()["node"] == "tools"
    nested = _writes_event(
        "~__pregel_push, ~__pregel_push, ~__pregel_pull, main, 0000000000, 0000000001, "
        "0000000002, 0000000001"
    )
    assert (nested.task, nested.node) == ("call #2", None)


def test_copies_and_compactions_keep_the_names(
    sync_saver: RedisStreamSaver, client: redis.Redis
) -> None:
    _run(sync_saver, "source")
    assert sync_saver.verify("source")[2] == []
    sync_saver.copy_thread("source", "copy")
    compacting = RedisStreamSaver(client, prefix=sync_saver.prefix, keep_last=2)
    _run(compacting, "compacted")
    _run(compacting, "compacted")
    # again, up to the interrupt: then the fan-out's checkpoint is among the 2 kept, copied
    config: Any = {"configurable": {"thread_id": "compacted"}}
    _fan_out(compacting).invoke({"calls": [], "results": []}, config)
    copied = [e for e in sync_saver.history("compacted") if e.origin is not None]
    assert any(e.sends == ("tools", "tools") for e in copied)
    for thread_id in ("copy", "compacted"):
        assert sync_saver.verify(thread_id)[2] == []
        tasks = {e.task for e in _writes(sync_saver.history(thread_id))}
        assert tasks >= _SENT, thread_id


def test_an_export_made_before_the_sends_were_shown_still_verifies(
    sync_saver: RedisStreamSaver,
) -> None:
    """A version 1 export worked its labels out by older rules (a Send's task was 'Send #i',
    a functional-API call 'Send #__pregel_pull', no sends or sent_to): it still verifies, its
    labels not compared; a version 2 export's labels are, and an edited value fails both."""
    _run(sync_saver, "exported")
    out = io.StringIO()
    sync_saver.export_audit(["exported"], out)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert records[0]["version"] == 2
    sent = next(
        i for i, r in enumerate(records) if r.get("node") == "tools" and "Send" in r["task"]
    )

    def verified(version: int, edit: Any) -> str | None:
        lines = copy.deepcopy(records)
        lines[0]["version"] = version
        edit(lines[sent])
        (check,) = verify_export([json.dumps(r) for r in lines], sync_saver.serde)
        return check.problem

    def as_version_1(record: dict[str, Any]) -> None:
        del record["sends"], record["sent_to"]
        record["node"], record["task"] = None, "Send #0"

    def value_edited(record: dict[str, Any]) -> None:
        record["writes"][0][1] = "forged"

    assert verified(1, as_version_1) is None
    assert f"line {sent + 1} " in (verified(2, as_version_1) or "")
    for version in (1, 2):
        assert f"line {sent + 1} " in (verified(version, value_edited) or "")


def test_a_hand_written_sends_or_node_field_costs_no_event(
    sync_saver: RedisStreamSaver, client: redis.Redis
) -> None:
    _run(sync_saver, "edited", durability="sync")
    log = f"{sync_saver.prefix}:{{edited}}:log"
    fields = next(f for _, f in client.xrange(log) if f[b"k"] == b"checkpoint")
    checkpoint = {**fields, b"sends": b"\xc1", b"id": b"x"}  # 0xc1: never valid msgpack
    client.xadd(log, checkpoint)  # type: ignore[arg-type]
    writes = next(f for _, f in client.xrange(log) if f.get(b"node"))
    client.xadd(log, {**writes, b"node": b"\xff"})  # type: ignore[arg-type]
    skipped: list[Any] = []
    events = list(sync_saver.tail("edited", after="0", follow=False, on_skip=skipped.append))
    assert skipped == []
    assert events[-2].kind == "checkpoint" and events[-2].sends == ()
    assert events[-1].kind == "writes" and events[-1].node == "tools"  # named by its checkpoint


def test_history_keeps_log_order_and_lets_go_of_writes_whose_checkpoint_never_comes(
    sync_saver: RedisStreamSaver, client: redis.Redis
) -> None:
    _run(sync_saver, "orphan", durability="sync")
    latest = sync_saver.get_tuple({"configurable": {"thread_id": "orphan"}})
    assert latest is not None
    nowhere: Any = {"configurable": {"thread_id": "orphan", "checkpoint_id": str(uuid6())}}
    sync_saver.put_writes(nowhere, [("results", "lost")], "lost", "~__pregel_push, 1, False")
    for i in range(3):
        sync_saver.put_writes(latest.config, [("results", i)], f"t{i}", "~__pregel_pull, review")
    events = list(sync_saver.history("orphan"))
    ids = [i.decode() for i, _ in client.xrange(f"{sync_saver.prefix}:{{orphan}}:log")]
    assert [e.id for e in events] == ids
    assert [e.task for e in events if e.task_id == "lost"] == ["Send #1"]

    namer: Namer[int] = Namer(hold=256)
    orphan = next(e for e in events if e.task_id == "lost")
    assert namer.add(orphan, -1) == []
    other = next(e for e in events if e.task_id == "t0")
    for i in range(255):
        assert namer.add(other, i) == []
    # the 257th event held lets the first go, and those behind it that need nothing
    assert [c for _, c in namer.add(other, 255)] == [-1, *range(256)]
    assert namer.flush() == []


def _boom(state: Branches) -> dict[str, Any]:
    raise ValueError("tool failed")


def _handled(state: Branches) -> dict[str, Any]:
    return {"seen": ["handled"]}


def test_error_handlers_name_the_task_whose_error_they_ran(sync_saver: RedisStreamSaver) -> None:
    builder = StateGraph(Branches)
    builder.add_node("plan", lambda state: {"seen": []})
    builder.add_node("step", _boom, error_handler=_handled)
    builder.add_node("tool", _boom, error_handler=_handled)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "step")
    builder.add_conditional_edges("plan", lambda s: [Send("tool", {"seen": []})], ["tool"])
    graph = builder.compile(checkpointer=sync_saver)
    assert graph.invoke({"seen": []}, {"configurable": {"thread_id": "failing"}}) == {
        "seen": ["handled", "handled"]
    }
    shown = {(e.task, e.node) for e in _writes(sync_saver.history("failing"))}
    assert {("step error handler", None), ("tool (Send #0) error handler", None)} <= shown
    assert {("step", "step"), ("tool (Send #0)", "tool")} <= shown  # their errors


async def test_the_console_shows_the_node_a_send_ran(async_saver: AsyncRedisStreamSaver) -> None:
    import httpx

    from streamsaver.web import create_app

    graph = _fan_out(async_saver)
    config: Any = {"configurable": {"thread_id": "console"}}
    await graph.ainvoke({"calls": [], "results": []}, config, interrupt_before=["review"])
    transport = httpx.ASGITransport(app=create_app(async_saver))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as h:
        page = (await h.get("/thread", params={"thread_id": "console"})).text
        rows = (await h.post("/threads/search", json={})).json()
    assert "<td>tools (Send #0) <span" in page and "<td>tools (Send #1) <span" in page
    # the latest checkpoint (before review) has no writes: its parent's are the Sends'
    assert [r["last_node"] for r in rows] == ["tools"]
