"""Every command of the command line through the failures an operator meets: a stopped server,
a wrong password, TLS against a plain port, an unknown thread, a missing file. Each must end
in one line on stderr and its documented exit code. Driven in-process through ``main`` (the
subprocess runs of test_cli_errors.py cover the interpreter's own exit and ``| head``)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamsaver import RedisStreamSaver
from streamsaver.cli import main
from streamsaver.store import RedisStreamStore
from tests import test_cli_errors
from tests.test_cli import _fill
from tests.test_security import _free_port

locked = test_cli_errors.locked  # a server of its own that wants another password

# every command that talks to Redis, as an operator would type it
COMMANDS = [
    ("threads",),
    ("migrate-keys",),
    ("rebuild", "--all"),
    ("rebuild", "t"),
    ("verify", "--all"),
    ("verify", "t"),
    ("tail", "t"),
    ("tail", "--all"),
    ("history", "t"),
    ("audit", "show", "t"),
    ("audit", "export", "--all", "--out", "-"),
    ("audit", "verify", "t"),
    ("audit", "verify", "--all"),
    ("store", "history", "users"),
    ("store", "tail"),
    ("store", "rebuild"),
    ("store", "verify"),
    ("store", "sweep"),
    ("projector", "status"),
    ("projector", "run"),
    ("projector", "rebuild", "--all"),
    ("projector", "verify", "--all"),
]


@pytest.fixture(autouse=True)
def _signals() -> Iterator[None]:
    # tail and projector run install SIGTERM/SIGINT handlers for the process they own
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if ": warning: " not in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_stopped_server(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"
    code, _, err = _run(capsys, *command, "--url", url)
    assert code == 4, err
    line = _one_line(err)
    assert line.startswith("streamsaver: ") and "is the server running" in line


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_wrong_password(
    command: tuple[str, ...], locked: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, *command, "--url", locked)
    assert code == 4, err
    line = _one_line(err)
    assert "refused the credentials" in line and ":wrong@" not in line


# A plain server never answers a TLS hello: each of these waits out the 5 s connect timeout
# (the URL cannot shorten it), so one command per module that opens a connection, not all
TLS_COMMANDS = [("threads",), ("tail", "t"), ("audit", "verify", "t"), ("store", "verify")]


@pytest.mark.parametrize("command", TLS_COMMANDS, ids=" ".join)
def test_tls_against_a_plain_port(
    command: tuple[str, ...], redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, *command, "--url", redis_url.replace("redis://", "rediss://"))
    assert code == 4, err
    assert "TLS handshake" in _one_line(err)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_no_server_given(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    code, _, err = _run(capsys, *command)
    assert code == 2, err
    assert "pass --url or set $REDIS_URL" in _one_line(err)


def test_doctor_fails_in_its_own_lines(
    locked: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor reports a dead server as a failed check (its output), exit 4."""
    for url, check in (
        (f"redis://127.0.0.1:{_free_port()}/0", "reachable"),
        (locked, "auth"),
    ):
        code, out, err = _run(capsys, "doctor", url)
        assert code == 4, (url, out, err)
        assert ["fail", check] in [line.split()[:2] for line in out.splitlines()], out
        assert "Traceback" not in err


def test_unknown_threads_exit_3(
    sync_saver: RedisStreamSaver, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(sync_saver, ["known"])
    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    for command in (
        ("rebuild", "--thread", "knwon"),
        ("projector", "verify", "--thread", "knwon"),
        ("audit", "show", "knwon"),
        ("audit", "verify", "knwon"),
    ):
        code, out, err = _run(capsys, *command, *where)
        assert code == 3, (command, out, err)
        assert "no thread 'knwon'" in _one_line(err)
        assert out == ""


def test_missing_files_and_bad_options_exit_2(
    sync_saver: RedisStreamSaver, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(sync_saver, ["a"])
    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    missing = str(tmp_path / "no" / "such.jsonl")
    for command, message in (
        (("audit", "verify", "--file", missing), f"cannot open {missing!r}"),
        (("audit", "export", "a", "--out", missing, *where), f"cannot open {missing!r}"),
        (("verify", "a", "--all", *where), "give THREAD_ID... or --all"),
        (("rebuild", *where), "give THREAD_ID... or --all"),
        (("audit", "export", *where), "give a THREAD_ID or --all"),
        (("tail", "a", "--all", *where), "give a THREAD_ID or --all"),
        (("store", "tail", "--from", "{oops", *where), "is not a Store cursor"),
        (("projector", "run", "--log-level", "LOUD", *where), "--log-level 'LOUD'"),
        (("acl", "--server-version", "seven"), "is not a version"),
    ):
        code, out, err = _run(capsys, *command)
        assert code == 2, (command, out, err)
        assert message in _one_line(err), (command, err)


def test_an_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "threads", "--frobnicate")
    assert code == 2
    assert "--frobnicate" in err and "Traceback" not in err


def test_serve_without_the_web_extra_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "streamsaver.web", None)  # as if not installed
    code, _, err = _run(capsys, "serve", "--url", "redis://127.0.0.1:1/0")
    assert code == 2
    assert "pip install 'streamsaver[web]'" in _one_line(err)


def test_store_tail_prints_events_and_resumes_from_its_cursor(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    with RedisStreamStore.from_conn_string(redis_url, prefix=prefix) as store:
        store.put(("users", "a"), "prefs", {"v": 1})
        store.put(("users", "b"), "prefs", {"v": 2})
        where = ("--url", redis_url, "--prefix", prefix)
        code, out, err = _run(capsys, "store", "tail", "--json", "--values", *where)
        assert code == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        assert [(e["namespace"], e["value"]) for e in events] == [
            (["users", "a"], {"v": 1}),
            (["users", "b"], {"v": 2}),
        ]
        cursor = err.split("resume with --from ", 1)[1].strip().strip("'")
        store.delete(("users", "a"), "prefs")
        code, out, err = _run(capsys, "store", "tail", "--from", cursor, *where)
        assert code == 0, err
        (line,) = out.splitlines()
        assert line.split()[1:4] == ["delete", "'users.a'", "'prefs'"]
