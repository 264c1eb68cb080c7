"""LangGraph's own tests pass with streamsaver as the checkpointer: every file of the sdist of
the installed ``langgraph`` (tests/langgraph_suite.py fetches it; it fails, never skips, where
it cannot), each test that takes LangGraph's ``sync_checkpointer`` or ``async_checkpointer`` run
with a streamsaver saver on this session's server, their bodies unchanged (about a minute).
``python -m tests.langgraph_suite [files]`` runs them by hand."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from tests.langgraph_suite import fetch, run

# streamsaver's runs in the versions counted here; another version must pass all of its own
# and these
COUNTS = {"1.2.24": 648}

# threads saved by older LangGraph versions, resumed: the checkpoints name channels LangGraph
# renames when it loads them
MIGRATION = [
    f"tests/test_checkpoint_migration.py::{test}[streamsaver{params}]"
    for test in ("test_saved_checkpoint_state_graph", "test_saved_checkpoint_state_graph_async")
    for params in ("-3", "-2-start:*", "-2-quadratic")
] + [
    f"tests/test_checkpoint_migration.py::{test}[streamsaver]"
    for test in ("test_latest_checkpoint_state_graph", "test_latest_checkpoint_state_graph_async")
]


@pytest.mark.timeout(600)
def test_langgraph_tests_pass_with_streamsaver(redis_url: str) -> None:
    outcome = run(fetch(), redis_url, ["tests"], timeout=540)
    assert outcome.failed == [], outcome.output
    # a whole file skipped at collection (one needing a LangGraph API server) is no test of a
    # checkpointer; a checkpointer's test skipped is not a pass
    assert [name for name in outcome.skipped if "streamsaver" in name] == [], outcome.output
    assert outcome.returncode == 0, outcome.output
    assert all("streamsaver" in name for name in outcome.passed), outcome.output
    assert set(MIGRATION) <= set(outcome.passed), outcome.output
    expected = COUNTS.get(version("langgraph"))
    if expected is not None:
        assert len(outcome.passed) == expected, outcome.output
