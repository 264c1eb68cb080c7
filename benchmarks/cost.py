"""Where the time of one agent step goes, measured: docs/cost.md's "Client side" table.

    python -m benchmarks.cost [--messages 150] [--steps 200]

Each saver runs a conversation to --messages messages, then --steps more agent steps
(``get_tuple`` + ``put_writes`` + ``put``), the savers taking turns step by step on one dedicated
``redis-server``. Over those steps it adds up, in this process's CPU time (``time.process_time``,
so a wait for the server costs nothing): the serde's calls (encoding and decoding values), the
rest of the codec (event fields, envelopes, the delta cache's bookkeeping inside it), the shell's
calls into redis-py (packing, the socket calls, parsing: the transport), and what is left of the
step (the saver's own flow, the benchmark building the next checkpoint as LangGraph would). The
server's side is read from ``INFO commandstats``: the scripts' time, and within it the Redis
commands they ran. ``InMemorySaver`` and the socket floor (``InMemorySaver`` plus one bare-socket
``PING`` per call) run in the same turns, so every figure has its references beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from statistics import mean, median
from time import perf_counter_ns, process_time_ns
from typing import Any

import redis
import redis.asyncio
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis

from . import conversation
from .floors import AsyncPingFloorSaver, AsyncPingSocket, PingFloorSaver, PingSocket
from .report import NONE, TIMES

__all__ = ["main"]

_US = 1000
# the server-side calls a saver makes that are not its own work
_NOT_SCRIPTS = frozenset({"info", "ping", "config|get", "config", "script|load", "script"})
_SCRIPTS = frozenset({"evalsha", "eval", "fcall", "fcall_ro", "evalsha_ro", "eval_ro"})


@dataclass
class Clock:
    """CPU time (ns) spent inside wrapped calls, by part; a wrapped call inside another is
    charged to the inner part only."""

    spent: dict[str, int] = field(default_factory=dict)
    _stack: list[int] = field(default_factory=list)

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(0)
            start = process_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                took = process_time_ns() - start
                inner = self._stack.pop()
                self.spent[part] = self.spent.get(part, 0) + took - inner
                if self._stack:
                    self._stack[-1] += took

        return timed


@dataclass
class Runner:
    name: str
    saver: Any
    clock: Clock = field(default_factory=Clock)
    server: bool = False  # its server-side work is read from INFO commandstats
    thread: str = field(default_factory=lambda: uuid.uuid4().hex)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    commands: dict[str, float] = field(default_factory=dict)


def _own_serde(saver: Any, clock: Clock) -> None:
    # a serde of its own: the default instance is shared between savers, and is timed here
    serde = JsonPlusSerializer()
    for name in ("dumps_typed", "loads_typed"):
        setattr(serde, name, clock.wrap("serde", getattr(serde, name)))
    saver.serde = serde


def _instrument(saver: RedisStreamSaver, clock: Clock) -> None:
    _own_serde(saver, clock)
    codec = saver._ops.codec
    for name in ("checkpoint_event", "writes_event", "checkpoint_tuple"):
        setattr(codec, name, clock.wrap("codec", getattr(codec, name)))
    # the shell's one call per round trip: everything redis-py does for it
    saver._execute = clock.wrap("transport", saver._execute)  # type: ignore[method-assign]


def _commandstats(client: redis.Redis) -> dict[str, float]:
    """usec spent per command name, from the server's own counters."""
    info: dict[str, Any] = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): float(v["usec"]) for k, v in info.items()}


@contextmanager
def _savers(url: str) -> Iterator[list[Runner]]:
    client = redis.Redis.from_url(url)
    address = urllib.parse.urlsplit(url)
    sock = PingSocket(address.hostname or "127.0.0.1", address.port or 6379)
    try:
        memory = Runner("InMemorySaver", InMemorySaver())
        _own_serde(memory.saver, memory.clock)
        floor = Runner("socket floor", PingFloorSaver(sock))
        _own_serde(floor.saver, floor.clock)
        sock.ping = floor.clock.wrap("transport", sock.ping)  # type: ignore[method-assign]
        runners = [memory, floor]
        for name, reuse in (("streamsaver", False), ("streamsaver reuse_items", True)):
            saver = RedisStreamSaver(client, prefix=f"cost-{reuse}", reuse_items=reuse)
            runner = Runner(name, saver, server=True)
            _instrument(saver, runner.clock)
            saver.setup()
            runners.append(runner)
        yield runners
    finally:
        sock.close()
        client.close()


@contextmanager
def _building(clock: Clock) -> Iterator[None]:
    """Charge what the benchmark does as LangGraph would (the next checkpoint, the message)
    to its own part: it is the same work for every saver."""
    saved = conversation.next_checkpoint, conversation.make_message
    conversation.next_checkpoint = clock.wrap("step", saved[0])
    conversation.make_message = clock.wrap("step", saved[1])
    try:
        yield
    finally:
        conversation.next_checkpoint, conversation.make_message = saved


def measure(messages: int, steps: int) -> list[Runner]:
    with EmbeddedRedis() as server, _savers(server.url) as runners:
        admin = redis.Redis.from_url(server.url)
        for r in runners:
            conversation.start_thread(r.saver, r.thread)
        for step in range(messages):
            for r in runners:
                conversation.agent_step(r.saver, r.thread, step)
        for r in runners:
            r.clock.spent.clear()
        for step in range(messages, messages + steps):
            for i in range(len(runners)):
                r = runners[(i + step) % len(runners)]
                before = _commandstats(admin) if r.server else {}
                with _building(r.clock):
                    start, cpu = perf_counter_ns(), process_time_ns()
                    conversation.agent_step(r.saver, r.thread, step)
                    r.cpu.append((process_time_ns() - cpu) / _US)
                    r.wall.append((perf_counter_ns() - start) / _US)
                if r.server:
                    for cmd, usec in _commandstats(admin).items():
                        r.commands[cmd] = r.commands.get(cmd, 0.0) + usec - before.get(cmd, 0.0)
        admin.close()
    return runners


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


_PARTS = {
    "serde": "- serde: encoding and decoding values",
    "codec": "- codec: event fields, envelopes, delta bookkeeping",
    "transport": "- transport: redis-py, or the bare socket (pack, send, parse)",
    "step": "- building the step as LangGraph would (same work for all)",
}


def report(runners: list[Runner], steps: int) -> str:
    memory = next(r for r in runners if r.name == "InMemorySaver")
    floor = next(r for r in runners if r.name == "socket floor")
    ref_cpu, ref_wall = mean(memory.cpu), median(floor.wall)
    lines = [
        _row(["per agent step (\N{MICRO SIGN}s)", *(r.name for r in runners)]),
        _row(["---", *("---:" for _ in runners)]),
    ]

    def add(label: str, values: list[float | None], ratio: float | None = None) -> None:
        cells = [
            NONE if v is None else f"{v:,.0f}" + (f" ({v / ratio:.2f}{TIMES})" if ratio else "")
            for v in values
        ]
        lines.append(_row([label, *cells]))

    def part(r: Runner, name: str) -> float:
        return r.clock.spent.get(name, 0) / _US / steps

    add(f"wall p50 ({TIMES} socket floor)", [median(r.wall) for r in runners], ref_wall)
    add(f"client CPU, mean ({TIMES} InMemorySaver)", [mean(r.cpu) for r in runners], ref_cpu)
    for name, label in _PARTS.items():
        add(label, [part(r, name) if name != "codec" or r.server else None for r in runners])
    add(
        "- the rest: the saver's own flow and cache",
        [mean(r.cpu) - sum(part(r, name) for name in _PARTS) for r in runners],
    )
    scripts = [sum(v for k, v in r.commands.items() if k in _SCRIPTS) / steps for r in runners]
    inside = [
        sum(v for k, v in r.commands.items() if k not in _SCRIPTS | _NOT_SCRIPTS) / steps
        for r in runners
    ]
    add(
        "server: scripts (INFO commandstats)",
        [v if r.server else None for r, v in zip(runners, scripts, strict=True)],
    )
    add(
        "- of which the Redis commands they ran",
        [v if r.server else None for r, v in zip(runners, inside, strict=True)],
    )
    return "\n".join(lines)


def storage(steps: int) -> str:
    """Bytes per step after ``steps`` agent steps on one thread: each key's ``MEMORY USAGE``,
    and the log's entries by field (name and value bytes, before Redis's own overhead)."""
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        saver = RedisStreamSaver(client, prefix="size")
        saver.setup()
        conversation.start_thread(saver, "t")
        for step in range(steps):
            conversation.agent_step(saver, "t", step)
        lines = [_row(["key (MEMORY USAGE)", "bytes per step"]), _row(["---", "---:"])]
        total = 0
        # a benchmark's own throwaway server: SCAN lists what one saver made
        keys: list[bytes] = sorted(client.scan_iter(match="size:*"))
        for key in keys:
            used = int(client.memory_usage(key, samples=0) or 0)
            total += used
            kind: bytes = client.type(key)  # type: ignore[assignment]
            lines.append(_row([f"`{key.decode()}` ({kind.decode()})", f"{used / steps:,.0f}"]))
        lines.append(_row(["all keys", f"{total / steps:,.0f}"]))
        fields: dict[str, int] = {}
        log = saver._ops.keys("t").log
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(log)  # type: ignore[assignment]
        for _, entry in entries:
            event = entry[b"k"].decode()
            for name, value in entry.items():
                text = name.decode()
                if text[:1] in ("b", "w") and text[1:].isdigit():
                    text = text[0] + "<i>"
                text = f"{event} {text}"
                fields[text] = fields.get(text, 0) + len(name) + len(value)
        client.close()
    lines += ["", _row(["log field (event kind, name)", "bytes per step"]), _row(["---", "---:"])]
    for field_name, size in sorted(fields.items(), key=lambda kv: -kv[1]):
        lines.append(_row([f"`{field_name}`", f"{size / steps:,.0f}"]))
    return "\n".join(lines)


async def _burst(
    saver: Any, threads: int, steps: int, clock: Clock | None = None
) -> tuple[float, float]:
    """(client CPU µs per checkpoint, checkpoints/s) of ``threads`` threads running ``steps``
    agent steps each, all at once on one event loop."""
    names = [uuid.uuid4().hex for _ in range(threads)]
    await asyncio.gather(*(conversation.astart_thread(saver, n) for n in names))
    if clock is not None:
        clock.spent.clear()

    async def thread(name: str) -> None:
        for step in range(steps):
            await conversation.aagent_step(saver, name, step)

    start, cpu = perf_counter_ns(), process_time_ns()
    await asyncio.gather(*(thread(n) for n in names))
    done = threads * steps
    return (process_time_ns() - cpu) / _US / done, done / ((perf_counter_ns() - start) / 1e9)


async def _concurrent(url: str, threads: int, steps: int, rounds: int) -> str:
    client = redis.asyncio.Redis.from_url(url, max_connections=max(100, 4 * threads))
    address = urllib.parse.urlsplit(url)
    sock = await AsyncPingSocket.connect(address.hostname or "127.0.0.1", address.port or 6379)
    clock = Clock()
    saver = AsyncRedisStreamSaver(client, prefix="concurrent")
    _own_serde(saver, clock)
    codec = saver._ops.codec
    for name in ("checkpoint_event", "writes_event", "checkpoint_tuple"):
        setattr(codec, name, clock.wrap("codec", getattr(codec, name)))
    await saver.asetup()
    savers = {
        "InMemorySaver": InMemorySaver(),
        "socket floor": AsyncPingFloorSaver(sock),
        "streamsaver": saver,
    }
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in savers}
    for r in range(-1, rounds):  # round -1 opens the pool's connections
        for name, target in savers.items():
            cpu, rate = await _burst(target, threads, steps, clock if target is saver else None)
            if r >= 0:
                figures[name].append((cpu, rate))
    # the serde and codec are synchronous: their CPU is theirs; the rest of the process's
    # CPU is redis-py's asyncio client, the event loop and the saver's shell
    spent = {part: ns / _US / (threads * steps) for part, ns in clock.spent.items()}
    sock.close()
    await client.aclose()
    memory_cpu = median(c for c, _ in figures["InMemorySaver"])
    memory_rate = median(r for _, r in figures["InMemorySaver"])
    lines = [
        _row(["per checkpoint", "client CPU (µs)", f"{TIMES} InMemorySaver", "checkpoints/s",
              f"{TIMES} InMemorySaver"]),
        _row(["---", "---:", "---:", "---:", "---:"]),
    ]  # fmt: skip
    for name, values in figures.items():
        cpu, rate = median(c for c, _ in values), median(r for _, r in values)
        lines.append(
            _row([name, f"{cpu:,.0f}", f"{cpu / memory_cpu:.2f}{TIMES}", f"{rate:,.0f}",
                  f"{rate / memory_rate:.2f}{TIMES}"])
        )  # fmt: skip
    lines.append(
        f"\nOf streamsaver's client CPU per checkpoint (last round): serde "
        f"{spent.get('serde', 0):,.0f} µs, codec {spent.get('codec', 0):,.0f} µs; the rest is "
        f"redis-py's asyncio client, the event loop and the saver's shell."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cost",
        description="Where the microseconds of one agent step go, client and server side.",
    )
    parser.add_argument("--messages", type=int, default=150, help="conversation length first")
    parser.add_argument("--steps", type=int, default=200, help="steps measured after it")
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="instead: N concurrent async threads of --steps steps each (3 rounds): client CPU "
        "per checkpoint and checkpoints/s beside InMemorySaver and the socket floor",
    )
    parser.add_argument(
        "--storage",
        type=int,
        metavar="STEPS",
        help="instead: the bytes per step after STEPS agent steps, by key and by log field",
    )
    args = parser.parse_args(argv)
    if args.threads:
        with EmbeddedRedis() as server:
            text = asyncio.run(_concurrent(server.url, args.threads, args.steps, 3))
        print(f"{args.threads} async threads, {args.steps} agent steps each, median of 3 rounds:\n")
        print(text)
        return 0
    if args.storage:
        print(f"Stored after {args.storage} agent steps on one thread:\n")
        print(storage(args.storage))
        return 0
    runners = measure(args.messages, args.steps)
    print(
        f"{args.steps} agent steps after {args.messages} messages (a {args.messages}- to "
        f"{args.messages + args.steps}-message conversation), savers taking turns:\n"
    )
    print(report(runners, args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
