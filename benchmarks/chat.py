"""Short threads, the shape most deployments hold millions of.

- a *chat* thread: a ``MessagesState`` graph whose one node answers each user message, invoked
  for a number of turns (each a ~150-byte message in, one out);
- a *one-checkpoint* thread: a single ``put`` holding one such message.

Both run against any LangGraph checkpointer, sync or async, so each peer stores the same thing.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from .conversation import text

__all__ = [
    "MESSAGE_BYTES",
    "USERS",
    "achat",
    "aone_checkpoint",
    "build_chat",
    "chat",
    "config",
    "metadata_filter",
    "one_checkpoint",
]

MESSAGE_BYTES = 150
# each thread's metadata names one of this many users, so a filtered cross-thread listing
# has a selective filter to answer
USERS = 1000

Saver = BaseCheckpointSaver[Any]
Graph = CompiledStateGraph[Any, Any, Any, Any]


def _reply(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(text(("reply", len(state["messages"])), MESSAGE_BYTES))]}


def build_chat(saver: Saver) -> Graph:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def user_of(n: int) -> str:
    return f"u{n % USERS}"


def metadata_filter(n: int = 7) -> dict[str, str]:
    """The filter that matches the threads of user ``n``: one thread in ``USERS``."""
    return {"user": user_of(n)}


def config(n: int) -> RunnableConfig:
    """Thread ``n``'s config; its metadata (stored with every checkpoint) names its user."""
    return RunnableConfig(configurable={"thread_id": f"t{n}"}, metadata={"user": user_of(n)})


def _said(n: int, turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(text(("user", n % 97, turn), MESSAGE_BYTES))]}


def chat(graph: Graph, n: int, turns: int) -> None:
    for turn in range(turns):
        graph.invoke(_said(n, turn), config(n))


async def achat(graph: Graph, n: int, turns: int) -> None:
    for turn in range(turns):
        await graph.ainvoke(_said(n, turn), config(n))


def _one(saver: Saver, n: int) -> tuple[RunnableConfig, Any, Any, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": _said(n, 0)["messages"]}
    checkpoint["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    conf = RunnableConfig(configurable={"thread_id": f"t{n}", "checkpoint_ns": ""})
    meta = {"source": "input", "step": -1, "parents": {}, "user": user_of(n)}
    return conf, checkpoint, meta, dict(checkpoint["channel_versions"])


def one_checkpoint(saver: Saver, n: int) -> None:
    saver.put(*_one(saver, n))


async def aone_checkpoint(saver: Saver, n: int) -> None:
    await saver.aput(*_one(saver, n))
