"""What the console's tests share: a small LangGraph graph to fill threads, a console served
by uvicorn in a process of its own (so a test can kill it), and an SSE reader."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Annotated, Any

import httpx
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class State(TypedDict):
    items: Annotated[list[str], lambda a, b: a + b]
    note: str


def build(checkpointer: Any, *, ask: bool = False, delay: float = 0) -> Any:
    """``plan`` then ``act``; with ``ask``, ``act`` waits on an interrupt; each node takes
    ``delay`` seconds (for a browser to watch it run)."""

    def plan(state: State) -> dict[str, Any]:
        time.sleep(delay)
        return {"items": [f"plan {len(state['items'])}"]}

    def act(state: State) -> dict[str, Any]:
        time.sleep(delay)
        answer = interrupt("approve?") if ask else "auto"
        return {"items": [f"act {answer}"], "note": str(answer)}

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("act", act)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    return builder.compile(checkpointer=checkpointer)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """``streamsaver serve`` in a subprocess on a fixed port, so it can be killed and
    started again at the same address."""

    def __init__(self, url: str, prefix: str, token: str | None = None) -> None:
        self.url = url
        self.prefix = prefix
        self.port = free_port()
        self.token = token
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # the command the README shows: streamsaver serve URL
        command = ["serve", self.url, "--port", str(self.port), "--prefix", self.prefix]
        env = {**os.environ, "STREAMSAVER_TOKEN": self.token or ""}
        self.process = subprocess.Popen([sys.executable, "-m", "streamsaver", *command], env=env)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(self.base + "/static/console.css", headers=self.headers, timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("the console did not start")

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()  # SIGKILL: no shutdown, as in a crash
        self.process.wait(10)

    def rss_kb(self) -> int:
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def __enter__(self) -> Served:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def sse(response: httpx.Response) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(id, event, data) of each message of an SSE response, as it arrives."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in fields:
                yield (
                    fields.get("id", ""),
                    fields.get("event", "message"),
                    json.loads(fields["data"]),
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
