"""LangGraph's own ways of reaching a Store work unchanged on streamsaver's: a graph compiled
with ``store=`` whose nodes take ``store: BaseStore``, and a ``create_react_agent`` whose tools
take an ``InjectedStore``, driven by a fake chat model (no network), with semantic search.
Memory written in one thread is found from another; each write's event names its thread."""

from __future__ import annotations

import hashlib
import operator
import os
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
import redis
import redis.asyncio as aredis
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict

from streamsaver import (
    AsyncRedisStreamSaver,
    AsyncRedisStreamStore,
    RedisStreamSaver,
    RedisStreamStore,
)


def embed(texts: list[str]) -> list[list[float]]:
    return [[float(b % 13 - 6) for b in hashlib.sha256(t.encode()).digest()[:8]] for t in texts]


INDEX: Any = {"dims": 8, "embed": embed, "fields": ["text"]}


class State(TypedDict):
    user: str
    said: str
    recalled: Annotated[list[str], operator.add]


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    namespace = ("memories", state["user"])
    found = store.search(namespace, query=state["said"], limit=1)
    store.put(namespace, f"m{len(store.search(namespace, limit=100))}", {"text": state["said"]})
    return {"recalled": [found[0].value["text"] if found else ""]}


async def aremember(state: State, *, store: BaseStore) -> dict[str, Any]:
    namespace = ("memories", state["user"])
    found = await store.asearch(namespace, query=state["said"], limit=1)
    count = len(await store.asearch(namespace, limit=100))
    await store.aput(namespace, f"m{count}", {"text": state["said"]})
    return {"recalled": [found[0].value["text"] if found else ""]}


def _graph(node: Any) -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node("remember", node)
    builder.add_edge(START, "remember")
    return builder


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url) as made:
        yield made


def test_graph_nodes_take_the_store(client: redis.Redis, prefix: str) -> None:
    store = RedisStreamStore(client, prefix=prefix, index=INDEX)
    graph = _graph(remember).compile(
        checkpointer=RedisStreamSaver(client, prefix=prefix), store=store
    )
    graph.invoke({"user": "u1", "said": "I like green tea"}, {"configurable": {"thread_id": "a"}})
    out = graph.invoke({"user": "u1", "said": "tea"}, {"configurable": {"thread_id": "b"}})
    # the second thread recalls what the first one stored
    assert out["recalled"] == ["I like green tea"]
    (first,) = store.history(("memories", "u1"), "m0")
    assert (first.kind, first.thread_id, first.node) == ("put", "a", "remember")
    assert graph.get_state({"configurable": {"thread_id": "a"}}).values["said"] == (
        "I like green tea"
    )


async def test_async_graph_nodes_take_the_store(redis_url: str, prefix: str) -> None:
    client = aredis.Redis.from_url(redis_url)
    try:
        store = AsyncRedisStreamStore(client, prefix=prefix, index=INDEX)
        graph = _graph(aremember).compile(
            checkpointer=AsyncRedisStreamSaver(client, prefix=prefix), store=store
        )
        await graph.ainvoke({"user": "u", "said": "redis"}, {"configurable": {"thread_id": "a"}})
        out = await graph.ainvoke(
            {"user": "u", "said": "redis"}, {"configurable": {"thread_id": "b"}}
        )
        assert out["recalled"] == ["redis"]
        assert [e.thread_id for e in await store.ahistory(("memories", "u"))] == ["a", "b"]
    finally:
        await client.aclose()


@tool
def save_memory(text: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Remember a fact about the user."""
    store.put(("facts",), hashlib.sha1(text.encode()).hexdigest()[:8], {"text": text})
    return "saved"


@tool
def recall(query: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Recall the fact most like the query."""
    found = store.search(("facts",), query=query, limit=1)
    return found[0].value["text"] if found else "nothing"


class ToolCallingFake(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
        return self


def _call(name: str, **args: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"{name}-1"}])


# deprecated for langchain.agents.create_agent (not installed here) but still what many use
@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
def test_react_agent_memory_tools(client: redis.Redis, prefix: str) -> None:
    store = RedisStreamStore(client, prefix=prefix, index=INDEX)
    replies: list[BaseMessage] = [
        _call("save_memory", text="the user's cat is called Miso"),
        AIMessage("noted"),
        _call("recall", query="the user's cat is called Miso"),
        AIMessage("your cat is Miso"),
    ]
    agent = create_react_agent(
        ToolCallingFake(messages=iter(replies)),
        [save_memory, recall],
        checkpointer=RedisStreamSaver(client, prefix=prefix),
        store=store,
    )
    agent.invoke({"messages": [("user", "my cat is Miso")]}, {"configurable": {"thread_id": "1"}})
    out = agent.invoke(
        {"messages": [("user", "what is my cat called?")]}, {"configurable": {"thread_id": "2"}}
    )
    tool_answers = [m.content for m in out["messages"] if m.type == "tool"]
    assert tool_answers == ["the user's cat is called Miso"]
    assert [i.value for i in store.search(("facts",))] == [
        {"text": "the user's cat is called Miso"}
    ]
    assert [e.thread_id for e in store.history(("facts",))] == ["1"]


def test_readme_graph_with_long_term_memory(redis_url: str, prefix: str) -> None:
    import re
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "store.md").read_text()
    section = page.split("## A graph with long-term memory", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```py\n(.*?)```", section, flags=re.S)
    # the block's own prefix would share keys with other tests: give it this test's
    code = block.replace(
        "from_conn_string(REDIS_URL)", f"from_conn_string(REDIS_URL, prefix={prefix!r})"
    )
    code = code.replace(
        "from_conn_string(REDIS_URL, index=",
        f"from_conn_string(REDIS_URL, prefix={prefix!r}, index=",
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "REDIS_URL": redis_url},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["I like tea"]
