"""Every command's --help as an operator reads it in an 80-column terminal: no line past the
edge, no word split inside, a value named for what it is (``--url URL``, never ``<str>`` or a
``<bool>`` on a flag), required arguments bare in the usage line (``THREAD_ID``, not
``{THREAD_ID}``) and brackets printed as written (``pip install 'streamsaver[embedded]'``)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main

from streamsaver.cli import app, main

CLI = Path(__file__).resolve().parents[1] / "src" / "streamsaver" / "cli"
# what click and typer write themselves
OWN = """Usage OPTIONS COMMAND ARGS Options Arguments Commands default Show this message and
exit Install completion for the current shell to copy it or customize the installation"""
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _commands() -> Iterator[tuple[str, ...]]:
    def walk(command: object, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, (*path, name))

    yield from walk(typer.main.get_command(app), ())


COMMANDS = list(_commands())


def _help(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*path, "--help"])
    return out.getvalue()


def _vocabulary() -> set[str]:
    """Every word the command line's sources and click's own strings hold, lower-cased: a word
    of the help that is not one was split by a wrap (``proj ector``)."""
    text = OWN + "".join(p.read_text(encoding="utf-8") for p in CLI.glob("*.py"))
    words = {w.lower() for w in WORD.findall(text)}
    # an option's name is its parameter's, hyphenated: --allow-host from allow_host
    return words | {part for w in words for part in w.split("_")}


VOCABULARY = _vocabulary()


def test_every_command_is_covered() -> None:
    assert len(COMMANDS) > 20 and ("audit", "verify") in COMMANDS and ("acl",) in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "streamsaver")
def test_help_reads_at_80_columns(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    text = _help(path, monkeypatch)
    assert text.startswith("Usage: streamsaver"), text
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert too_wide == []
    # a value's placeholder is its name or choices, never its Python type
    assert re.findall(r"<(?:str|int|float|bool|path|list\[\w+\])>", text) == []
    usage = text.splitlines()[0]
    assert "{" not in usage, usage
    split = sorted({w for w in WORD.findall(text) if w.lower() not in VOCABULARY})
    assert split == [], f"words no source holds (split by a wrap?): {split}"


def test_brackets_print_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    text = " ".join(_help(("demo",), monkeypatch).split())
    assert "pip install 'streamsaver[embedded]'" in text
    audit = " ".join(_help(("audit", "show"), monkeypatch).split())
    assert "'streamsaver[encryption]'" in audit


def test_flags_show_no_value(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _help(("tail",), monkeypatch)
    assert re.search(r"^  -f, --follow +keep waiting", text, re.M), text
    assert re.search(r"^  --url URL +Redis URL", text, re.M), text
    assert re.search(r"^  THREAD_ID +the thread", text, re.M), text
    roles = _help(("acl",), monkeypatch)
    assert "--role [saver|reader|projector|loader]" in roles
