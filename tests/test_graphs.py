"""Real LangGraph graphs on our savers vs langgraph's ``InMemorySaver``.

Each test runs one scenario of ``tests/graphs.py`` twice, once on the saver under
test and once on ``InMemorySaver`` (the reference), and requires the two
normalized observations to be identical. Each test also checks a few concrete
facts of both observations, so that two empty or degenerate records can never
compare equal by accident, and so that a failure names the fact that broke.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from tests import graphs
from tests.graphs import Observed


def assert_same(ours: Observed, ref: Observed) -> None:
    """Compare field by field first, so a failure names the field that differs."""
    assert list(ours) == list(ref)
    for key in ref:
        assert ours[key] == ref[key], f"field {key!r}: saver (left) != InMemorySaver (right)"
    assert ours == ref


def sources_and_steps(history: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(s["metadata"]["source"], s["metadata"]["step"]) for s in history]


def interrupt_values(items: Any) -> list[Any]:
    return [i["interrupt"] for i in items]


@pytest.fixture
def saver(sync_saver: RedisStreamSaver) -> RedisStreamSaver:
    assert isinstance(sync_saver, RedisStreamSaver)
    return sync_saver


@pytest.fixture
def asaver(async_saver: AsyncRedisStreamSaver) -> AsyncRedisStreamSaver:
    assert isinstance(async_saver, AsyncRedisStreamSaver)
    return async_saver


# --------------------------------------------------------------------------- #
# 1. linear graph, reducer, several invocations (+ durability variants)
# --------------------------------------------------------------------------- #

DURABILITIES = [None, "sync", "exit"]


def check_linear(obs: Observed, durability: str | None) -> None:
    assert obs["state"]["values"]["total"] == 80
    assert obs["state"]["values"]["log"][-4:] == ["streamed", "first", "second:8", "third"]
    assert len(obs["state"]["values"]["log"]) == 16
    assert obs["state_other"]["values"]["total"] == 1020
    assert obs["outputs"][2]["log"][-4:] == ["in1", "first", "second:2", "third"]
    assert [v["total"] for v in obs["streamed"]] == [7, 8, 8, 80]
    history = obs["history"]
    if durability == "exit":
        assert sources_and_steps(history) == [("loop", 18), ("loop", 13), ("loop", 8), ("loop", 3)]
        assert len(obs["history_other"]) == 2
    else:
        assert len(history) == 20
        assert len(obs["history_other"]) == 10
        assert [step for _, step in sources_and_steps(history)] == list(range(18, -2, -1))
        assert [s["parent_is_none"] for s in history] == [False] * 19 + [True]
        # each snapshot's parent is the next (older) snapshot of the history
        for newer, older in itertools.pairwise(history):
            assert newer["parent_config"] == older["config"]
    assert history[0]["values"] == obs["state"]["values"]


# --------------------------------------------------------------------------- #
# 2. human in the loop: interrupt() + Command(resume=...)
# --------------------------------------------------------------------------- #


def check_hitl(obs: Observed) -> None:
    assert interrupt_values(obs["run1"]["__interrupt__"]) == [
        {"question": "approve draft?", "log": ["draft:redis"]}
    ]
    assert interrupt_values(obs["run2"]["__interrupt__"]) == [
        {"question": "really?", "first": "yes"}
    ]
    assert obs["run3"] == {"topic": "redis", "log": ["draft:redis", "review:yes:sure", "published"]}
    for n, run in ((1, "run1"), (2, "run2")):
        state = obs[f"state{n}"]
        assert state["next"] == ("review",)
        assert state["interrupts"] == obs[run]["__interrupt__"]
        [task] = state["tasks"]
        assert task["name"] == "review"
        assert task["interrupts"] == obs[run]["__interrupt__"]
    assert obs["state"]["next"] == ()
    assert obs["state"]["interrupts"] == []
    assert sources_and_steps(obs["history"]) == [
        ("loop", 3),
        ("loop", 2),
        ("loop", 1),
        ("loop", 0),
        ("input", -1),
    ]


def check_parallel_interrupts(obs: Observed) -> None:
    assert interrupt_values(obs["run1_interrupts"]) == ["question-a", "question-b"]
    assert obs["state1"]["next"] == ("ask_a", "ask_b")
    assert sorted(obs["state1"]["interrupts"], key=repr) == obs["run1_interrupts"]
    assert obs["run2"] == {"answers": ["a=answer-question-a", "b=answer-question-b", "joined:2"]}
    assert obs["state"]["interrupts"] == []
    assert len(obs["history"]) == 4


# --------------------------------------------------------------------------- #
# 3. time travel: fork (update_state on an old checkpoint) and replay
# --------------------------------------------------------------------------- #


def check_time_travel(obs: Observed) -> None:
    assert len(obs["history_before_fork"]) == 10
    assert obs["fork_state"]["values"] == {"log": ["start", "first", "forked"], "total": 50}
    assert obs["fork_state"]["next"] == ("second",)
    assert obs["fork_state"]["metadata"]["source"] == "update"
    assert obs["fork_state"]["config"] == obs["fork_config"]
    assert obs["fork_run"] == {
        "log": ["start", "first", "forked", "second:50", "third"],
        "total": 500,
    }
    assert obs["as_node_state"]["next"] == ("third",)
    assert obs["as_node_run"] == {"log": ["start", "first", "as-second", "third"], "total": 20}
    assert obs["replay_run"] == obs["run2"]
    history = obs["history"]
    assert len(history) == 19
    sources = [source for source, _ in sources_and_steps(history)]
    assert sources.count("update") == 2
    assert sources.count("fork") == 1
    assert history[0]["values"] == obs["state"]["values"]


# --------------------------------------------------------------------------- #
# 4. subgraph that interrupts (checkpoint namespaces)
# --------------------------------------------------------------------------- #


def check_subgraph(obs: Observed) -> None:
    namespaces = [ns for ns, _ in obs["run1"]]
    assert namespaces[0] == ()
    assert namespaces[1][0].startswith("child:")
    assert "__interrupt__" in obs["run1"][-1][1]
    state = obs["state1_subgraphs"]
    assert state["next"] == ("child",)
    [task] = state["tasks"]
    child = task["state"]
    assert child["next"] == ("child_ask",)
    assert child["config"]["configurable"]["checkpoint_ns"].startswith("child:")
    assert interrupt_values(child["interrupts"]) == [{"ask": "child needs input", "note": "seen 2"}]
    assert child["interrupts"] == state["interrupts"]
    # without subgraphs=True the task state is only the child's config
    assert (
        obs["state1"]["tasks"][0]["state"]["configurable"]["checkpoint_ns"]
        == (child["config"]["configurable"]["checkpoint_ns"])
    )
    assert obs["child_state1"]["next"] == ("child_ask",)
    assert len(obs["child_history1"]) == 3
    assert obs["state_subgraphs"]["next"] == ()
    assert obs["state_subgraphs"]["values"]["items"][-1] == "parent-after:7"
    assert "child-answer:from-human" in obs["state_subgraphs"]["values"]["items"]
    assert len(obs["history"]) == 5
    assert len(obs["child_history"]) == 5
    # the resumed child appended two checkpoints to the same namespace
    for key in ("config", "values", "next", "metadata"):
        assert [s[key] for s in obs["child_history"][2:]] == [s[key] for s in obs["child_history1"]]


# --------------------------------------------------------------------------- #
# 5. Send fan-out (map-reduce)
# --------------------------------------------------------------------------- #


def check_send_fanout(obs: Observed) -> None:
    assert obs["run1"] == {"items": [1, 2, 3, 300], "results": [2, 4, 6, 600], "summary": "4:612"}
    assert obs["run2"]["results"] == [2, 4, 6, 600, 10, 14, 400]
    assert obs["run2"]["summary"] == "7:1036"
    history = obs["history"]
    assert len(history) == 10
    assert [s["next"] for s in history if "worker" in s["next"]] == [
        ("worker",) * 3,
        ("worker",) * 4,
    ]
    workers = [t for s in history for t in s["tasks"] if t["name"] == "worker"]
    assert [t["result"] for t in workers] == [{"results": [r]} for r in (10, 14, 400, 2, 4, 6, 600)]


# --------------------------------------------------------------------------- #
# 6. parallel step with a failing node; resume must not re-run the sibling
# --------------------------------------------------------------------------- #


def check_parallel_failure(obs: Observed) -> None:
    assert obs["error"] == "FlakyError('flaky failed on its first call')"
    assert obs["calls_after_failure"] == {"a_steady": 1, "b_flaky": 1, "join": 0}
    # the sibling's successful writes were saved: resuming did not run it again
    assert obs["calls"]["a_steady"] == 1, "the succeeding sibling ran again on resume"
    assert obs["calls"] == {"a_steady": 1, "b_flaky": 2, "join": 1}
    failed = obs["state_after_failure"]
    assert failed["next"] == ("b_flaky",)
    assert failed["values"] == {"log": ["input", "steady"]}
    steady, flaky = failed["tasks"]
    assert (steady["name"], steady["error"], steady["result"]) == (
        "a_steady",
        None,
        {"log": ["steady"]},
    )
    assert flaky["name"] == "b_flaky"
    assert "FlakyError" in flaky["error"]
    assert obs["resumed"] == {"log": ["input", "steady", "flaky", "joined:input,steady,flaky"]}
    assert len(obs["history_after_failure"]) == 2
    assert len(obs["history"]) == 4


# --------------------------------------------------------------------------- #
# 7. 40 invocations; history with limit / before / filter
# --------------------------------------------------------------------------- #


def check_long_thread(obs: Observed) -> None:
    assert len(obs["outputs"]) == graphs.LONG_THREAD_RUNS
    assert obs["outputs"][-1]["count"] == 79
    history = obs["history"]
    assert len(history) == 4 * graphs.LONG_THREAD_RUNS
    assert obs["limit_5"] == history[:5]
    assert obs["before_id"] == history[10]["config"]
    assert obs["before"] == history[11:]
    assert obs["before_limit_3"] == history[11:14]
    assert obs["source_loop"] == [s for s in history if s["metadata"]["source"] == "loop"]
    assert len(obs["source_loop"]) == 3 * graphs.LONG_THREAD_RUNS
    assert obs["source_input"] == [s for s in history if s["metadata"]["source"] == "input"]
    assert sources_and_steps(obs["step_3"]) == [("input", 3)]
    assert sources_and_steps(obs["step_5_loop"]) == [("loop", 5)]
    assert obs["no_match"] == []
    loop_before = [s for s in history[11:] if s["metadata"]["source"] == "loop"]
    assert obs["loop_limit_4_before"] == loop_before[:4]
    assert len(obs["other_history"]) == 16


# --------------------------------------------------------------------------- #
# 8. streaming (astream updates) with a reducer and interrupt/resume
# --------------------------------------------------------------------------- #


def check_streamed_review(obs: Observed) -> None:
    first, interrupted = obs["stream1"]
    assert first == {"draft": {"log": ["draft:streams"]}}
    assert interrupt_values(interrupted["__interrupt__"]) == [
        {"question": "approve draft?", "log": ["seed", "draft:streams"]}
    ]
    assert obs["state1"]["interrupts"] == list(interrupted["__interrupt__"])
    [again] = obs["stream2"]
    assert interrupt_values(again["__interrupt__"]) == [{"question": "really?", "first": "ok"}]
    assert obs["run3"]["log"] == ["seed", "draft:streams", "review:ok:done", "published"]
    assert [mode for mode, _ in obs["stream4"]] == [
        "values",
        "updates",
        "values",
        "updates",
        "values",
    ]
    assert obs["state"]["next"] == ("review",)
    assert obs["state"]["values"]["log"][-2:] == ["turn2", "draft:again"]
    assert len(obs["history"]) == 8


# --------------------------------------------------------------------------- #
# 9. stateful subgraphs (checkpointer=True): replay, fork, time travel, interrupt;
#    the checkpointer's list across namespaces
# --------------------------------------------------------------------------- #


def namespaces(listed: list[dict[str, Any]]) -> list[str]:
    return [c["config"]["configurable"]["checkpoint_ns"] for c in listed]


def check_whole_thread(obs: Observed, root: int, clerk: int) -> None:
    every = obs["list"]
    # the root namespace first, then the subgraph's, newest first within each
    assert namespaces(every) == [""] * root + ["clerk"] * clerk
    assert [c for c in every if c["config"]["configurable"]["checkpoint_ns"] == "clerk"] == obs[
        "list_clerk"
    ]
    assert obs["list_limit_3"] == every[:3]
    assert obs["list_limit_past_root"] == every[: len(every) // 2 + 3]
    assert namespaces(obs["list_limit_past_root"])[-1] == "clerk"
    for name in ("root", "clerk"):
        before = obs[f"list_before_{name}"]
        assert before and set(namespaces(before)) == {"", "clerk"}
        assert obs[f"list_before_{name}_limit"] == before[: max(1, len(before) - 2)]
    assert namespaces(obs["list_exact"]) == ["clerk"]
    assert obs["list_loop"] == [c for c in every if c["metadata"]["source"] == "loop"][:5]


def check_stateful_replay(obs: Observed) -> None:
    assert obs["run2"]["summary"] == "visit:a,visit:b"
    # replaying run2's clerk step restores the clerk as it was before that step
    assert obs["replay_run"] == obs["run2"]
    assert obs["clerk_after_replay"]["values"]["visits"] == ["visit:a", "visit:b"]
    [task] = obs["replay_from_subgraphs"]["tasks"]
    assert task["state"]["values"]["visits"] == ["visit:a", "visit:b"]
    assert obs["fork_state"]["metadata"]["source"] == "update"
    assert obs["fork_run"]["summary"] == "visit:a,visit:forked"
    # before the clerk first ran, it had no checkpoint: it starts empty
    assert obs["travel_run"] == obs["run1"]
    assert obs["clerk_state"]["values"]["visits"] == ["visit:a"]
    assert len(obs["history"]) == 20
    assert len(obs["clerk_history"]) == 20
    check_whole_thread(obs, 20, 20)


def check_stateful_interrupt(obs: Observed) -> None:
    [task] = obs["state1"]["tasks"]
    assert task["state"]["next"] == ("confirm",)
    assert interrupt_values(task["interrupts"]) == [{"confirm": "a", "visits": ["visit:a"]}]
    assert obs["clerk_state1"]["values"]["visits"] == ["visit:a"]
    assert obs["run4"]["summary"] == "visit:a,answer:yes,visit:b,answer:no"
    # the replayed step interrupts again, on the clerk's state of before that step
    assert interrupt_values(obs["replay_run"]["__interrupt__"]) == [
        {"confirm": "b", "visits": ["visit:a", "answer:yes", "visit:b"]}
    ]
    [task] = obs["replay_state"]["tasks"]
    assert task["state"]["next"] == ("confirm",)
    assert obs["replay_resumed"]["summary"] == "visit:a,answer:yes,visit:b,answer:again"
    assert len(obs["history"]) == 13
    assert len(obs["clerk_history"]) == 15
    check_whole_thread(obs, 13, 15)


def check_subgraph_time_travel(obs: Observed) -> None:
    asked = [{"ask": "child needs input", "note": "seen 2"}]
    assert interrupt_values(obs["run1"]["__interrupt__"]) == asked
    # replaying the parent's step into the child runs the child again from its start
    assert interrupt_values(obs["replay_run"]["__interrupt__"]) == asked
    [task] = obs["replay_state"]["tasks"]
    assert task["state"]["next"] == ("child_ask",)
    assert obs["replay_resumed"]["items"][-3:] == [
        "child-answer:second",
        "child-finish",
        "parent-after:7",
    ]
    assert obs["fork_state"]["metadata"]["source"] == "update"
    fork_asked = [{"ask": "child needs input", "note": "seen 3"}]
    assert interrupt_values(obs["fork_run"]["__interrupt__"]) == fork_asked
    assert obs["fork_resumed"]["items"][-1] == "parent-after:9"
    assert len(obs["history"]) == 11


# --------------------------------------------------------------------------- #
# every scenario, on the sync and on the async saver
# --------------------------------------------------------------------------- #

Check = Callable[[Observed], None]


def case(name: str, check: Check, *args: str | None) -> Any:
    """A scenario of tests/graphs.py by name, the facts it must show, and its arguments."""
    return pytest.param(name, check, args, id="-".join([name, *map(str, args)]))


CASES = [
    *(case("linear", partial(check_linear, durability=d), d) for d in DURABILITIES),
    *(case("hitl", check_hitl, d) for d in (None, "sync")),
    case("parallel_interrupts", check_parallel_interrupts),
    case("time_travel", check_time_travel),
    case("subgraph", check_subgraph),
    case("send_fanout", check_send_fanout),
    *(case("parallel_failure", check_parallel_failure, d) for d in (None, "sync")),
    case("long_thread", check_long_thread),
    *(case("streamed_review", check_streamed_review, d) for d in (None, "sync")),
    case("stateful_replay", check_stateful_replay),
    case("stateful_interrupt", check_stateful_interrupt),
    case("subgraph_time_travel", check_subgraph_time_travel),
]


@pytest.mark.parametrize(("name", "check", "args"), CASES)
def test_graph(saver: RedisStreamSaver, name: str, check: Check, args: tuple[Any, ...]) -> None:
    scenario = getattr(graphs, name)
    ref = scenario(InMemorySaver(), *args)
    check(ref)
    ours = scenario(saver, *args)
    check(ours)
    assert_same(ours, ref)


@pytest.mark.parametrize(("name", "check", "args"), CASES)
async def test_graph_async(
    asaver: AsyncRedisStreamSaver, name: str, check: Check, args: tuple[Any, ...]
) -> None:
    scenario = getattr(graphs, f"a{name}")
    ref = await scenario(InMemorySaver(), *args)
    check(ref)
    ours = await scenario(asaver, *args)
    check(ours)
    assert_same(ours, ref)
