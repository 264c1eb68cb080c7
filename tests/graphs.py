"""Real LangGraph graphs and scenarios, run on any checkpointer.

Every scenario builds its graph(s) on the checkpointer it is given, drives them
through a fixed script and returns an :data:`Observed` record: everything the
graph API exposes about the run (return values, streamed chunks, state
snapshots, the whole state history), normalized only where two correct savers
may legitimately differ:

* checkpoint ids, task ids, interrupt ids and run ids are random or derived from
  random ids: each distinct id is replaced by a label ``<id:N>``, numbered in
  order of first appearance in the record.  Two records are therefore equal only
  if the same ids appear in the same places (a parent config must point to the
  same snapshot of the history, a ``parents`` map to the same checkpoint, an
  interrupt id in ``__interrupt__`` to the same pending interrupt, ...);
* ``created_at`` timestamps are dropped;
* the checkpointer object a subgraph's empty state carries in its config is
  ``<checkpointer>``.

Nothing else is normalized: values, ``next``, metadata (``source``, ``step``,
...), task results and errors, the number and order of snapshots must match.

Each scenario exists once, as a coroutine taking an :class:`Api`. The sync
variant runs it with :data:`SYNC` (which calls ``invoke``/``get_state``/... and
never suspends, so the coroutine is driven to completion without an event loop);
the async variant awaits it with :data:`ASYNC` (``ainvoke``/``aget_state``/...).
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Coroutine, Mapping
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Interrupt, PregelTask, Send, StateSnapshot, interrupt
from typing_extensions import TypedDict

Observed = dict[str, Any]
Graph = CompiledStateGraph[Any, Any, Any, Any]
Durability = str | None  # None: langgraph's default ("async")

T = TypeVar("T")
P = ParamSpec("P")

# --------------------------------------------------------------------------- #
# normalization
# --------------------------------------------------------------------------- #

# checkpoint ids (uuid6), task ids (uuid-formatted) and interrupt ids (xxh3 hex)
_ID_RE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])"
)


class Normalizer:
    """Turns graph API results into plain, comparable data (see module doc)."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}

    def _label(self, match: re.Match[str]) -> str:
        ident = match.group(0)
        if ident not in self._labels:
            self._labels[ident] = f"<id:{len(self._labels)}>"
        return self._labels[ident]

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, StateSnapshot):
            return self.snapshot(obj)
        if isinstance(obj, PregelTask):
            return self.task(obj)
        if isinstance(obj, Interrupt):
            return {"interrupt": self(obj.value), "id": self(obj.id)}
        if isinstance(obj, BaseException):
            return {"error": repr(obj)}
        if isinstance(obj, BaseCheckpointSaver):
            # a subgraph's empty state names the saver itself in its config
            return "<checkpointer>"
        if isinstance(obj, Send):
            return {"send": obj.node, "arg": self(obj.arg)}
        if isinstance(obj, str):
            return _ID_RE.sub(self._label, obj)
        if isinstance(obj, Mapping):
            # label ids in a key order that does not depend on insertion order
            items = sorted(obj.items(), key=lambda kv: str(kv[0]))
            return {self(k): self(v) for k, v in items}
        if isinstance(obj, tuple):
            return tuple(self(v) for v in obj)
        if isinstance(obj, list):
            return [self(v) for v in obj]
        return obj

    def task(self, task: PregelTask) -> dict[str, Any]:
        return {
            "id": self(task.id),
            "name": task.name,
            "path": self(task.path),
            "error": None if task.error is None else repr(task.error),
            "interrupts": [self(i) for i in task.interrupts],
            "state": self(task.state),
            "result": self(task.result),
        }

    def snapshot(self, snap: StateSnapshot) -> dict[str, Any]:
        return {
            "config": self(snap.config),
            "values": self(snap.values),
            "next": snap.next,
            "metadata": self(snap.metadata),
            "parent_is_none": snap.parent_config is None,
            "parent_config": self(snap.parent_config),
            "tasks": [self.task(t) for t in snap.tasks],
            "interrupts": [self(i) for i in snap.interrupts],
        }


# --------------------------------------------------------------------------- #
# sync / async drivers
# --------------------------------------------------------------------------- #


class Api:
    """The graph API used by a scenario; every method is a coroutine."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    async def invoke(self, inp: Any, config: RunnableConfig, **kw: Any) -> Any:
        return self.graph.invoke(inp, config, **kw)

    async def stream(self, inp: Any, config: RunnableConfig, **kw: Any) -> list[Any]:
        return list(self.graph.stream(inp, config, **kw))

    async def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        return self.graph.get_state(config, subgraphs=subgraphs)

    async def history(self, config: RunnableConfig, **kw: Any) -> list[StateSnapshot]:
        return list(self.graph.get_state_history(config, **kw))

    async def update_state(
        self, config: RunnableConfig, values: Any, as_node: str | None = None
    ) -> RunnableConfig:
        return self.graph.update_state(config, values, as_node=as_node)

    async def checkpoints(self, config: RunnableConfig | None, **kw: Any) -> list[Any]:
        """The checkpointer's own ``list``: unlike the history, it spans every namespace."""
        return [_listed(c) for c in self._saver.list(config, **kw)]

    @property
    def _saver(self) -> BaseCheckpointSaver[Any]:
        saver = self.graph.checkpointer
        assert isinstance(saver, BaseCheckpointSaver), saver
        return saver


def _listed(item: CheckpointTuple) -> dict[str, Any]:
    # what two savers must agree on; checkpoint timestamps and version strings may differ
    return {
        "config": item.config,
        "parent_config": item.parent_config,
        "metadata": item.metadata,
        "values": item.checkpoint["channel_values"],
        "writes": item.pending_writes,
    }


class AsyncApi(Api):
    async def invoke(self, inp: Any, config: RunnableConfig, **kw: Any) -> Any:
        return await self.graph.ainvoke(inp, config, **kw)

    async def stream(self, inp: Any, config: RunnableConfig, **kw: Any) -> list[Any]:
        return [chunk async for chunk in self.graph.astream(inp, config, **kw)]

    async def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        return await self.graph.aget_state(config, subgraphs=subgraphs)

    async def history(self, config: RunnableConfig, **kw: Any) -> list[StateSnapshot]:
        return [s async for s in self.graph.aget_state_history(config, **kw)]

    async def update_state(
        self, config: RunnableConfig, values: Any, as_node: str | None = None
    ) -> RunnableConfig:
        return await self.graph.aupdate_state(config, values, as_node=as_node)

    async def checkpoints(self, config: RunnableConfig | None, **kw: Any) -> list[Any]:
        return [_listed(c) async for c in self._saver.alist(config, **kw)]


ApiFactory = Callable[[Graph], Api]
SYNC: ApiFactory = Api
ASYNC: ApiFactory = AsyncApi


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (a scenario driven by :data:`SYNC`)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a sync scenario suspended: it must only use the sync graph API")


def thread(thread_id: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}, **extra}  # type: ignore[typeddict-item]


def _durability(durability: Durability) -> dict[str, Any]:
    return {} if durability is None else {"durability": durability}


def _begin(
    api: ApiFactory, graph: Graph, thread_id: str, **extra: Any
) -> tuple[Api, Normalizer, RunnableConfig, Observed]:
    """A scenario's graph on its API, a fresh normalizer, its thread and its empty record."""
    return api(graph), Normalizer(), thread(thread_id, **extra), {}


async def _end(
    g: Api, norm: Normalizer, cfg: RunnableConfig, obs: Observed, *, subgraphs: bool = False
) -> Observed:
    """*obs* with the thread's last state and its whole history."""
    obs["state"] = norm(await g.get_state(cfg, subgraphs=subgraphs))
    obs["history"] = norm(await g.history(cfg))
    return obs


def _sync_and_async(
    scenario: Callable[
        Concatenate[BaseCheckpointSaver[Any], ApiFactory, P], Coroutine[Any, Any, Observed]
    ],
) -> tuple[
    Callable[Concatenate[BaseCheckpointSaver[Any], P], Observed],
    Callable[Concatenate[BaseCheckpointSaver[Any], P], Coroutine[Any, Any, Observed]],
]:
    """The two public variants of a scenario: run on the sync API, awaited on the async one."""

    def on_sync(
        checkpointer: BaseCheckpointSaver[Any], /, *args: P.args, **kw: P.kwargs
    ) -> Observed:
        return run_sync(scenario(checkpointer, SYNC, *args, **kw))

    async def on_async(
        checkpointer: BaseCheckpointSaver[Any], /, *args: P.args, **kw: P.kwargs
    ) -> Observed:
        return await scenario(checkpointer, ASYNC, *args, **kw)

    return on_sync, on_async


def pipeline(state: type[Any], **nodes: Any) -> StateGraph[Any, Any, Any, Any]:
    """A graph that runs *nodes* one after another, in the order given."""
    builder = StateGraph(state)
    for name, node in nodes.items():
        builder.add_node(name, node)
    for before, after in itertools.pairwise([START, *nodes, END]):
        builder.add_edge(before, after)
    return builder


def appending(channel: str, *names: str) -> dict[str, Callable[[Any], dict[str, Any]]]:
    """Nodes by *names* that each append to list *channel* its name and the list's length."""
    return {name: _appends(channel, name) for name in names}


def _appends(channel: str, name: str) -> Callable[[Any], dict[str, Any]]:
    return lambda state: {channel: [f"{name}{len(state[channel])}"]}


def _fan_in(
    state: type[Any], *branches: Callable[..., Any], join: Callable[..., Any]
) -> StateGraph[Any, Any, Any, Any]:
    """*branches* side by side in one step, then *join* once all of them are done."""
    builder = StateGraph(state)
    for node in (*branches, join):
        builder.add_node(node.__name__, node)
    for node in branches:
        builder.add_edge(START, node.__name__)
    builder.add_edge([node.__name__ for node in branches], join.__name__)
    builder.add_edge(join.__name__, END)
    return builder


def map_reduce(
    state: type[Any], route: Callable[[Any], list[Send]], **nodes: Any
) -> StateGraph[Any, Any, Any, Any]:
    """Three *nodes*: the first; the second once for each Send that *route* makes of the
    first's state; then the third."""
    plan, worker, collect = nodes
    builder = StateGraph(state)
    for name, node in nodes.items():
        builder.add_node(name, node)
    builder.add_edge(START, plan)
    builder.add_conditional_edges(plan, route, [worker])
    builder.add_edge(worker, collect)
    builder.add_edge(collect, END)
    return builder


# --------------------------------------------------------------------------- #
# 1. linear graph with a reducer, several invocations on one thread
# --------------------------------------------------------------------------- #


class LinearState(TypedDict):
    log: Annotated[list[str], operator.add]
    total: int


def build_linear(checkpointer: BaseCheckpointSaver[Any]) -> Graph:
    def first(state: LinearState) -> dict[str, Any]:
        return {"log": ["first"], "total": state["total"] + 1}

    def second(state: LinearState) -> dict[str, Any]:
        return {"log": [f"second:{state['total']}"]}

    def third(state: LinearState) -> dict[str, Any]:
        return {"log": ["third"], "total": state["total"] * 10}

    builder = pipeline(LinearState, first=first, second=second, third=third)
    return builder.compile(checkpointer=checkpointer)


async def _linear(
    cp: BaseCheckpointSaver[Any], api: ApiFactory, durability: Durability = None
) -> Observed:
    g = api(build_linear(cp))
    norm = Normalizer()
    dur = _durability(durability)
    t1, t2 = thread("linear-1"), thread("linear-2")
    outputs = []
    # interleave two threads: they must not see each other's checkpoints
    for i in range(3):
        outputs.append(await g.invoke({"log": [f"in{i}"], "total": i}, t1, **dur))
        if i < 2:
            outputs.append(await g.invoke({"log": [f"other{i}"], "total": 100 + i}, t2, **dur))
    streamed = await g.stream({"log": ["streamed"], "total": 7}, t1, stream_mode="values", **dur)
    return {
        "outputs": norm(outputs),
        "streamed": norm(streamed),
        "state": norm(await g.get_state(t1)),
        "history": norm(await g.history(t1)),
        "state_other": norm(await g.get_state(t2)),
        "history_other": norm(await g.history(t2)),
    }


linear, alinear = _sync_and_async(_linear)


# --------------------------------------------------------------------------- #
# 2. human in the loop: interrupt() in a node, Command(resume=...)
# --------------------------------------------------------------------------- #


class ReviewState(TypedDict):
    topic: str
    log: Annotated[list[str], operator.add]


def build_review(checkpointer: BaseCheckpointSaver[Any]) -> Graph:
    def draft(state: ReviewState) -> dict[str, Any]:
        return {"log": [f"draft:{state['topic']}"]}

    def review(state: ReviewState) -> dict[str, Any]:
        # two interrupts in one node: the first answer must be replayed from the
        # checkpointer's pending writes when the node re-runs for the second one
        first = interrupt({"question": "approve draft?", "log": list(state["log"])})
        second = interrupt({"question": "really?", "first": first})
        return {"log": [f"review:{first}:{second}"]}

    def publish(state: ReviewState) -> dict[str, Any]:
        return {"log": ["published"]}

    builder = pipeline(ReviewState, draft=draft, review=review, publish=publish)
    return builder.compile(checkpointer=checkpointer)


async def _hitl(
    cp: BaseCheckpointSaver[Any], api: ApiFactory, durability: Durability = None
) -> Observed:
    g, norm, cfg, obs = _begin(api, build_review(cp), "hitl")
    dur = _durability(durability)
    obs["run1"] = norm(await g.invoke({"topic": "redis", "log": []}, cfg, **dur))
    obs["state1"] = norm(await g.get_state(cfg))
    obs["run2"] = norm(await g.invoke(Command(resume="yes"), cfg, **dur))
    obs["state2"] = norm(await g.get_state(cfg))
    obs["run3"] = norm(await g.invoke(Command(resume="sure"), cfg, **dur))
    return await _end(g, norm, cfg, obs)


hitl, ahitl = _sync_and_async(_hitl)


# 2b. two parallel nodes interrupt in the same step; resumed by interrupt id


class PairState(TypedDict):
    answers: Annotated[list[str], operator.add]


def build_parallel_interrupts(checkpointer: BaseCheckpointSaver[Any]) -> Graph:
    def ask_a(state: PairState) -> dict[str, Any]:
        return {"answers": [f"a={interrupt('question-a')}"]}

    def ask_b(state: PairState) -> dict[str, Any]:
        return {"answers": [f"b={interrupt('question-b')}"]}

    def join(state: PairState) -> dict[str, Any]:
        return {"answers": [f"joined:{len(state['answers'])}"]}

    return _fan_in(PairState, ask_a, ask_b, join=join).compile(checkpointer=checkpointer)


async def _parallel_interrupts(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    g, norm, cfg, obs = _begin(api, build_parallel_interrupts(cp), "pair")
    first = await g.invoke({"answers": []}, cfg)
    # __interrupt__ lists the interrupts in task completion order (thread timing): sort
    # them by value *before* normalizing, so that their ids get labels in a fixed order
    raised: list[Interrupt] = first.pop("__interrupt__")
    obs["run1_interrupts"] = norm(sorted(raised, key=lambda i: repr(i.value)))
    obs["run1"] = norm(first)
    state = await g.get_state(cfg)
    obs["state1"] = norm(state)
    # resume both interrupts at once, addressing them by the ids the saver gave back
    answers = {i.id: f"answer-{i.value}" for i in state.interrupts}
    obs["run2"] = norm(await g.invoke(Command(resume=answers), cfg))
    return await _end(g, norm, cfg, obs)


parallel_interrupts, aparallel_interrupts = _sync_and_async(_parallel_interrupts)


# --------------------------------------------------------------------------- #
# 3. time travel: fork with update_state on an old checkpoint, replay
# --------------------------------------------------------------------------- #


async def _time_travel(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    g, norm, cfg, obs = _begin(api, build_linear(cp), "travel")
    obs["run1"] = norm(await g.invoke({"log": ["start"], "total": 1}, cfg))
    obs["run2"] = norm(await g.invoke({"log": ["again"], "total": 2}, cfg))
    history = await g.history(cfg)
    obs["history_before_fork"] = norm(history)
    # the oldest snapshot about to run "second" (from run1)
    old = [s for s in history if s.next == ("second",)][-1]
    fork_config = await g.update_state(old.config, {"log": ["forked"], "total": 50})
    obs["fork_config"] = norm(fork_config)
    obs["fork_state"] = norm(await g.get_state(fork_config))
    obs["fork_run"] = norm(await g.invoke(None, fork_config))
    obs["after_fork_state"] = norm(await g.get_state(cfg))
    # fork "as" a node: the next node is computed from the edges of "second"
    as_node_config = await g.update_state(old.config, {"log": ["as-second"]}, as_node="second")
    obs["as_node_state"] = norm(await g.get_state(as_node_config))
    obs["as_node_run"] = norm(await g.invoke(None, as_node_config))
    # replay from an old checkpoint: the snapshot of run2 about to run "first"
    replay_from = next(s for s in history if s.next == ("first",))
    obs["replay_run"] = norm(await g.invoke(None, replay_from.config))
    return await _end(g, norm, cfg, obs)


time_travel, atime_travel = _sync_and_async(_time_travel)


# --------------------------------------------------------------------------- #
# 4. a subgraph node that interrupts (checkpoint namespaces)
# --------------------------------------------------------------------------- #


class ChildState(TypedDict):
    items: Annotated[list[str], operator.add]
    note: str


class ParentState(TypedDict):
    items: Annotated[list[str], operator.add]


def build_nested(checkpointer: BaseCheckpointSaver[Any]) -> Graph:
    def child_prepare(state: ChildState) -> dict[str, Any]:
        return {"items": ["child-prepare"], "note": f"seen {len(state['items'])}"}

    def child_ask(state: ChildState) -> dict[str, Any]:
        answer = interrupt({"ask": "child needs input", "note": state["note"]})
        return {"items": [f"child-answer:{answer}"]}

    def child_finish(state: ChildState) -> dict[str, Any]:
        return {"items": ["child-finish"]}

    child = pipeline(
        ChildState, child_prepare=child_prepare, child_ask=child_ask, child_finish=child_finish
    )
    child_graph = child.compile()  # inherits the parent's checkpointer

    def before(state: ParentState) -> dict[str, Any]:
        return {"items": ["parent-before"]}

    def after(state: ParentState) -> dict[str, Any]:
        return {"items": [f"parent-after:{len(state['items'])}"]}

    parent = pipeline(ParentState, before=before, child=child_graph, after=after)
    return parent.compile(checkpointer=checkpointer)


async def _subgraph(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    g, norm, cfg, obs = _begin(api, build_nested(cp), "nested")
    obs["run1"] = norm(
        await g.stream({"items": ["input"]}, cfg, stream_mode="updates", subgraphs=True)
    )
    state = await g.get_state(cfg, subgraphs=True)
    obs["state1_subgraphs"] = norm(state)
    obs["state1"] = norm(await g.get_state(cfg))
    # the child's own namespace: its state and history
    child_state = state.tasks[0].state
    assert isinstance(child_state, StateSnapshot), child_state
    child_ns = child_state.config["configurable"]["checkpoint_ns"]
    child_cfg: RunnableConfig = {"configurable": {"thread_id": "nested", "checkpoint_ns": child_ns}}
    obs["child_state1"] = norm(await g.get_state(child_cfg))
    obs["child_history1"] = norm(await g.history(child_cfg))
    obs["run2"] = norm(
        await g.stream(Command(resume="from-human"), cfg, stream_mode="updates", subgraphs=True)
    )
    obs["state_subgraphs"] = norm(await g.get_state(cfg, subgraphs=True))
    obs["history"] = norm(await g.history(cfg))
    obs["child_history"] = norm(await g.history(child_cfg))
    return obs


subgraph, asubgraph = _sync_and_async(_subgraph)


# --------------------------------------------------------------------------- #
# 5. Send fan-out (map-reduce)
# --------------------------------------------------------------------------- #


class MapState(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]
    summary: str


class WorkerInput(TypedDict):
    item: int


def build_map_reduce(checkpointer: BaseCheckpointSaver[Any]) -> Graph:
    def plan(state: MapState) -> dict[str, Any]:
        return {"items": [*state["items"], len(state["items"]) * 100]}

    def fan_out(state: MapState) -> list[Send]:
        return [Send("worker", {"item": item}) for item in state["items"]]

    def worker(state: WorkerInput) -> dict[str, Any]:
        return {"results": [state["item"] * 2]}

    def collect(state: MapState) -> dict[str, Any]:
        return {"summary": f"{len(state['results'])}:{sum(state['results'])}"}

    builder = map_reduce(MapState, fan_out, plan=plan, worker=worker, collect=collect)
    return builder.compile(checkpointer=checkpointer)


async def _send_fanout(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    g, norm, cfg, obs = _begin(api, build_map_reduce(cp), "map")
    obs["run1"] = norm(await g.invoke({"items": [1, 2, 3], "results": []}, cfg))
    obs["run2"] = norm(await g.invoke({"items": [5, 7]}, cfg))
    return await _end(g, norm, cfg, obs)


send_fanout, asend_fanout = _sync_and_async(_send_fanout)


# --------------------------------------------------------------------------- #
# 6. parallel step: one node fails, its sibling succeeds; resume
# --------------------------------------------------------------------------- #


class FlakyError(RuntimeError):
    pass


class ParallelState(TypedDict):
    log: Annotated[list[str], operator.add]


def build_parallel_failure(checkpointer: BaseCheckpointSaver[Any], calls: dict[str, int]) -> Graph:
    def a_steady(state: ParallelState) -> dict[str, Any]:
        calls["a_steady"] += 1
        return {"log": ["steady"]}

    def b_flaky(state: ParallelState) -> dict[str, Any]:
        calls["b_flaky"] += 1
        if calls["b_flaky"] == 1:
            raise FlakyError("flaky failed on its first call")
        return {"log": ["flaky"]}

    def join(state: ParallelState) -> dict[str, Any]:
        calls["join"] += 1
        return {"log": [f"joined:{','.join(state['log'])}"]}

    builder = _fan_in(ParallelState, a_steady, b_flaky, join=join)
    return builder.compile(checkpointer=checkpointer)


async def _parallel_failure(
    cp: BaseCheckpointSaver[Any], api: ApiFactory, durability: Durability = None
) -> Observed:
    calls = {"a_steady": 0, "b_flaky": 0, "join": 0}
    # max_concurrency=1 runs the step's tasks one at a time in order, so a_steady
    # has finished (and its writes are committed) before b_flaky raises: without
    # it, whether the sibling's writes are saved would depend on thread timing.
    build = build_parallel_failure(cp, calls)
    g, norm, cfg, obs = _begin(api, build, "parallel", max_concurrency=1)
    dur = _durability(durability)
    try:
        await g.invoke({"log": ["input"]}, cfg, **dur)
    except FlakyError as exc:
        obs["error"] = repr(exc)
    else:
        obs["error"] = None
    obs["calls_after_failure"] = dict(calls)
    obs["state_after_failure"] = norm(await g.get_state(cfg))
    obs["history_after_failure"] = norm(await g.history(cfg))
    obs["resumed"] = norm(await g.invoke(None, cfg, **dur))
    obs["calls"] = dict(calls)
    return await _end(g, norm, cfg, obs)


parallel_failure, aparallel_failure = _sync_and_async(_parallel_failure)


# --------------------------------------------------------------------------- #
# 7. a long thread: history with limit / before / filter
# --------------------------------------------------------------------------- #


LONG_THREAD_RUNS = 40


class CounterState(TypedDict):
    count: int
    seen: Annotated[list[int], operator.add]


def build_counter(checkpointer: BaseCheckpointSaver[Any]) -> Graph:
    def bump(state: CounterState) -> dict[str, Any]:
        return {"count": state["count"] + 1}

    def record(state: CounterState) -> dict[str, Any]:
        return {"seen": [state["count"]]}

    return pipeline(CounterState, bump=bump, record=record).compile(checkpointer=checkpointer)


async def _long_thread(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    g = api(build_counter(cp))
    norm = Normalizer()
    cfg = thread("long")
    other = thread("long-other")
    outputs = []
    for i in range(LONG_THREAD_RUNS):
        outputs.append(await g.invoke({"count": i * 2}, cfg))
        if i % 10 == 0:
            await g.invoke({"count": -i}, other)
    full = await g.history(cfg)
    obs: Observed = {"outputs": norm(outputs), "history": norm(full)}
    before = full[10].config
    obs["before_id"] = norm(before)
    obs["limit_5"] = norm(await g.history(cfg, limit=5))
    obs["before"] = norm(await g.history(cfg, before=before))
    obs["before_limit_3"] = norm(await g.history(cfg, before=before, limit=3))
    obs["source_loop"] = norm(await g.history(cfg, filter={"source": "loop"}))
    obs["source_input"] = norm(await g.history(cfg, filter={"source": "input"}))
    obs["step_3"] = norm(await g.history(cfg, filter={"step": 3}))
    obs["step_5_loop"] = norm(await g.history(cfg, filter={"step": 5, "source": "loop"}))
    obs["no_match"] = norm(await g.history(cfg, filter={"source": "nope"}))
    obs["loop_limit_4_before"] = norm(
        await g.history(cfg, filter={"source": "loop"}, limit=4, before=before)
    )
    obs["other_history"] = norm(await g.history(other))
    return obs


long_thread, along_thread = _sync_and_async(_long_thread)


# --------------------------------------------------------------------------- #
# 8. async API: ainvoke / astream(updates) / aget_state_history, reducer + interrupt
# --------------------------------------------------------------------------- #


async def _streamed_review(
    cp: BaseCheckpointSaver[Any], api: ApiFactory, durability: Durability = None
) -> Observed:
    g, norm, cfg, obs = _begin(api, build_review(cp), "streamed-review")
    dur = _durability(durability)
    obs["stream1"] = norm(
        await g.stream({"topic": "streams", "log": ["seed"]}, cfg, stream_mode="updates", **dur)
    )
    obs["state1"] = norm(await g.get_state(cfg))
    obs["stream2"] = norm(await g.stream(Command(resume="ok"), cfg, stream_mode="updates", **dur))
    obs["run3"] = norm(await g.invoke(Command(resume="done"), cfg, **dur))
    # a second conversation turn on the same thread, streamed with two modes
    obs["stream4"] = norm(
        await g.stream(
            {"topic": "again", "log": ["turn2"]}, cfg, stream_mode=["updates", "values"], **dur
        )
    )
    return await _end(g, norm, cfg, obs)


streamed_review, astreamed_review = _sync_and_async(_streamed_review)


# --------------------------------------------------------------------------- #
# 9. stateful subgraphs (checkpointer=True): replay, fork, time travel, interrupt
# --------------------------------------------------------------------------- #


class DeskState(TypedDict):
    topic: str
    summary: str
    log: Annotated[list[str], operator.add]


class ClerkState(TypedDict):
    topic: str
    summary: str
    # only the clerk has it: it grows across parent runs because the clerk keeps its own
    # checkpoints, so a replay that restores the wrong clerk checkpoint shows here
    visits: Annotated[list[str], operator.add]


def build_stateful(checkpointer: BaseCheckpointSaver[Any], *, ask: bool = False) -> Graph:
    def visit(state: ClerkState) -> dict[str, Any]:
        return {"visits": [f"visit:{state['topic']}"]}

    def confirm(state: ClerkState) -> dict[str, Any]:
        answer = interrupt({"confirm": state["topic"], "visits": state["visits"]})
        return {"visits": [f"answer:{answer}"]}

    def sum_up(state: ClerkState) -> dict[str, Any]:
        return {"summary": ",".join(state["visits"])}

    asked = {"confirm": confirm} if ask else {}
    clerk = pipeline(ClerkState, visit=visit, **asked, sum_up=sum_up)
    clerk_graph = clerk.compile(checkpointer=True)

    def intake(state: DeskState) -> dict[str, Any]:
        return {"log": [f"intake:{state['topic']}"]}

    def report(state: DeskState) -> dict[str, Any]:
        return {"log": [f"report:{state['summary']}"]}

    desk = pipeline(DeskState, intake=intake, clerk=clerk_graph, report=report)
    return desk.compile(checkpointer=checkpointer)


def _clerk(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "clerk"}}


async def _whole_thread(g: Api, thread_id: str, obs: Observed, norm: Normalizer) -> None:
    """The checkpointer's list over every namespace, with limit and before."""
    cfg = thread(thread_id)
    every = await g.checkpoints(cfg)
    obs["list"] = norm(every)
    obs["list_limit_3"] = norm(await g.checkpoints(cfg, limit=3))
    # a limit that ends inside the second namespace
    obs["list_limit_past_root"] = norm(await g.checkpoints(cfg, limit=len(every) // 2 + 3))
    for name, item in (("root", every[len(every) // 3]), ("clerk", every[-2])):
        # a bound is only an id: LangGraph passes one from another namespace, no thread_id
        bound = {"configurable": {"checkpoint_id": item["config"]["configurable"]["checkpoint_id"]}}
        before = await g.checkpoints(cfg, before=bound)
        obs[f"list_before_{name}"] = norm(before)
        obs[f"list_before_{name}_limit"] = norm(
            await g.checkpoints(cfg, before=bound, limit=max(1, len(before) - 2))
        )
    clerk_id = every[-3]["config"]["configurable"]["checkpoint_id"]
    exact: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_id": clerk_id}}
    obs["list_exact"] = norm(await g.checkpoints(exact))
    obs["list_loop"] = norm(await g.checkpoints(cfg, filter={"source": "loop"}, limit=5))
    obs["list_clerk"] = norm(await g.checkpoints(_clerk(thread_id)))


async def _stateful_replay(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    g, norm, cfg, obs = _begin(api, build_stateful(cp), "stateful")
    obs["run1"] = norm(await g.invoke({"topic": "a", "summary": "", "log": []}, cfg))
    obs["run2"] = norm(await g.invoke({"topic": "b"}, cfg))
    history = await g.history(cfg)
    obs["history_before_replay"] = norm(history)
    obs["clerk_state_before_replay"] = norm(await g.get_state(_clerk("stateful")))
    # run2's checkpoint about to run the clerk: the clerk must start from what it had then
    replay_from = next(s for s in history if s.next == ("clerk",))
    obs["replay_from_subgraphs"] = norm(await g.get_state(replay_from.config, subgraphs=True))
    obs["replay_run"] = norm(await g.invoke(None, replay_from.config))
    obs["clerk_after_replay"] = norm(await g.get_state(_clerk("stateful")))
    # fork that same checkpoint with another topic
    fork_config = await g.update_state(replay_from.config, {"topic": "forked"})
    obs["fork_state"] = norm(await g.get_state(fork_config, subgraphs=True))
    obs["fork_run"] = norm(await g.invoke(None, fork_config))
    obs["clerk_after_fork"] = norm(await g.get_state(_clerk("stateful")))
    # time travel to run1's first step, before the clerk ever ran: it starts empty
    first = [s for s in history if s.next == ("intake",)][-1]
    obs["travel_run"] = norm(await g.invoke(None, first.config))
    obs["state"] = norm(await g.get_state(cfg, subgraphs=True))
    obs["history"] = norm(await g.history(cfg))
    obs["clerk_state"] = norm(await g.get_state(_clerk("stateful")))
    obs["clerk_history"] = norm(await g.history(_clerk("stateful")))
    await _whole_thread(g, "stateful", obs, norm)
    return obs


stateful_replay, astateful_replay = _sync_and_async(_stateful_replay)


async def _replay_and_resume(
    g: Api, norm: Normalizer, cfg: RunnableConfig, obs: Observed, into: str, answer: str
) -> StateSnapshot:
    """Replay the newest step into node *into*, which interrupts, and resume it with *answer*."""
    history = await g.history(cfg)
    obs["history_before_replay"] = norm(history)
    replay_from = next(s for s in history if s.next == (into,))
    obs["replay_run"] = norm(await g.invoke(None, replay_from.config))
    obs["replay_state"] = norm(await g.get_state(cfg, subgraphs=True))
    obs["replay_resumed"] = norm(await g.invoke(Command(resume=answer), cfg))
    return replay_from


async def _stateful_interrupt(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    g, norm, cfg, obs = _begin(api, build_stateful(cp, ask=True), "stateful-ask")
    obs["run1"] = norm(
        await g.stream(
            {"topic": "a", "summary": "", "log": []}, cfg, stream_mode="updates", subgraphs=True
        )
    )
    obs["state1"] = norm(await g.get_state(cfg, subgraphs=True))
    obs["clerk_state1"] = norm(await g.get_state(_clerk("stateful-ask")))
    obs["run2"] = norm(await g.invoke(Command(resume="yes"), cfg))
    obs["run3"] = norm(await g.invoke({"topic": "b"}, cfg))
    obs["state3"] = norm(await g.get_state(cfg, subgraphs=True))
    obs["run4"] = norm(await g.invoke(Command(resume="no"), cfg))
    # replay run3's step into the clerk: it interrupts again, on the clerk's state of then
    await _replay_and_resume(g, norm, cfg, obs, "clerk", "again")
    obs["state"] = norm(await g.get_state(cfg, subgraphs=True))
    obs["history"] = norm(await g.history(cfg))
    obs["clerk_history"] = norm(await g.history(_clerk("stateful-ask")))
    await _whole_thread(g, "stateful-ask", obs, norm)
    return obs


stateful_interrupt, astateful_interrupt = _sync_and_async(_stateful_interrupt)


async def _subgraph_time_travel(cp: BaseCheckpointSaver[Any], api: ApiFactory) -> Observed:
    """Replay and fork a parent whose subgraph (one namespace per call) interrupts."""
    g, norm, cfg, obs = _begin(api, build_nested(cp), "nested-travel")
    obs["run1"] = norm(await g.invoke({"items": ["input"]}, cfg))
    obs["run2"] = norm(await g.invoke(Command(resume="first"), cfg))
    into_child = await _replay_and_resume(g, norm, cfg, obs, "child", "second")
    fork_config = await g.update_state(into_child.config, {"items": ["forked"]})
    obs["fork_state"] = norm(await g.get_state(fork_config, subgraphs=True))
    obs["fork_run"] = norm(await g.invoke(None, fork_config))
    obs["fork_resumed"] = norm(await g.invoke(Command(resume="third"), cfg))
    return await _end(g, norm, cfg, obs, subgraphs=True)


subgraph_time_travel, asubgraph_time_travel = _sync_and_async(_subgraph_time_travel)
