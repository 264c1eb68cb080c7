"""``streamsaver demo``: a small LangGraph graph checkpointed by streamsaver, then its history."""

from __future__ import annotations

import operator
import os
import shlex
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
def redis_url(url: str | None, throwaway: bool, out: TextIO) -> Iterator[tuple[str, bool]]:
    """The given URL, else $REDIS_URL, else the development server (started if need be, left
    running), or with ``throwaway`` an embedded server for the demo's life; and whether the
    demo chose the server (then it prints how to reach it)."""
    if url or os.environ.get("REDIS_URL"):
        yield url or os.environ["REDIS_URL"], False
        return
    if not throwaway:
        from ..devserver import start_dev

        dev, started = start_dev()
        out.write(f"{'started' if started else 'using'} the development server, {dev}\n")
        yield dev, True
        return
    from ..embedded import EmbeddedRedis

    # a throwaway server is meant to keep nothing: the saver need not warn about it
    with EmbeddedRedis() as server, warnings.catch_warnings():
        warnings.simplefilter("ignore", NoPersistenceWarning)
        yield server.url, False


def run(url: str | None, prefix: str, out: TextIO, throwaway: bool = False) -> int:
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
        redis_url(url, throwaway, out) as (resolved, chosen),
        RedisStreamSaver.from_conn_string(resolved, prefix=prefix) as saver,
    ):
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": _new_thread(saver, prefix)}}
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
        if chosen:
            out.write(_NEXT.format(url=resolved, thread=shlex.quote(thread_id), prefix=prefix))
    return 0


def _new_thread(saver: RedisStreamSaver, prefix: str) -> str:
    """demo-1, demo-2, ...: the first id no thread uses, so the README's `history demo-1` names
    the first run's thread on a fresh server."""
    for n in range(1, 1000):
        thread_id = f"demo-{n}"
        if not saver.client.exists(thread_keys(prefix, thread_id).log):
            return thread_id
    return f"demo-{uuid4().hex[:8]}"


# what a new user does next, against the server the demo left running; the README's path
_NEXT = """
The server keeps running, with this thread in it. Next, in this shell:

  export REDIS_URL={url}
  streamsaver threads
  streamsaver history {thread}
  streamsaver serve                  # the console: http://127.0.0.1:8765/

`streamsaver dev stop` stops the server (its data stays for `streamsaver dev start`).
"""
