"""The console in a real browser: Playwright driving Debian's chromium (``apt-get install
chromium``; .ci/run installs it) against a console process, while graphs run beside it.
``STREAMSAVER_SCREENSHOTS=<dir>`` keeps a screenshot of each page there (docs/ holds them)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamsaver import RedisStreamSaver
from tests.web_support import Served, build

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):  # pragma: no cover - .ci/run installs it
    pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START: dict[str, Any] = {"items": [], "note": ""}


@pytest.fixture
def page(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[Any]:
    with (
        Served(redis_url, prefix, token="browser-token") as served,
        playwright.sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(
            extra_http_headers={"authorization": "Bearer browser-token"},
            viewport={"width": 1280, "height": 760},
        )
        context.set_default_timeout(20_000)
        tab = context.new_page()
        tab.base = served.base  # type: ignore[attr-defined]
        tab.shots = Path(os.environ.get("STREAMSAVER_SCREENSHOTS") or tmp_path)  # type: ignore[attr-defined]
        yield tab
        browser.close()


def run_in_background(saver: RedisStreamSaver, thread_id: str, delay: float) -> threading.Thread:
    def run() -> None:
        build(saver, delay=delay).invoke(START, {"configurable": {"thread_id": thread_id}})

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    return runner


def test_threads_thread_checkpoint_and_live_update_without_reload(
    page: Any, sync_saver: RedisStreamSaver
) -> None:
    expect = playwright.expect
    build(sync_saver).invoke(START, {"configurable": {"thread_id": "<b>seed</b>"}})

    page.goto(page.base + "/")
    expect(page.locator("#threads tbody tr")).to_have_count(1)
    expect(page.locator("#threads")).to_contain_text("<b>seed</b>")  # shown as text
    page.evaluate("window.notReloaded = true")
    runner = run_in_background(sync_saver, "run-1", delay=2.5)
    row = page.locator('#threads tr[data-thread="run-1"]')
    expect(row).to_be_visible()
    expect(row.locator(".badge")).to_have_text("running")
    page.screenshot(path=str(page.shots / "console-threads.png"))
    assert page.evaluate("window.notReloaded") is True

    page.goto(page.base + "/thread?thread_id=run-1")
    page.evaluate("window.notReloaded = true")
    rows = page.locator("#timeline tbody tr")
    before = rows.count()
    runner.join(30)
    expect(rows).to_have_count(7)  # input, 3 writes, 3 checkpoints: all of the run
    assert before < 7, "the page was opened after the run had ended"
    assert page.evaluate("window.notReloaded") is True
    expect(page.locator(".badge.ok")).to_contain_text("audit chain ✓")
    page.screenshot(path=str(page.shots / "console-thread.png"), full_page=True)

    page.reload()  # the links of checkpoints rendered by the server
    page.locator("#timeline a", has_text="checkpoint").last.click()
    expect(page.locator("h1")).to_contain_text("Checkpoint")
    expect(page.locator("#diff")).to_contain_text("~ items")
    expect(page.locator("#state")).to_contain_text("act auto")
    page.screenshot(path=str(page.shots / "console-checkpoint.png"), full_page=True)


def test_live_pauses_and_resumes_without_losing_events(
    page: Any, sync_saver: RedisStreamSaver
) -> None:
    expect = playwright.expect
    page.goto(page.base + "/live")
    live = page.locator("#live tbody tr")
    time.sleep(1.0)  # the stream is open ("$": from now)
    build(sync_saver).invoke(START, {"configurable": {"thread_id": "a"}})
    expect(live).to_have_count(7)
    page.click("#pause")
    expect(page.locator("#live-state")).to_have_text("paused")
    build(sync_saver).invoke(START, {"configurable": {"thread_id": "b"}})
    time.sleep(1.5)
    assert live.count() == 7, "a paused page shows nothing new"
    page.screenshot(path=str(page.shots / "console-live.png"))
    page.click("#pause")
    expect(live).to_have_count(14)  # b's events, sent while paused, none twice
    page.fill("input[name=thread]", "b")
    expect(page.locator("#live tbody tr:visible")).to_have_count(7)
    page.select_option("select[name=kind]", "writes")
    expect(page.locator("#live tbody tr:visible")).to_have_count(3)
    assert all(
        re.fullmatch(r"b", t)
        for t in page.locator("#live tbody tr:visible td:nth-child(2)").all_inner_texts()
    )
