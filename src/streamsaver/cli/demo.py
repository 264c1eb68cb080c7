"""``streamsaver demo``: a small LangGraph graph checkpointed by streamsaver, then its history."""

from __future__ import annotations

import operator
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TextIO, TypedDict, cast
from uuid import uuid4

from ..checkpoint.saver import RedisStreamSaver
from ..core.errors import NoPersistenceWarning
from ..core.keys import thread_keys


class _State(TypedDict):
    messages: Annotated[list[str], operator.add]
    turns: int


@contextmanager
def redis_url(url: str | None) -> Iterator[str]:
    """The given URL, else $REDIS_URL, else a throwaway embedded server for the demo's life."""
    if url or os.environ.get("REDIS_URL"):
        yield url or os.environ["REDIS_URL"]
        return
    from ..embedded import EmbeddedRedis

    # a throwaway server is meant to keep nothing: the saver need not warn about it
    with EmbeddedRedis() as server, warnings.catch_warnings():
        warnings.simplefilter("ignore", NoPersistenceWarning)
        yield server.url


def run(url: str | None, prefix: str, out: TextIO) -> int:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        out.write("the demo runs a LangGraph graph: pip install 'streamsaver[demo]'\n")
        return 2

    def user(state: _State) -> dict[str, Any]:
        return {"messages": [f"user: question {state['turns'] + 1}"]}

    def agent(state: _State) -> dict[str, Any]:
        return {"messages": [f"agent: answer {state['turns'] + 1}"], "turns": state["turns"] + 1}

    builder = StateGraph(_State)
    builder.add_node("user", user)
    builder.add_node("agent", agent)
    builder.add_edge(START, "user")
    builder.add_edge("user", "agent")
    builder.add_edge("agent", END)

    with (
        redis_url(url) as resolved,
        RedisStreamSaver.from_conn_string(resolved, prefix=prefix) as saver,
    ):
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": f"demo-{uuid4().hex[:8]}"}}
        state = graph.invoke(_State(messages=[], turns=0), config)
        # the thread remembers the rest: a partial input is enough
        state = graph.invoke(cast(_State, {"messages": []}), config)
        thread_id = config["configurable"]["thread_id"]
        out.write(f"Redis {resolved}, thread {thread_id!r}\n\nhistory, newest first:\n")
        for snap in graph.get_state_history(config):
            meta = snap.metadata or {}
            step, source, nxt = meta.get("step"), meta.get("source"), list(snap.next)
            messages = len(snap.values.get("messages", []))
            out.write(f"  step {step:>2}  {source:<5}  next={nxt!s:<14}  messages={messages}\n")
        log = thread_keys(prefix, thread_id).log
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], saver.client.xrange(log))
        kinds = [fields[b"k"].decode() for _, fields in entries]
        out.write(
            f"\nthe thread's event log ({log}): {len(kinds)} events, "
            f"{kinds.count('checkpoint')} checkpoints and {kinds.count('writes')} writes\n"
            f"final messages: {state['messages']}\n"
        )
    return 0
