"""The first minutes on a bare machine: ``streamsaver demo`` without a Redis leaves the
development server running and prints the next commands, and each of them, run as printed,
works against it (the demo used to throw its server away, so ``threads --url <its URL>`` failed
with "cannot connect")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_cli_start import _listening
from tests.test_security import _free_port

BIN = Path(sys.executable).parent


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A shell's environment with no Redis configured and a development server of its own."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["STREAMSAVER_DEV_DIR"] = str(tmp_path / "dev")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    yield env
    subprocess.run(["streamsaver", "dev", "stop"], env=env, capture_output=True, timeout=60)


def _sh(script: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_the_demo_leaves_a_server_and_its_next_commands_work(env: dict[str, str]) -> None:
    demo = _sh("streamsaver demo", env)
    assert demo.returncode == 0, demo.stderr
    printed = demo.stdout.split("Next, in this shell:", 1)[1]
    commands = [line.strip() for line in printed.splitlines() if line.startswith("  ")]
    assert [c.split()[:2] for c in commands] == [
        ["export", "REDIS_URL=redis://127.0.0.1:" + commands[0].split(":")[2]],
        ["streamsaver", "threads"],
        ["streamsaver", "history"],
        ["streamsaver", "serve"],
    ]
    thread = commands[2].split()[2]
    # as a user pastes them: the export, then each command (serve runs until Ctrl-C)
    shown = _sh("\n".join(commands[:3]), env)
    assert shown.returncode == 0, shown.stderr
    assert f"'{thread}'" in shown.stdout and "thread_deleted" not in shown.stdout
    assert len(re.findall(r" checkpoint ", shown.stdout)) == 8, shown.stdout

    port = _free_port()
    serve = subprocess.Popen(
        ["bash", "-c", f"{commands[0]}\nexec {commands[3].split('#')[0]} --port {port}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _listening(port, serve)
        import httpx

        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert page.status_code == 200 and thread in page.text
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=30)


def test_dev_keeps_its_data_across_a_restart(env: dict[str, str]) -> None:
    started = _sh("streamsaver dev start", env)
    assert started.returncode == 0 and started.stdout.startswith("started: export REDIS_URL=")
    again = _sh("streamsaver dev start", env)
    assert again.stdout == started.stdout.replace("started", "already running")
    demo = _sh("streamsaver demo", env)
    assert demo.returncode == 0 and "using the development server" in demo.stdout, demo.stdout
    thread = re.findall(r"streamsaver history (\S+)", demo.stdout)[0]
    assert _sh("streamsaver dev stop", env).stdout == "stopped\n"
    gone = _sh("streamsaver dev url", env)
    assert gone.returncode == 4 and gone.stdout == "" and "not running" in gone.stderr
    _sh("streamsaver dev start", env)
    kept = _sh('streamsaver threads --url "$(streamsaver dev url)"', env)
    assert f"'{thread}'" in kept.stdout, kept.stdout + kept.stderr


def test_dev_stop_leaves_a_server_it_did_not_start(env: dict[str, str]) -> None:
    """The port it recorded, taken since by another server: stop must not shut that down."""
    started = _sh("streamsaver dev start", env)
    url = started.stdout.split("REDIS_URL=")[1].strip()
    port = int(url.split(":")[2].split("/")[0])
    assert _sh("streamsaver dev stop", env).returncode == 0
    state = Path(env["STREAMSAVER_DEV_DIR"]) / "server.json"
    other = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while _sh(f"redis-cli -p {port} ping", env).stdout.strip() != "PONG":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        state.write_text(f'{{"port": {port}, "pid": 1}}')  # a stale record naming that port
        assert _sh("streamsaver dev stop", env).stdout.startswith("the development server was not")
        assert _sh(f"redis-cli -p {port} ping", env).stdout.strip() == "PONG"
    finally:
        other.terminate()
        other.wait(10)
