"""The README's code cannot rot: its Python runs, and CI runs its test command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _documented_commands() -> list[tuple[str, str]]:
    """Every ``streamsaver ...`` command line in README.md and docs/, in code blocks and inline
    code, cut at a comment, pipe or redirect; synopses (``[--json]``, ``rebuild|verify``,
    ``...``, ``COMMAND``) are left out: they describe, they do not run."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
        prose = re.sub(r"```.*?```", "", text, flags=re.S).replace("\n", " ")
        lines = [line for block in blocks for line in block.splitlines()]
        lines += re.findall(r"`(streamsaver [^`]*)`", prose)
        for line in lines:
            match = re.match(r"^\s*(?:\S*/)?streamsaver (.*)$", line)
            if not match:
                continue
            command = re.split(r"\s+#\s|\s\|\s|\s>\s|\s&&\s", match.group(1))[0].strip()
            if re.search(r"\[|\w\|\w|\.\.\.|\bCOMMAND\b|completion|-h\b|--help", command):
                continue
            found.append((path.name, command))
    return found


def test_every_documented_command_line_parses() -> None:
    """A command the docs show must be one the CLI takes: 'streamsaver serve URL' was
    documented while serve took only --url. Parsed, not run (no callback runs)."""
    import shlex

    import typer

    from streamsaver.cli import app

    root = typer.main.get_command(app)
    commands = _documented_commands()
    assert len(commands) > 30
    wrong = []
    for where, command in commands:
        args = shlex.split(command)
        context: Any = root.make_context("streamsaver", args, resilient_parsing=True)
        group: Any = root
        try:
            # resilient parsing runs no callback and ignores missing values, but still refuses
            # an unknown command, option or extra argument
            while hasattr(group, "resolve_command"):
                rest = [*getattr(context, "_protected_args", []), *context.args]
                if not rest:
                    break
                name, group, rest = group.resolve_command(context, rest)
                context = group.make_context(name, rest, parent=context, resilient_parsing=True)
            if context.args:
                wrong.append((where, command, f"extra arguments {context.args}"))
        except Exception as exc:  # typer's vendored click: UsageError and its kin
            wrong.append((where, command, f"{type(exc).__name__}: {exc}"))
    assert wrong == []
