"""The Redis server's CPU per agent step (issue 14).

    python -m benchmarks.server_cpu [--steps 500] [--rounds 3] [--binary PATH]

One agent step is ``get_tuple`` + ``put_writes`` + ``put`` on one thread whose ``messages`` list
grows by one 200-byte message each step (benchmarks.conversation). Each peer runs ``--steps``
steps on a private redis-server this benchmark starts (emptied and its statistics reset before
each peer), and the server's CPU per step is read from ``INFO cpu`` (user + sys of the server
process) and ``INFO commandstats`` (time inside commands); the median of ``--rounds`` rounds,
peers interleaved within each round.

Beside streamsaver, in the same run:

- the floor: the Redis commands streamsaver's scripts run for those steps (XADD, HSET, ZADD,
  XRANGE, ...; recorded with ``MONITOR`` in an untimed run), sent without Lua, one pipeline per
  saver call. The same bytes, the same keys and entry ids, so the same reads find the same data:
  what the step costs the server with no script around its commands.
- langgraph-checkpoint-plainredis (plain Redis, no modules).

Each figure is also printed as a ratio to the floor and to plainredis from the same round, the
only comparison that survives a machine shared with other work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import redis

from streamsaver.embedded import EmbeddedRedis

from . import script
from .conversation import agent_step, start_thread

__all__ = ["Sample", "floor_trace", "main", "measure"]

Runner = Callable[[redis.Redis], None]

_SCRIPTS = ("cmdstat_eval", "cmdstat_fcall")
# the benchmark's own
_OURS = ("cmdstat_info", "cmdstat_config", "cmdstat_flushall")
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("a"): 7, ord("b"): 8}


@dataclass(frozen=True)
class Sample:
    """One peer's server cost over a run, per step."""

    cpu_us: float  # server process CPU (INFO cpu: user + sys)
    scripts_us: float  # time inside EVALSHA/FCALL (INFO commandstats), their commands included
    commands_us: float  # time inside the other commands, those a script ran included
    calls: float  # commands the server ran, those a script ran included


def _unrepr(data: bytes, start: int) -> tuple[bytes, int]:
    """One argument as MONITOR quotes it (sdscatrepr), from the opening quote at ``start``:
    its bytes and the index after the closing quote."""
    out = bytearray()
    i = start + 1
    while data[i] != ord('"'):
        c = data[i]
        if c != ord("\\"):
            out.append(c)
            i += 1
            continue
        nxt = data[i + 1]
        if nxt == ord("x"):
            out.append(int(data[i + 2 : i + 4], 16))
            i += 4
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return bytes(out), i + 1


def _parse_monitor(line: bytes) -> tuple[bool, list[bytes]]:
    """(whether a script ran it, its arguments) of one MONITOR line:
    ``<time> [<db> <client or lua>] "ARG" "ARG" ...``."""
    close = line.index(b"]")
    from_lua = line[:close].endswith(b" lua")
    args: list[bytes] = []
    i = line.index(b'"', close)
    while i < len(line):
        arg, i = _unrepr(line, i)
        args.append(arg)
        i += 1  # the space between arguments
    return from_lua, args


@contextmanager
def _monitor(client: redis.Redis) -> Iterator[list[bytes]]:
    """The raw MONITOR lines of everything the server runs inside the block."""
    lines: list[bytes] = []
    # redis-py's own Monitor decodes and re-quotes the lines, losing binary arguments
    conn: Any = client.connection_pool.make_connection()
    conn.connect()
    conn.send_command("MONITOR")
    assert conn.read_response() in (b"OK", "OK")
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set() or conn.can_read(timeout=0.2):
            if conn.can_read(timeout=0.05):
                lines.append(conn.read_response(disable_decoding=True))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        # a marker the reader must see: everything before it has been read
        client.echo("streamsaver-monitor-end")
        while not any(b"streamsaver-monitor-end" in line for line in lines[-3:]):
            reader.join(0.05)
        stop.set()
        reader.join()
        conn.disconnect()


def floor_trace(client: redis.Redis, saver_run: Runner) -> list[list[tuple[bytes, ...]]]:
    """The commands the scripts ran during ``saver_run``, grouped by the call that ran them,
    with each log entry's server-given id (``*``) replaced by the id it got, so a replay
    onto an empty server writes the same entries and the reads find them."""
    client.flushall()
    with _monitor(client) as lines:
        saver_run(client)
    calls: list[list[list[bytes]]] = []
    for line in lines:
        from_lua, args = _parse_monitor(line)
        if not from_lua:
            calls.append([])
        elif calls:
            calls[-1].append(args)
    xadds: dict[bytes, list[list[bytes]]] = {}
    for call in calls:
        for args in call:
            if args[0].upper() == b"XADD" and args[2] == b"*":
                xadds.setdefault(args[1], []).append(args)
    for key, adds in xadds.items():
        entries: Any = client.xrange(key)
        ids = [entry_id for entry_id, _ in entries]
        if len(ids) == len(adds):  # a trimmed stream (the feed) keeps '*': no one reads its ids
            for args, entry_id in zip(adds, ids, strict=True):
                args[2] = entry_id
    return [[tuple(args) for args in call] for call in calls if call]


def _replay(trace: Sequence[Sequence[tuple[bytes, ...]]]) -> Runner:
    def run(client: redis.Redis) -> None:
        for call in trace:
            pipe: Any = client.pipeline(transaction=False)
            for args in call:
                pipe.execute_command(*args)
            pipe.execute(raise_on_error=False)

    return run


def _steps(make_saver: Callable[[redis.Redis], Any], steps: int) -> Runner:
    def run(client: redis.Redis) -> None:
        saver = make_saver(client)
        thread = f"t-{uuid.uuid4().hex}"
        start_thread(saver, thread)
        for step in range(steps):
            agent_step(saver, thread, step)

    return run


def _streamsaver(client: redis.Redis, feed: bool = True, **options: Any) -> Any:
    from streamsaver import RedisStreamSaver

    saver = RedisStreamSaver(client, prefix="bench", **options)
    if not feed:
        saver.feed_maxlen = 0
    saver.setup()
    return saver


def _elsewhere(src: str, steps: int) -> Runner:
    """streamsaver's steps from the sources in ``src`` (another checkout's src/), in a child
    process, against the same server: before and after a change, measured in one run."""

    def run(client: redis.Redis) -> None:
        kwargs = client.connection_pool.connection_kwargs
        url = f"redis://{kwargs['host']}:{kwargs['port']}/0"
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, root])}
        command = [sys.executable, "-W", "ignore", "-m", "benchmarks.server_cpu"]
        subprocess.run([*command, "--client", url, "--steps", str(steps)], env=env, check=True)

    return run


def _plainredis(client: redis.Redis) -> Any:
    from langgraph_checkpoint_plainredis import RedisSaver

    return RedisSaver(client, prefix="bench")


def _cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(client: redis.Redis, run: Runner, steps: int) -> Sample:
    client.flushall()
    client.config_resetstat()
    before = _cpu(client)
    run(client)
    after = _cpu(client)
    stats = client.info("commandstats")
    scripts = _usec(stats, lambda name: name.startswith(_SCRIPTS))
    # a script's time includes the commands it ran, which are also counted under their names
    commands = _usec(stats, lambda name: not name.startswith((*_SCRIPTS, *_OURS)))
    calls = sum(float(s["calls"]) for name, s in stats.items() if not name.startswith(_OURS))
    return Sample((after - before) * 1e6 / steps, scripts / steps, commands / steps, calls / steps)


def _usec(stats: dict[str, Any], which: Callable[[str], bool]) -> float:
    return sum(float(s["usec"]) for name, s in stats.items() if which(name))


def _median(samples: Sequence[Sample]) -> Sample:
    return Sample(
        statistics.median(s.cpu_us for s in samples),
        statistics.median(s.scripts_us for s in samples),
        statistics.median(s.commands_us for s in samples),
        statistics.median(s.calls for s in samples),
    )


def peers(steps: int, variants: bool = False) -> dict[str, Runner]:
    runners = {
        "streamsaver": _steps(_streamsaver, steps),
        "langgraph-checkpoint-plainredis": _steps(_plainredis, steps),
    }
    if variants:
        # what the chain and the feed cost the server, by their absence
        runners["streamsaver chain=False"] = _steps(partial(_streamsaver, chain=False), steps)
        runners["streamsaver chain=False, no feed"] = _steps(
            partial(_streamsaver, chain=False, feed=False), steps
        )
    return runners


def main(argv: Sequence[str] | None = None) -> int:
    parser = script.parser("server_cpu", __doc__)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", help="the redis-server to measure (default: PATH, embedded)")
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also streamsaver without the audit chain, and without the chain or the feed",
    )
    parser.add_argument(
        "--before",
        metavar="SRC",
        help="also streamsaver from another checkout's src/ (e.g. one `git archive` made of "
        "the last release), run in a child process against the same server",
    )
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.client:  # the child of --before: only the steps, the parent measures
        _steps(_streamsaver, ns.steps)(redis.Redis.from_url(ns.client))
        return 0
    runners = peers(ns.steps, ns.variants)
    if ns.before:
        runners["streamsaver before"] = _elsewhere(ns.before, ns.steps)
    with EmbeddedRedis(binary=ns.binary) as server:
        client = redis.Redis.from_url(server.url)
        info = client.info("server")
        version = (
            f"valkey {info['valkey_version']}"
            if "valkey_version" in info
            else info["redis_version"]
        )
        print(f"server {server.binary} {version}; {ns.steps} steps, {ns.rounds} rounds")
        trace = floor_trace(client, runners["streamsaver"])
        runners = {"floor (the scripts' commands, no Lua)": _replay(trace), **runners}
        samples: dict[str, list[Sample]] = {name: [] for name in runners}
        for turn in range(ns.rounds):
            names = list(runners)
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                samples[name].append(measure(client, runners[name], ns.steps))
    medians = {name: _median(s) for name, s in samples.items()}
    floor = medians[next(iter(medians))]
    plain = medians["langgraph-checkpoint-plainredis"]
    print(
        f"{'peer':40} {'cpu us/step':>12} {'in scripts':>11} {'in commands':>12} "
        f"{'cmds/step':>10} "
        f"{'x floor':>8} {'x plainredis':>13}"
    )
    for name, m in medians.items():
        print(
            f"{name:40} {m.cpu_us:12.0f} {m.scripts_us:11.0f} {m.commands_us:12.0f} "
            f"{m.calls:10.1f} "
            f"{m.cpu_us / floor.cpu_us:8.2f} {m.cpu_us / plain.cpu_us:13.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
