"""The Store tests of LangGraph's stores pass on streamsaver's: ``InMemoryStore``'s,
``PostgresStore``'s and ``AsyncPostgresStore``'s, ``SqliteStore``'s and ``AsyncSqliteStore``'s,
from the sdists of the installed packages, their bodies unchanged, with streamsaver's stores
in place of theirs (tests/store_peers.py fetches them and runs them in a subprocess with
tests/store_peers_plugin.py). What fails is listed below with why: each a test of the peer's
own machinery (its SQL, its connection pool, a SQLite-only filter syntax) or a feature
streamsaver's store does not offer; anything else failing, or one of these passing, fails
here. ``python -m tests.store_peers`` runs them by hand."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from tests.store_peers import run

# Postgres's fixtures run each test with three connection modes (a connection, a pipeline, a
# pool), the same store to streamsaver: one mode is run. Left out: its TTL test, which sleeps
# 17 s (tests/test_store_contract.py covers expiry and refresh), and the burst of 50,000
# concurrent calls (tests/test_bounded_waits.py's concern).
DESELECT = {
    "langgraph-checkpoint": [],
    "langgraph-checkpoint-sqlite": [],
    "langgraph-checkpoint-postgres": [
        "-k",
        "not pipe and not pool and not test_store_ttl and not test_large_batches_async",
    ],
}

_SQL = "runs its own SQL on the store's table (backdating a row's expiry, reading its columns)"
_SQLITE = "SQLite's own: its index option named text_fields, its migrations, filter syntax"

NOT_OURS = {
    "langgraph-checkpoint": {},
    "langgraph-checkpoint-sqlite": {
        "tests/test_store.py::test_vector_store_initialization": _SQLITE,
        "tests/test_store.py::test_nonnull_migrations": _SQLITE,
        # a filter key that would inject SQL is refused there; here no key is SQL
        "tests/test_store.py::test_sql_injection_vulnerability[memory]": _SQLITE,
        "tests/test_store.py::test_sql_injection_vulnerability[file]": _SQLITE,
        # a dotted filter key as a nested path: InMemoryStore (which this store follows)
        # compares top-level keys only
        "tests/test_store.py::test_filter_keys_with_hyphens_and_digits[memory]": _SQLITE,
        "tests/test_store.py::test_filter_keys_with_hyphens_and_digits[file]": _SQLITE,
    },
    "langgraph-checkpoint-postgres": {
        **{
            f"tests/test_store.py::test_scores[{q}-halfvec-l2]": (
                "distance_type='l2': this store ranks by cosine similarity only"
            )
            for q in ("aaa", "bbb", "ccc", "abcd", "poisson")
        },
        **{
            f"tests/{f}::test_omit_expired_{t}[default]": _SQL
            for f in ("test_store.py", "test_async_store.py")
            for t in (
                "filters_read_paths",
                "refresh_ttl_only_refreshes_live_rows",
                "search_pagination",
            )
        },
        "tests/test_store.py::test_nonnull_migrations": "Postgres's own: its migrations",
    },
}

# what passes, per package version counted here (another version must pass all its own but
# the above)
COUNTS = {
    ("langgraph-checkpoint", "4.3.2"): 117,
    ("langgraph-checkpoint-sqlite", "3.1.2"): 136,
    ("langgraph-checkpoint-postgres", "3.2.0"): 169,
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("package", sorted(DESELECT))
def test_peer_store_tests_pass_on_streamsaver(package: str, redis_url: str) -> None:
    outcome = run(package, redis_url, DESELECT[package], timeout=540)
    assert sorted(outcome.failed) == sorted(NOT_OURS[package]), outcome.output
    assert outcome.skipped == [], outcome.output
    # every one of the async peers' TTL and loop tests among what passes: sweep_ttl, setup,
    # start_ttl_sweeper as coroutines, InvalidStateError for a sync call on the loop
    if package == "langgraph-checkpoint-sqlite":
        assert "tests/test_async_store.py::test_no_running_loop[memory]" in outcome.passed
    expected = COUNTS.get((package, version(package)))
    if expected is not None:
        assert len(outcome.passed) == expected, outcome.output
