"""The README's and docs' code cannot rot: every Python block runs verbatim against a server of
the tests' own, the README's first-fifteen-minutes path runs verbatim in a shell on a fresh
development server, its install-and-demo line is the one .ci/package checks, CI runs its test
command, and every command line the docs show is one the CLI takes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


PYTHON = [
    (f"{page.name}#{i}", block)
    for page in PAGES
    for i, block in enumerate(_blocks(page.read_text(), "(?:python|py)"), 1)
]


def test_the_readme_stays_an_entry_point() -> None:
    """What it is, install, one path, links: at most 300 lines."""
    assert len(README.splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_names_a_tracker_number_or_a_commit(page: Path) -> None:
    """User-facing text never names an issue number or a commit hash (a word of 7 to 40 hex
    digits holding a digit and a letter, outside code, where a version string may be one)."""
    prose = re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", page.read_text(), flags=re.S))
    hexes = [
        w
        for w in re.findall(r"\b[0-9a-f]{7,40}\b", prose)
        if re.search(r"\d", w) and re.search(r"[a-f]", w)
    ]
    assert hexes == []
    assert re.findall(r"(?i)\bissues?\s*#?\d+|(?<![\w&])#\d{2,}\b", prose) == []


@pytest.mark.parametrize("block", [b for _, b in PYTHON], ids=[n for n, _ in PYTHON])
def test_every_python_block_runs_verbatim(block: str, redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "REDIS_URL": redis_url}
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", block],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_the_quickstart_prints_what_it_says(redis_url: str) -> None:
    (quickstart,) = _blocks(README, "python")
    env = {**os.environ, "REDIS_URL": redis_url}
    out = subprocess.run(
        [sys.executable, "-c", quickstart], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "you said: hello"
    # its history: a run before (the block runs twice here) left its deletion's record first
    assert "checkpoint -1  ('__start__',)" in lines, lines
    assert any(line.startswith("writes None reply ") for line in lines), lines


def test_the_first_fifteen_minutes_run_verbatim(tmp_path: Path) -> None:
    """The install line (a fresh venv: here the tests' own, already installed), then the path
    block as printed, in one shell, with no REDIS_URL and a development server of its own."""
    install, path, _ = (block.strip() for block in _blocks(README, "sh"))
    assert install.endswith(".venv/bin/python -m streamsaver demo")
    venv = tmp_path / ".venv"
    venv.symlink_to(Path(sys.prefix))  # the venv the tests run in, as the install line made it
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["STREAMSAVER_DEV_DIR"] = str(tmp_path / "dev")
    demo = install.split("&&")[-1].strip()
    script = f"set -euo pipefail\n{demo}\n{path}\nstreamsaver dev stop\n"
    try:
        out = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300,
            cwd=tmp_path,
        )  # fmt: skip
    finally:
        subprocess.run(
            [str(venv / "bin" / "streamsaver"), "dev", "stop"], env=env, capture_output=True
        )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "streamsaver history demo-1" in out.stdout  # what the demo says to run next
    assert "'demo-1'" in out.stdout  # threads lists it
    assert re.search(r" checkpoint ns='' step=0 loop ", out.stdout), out.stdout  # history
    assert re.search(r" writes +ns='' step=\S+ user ", out.stdout), out.stdout
    assert re.search(r"^ok +reachable ", out.stdout, flags=re.M), out.stdout  # doctor


def test_ci_runs_the_readme_test_command() -> None:
    _, _, tests = (block.strip() for block in _blocks(README, "sh"))
    ci = (ROOT / ".ci" / "run").read_text()
    # verbatim, with only its exit status kept for the no-tests check that follows
    assert f"{tests} || status=$?" in ci.splitlines()


def _documented_commands() -> list[tuple[str, str]]:
    """Every ``streamsaver ...`` command line in README.md and docs/, in code blocks and inline
    code, cut at a comment, pipe or redirect; synopses (``[--json]``, ``rebuild|verify``,
    ``...``, ``COMMAND``) are left out: they describe, they do not run."""
    found = []
    for path in PAGES:
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


def _block_commands() -> list[tuple[str, list[str]]]:
    """Each code block's ``streamsaver`` lines, in order, by page: the commands a reader
    copies (prose names commands; blocks run them), cut at a comment or a pipe."""
    found = []
    for path in PAGES:
        for i, block in enumerate(re.findall(r"```[a-z]*\n(.*?)```", path.read_text(), re.S)):
            lines = [
                re.split(r"\s+#\s|\s\|\s", m.group(1))[0].strip()
                for line in block.splitlines()
                if (m := re.match(r"^\s*(?:\S*/)?streamsaver (.*)$", line))
            ]
            if lines:
                found.append((f"{path.name}#{i}", lines))
    return found


def test_every_command_of_a_code_block_runs(sync_saver: Any, tmp_path: Path) -> None:
    """Each block's commands run as written, in order (an export, then its verify), against a
    fresh server ($REDIS_URL) holding the threads the docs name, each block in a directory of
    its own. A usage error (exit 2) or a traceback fails; a command that runs until stopped
    (--follow, serve) is stopped after a few seconds. Exit 1 is a check that failed here (no
    persistence on the tests' server), 4 an example's host that does not exist, 5 serve's
    port taken by another program on this machine."""
    from tests.test_cli import _fill

    _fill(sync_saver, ["my-thread", "quickstart", "demo-1"])
    url = sync_saver.client.get_connection_kwargs()
    redis_url = f"redis://{url['host']}:{url['port']}/0"
    env = {**os.environ, "REDIS_URL": redis_url, "STREAMSAVER_DEV_DIR": str(tmp_path / "dev")}
    streamsaver = Path(sys.executable).parent / "streamsaver"
    blocks = _block_commands()
    assert len([c for _, cs in blocks for c in cs]) > 12
    wrong = []
    for where, commands in blocks:
        cwd = tmp_path / where.replace("#", "_")
        cwd.mkdir()
        for command in commands:
            line = f'"{streamsaver}" {command}'
            if re.match(r"(threads|history|tail|audit)\b", command):
                line += f" --prefix {sync_saver.prefix}"  # the threads filled above
            try:
                out = subprocess.run(
                    line, shell=True, capture_output=True, text=True, env=env, cwd=cwd,
                    timeout=8, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                if not re.search(r"--follow|^serve\b", command):
                    wrong.append((where, command, "did not end"))
                continue
            if out.returncode not in (0, 1, 4, 5) or "Traceback" in out.stderr:
                wrong.append((where, command, f"exit {out.returncode}: {out.stderr[-300:]}"))
    assert wrong == [], "\n".join(map(repr, wrong))
