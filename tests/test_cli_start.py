"""The command line as a new user first meets it: how fast it starts, what it makes of a URL
typed as redis-cli takes one (``host:port``), and how ``serve`` and ``tail --follow`` start and
end (a server that is down, a port that is taken, Ctrl-C)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from streamsaver import RedisStreamSaver
from tests.test_cli import _fill
from tests.test_cli_failures import COMMANDS, _one_line, _run
from tests.test_security import _free_port

HEAVY = ("langchain_core", "langgraph", "langsmith")
_CALL = "from streamsaver.cli import main\ntry:\n    main([{}])\nexcept SystemExit:\n    pass"


def _imported_after(code: str) -> list[str]:
    """The heavy packages a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}}))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = eval(out.stdout.strip().splitlines()[-1])  # a list of names printed above
    return [m for m in HEAVY if m in loaded]


@pytest.mark.parametrize(
    "code",
    [
        "import streamsaver",
        "import streamsaver.cli",
        _CALL.format("'--version'"),
        _CALL.format("'--help'"),
        _CALL.format("'tail', '--help'"),
        "from streamsaver import InvalidInputError, StreamSaverError",
    ],
    ids=["package", "cli", "--version", "--help", "tail --help", "errors"],
)
def test_starting_pulls_no_langchain(code: str) -> None:
    """--version, --help and the errors need neither LangGraph nor langchain_core (~1 s to
    import): they are imported by what uses them (a saver, an event's config)."""
    assert _imported_after(code) == []


def test_the_public_names_still_resolve() -> None:
    import streamsaver

    for name in streamsaver.__all__:
        assert getattr(streamsaver, name) is not None, name
    assert "RedisStreamSaver" in dir(streamsaver)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = streamsaver.nope  # type: ignore[attr-defined]
    # what the saver needs comes with it
    assert {"langchain_core", "langgraph"} <= set(
        _imported_after("from streamsaver import RedisStreamSaver")
    )


@pytest.mark.parametrize("command", [c for c in COMMANDS if c[0] != "projector"], ids=" ".join)
def test_host_port_is_a_url(
    command: tuple[str, ...], redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``host:port`` as redis-cli takes it: the command reaches that server (an unknown
    thread, then, is exit 3; a list is exit 0), never a traceback."""
    bare = redis_url.removeprefix("redis://").split("/")[0]
    code, _, err = _run(capsys, *command, "--url", bare, "--prefix", "no-such-prefix")
    assert "Traceback" not in err and "scheme" not in err, err
    assert code in (0, 3), (code, err)


@pytest.mark.parametrize("url", ["http://localhost:6379", "local host", "localhost:99999", "a:b"])
def test_a_url_that_is_not_one_is_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    for command in (("threads", "--url", url), ("doctor", url), ("serve", url)):
        code, _, err = _run(capsys, *command)
        assert code == 2, (command, err)
        line = _one_line(err)
        assert repr(url) in line and ("redis://" in line or "port" in line), line


def test_doctor_takes_host_port(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    bare = redis_url.removeprefix("redis://").split("/")[0]
    code, out, err = _run(capsys, "doctor", bare)
    assert "Traceback" not in err
    assert ["ok", "reachable"] in [line.split()[:2] for line in out.splitlines()], out
    assert code in (0, 1), (code, out, err)  # 1: a check this server fails (no persistence)


class Serving:
    """``streamsaver serve`` in a process of its own."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streamsaver", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        _, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, err


@pytest.fixture
def serving() -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for s in started:
        s.process.kill()
        s.process.communicate()


def _listening(port: int, process: subprocess.Popen[str], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"serve never listened on {port}")


def test_serve_checks_its_redis_before_the_banner(serving: list[Serving]) -> None:
    serving.append(s := Serving(f"127.0.0.1:{_free_port()}", "--port", str(_free_port())))
    code, err = s.finish()
    assert code == 4, err
    assert "console on" not in err
    assert "is the server running" in _one_line(err)


def test_serve_on_a_taken_port_is_one_line(redis_url: str, serving: list[Serving]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        serving.append(s := Serving(redis_url, "--port", str(port)))
        code, err = s.finish()
    assert code == 5, err
    assert "console on" not in err
    assert "pick another --port" in _one_line(err)


def test_serve_ends_on_ctrl_c_with_130(redis_url: str, serving: list[Serving]) -> None:
    port = _free_port()
    serving.append(s := Serving(redis_url, "--port", str(port)))
    _listening(port, s.process)
    s.process.send_signal(signal.SIGINT)
    code, err = s.finish()
    assert code == 130, err
    assert "Traceback" not in err


def test_tail_follow_ends_on_ctrl_c_with_130_and_its_position(redis_url: str) -> None:
    tail = subprocess.Popen(
        [sys.executable, "-m", "streamsaver", "tail", "t", "--follow", "--url", redis_url,
         "--prefix", f"start-{os.getpid()}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(3)  # imported and waiting on its first read: Ctrl-C now is a user's
        assert tail.poll() is None, tail.communicate()
        tail.send_signal(signal.SIGINT)
        _, err = tail.communicate(timeout=30)
    finally:
        tail.kill()
    assert tail.returncode == 130, err
    assert "resume with --from" in err and "Traceback" not in err


def test_one_shape_thread_ids_positional_counts_one_wording(
    sync_saver: RedisStreamSaver, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Thread ids are positional everywhere (verify and rebuild took only --thread, which
    they still accept); a count prints as "1 thread" / "2 threads" in every command."""
    _fill(sync_saver, ["one", "two"])
    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    for command, expected in (
        (("verify", "one", *where), "verified 1 thread (6 events): 0 with differences"),
        (("verify", "one", "two", *where), "verified 2 threads (12 events)"),
        (("rebuild", "one", *where), "rebuilt 1 thread: 6 events applied"),
        (("verify", "--thread", "one", *where), "verified 1 thread (6 events)"),
        (("audit", "verify", "one", *where), "verified 1 thread: 0 broken"),
    ):
        code, out, err = _run(capsys, *command)
        assert code == 0, (command, err)
        assert expected in out, (command, out)
        assert "(s)" not in out + err


def test_a_url_where_a_command_takes_none_says_where_it_goes(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "threads", redis_url)
    assert code == 2, err
    assert f"give the server as --url {redis_url}" in err
