"""The command line's failures: one line naming the problem and the remedy, a documented exit
code, never a traceback (unless --debug)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streamsaver import RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis
from tests.test_cli import ROOT, _cli, _fill
from tests.test_security import _free_port


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    # the test server has no persistence: setup() warns, in a line of its own
    lines = [line for line in result.stderr.strip().splitlines() if ": warning: " not in line]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def locked() -> Iterator[str]:
    server = EmbeddedRedis()
    with redis.Redis.from_url(server.url) as admin:
        admin.config_set("requirepass", "right")
    yield server.url.replace("redis://", "redis://:wrong@")
    server.stop()


def test_version_and_help_list_the_exit_codes() -> None:
    out = _cli("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("streamsaver ")
    help_text = _cli("--help").stdout
    for line in ("3  no such thread", "4  Redis cannot be reached", "examples:"):
        assert line in help_text
    projector = _cli("--help", module="projector").stdout
    assert "keeps the cross-thread projections" in projector


def test_a_stopped_server_is_one_line_and_exit_4() -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"
    for args in (("threads",), ("history", "t"), ("verify", "--all"), ("audit", "verify", "t")):
        out = _cli(*args, url=url)
        assert out.returncode == 4, (args, out.stderr)
        assert "is the server running" in _one_line(out)
    out = _cli("status", module="projector", url=url)
    assert out.returncode == 4
    assert "cannot connect" in _one_line(out)


def test_a_wrong_password_is_one_line_and_exit_4(locked: str) -> None:
    out = _cli("threads", url=locked)
    assert out.returncode == 4
    line = _one_line(out)
    assert "refused the credentials" in line
    assert ":wrong@" not in line


def test_tls_against_a_plain_server_is_one_line_and_exit_4(redis_url: str) -> None:
    out = _cli("threads", url=redis_url.replace("redis://", "rediss://"))
    assert out.returncode == 4
    assert "TLS handshake" in _one_line(out)


def test_debug_shows_the_traceback() -> None:
    out = _cli("--debug", "threads", url=f"redis://127.0.0.1:{_free_port()}/0")
    assert out.returncode != 0
    assert "Traceback" in out.stderr
    assert "ConnectionFailedError" in out.stderr


def test_an_unknown_thread_exits_3_and_says_so(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    _fill(sync_saver, ["known"])
    prefix = sync_saver.prefix
    for args in (
        ("history", "knwon"),
        ("audit", "show", "knwon"),
        ("audit", "verify", "knwon"),
        ("verify", "--thread", "knwon"),
        ("verify", "--thread", "known", "--thread", "knwon"),
        ("tail", "knwon"),
    ):
        out = _cli(*args, "--prefix", prefix, url=redis_url)
        assert out.returncode == 3, (args, out.stdout, out.stderr)
        line = _one_line(out)
        assert "no thread 'knwon'" in line
        assert "streamsaver threads" in line
        assert "chain intact" not in out.stdout
    known = _cli("audit", "verify", "known", "--prefix", prefix, url=redis_url)
    assert known.returncode == 0, known.stderr
    assert "chain intact" in known.stdout


def test_a_deleted_thread_is_not_unknown(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    _fill(sync_saver, ["gone"])
    sync_saver.delete_thread("gone")
    out = _cli("history", "gone", "--prefix", sync_saver.prefix, url=redis_url)
    assert out.returncode == 0, out.stderr
    assert "deleted" in out.stdout


def test_a_missing_file_is_one_line_and_exit_2() -> None:
    out = _cli("audit", "verify", "--file", "/nonexistent/export.jsonl")
    assert out.returncode == 2
    assert "cannot open '/nonexistent/export.jsonl'" in _one_line(out)


def test_a_closed_pipe_is_no_traceback(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    _fill(sync_saver, [f"t{i}" for i in range(40)])
    env = {**os.environ, "REDIS_URL": redis_url}
    for command in ("threads", "history t0", "tail t0"):
        shell = (
            f"{sys.executable} -m streamsaver {command} --prefix {sync_saver.prefix} | head -n 1"
        )
        out = subprocess.run(
            ["bash", "-o", "pipefail", "-c", shell],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            cwd=ROOT,
        )
        assert "Traceback" not in out.stderr, out.stderr
        assert "BrokenPipe" not in out.stderr
        assert len(out.stdout.splitlines()) == 1
        assert out.returncode == 0, (command, out.stderr)


def test_the_docs_list_the_exit_codes_help_prints() -> None:
    from streamsaver.cli import EXIT_CODES

    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", page, flags=re.M)}
    printed = {int(code) for code in re.findall(r"^  (\d+)  ", EXIT_CODES, flags=re.M)}
    assert documented == printed == {0, 1, 2, 3, 4, 5, 130}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_shows_on_a_terminal_only() -> None:
    from streamsaver.cli.progress import progress_bar

    terminal = _Terminal()
    with progress_bar("verify", terminal) as progress:
        assert progress is not None
        for done in range(1, 4):
            progress(done, 3)
    assert "3/3" in terminal.getvalue()
    assert "verify" in terminal.getvalue()
    piped = io.StringIO()
    with progress_bar("verify", piped) as progress:
        assert progress is None
    assert piped.getvalue() == ""


def test_verify_rebuild_and_audit_verify_print_json(
    sync_saver: RedisStreamSaver, redis_url: str, tmp_path: Path
) -> None:
    _fill(sync_saver, ["a", "b"])
    prefix = sync_saver.prefix
    verify = _cli("verify", "--all", "--json", "--prefix", prefix, url=redis_url)
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["threads"] == 2
    rebuild = _cli("rebuild", "--thread", "a", "--json", "--prefix", prefix, url=redis_url)
    assert json.loads(rebuild.stdout)["applied"] == 6
    chains = _cli("audit", "verify", "--all", "--json", "--prefix", prefix, url=redis_url)
    lines = [json.loads(line) for line in chains.stdout.splitlines()]
    assert sorted(line["thread_id"] for line in lines) == ["a", "b"]
    assert all(line["ok"] for line in lines)
    export = tmp_path / "export.jsonl"
    _cli("audit", "export", "--all", "--out", str(export), "--prefix", prefix, url=redis_url)
    checked = _cli("audit", "verify", "--file", str(export), "--json")
    assert checked.returncode == 0, checked.stderr
    assert [json.loads(line)["ok"] for line in checked.stdout.splitlines()] == [True, True]


@pytest.mark.parametrize(("option", "value"), [("--slice-ms", "0"), ("--slice-pause", "-1")])
def test_a_bad_slice_option_is_one_line_and_exit_2(
    sync_saver: RedisStreamSaver, redis_url: str, option: str, value: str
) -> None:
    _fill(sync_saver, ["t"])
    out = _cli("rebuild", "--url", redis_url, "--prefix", sync_saver.prefix, "--all", option, value)
    assert out.returncode == 2
    name = option[2:].replace("-", "_")
    assert f"{name}={float(value)!r}: give a number" in _one_line(out)


def test_rebuild_and_verify_take_the_slice_options(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    _fill(sync_saver, ["t"])
    for command in ("rebuild", "verify"):
        out = _cli(
            command, "--url", redis_url, "--prefix", sync_saver.prefix, "--thread", "t",
            "--slice-ms", "0.5", "--slice-pause", "0",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
