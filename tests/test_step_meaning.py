"""One meaning of "step" wherever an event is shown: a checkpoint's metadata step, and for a
writes event the step of the checkpoint its task ran from. The command line's lines said the
next step (``step=1`` for the writes of step 0), its --json and the console's live stream
``null``, the console's page the checkpoint's: now every one says the checkpoint's."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from streamsaver import RedisStreamSaver
from tests.test_cli import _fill
from tests.test_cli_failures import _run
from tests.web_support import Served, sse


def _expected(saver: RedisStreamSaver, thread_id: str) -> list[tuple[str, str, int]]:
    """(event id, kind, step) of the thread's events: writes take their checkpoint's step."""
    steps: dict[str, int] = {}
    out = []
    for event in saver.history(thread_id):
        if event.kind == "checkpoint":
            assert event.step is not None
            steps[event.checkpoint_id or ""] = event.step
        out.append((event.id, event.kind, steps[event.checkpoint_id or ""]))
    return out


@pytest.fixture
def thread(sync_saver: RedisStreamSaver) -> list[tuple[str, str, int]]:
    _fill(sync_saver, ["t"])
    expected = _expected(sync_saver, "t")
    assert [k for _, k, _ in expected].count("writes") == 3
    return expected


def test_the_command_line_shows_one_step(
    sync_saver: RedisStreamSaver,
    thread: list[tuple[str, str, int]],
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    for command in (("history", "t"), ("tail", "t")):
        code, out, err = _run(capsys, *command, *where)
        assert code == 0, err
        shown = [int(s) for s in re.findall(r" step=(-?\d+) ", out)]
        assert shown == [step for _, _, step in thread], (command, out)
        code, out, err = _run(capsys, *command, "--json", *where)
        assert code == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        assert [(r["id"], r["kind"], r["step"]) for r in records] == thread, command


def test_the_console_shows_the_same_step(
    sync_saver: RedisStreamSaver, thread: list[tuple[str, str, int]], redis_url: str
) -> None:
    with Served(redis_url, sync_saver.prefix) as served:
        # a live stream that starts after the first checkpoint: its writes' checkpoint came
        # before the stream, as on a page that rendered it
        first = thread[0][0]
        got: list[tuple[str, str, Any]] = []
        with httpx.stream(
            "GET",
            f"{served.base}/threads/t/events?after={first}",
            headers=served.headers,
            timeout=httpx.Timeout(15, read=15),
        ) as response:
            for event_id, kind, data in sse(response):
                got.append((event_id, kind, data["step"]))
                if len(got) == len(thread) - 1:
                    break
        assert got == thread[1:]
