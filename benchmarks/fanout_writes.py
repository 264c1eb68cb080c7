"""The server's CPU per ``put_writes`` over a fan-out: many tasks writing to one checkpoint.

    python -m benchmarks.fanout_writes [--writes 600] [--before SRC] [--binary PATH]

One checkpoint, then ``--writes`` ``put_writes`` calls to it (one task each, one write), and
the server's CPU per call (``INFO cpu``, user + sys) over each third of them: flat when a
put_writes costs what its own writes do, growing when it re-reads what the checkpoint holds.
``--before SRC`` runs the same against another checkout's ``src/`` in a child process on the
same server (as benchmarks.server_cpu does), so both are measured in one run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import redis
from langgraph.checkpoint.base import empty_checkpoint

from streamsaver.embedded import EmbeddedRedis

from . import script

__all__ = ["fan_out", "main"]


def _cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def fan_out(client: redis.Redis, writes: int) -> list[float]:
    """Server CPU µs per put_writes over each third of ``writes`` calls to one checkpoint."""
    from streamsaver import RedisStreamSaver

    saver = RedisStreamSaver(client, prefix="fanout")
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}", "checkpoint_ns": ""}}
    stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    third = writes // 3
    marks = []
    for i in range(3 * third):
        if i % third == 0:
            marks.append(_cpu(client))
        saver.put_writes(stored, [("fan", f"result {i}")], f"task-{i}")
    marks.append(_cpu(client))
    got = saver.get_tuple(stored)
    assert got is not None and len(got.pending_writes) == 3 * third
    return [(b - a) * 1e6 / third for a, b in itertools.pairwise(marks)]


def _elsewhere(src: str, url: str, writes: int) -> list[float]:
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, root])}
    command = [sys.executable, "-W", "ignore", "-m", "benchmarks.fanout_writes"]
    out = subprocess.run(
        [*command, "--client", url, "--writes", str(writes)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return list(json.loads(out))


def main(argv: Sequence[str] | None = None) -> int:
    parser = script.parser("fanout_writes", __doc__)
    parser.add_argument("--writes", type=int, default=600)
    parser.add_argument("--binary", help="the redis-server to measure (default: PATH, embedded)")
    parser.add_argument("--before", metavar="SRC", help="also another checkout's src/")
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.client:  # the child of --before: print its figures
        print(json.dumps(fan_out(redis.Redis.from_url(ns.client), ns.writes)))
        return 0
    third = ns.writes // 3
    with EmbeddedRedis(binary=ns.binary) as server:
        client = redis.Redis.from_url(server.url)
        rows = {"streamsaver": fan_out(client, ns.writes)}
        if ns.before:
            rows["streamsaver before"] = _elsewhere(ns.before, server.url, ns.writes)
    print("server CPU per put_writes (µs), by the writes the checkpoint already holds")
    print(f"{'peer':20}" + "".join(f"{f'{i * third}-{(i + 1) * third}':>12}" for i in range(3)))
    for name, row in rows.items():
        print(f"{name:20}" + "".join(f"{us:12.0f}" for us in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
