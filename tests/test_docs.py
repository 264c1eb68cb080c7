"""The README's code cannot rot: its Python runs, and CI runs its test command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_quickstart_runs_and_prints_what_it_says(redis_url: str) -> None:
    (quickstart,) = _blocks("python")
    env = {**os.environ, "REDIS_URL": redis_url}
    out = subprocess.run(
        [sys.executable, "-c", quickstart], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "you said: hello"


def test_ci_runs_the_readme_test_command() -> None:
    demo, tests = (block.strip() for block in _blocks("sh"))
    assert "python -m streamsaver demo" in demo
    ci = (ROOT / ".ci" / "run").read_text()
    # verbatim, with only its exit status kept for the no-tests check that follows
    assert f"{tests} || status=$?" in ci.splitlines()
