"""LangGraph's own tests, from the sdist of the installed ``langgraph``, run with streamsaver as
a checkpointer (tests/langgraph_plugin.py): their bodies unchanged, in a pytest subprocess.

The sdist is fetched with ``pip download`` (its index, so a mirror works too) and unpacked into
a cache directory (``STREAMSAVER_LANGGRAPH_HOME``, default ``~/.cache/streamsaver/langgraph``),
one folder per version, so only the first run downloads (~800 KB). A machine that cannot fetch
it fails the tests that need it, saying why: they never skip.

By hand, every file LangGraph ships, streamsaver's runs only, on a throwaway server::

    python -m tests.langgraph_suite              # or: ... tests/test_pregel.py -x
    python -m tests.langgraph_suite --fetch      # only fetch the sdist, print where it is
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

__all__ = ["Outcome", "fetch", "fetch_sdist", "run", "run_pytest"]

_HERE = Path(__file__).resolve().parent


def _home() -> Path:
    default = Path.home() / ".cache" / "streamsaver" / "langgraph"
    return Path(os.environ.get("STREAMSAVER_LANGGRAPH_HOME") or default)


def fetch(wanted: str | None = None) -> Path:
    """The unpacked sdist of langgraph ``wanted`` (default: the installed version)."""
    return fetch_sdist("langgraph", wanted or version("langgraph"), _home())


def fetch_sdist(package: str, wanted: str, home: Path) -> Path:
    """The sdist of ``package`` ``wanted``, unpacked under ``home`` (kept there: the next run
    finds it). Raises, naming what pip said, when it cannot be fetched: a suite that cannot
    run must fail, not pass as skipped."""
    stem = f"{package.replace('-', '_')}-{wanted}"
    root = home / stem
    if (root / "tests").is_dir():
        return root
    home.mkdir(parents=True, exist_ok=True)
    download = home / f"download-{stem}"
    shutil.rmtree(download, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         "--no-deps", "--no-binary", ":all:", "-d", str(download), f"{package}=={wanted}"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(
            f"downloading the {package} {wanted} sdist (its tests) failed: "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )
    (archive,) = download.glob("*.tar.gz")
    partial = home / f"{stem}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(partial, filter="data")
    (unpacked,) = partial.iterdir()
    unpacked.rename(root)
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(download, ignore_errors=True)
    return root


@dataclass
class Outcome:
    """What the run reported, per test id (``file::name[params]``)."""

    returncode: int
    output: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def run(sdist: Path, redis_url: str, args: list[str], timeout: float = 900) -> Outcome:
    """pytest over the sdist's tests with ``args`` (files, options), streamsaver's runs only."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(_HERE), os.environ.get("PYTHONPATH", "")]),
        "STREAMSAVER_LANGGRAPH_REDIS_URL": redis_url,
        # their Postgres and Redis-cache parameters need servers of their own
        "NO_DOCKER": "true",
    }
    options = ["-p", "langgraph_plugin", "-q", "-k", "streamsaver", "--timeout=120", *args]
    return run_pytest(options, sdist, env, timeout)


def run_pytest(options: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Outcome:
    """pytest with ``options`` in ``cwd``, each test's outcome read from a JUnit report of this
    run's own (two runs may share a cached sdist)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        command = [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}",
            "-o", "junit_family=xunit1", "-o", "asyncio_default_fixture_loop_scope=function",
            *options,
        ]  # fmt: skip
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        outcome = Outcome(done.returncode, done.stdout[-6000:] + done.stderr[-3000:])
        if report.exists():
            for case in ET.parse(report).getroot().iter("testcase"):
                name = f"{case.get('file')}::{case.get('name')}"
                if case.find("failure") is not None or case.find("error") is not None:
                    if name not in outcome.failed:  # a failed test whose teardown errs too
                        outcome.failed.append(name)
                elif case.find("skipped") is not None:
                    outcome.skipped.append(name)
                else:
                    outcome.passed.append(name)
    return outcome


def main(argv: list[str]) -> int:
    from streamsaver.embedded import EmbeddedRedis

    sdist = fetch()
    if argv == ["--fetch"]:
        print(sdist)
        return 0
    with EmbeddedRedis() as server:
        outcome = run(sdist, server.url, argv or ["tests"], timeout=3600)
    print(outcome.output)
    print(
        f"langgraph {version('langgraph')}: {len(outcome.passed)} passed, "
        f"{len(outcome.failed)} failed, {len(outcome.skipped)} skipped"
    )
    return outcome.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
