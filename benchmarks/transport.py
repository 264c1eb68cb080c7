"""The asyncio transport at 64 concurrent tasks, beside its peers and floor in one run.

    python -m benchmarks.transport [--url redis://...] [--tasks 64] [--calls 20000]
                                   [--steps 20] [--rounds 3]

1. Calls/s of one small command (``GET``) from ``--tasks`` concurrent asyncio tasks:
   redis-py's asyncio client (a pool checkout per call), streamsaver's ``AutoPipeline`` (calls
   of one loop turn written together on one connection), and the floor: a bare asyncio protocol
   that writes each call as it comes and parses replies with hiredis, no client library.
2. Microseconds per call of the same command from one thread, sync: redis-py's pooled call,
   streamsaver's ``HeldConnection`` (one pooled connection kept between calls), and the floor:
   a raw socket round trip with hiredis parsing.
3. Checkpoints/s of ``--tasks`` concurrent LangGraph threads, each running ``--steps`` agent
   steps (``aget_tuple`` + ``aput_writes`` + ``aput``, a message appended per step):
   ``InMemorySaver``, ``AsyncRedisStreamSaver`` on redis-py's pooled path (the transport before
   auto-pipelining) and on ``AutoPipeline`` (the default on a standalone server).

Each figure is the median of ``--rounds`` rounds, the peers interleaved within each round;
ratios are to the floor (1, 2) and to ``InMemorySaver`` (3) of the same run. Without ``--url`` a
throwaway ``redis-server`` is started on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from statistics import median
from typing import Any

import hiredis
import redis
import redis.asyncio as aredis
from langgraph.checkpoint.memory import InMemorySaver

from streamsaver import AsyncRedisStreamSaver, NoPersistenceWarning
from streamsaver.transport.connection import HeldConnection
from streamsaver.transport.pipelining import AutoPipeline

from .conversation import aagent_step, astart_thread


class _HiredisProtocol(asyncio.Protocol):
    """The floor: each call written at once, replies parsed by hiredis and matched in order."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: list[asyncio.Future[Any]] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            self.waiting.pop(0).set_result(reply)

    def call(self, *args: bytes) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        packed = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        assert self.transport is not None
        self.transport.write(packed)
        return future


async def _rate(call: Callable[[], Awaitable[Any]], tasks: int, calls: int) -> float:
    each = calls // tasks

    async def worker() -> None:
        for _ in range(each):
            await call()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return each * tasks / (time.perf_counter() - start)


async def _calls(url: str, tasks: int, calls: int, rounds: int) -> dict[str, list[float]]:
    client: Any = aredis.Redis.from_url(url)  # redis-py leaves execute_command untyped
    pipe = AutoPipeline(client)
    kwargs = client.connection_pool.connection_kwargs
    host, port = kwargs["host"], int(kwargs["port"])
    loop = asyncio.get_running_loop()
    transport, floor = await loop.create_connection(_HiredisProtocol, host, port)
    await client.set("transport:k", b"v" * 100)
    peers: dict[str, Callable[[], Awaitable[Any]]] = {
        "redis-py asyncio": lambda: client.execute_command("GET", "transport:k"),
        "streamsaver AutoPipeline": lambda: pipe.send([("GET", "transport:k")]),
        "floor: asyncio protocol + hiredis": lambda: floor.call(b"GET", b"transport:k"),
    }
    rates: dict[str, list[float]] = {name: [] for name in peers}
    for call in peers.values():  # warm: the pool opens its connections
        await _rate(call, tasks, tasks)
    for _ in range(rounds):
        for name, call in peers.items():
            rates[name].append(await _rate(call, tasks, calls))
    transport.close()
    await client.aclose()
    return rates


async def _checkpoints(url: str, tasks: int, steps: int, rounds: int) -> dict[str, list[float]]:
    client = aredis.Redis.from_url(url)
    pooled = AsyncRedisStreamSaver(client, prefix=f"transport-{uuid.uuid4().hex[:8]}")
    pooled._autopipe = None  # redis-py's pool checkout per call: the transport before
    piped = AsyncRedisStreamSaver(client, prefix=f"transport-{uuid.uuid4().hex[:8]}")
    peers: dict[str, Any] = {
        "InMemorySaver": InMemorySaver(),
        "streamsaver, redis-py pooled (before)": pooled,
        "streamsaver, AutoPipeline (after)": piped,
    }
    for saver in (pooled, piped):
        await saver.asetup()

    async def burst(saver: Any) -> float:
        names = [f"c-{uuid.uuid4().hex}" for _ in range(tasks)]
        await asyncio.gather(*(astart_thread(saver, n) for n in names))

        async def thread(name: str) -> None:
            for step in range(steps):
                await aagent_step(saver, name, step)

        start = time.perf_counter()
        await asyncio.gather(*(thread(n) for n in names))
        return tasks * steps / (time.perf_counter() - start)

    rates: dict[str, list[float]] = {name: [] for name in peers}
    for saver in peers.values():  # warm: connections, scripts
        await burst(saver)
    for _ in range(rounds):
        for name, saver in peers.items():
            rates[name].append(await burst(saver))
    await client.aclose()
    return rates


def _sync_calls(url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    client: Any = redis.Redis.from_url(url)
    held = HeldConnection(client.connection_pool)
    kwargs = client.connection_pool.connection_kwargs
    raw = socket.create_connection((kwargs["host"], int(kwargs["port"])))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = hiredis.Reader()
    packed = b"*2\r\n$3\r\nGET\r\n$11\r\ntransport:k\r\n"

    def raw_get() -> Any:
        raw.sendall(packed)
        while (reply := reader.gets()) is False:
            reader.feed(raw.recv(65536))
        return reply

    peers: dict[str, Callable[[], Any]] = {
        "redis-py pooled call": lambda: client.execute_command("GET", "transport:k"),
        "streamsaver HeldConnection": lambda: held.send(client, [("GET", "transport:k")]),
        "floor: raw socket + hiredis": raw_get,
    }
    times: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, call in peers.items():
            for _ in range(200):
                call()
            start = time.perf_counter()
            for _ in range(calls):
                call()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    raw.close()
    client.close()
    return times


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        args = ["redis-server", "--port", str(port), "--dir", tmp, "--save", "", "--appendonly"]
        proc = subprocess.Popen([*args, "no"], stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait()


def _table(title: str, unit: str, rates: dict[str, list[float]], base: str) -> None:
    print(f"\n{title}")
    floor = median(rates[base])
    for name, values in rates.items():
        rate = median(values)
        print(f"  {name:40} {rate:>10,.1f} {unit}   {rate / floor:5.2f}x {base}")


def main() -> None:
    # the throwaway server has no persistence, on purpose
    warnings.filterwarnings("ignore", category=NoPersistenceWarning)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with _server(args.url) as url:
        calls = asyncio.run(_calls(url, args.tasks, args.calls, args.rounds))
        _table(
            f"{args.tasks} concurrent tasks, GET",
            "calls/s",
            calls,
            "floor: asyncio protocol + hiredis",
        )
        sync = _sync_calls(url, args.calls // 4, args.rounds)
        _table("one thread, sync GET", "us/call", sync, "floor: raw socket + hiredis")
        cps = asyncio.run(_checkpoints(url, args.tasks, args.steps, args.rounds))
        _table(f"{args.tasks} concurrent threads, agent steps", "ckpt/s", cps, "InMemorySaver")


if __name__ == "__main__":
    main()
