"""A local development server that outlives the command that started it: what ``streamsaver
demo`` leaves running so ``threads``, ``history`` and ``serve`` have something to read, and what
``streamsaver dev start|url|stop`` manage.

One per user: its state (data with an append-only file, so the thread survives a restart, its
log, and ``server.json`` naming its port and pid) lives in ``$STREAMSAVER_DEV_DIR``, else
``$XDG_STATE_HOME/streamsaver/dev``, else ``~/.local/state/streamsaver/dev``. The binary is
``embedded.find_redis_server``'s (redis-server on PATH, else the bundled Valkey).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .embedded import _free_port, _log_tail, find_redis_server

__all__ = ["DEFAULT_PORT", "dev_dir", "dev_url", "start_dev", "stop_dev"]

# beside Redis's 6379, not on it: a developer's own Redis is often there
DEFAULT_PORT = 6390
_STATE = "server.json"
_LOG = "redis.log"


def dev_dir() -> Path:
    given = os.environ.get("STREAMSAVER_DEV_DIR")
    if given:
        return Path(given)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "streamsaver" / "dev"


def _client(port: int) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_connect_timeout=0.5,
        socket_timeout=2.0,
        retry=Retry(NoBackoff(), 0),
    )


def _answers(port: int) -> bool:
    try:
        with _client(port) as client:
            return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
        return False


def _recorded(directory: Path) -> dict[str, int] | None:
    try:
        state = json.loads((directory / _STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("port"), int):
        return None
    return state


def dev_url() -> str | None:
    """The development server's URL if it is running, else None."""
    state = _recorded(dev_dir())
    if state is None or not _answers(state["port"]):
        return None
    return f"redis://127.0.0.1:{state['port']}/0"


def start_dev(port: int | None = None, timeout: float = 20.0) -> tuple[str, bool]:
    """The development server's URL, and whether this call started it (False: it was
    running). ``port``: where to start it (default 6390, else a free one if that is taken)."""
    running = dev_url()
    if running is not None:
        return running, False
    directory = dev_dir()
    directory.mkdir(parents=True, exist_ok=True)
    if port is None:
        port = DEFAULT_PORT if not _answers(DEFAULT_PORT) and _free(DEFAULT_PORT) else _free_port()
    args = [
        find_redis_server(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(directory),
        "--daemonize", "no",
        # the demo's thread is meant to be explored later, after a restart too
        "--appendonly", "yes",
        "--save", "",
    ]  # fmt: skip
    with open(directory / _LOG, "ab") as log:
        # a session of its own: Ctrl-C in the terminal that started it does not stop it
        process = subprocess.Popen(
            args,
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while not _answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(
                f"the development server did not start on port {port}; log tail "
                f"({directory / _LOG}):\n{_log_tail(str(directory))}"
            )
        time.sleep(0.05)
    (directory / _STATE).write_text(json.dumps({"port": port, "pid": process.pid}))
    return f"redis://127.0.0.1:{port}/0", True


def stop_dev() -> bool:
    """Stop the development server (its data stays for the next start); False if none ran."""
    directory = dev_dir()
    state = _recorded(directory)
    if state is None:
        return False
    stopped = False
    if _answers(state["port"]):
        with _client(state["port"]) as client:
            # the port may have been taken by another server since: stop only ours
            if client.info("server").get("process_id") == state.get("pid"):
                # SHUTDOWN closes the connection it came on
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                    client.shutdown()
                stopped = True
    (directory / _STATE).unlink(missing_ok=True)
    return stopped


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
