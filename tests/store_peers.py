"""The Store tests LangGraph's stores ship, run against streamsaver's stores
(tests/store_peers_plugin.py): ``InMemoryStore``'s (langgraph-checkpoint), ``PostgresStore``'s
and ``AsyncPostgresStore``'s (langgraph-checkpoint-postgres), ``SqliteStore``'s and
``AsyncSqliteStore``'s (langgraph-checkpoint-sqlite), their bodies unchanged, in a pytest
subprocess per package.

Each sdist, of the installed version, is fetched with ``pip download`` and unpacked into a
cache directory (``STREAMSAVER_STORE_PEERS_HOME``, default
``~/.cache/streamsaver/store-peers``), so only the first run downloads (~400 KB in all). A
machine that cannot fetch them fails the tests that need them, saying why: they never skip.

By hand, on a throwaway server::

    python -m tests.store_peers                  # every package's store tests
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

from tests.langgraph_suite import Outcome, fetch_sdist, run_pytest

__all__ = ["PACKAGES", "fetch", "run"]

_HERE = Path(__file__).resolve().parent

# per package, its store test files
PACKAGES = {
    "langgraph-checkpoint": ["tests/test_store.py"],
    "langgraph-checkpoint-postgres": ["tests/test_store.py", "tests/test_async_store.py"],
    "langgraph-checkpoint-sqlite": ["tests/test_store.py", "tests/test_async_store.py"],
}


def _home() -> Path:
    default = Path.home() / ".cache" / "streamsaver" / "store-peers"
    return Path(os.environ.get("STREAMSAVER_STORE_PEERS_HOME") or default)


def fetch(package: str) -> Path:
    """The unpacked sdist of the installed version of ``package``."""
    return fetch_sdist(package, version(package), _home())


def run(package: str, redis_url: str, args: list[str], timeout: float = 600) -> Outcome:
    """pytest over ``package``'s store tests (``args``: options, more files) with streamsaver's
    stores in place of its own; test ids as ``file::name[params]``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(_HERE), os.environ.get("PYTHONPATH", "")]),
        "STREAMSAVER_STORE_PEERS_REDIS_URL": redis_url,
    }
    options = ["-p", "store_peers_plugin", "-q", "--timeout=60", *PACKAGES[package], *args]
    return run_pytest(options, fetch(package), env, timeout)


def main(argv: list[str]) -> int:
    from streamsaver.embedded import EmbeddedRedis

    if argv == ["--fetch"]:
        for package in PACKAGES:
            print(fetch(package))
        return 0
    code = 0
    with EmbeddedRedis() as server:
        for package in PACKAGES:
            outcome = run(package, server.url, argv, timeout=3600)
            print(outcome.output)
            for name in outcome.failed:
                print(f"FAILED {name}")
            print(
                f"{package} {version(package)}: {len(outcome.passed)} passed, "
                f"{len(outcome.failed)} failed, {len(outcome.skipped)} skipped"
            )
            code = code or outcome.returncode
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
