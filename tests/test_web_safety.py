"""The console fails fast and safe: any value a thread holds is served (NaN and ±Infinity as
null, never a 500), errors are a page for a browser and JSON for the API, a favicon, a foreign
Host header refused (DNS rebinding), listening beyond loopback only with a token, and a resume
id past a thread's end refused instead of a stream that waits for nothing."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from streamsaver import AsyncRedisStreamSaver
from streamsaver.web import create_app
from tests.test_cli_failures import _one_line, _run
from tests.test_cli_start import _listening
from tests.test_security import _free_port
from tests.test_web import client, conf

ODD = [math.nan, math.inf, -math.inf]


def _strict(text: str) -> Any:
    """JSON as a strict parser reads it: NaN or Infinity in it is an error."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
async def odd(async_saver: AsyncRedisStreamSaver) -> AsyncRedisStreamSaver:
    """A thread whose state, metadata and pending writes hold NaN and ±Infinity, as
    LangGraph and InMemorySaver store and read them back."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": ODD, "y": {"z": math.nan}}
    checkpoint["channel_versions"] = {"x": "1", "y": "1"}
    stored = await async_saver.aput(
        conf("odd"), checkpoint, {"step": 1, "score": math.inf}, {"x": "1", "y": "1"}
    )
    await async_saver.aput_writes(stored, [("x", math.nan), ("y", -math.inf)], "task")
    return async_saver


async def test_every_json_endpoint_serves_nan_and_infinity(odd: AsyncRedisStreamSaver) -> None:
    async with client(create_app(odd)) as h:
        for method, path, body in (
            ("GET", "/threads/odd", None),
            ("GET", "/threads/odd/state", None),
            ("POST", "/threads/odd/history", {}),
            ("POST", "/threads/search", {}),
            ("GET", "/threads/odd/verify", None),
        ):
            got = await h.request(method, path, json=body)
            assert got.status_code == 200, (path, got.text)
            _strict(got.text)
        state = _strict((await h.get("/threads/odd/state")).text)
        assert state["values"]["x"] == [None, None, None], state
        export = await h.get("/threads/odd/audit")
        assert export.status_code == 200
        for line in export.text.splitlines():
            _strict(line)
        for page in ("/", "/thread?thread_id=odd"):
            assert (await h.get(page)).status_code == 200, page


async def test_errors_are_pages_for_a_browser_and_json_for_the_api(
    async_saver: AsyncRedisStreamSaver,
) -> None:
    browser = {"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    async with client(create_app(async_saver)) as h:
        page = await h.get("/thread?thread_id=nope", headers=browser)
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html")
        assert "<h1>Not found</h1>" in page.text and "nope" in page.text
        missing = await h.get("/no/such/page", headers=browser)
        assert missing.status_code == 404 and missing.text.startswith("<!doctype html>")
        api = await h.get("/threads/nope")
        assert api.status_code == 404 and "nope" in _strict(api.text)["error"]
        bad = await h.get("/?status=bogus", headers=browser)
        assert bad.status_code == 400 and bad.text.startswith("<!doctype html>")
        assert "<h1>Bad request</h1>" in bad.text and "bogus" in bad.text
        icon = await h.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert b"<svg" in icon.content


async def test_a_foreign_host_is_refused(async_saver: AsyncRedisStreamSaver) -> None:
    app = create_app(async_saver, allowed_hosts=["127.0.0.1", "localhost"])
    async with client(app) as h:
        for host in ("127.0.0.1:8765", "localhost"):
            assert (await h.get("/threads/search", headers={"host": host})).status_code != 400
            assert (await h.post("/threads/search", json={}, headers={"host": host})).is_success
        for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example"):
            got = await h.post("/threads/search", json={}, headers={"host": host})
            assert got.status_code == 400, host
            assert "thread" not in got.text


async def test_a_resume_id_past_the_end_is_a_400(odd: AsyncRedisStreamSaver) -> None:
    async with client(create_app(odd)) as h:
        got = await h.get("/threads/odd/events", params={"after": "99999999999999-0"})
        assert got.status_code == 400
        assert "past thread 'odd'" in _strict(got.text)["error"]


def test_serve_refuses_a_foreign_host_by_default(redis_url: str) -> None:
    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "streamsaver", "serve", redis_url, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _listening(port, serve)
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(base + "/", timeout=10).status_code == 200
        assert httpx.get(base + "/", headers={"host": f"localhost:{port}"}, timeout=10).is_success
        rebound = httpx.post(
            base + "/threads/search", json={}, headers={"host": "attacker.example"}, timeout=10
        )
        assert rebound.status_code == 400
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=30)


def test_listening_beyond_loopback_needs_a_token(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMSAVER_TOKEN", raising=False)
    code, _, err = _run(capsys, "serve", redis_url, "--host", "0.0.0.0", "--port", "1")
    assert code == 2, err
    assert "--open-without-token" in _one_line(err) and "token" in err
    port = _free_port()
    opened = subprocess.Popen(
        [sys.executable, "-m", "streamsaver", "serve", redis_url, "--host", "0.0.0.0",
         "--port", str(port), "--open-without-token"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _listening(port, opened)
    finally:
        opened.send_signal(signal.SIGINT)
        opened.communicate(timeout=30)
