"""Real LangGraph graphs for the graph-invoke workload, with no network anywhere.

- ``pipeline``: a ``StateGraph`` of three nodes whose ``messages`` channel has a reducer
  (``add_messages``), so each invoke appends to the thread's history.
- ``react``: ``create_react_agent`` with a fake tool-calling chat model: model, tool, model per
  invoke, the loop of a tool-using agent.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph

from .conversation import text

__all__ = ["GRAPHS", "Graph", "GraphSpec", "graph_input"]

Saver = BaseCheckpointSaver[Any]
Graph = CompiledStateGraph[Any, Any, Any, Any]


class PipelineState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def _plan(state: PipelineState) -> dict[str, Any]:
    return {
        "messages": [AIMessage(text(("plan", len(state["messages"]))))],
        "turns": state.get("turns", 0) + 1,
    }


def _act(state: PipelineState) -> dict[str, Any]:
    return {"messages": [AIMessage(text(("act", len(state["messages"]))))]}


def _answer(state: PipelineState) -> dict[str, Any]:
    return {"messages": [AIMessage(text(("answer", len(state["messages"]))))]}


def build_pipeline(checkpointer: Saver) -> Graph:
    builder = StateGraph(PipelineState)
    builder.add_node("plan", _plan)
    builder.add_node("act", _act)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return text(("result", query))


class ToolCallingFakeModel(BaseChatModel):
    """Calls ``lookup`` once after each user turn, then answers: deterministic, offline."""

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if isinstance(messages[-1], HumanMessage):
            call = ToolCall(name="lookup", args={"query": "q"}, id=f"call-{len(messages)}")
            reply = AIMessage(content="", tool_calls=[call])
        else:
            reply = AIMessage(content=text(("answer", len(messages))))
        return ChatResult(generations=[ChatGeneration(message=reply)])


def build_react(checkpointer: Saver) -> Graph:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        # deprecated in favour of langchain.agents.create_agent, which is not installed here
        warnings.simplefilter("ignore")
        graph: Graph = create_react_agent(
            ToolCallingFakeModel(), [lookup], checkpointer=checkpointer
        )
    return graph


def graph_input(invoke: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(text(("question", invoke)))]}


@dataclass(frozen=True)
class GraphSpec:
    key: str
    name: str
    build: Callable[[Saver], Graph]


GRAPHS: tuple[GraphSpec, ...] = (
    GraphSpec("pipeline", "StateGraph, 3 nodes", build_pipeline),
    GraphSpec("react", "ReAct agent, fake model", build_react),
)
