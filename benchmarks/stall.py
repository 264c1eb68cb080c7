"""Does one tenant's long operation stall the others? (issue 13)

    python -m benchmarks.stall [--events 1000000] [--url URL] [--check]

Builds a thread of ``--events`` events (a checkpoint and its writes per step, copies of events
the real writer made, appended with pipelined XADD, then indexed by a rebuild), while another
tenant (another prefix, another process) reads its latest checkpoint with ``get_tuple`` in a
loop. Reports that tenant's get_tuple p50/p99 while idle, beside two floors (the first
tenant's process busy without Redis, and running scripts that each hold the server for exactly
one slice's budget), and while the first tenant, in turn, rebuilds the thread, verifies it,
walks its audit chain (verify_chain), copies it, deletes a run's checkpoints (every tenth
step's: delete_for_runs), prunes it (keep_latest) and deletes the copy, then rebuilds and
verifies a Store bucket of as many events (one namespace), with each operation's total time.
Then the same for what a real conversation stores, whose size is in its values rather than its
entry count: a thread of ``--conversation-steps`` agent steps of ``--message-bytes`` messages
(each step a node's write of one message, then a checkpoint whose list holds every message so
far), pruned to its latest checkpoint (one event then holds the whole conversation) and
verified; and a ``--keep-last`` saver writing ``--keep-steps`` such steps of
``--keep-bytes`` messages, whose puts compact the thread as they go.
Redis runs one script at a time: an operation that is one script over the whole thread (or
bucket) holds every tenant for as long as it runs.

Before the other tenant starts, when ``verify`` or ``verify_chain`` is chosen, the thread is
checked on the idle server with the default pace (which adapts: no pause and slices growing to a
few ms while no other client is served), with the fixed pace (``slice_ms=0.25``,
``slice_pause=1``), and by one script over the whole thread, the raw floor of a check (for
``verify_chain``: one read of the whole log and one references script); each as a multiple of
the floor. The table after it shows the other tenant's p99 against its idle p99 while each
check runs with that tenant calling, the default pace and (``verify, fixed pace``) the fixed.

Run it once per implementation to compare (the sources first on PYTHONPATH are the ones
measured), e.g. ``PYTHONPATH=/work/main/src`` (one big script) against this tree's ``src``.
``--check`` then compares the sliced rebuild's indexes with one replay script's (blocking).
Without --url it starts a throwaway redis-server.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import redis
from langgraph.checkpoint.base.id import uuid6

import streamsaver
from streamsaver import RedisStreamSaver, RedisStreamStore
from streamsaver.core.flow import Eval
from streamsaver.core.keys import scratch_keys, store_bucket, store_keys
from streamsaver.store.slices import store_slices

from . import script

BIG, COPY, OTHER = "big", "big-copy", "other"
CONVERSATION, KEPT = "conversation", "kept"
FLOOR_SECONDS = 10.0
# a script that holds the server for ARGV[1] ms and does nothing else
SPIN = """local t0 = redis.call('TIME')
repeat
  local t = redis.call('TIME')
until (t[1] - t0[1]) * 1000 + (t[2] - t0[2]) / 1000 >= tonumber(ARGV[1])"""
# the scripts' server time reported (INFO latencystats)
QUANTILES = ("p50", "p99", "p100")


def ideal_slices(tenant: RedisStreamSaver) -> None:
    """The floor: scripts that each hold the server for exactly ``slice_ms`` and do nothing
    else, paced as the operations' slices are (a pause ``slice_pause`` times as long as each
    call took), from the tenant's process, for FLOOR_SECONDS. No operation in slices of that
    budget can cost the other tenant less on this machine: what the operations cost above it
    is theirs (overruns, their client's CPU), what this costs is the slicing itself and the
    machine's scheduling."""
    spin = tenant.client.register_script(SPIN)
    ops: Any = tenant._ops
    end = time.perf_counter() + FLOOR_SECONDS
    while (started := time.perf_counter()) < end:
        spin(args=[ops.slice_ms])
        time.sleep((time.perf_counter() - started) * ops.slice_pause)


def busy(tenant: RedisStreamSaver) -> None:
    """The tenant's process burning CPU for FLOOR_SECONDS, no Redis: what the machine's
    scheduling alone costs the other tenant when one more process is busy."""
    end = time.perf_counter() + FLOOR_SECONDS
    while time.perf_counter() < end:
        pass


@dataclass
class Conversations:
    """The conversations' sizes (main sets them from the command line)."""

    steps: int = 600
    message_bytes: int = 1000
    keep_last: int = 495
    keep_steps: int = 1000
    keep_bytes: int = 2000


SIZES = Conversations()


def converse(saver: RedisStreamSaver, thread: str, steps: int, size: int) -> None:
    """``steps`` agent steps of a new thread: each a node's write of one ``size``-byte message,
    then a checkpoint whose ``messages`` list holds every message so far, as LangGraph writes
    them (the saver stores each as its new item, naming the write's bytes)."""
    empty = {"v": 1, "id": str(uuid6()), "ts": "", "channel_values": {},
             "channel_versions": {}, "versions_seen": {}}  # fmt: skip
    config = saver.put(_config(thread), cast(Any, empty), {"source": "input", "step": -1}, {})
    messages: list[str] = []
    version: Any = None
    for step in range(steps):
        message = f"{step:08d} " + "abcdefghij" * (size // 10)
        saver.put_writes(config, [("messages", message)], f"task-{step}")
        messages = [*messages, message]
        version = saver.get_next_version(version, None)
        checkpoint = {**empty, "id": str(uuid6()), "channel_values": {"messages": messages},
                      "channel_versions": {"messages": version}}  # fmt: skip
        metadata: Any = {"source": "loop", "step": step}
        config = saver.put(config, cast(Any, checkpoint), metadata, {"messages": version})


def keep_last_puts(tenant: RedisStreamSaver) -> None:
    """A keep_last saver's conversation: its puts compact the thread as they go."""
    saver = RedisStreamSaver(tenant.client, prefix=tenant.prefix, keep_last=SIZES.keep_last)
    saver._ops.slice_ms, saver._ops.slice_pause = tenant._ops.slice_ms, tenant._ops.slice_pause  # type: ignore[attr-defined, unused-ignore]
    converse(saver, KEPT, SIZES.keep_steps, SIZES.keep_bytes)


# by --only's name, in the order they run: the operation's label and what it runs; the floors first
OPERATIONS: dict[str, tuple[str, Callable[[RedisStreamSaver], object]]] = {
    "busy": ("floor: a busy process", busy),
    "ideal_slices": ("floor: ideal slices, paced", ideal_slices),
    "rebuild": ("rebuild", lambda tenant: tenant.rebuild(BIG)),
    "verify": ("verify", lambda tenant: tenant.verify(BIG)),
    "verify_chain": ("audit verify_chain", lambda tenant: tenant.verify_chain(BIG)),
    "verify_fixed": ("verify, fixed pace", lambda tenant: _fixed(tenant).verify(BIG)),
    "copy_thread": ("copy_thread", lambda tenant: tenant.copy_thread(BIG, COPY)),
    "delete_for_runs": ("delete_for_runs", lambda tenant: tenant.delete_for_runs(["gone"])),
    "seed": ("projector keys (rebuild --all)", lambda tenant: tenant.seed_projections()),
    "prune": ("prune keep_latest", lambda tenant: tenant.prune([BIG], strategy="keep_latest")),
    "delete_thread": ("delete_thread", lambda tenant: tenant.delete_thread(COPY)),
    # a conversation of large messages (fill_conversation), pruned, then verified
    "prune_conversation": (
        "prune keep_latest, conversation",
        lambda tenant: tenant.prune([CONVERSATION], strategy="keep_latest"),
    ),
    "verify_pruned": ("verify, pruned conversation", lambda tenant: tenant.verify(CONVERSATION)),
    "verify_chain_pruned": (
        "verify_chain, pruned conversation",
        lambda tenant: tenant.verify_chain(CONVERSATION),
    ),
    "keep_last": ("keep_last puts, conversation", keep_last_puts),
    # the Store's: one bucket of --events memory events (fill_store)
    "store_rebuild": ("store rebuild", lambda tenant: _store(tenant).rebuild()),
    "store_verify": ("store verify", lambda tenant: _store(tenant).verify()),
}
STORE_OPERATIONS = ("store_rebuild", "store_verify")
# what the conversation (fill_conversation) is filled for; keep_last writes its own
CONVERSATION_OPERATIONS = ("prune_conversation", "verify_pruned", "verify_chain_pruned")


def _fixed(tenant: RedisStreamSaver) -> RedisStreamSaver:
    """The tenant's saver with the pace fixed at the defaults (given, so it does not adapt)."""
    return RedisStreamSaver(tenant.client, prefix=tenant.prefix, slice_ms=0.25, slice_pause=1.0)


def floor_verify(tenant: RedisStreamSaver, mode: str = "") -> None:
    """One verify script over the whole thread (``refs``: its references only)."""
    keys = tenant._ops.keys(BIG)
    tenant._execute(Eval("verify", (*keys, *scratch_keys(keys)), (mode,)))


def floor_chain(tenant: RedisStreamSaver) -> None:
    """verify_chain's work in one read of the whole log and one references script."""
    cast(Any, tenant.client).xrange(tenant._ops.keys(BIG).log)
    floor_verify(tenant, "refs")


# the checks timed on the idle server: (label, the default pace's run, the fixed pace's, the floor)
IDLE_CHECKS: dict[str, tuple[Callable[[RedisStreamSaver], object], ...]] = {
    "verify": (
        lambda tenant: tenant.verify(BIG),
        lambda tenant: _fixed(tenant).verify(BIG),
        floor_verify,
    ),
    "verify_chain": (
        lambda tenant: tenant.verify_chain(BIG),
        lambda tenant: _fixed(tenant).verify_chain(BIG),
        floor_chain,
    ),
}


IDLE_REPEATS = 3


def idle_checks(tenant: RedisStreamSaver, chosen: set[str], events: int) -> None:
    """Each chosen check, timed on the idle server (no other client yet), against the floor."""
    rows: list[tuple[str, float, float, float]] = []
    for name, runs in IDLE_CHECKS.items():
        if name not in chosen:
            continue
        took = []
        for run in runs:
            # the best of a few: the machine's other work only ever adds to a run
            best = math.inf
            for _ in range(IDLE_REPEATS):
                t0 = time.perf_counter()
                run(tenant)
                best = min(best, time.perf_counter() - t0)
            took.append(best)
        rows.append((name, took[0], took[1], took[2]))
    if not rows:
        return
    print(
        f"idle server, {events} events: the check's time (best of {IDLE_REPEATS}), and as a "
        f"multiple of one script"
    )
    print(f"| {'check':<13} | {'default s':>9} | {'fixed s':>9} | {'one script s':>12} "
          f"| default / floor | fixed / floor |")  # fmt: skip
    print(f"|{'-' * 15}|{'-' * 11}|{'-' * 11}|{'-' * 14}|-----------------|---------------|")
    for name, adaptive, fixed, floor in rows:
        print(
            f"| {name:<13} | {adaptive:>9.3f} | {fixed:>9.3f} | {floor:>12.3f} "
            f"| {adaptive / floor:>15.2f} | {fixed / floor:>13.2f} |"
        )
    print()


def _store(tenant: RedisStreamSaver) -> RedisStreamStore:
    return RedisStreamStore(tenant.client, prefix=tenant.prefix)


def fill_store(tenant: RedisStreamSaver, events: int) -> None:
    """``events`` puts of distinct keys in one namespace (one bucket): copies of one event the
    store wrote, unchained, each with its own key; then the bucket's indexes, rebuilt in
    slices as long as the server allows (nothing is measured yet)."""
    store, client = _store(tenant), cast(Any, tenant.client)
    store.put(("big",), "k0", {"msg": "x" * 200})
    keys = store_keys(tenant.prefix, store_bucket("big"))
    ((_, fields),) = client.xrange(keys.log)
    event = {k: v for k, v in fields.items() if k not in (b"ch", b"dg")}
    pipe = client.pipeline(transaction=False)
    for i in range(1, events):
        pipe.xadd(keys.log, {**event, b"key": f"k{i}".encode()})
        if len(pipe) >= 20_000:
            pipe.execute()
    pipe.execute()
    store._saver._run(store_slices([store_bucket("big")], store._ops._keys, "rebuild", "", 200, 0))


def _config(thread: str, checkpoint_id: str | None = None) -> Any:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def _checkpoint(step: int) -> Any:
    return {
        "v": 1, "id": f"{step:032d}", "ts": "", "channel_values": {"n": step, "msg": "x" * 200},
        "channel_versions": {"n": step + 1, "msg": 1}, "versions_seen": {},
        "updated_channels": None,
    }  # fmt: skip


def fill(saver: RedisStreamSaver, events: int) -> None:
    """``events`` entries in BIG's log: copies of one checkpoint and one writes event the saver
    wrote, each step with its own checkpoint id (parent: the previous one), unchained."""
    client: Any = saver.client
    config = saver.put(_config(BIG), _checkpoint(0), {"step": 0, "run_id": "r"}, {"n": 1, "msg": 1})
    saver.put_writes(config, [("n", 1), ("log", "step")], "task")
    log = saver._ops.keys(BIG).log
    (_, cp_fields), (_, w_fields) = client.xrange(log)
    drop = {b"ch", b"dg"}
    cp_t = {k: v for k, v in cp_fields.items() if k not in drop}
    w_t = {k: v for k, v in w_fields.items() if k not in drop}
    cp_t.pop(b"parent", None)
    step, have, pipe = 1, client.xlen(log), client.pipeline(transaction=False)
    while have < events:
        cid = f"{step:032d}".encode()
        # every tenth step of another run, which delete_for_runs takes out
        run = {b"run": b"gone"} if step % 10 == 0 else {}
        pipe.xadd(log, {**cp_t, b"id": cid, b"parent": f"{step - 1:032d}".encode(), **run})
        pipe.xadd(log, {**w_t, b"id": cid})
        step, have = step + 1, have + 2
        if len(pipe) >= 20_000:
            pipe.execute()
    pipe.execute()


def reader(url: str, prefix: str, stop: Any, out: Any) -> None:
    """The other tenant: get_tuple of its thread, in a loop, each (start time, seconds)."""
    # a wait as long as one big script holds the server is a sample, not an error
    with redis.Redis.from_url(url, socket_timeout=900) as client:
        saver = RedisStreamSaver(client, prefix=prefix)
        samples: list[tuple[float, float]] = []
        while not stop.is_set():
            t0 = time.perf_counter()
            saver.get_tuple(_config(OTHER))
            samples.append((t0, time.perf_counter() - t0))
        out.send(samples)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def digest(client: Any, saver: RedisStreamSaver, thread: str) -> str:
    keys = saver._ops.keys(thread)
    h = hashlib.sha1()
    for m in sorted(client.zrange(keys.ix, 0, -1)):
        h.update(m + b"\0")
    for k, v in sorted(client.hgetall(keys.ptr).items()):
        h.update(k + b"\0" + v + b"\0")
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("stall", __doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument(
        "--idle",
        type=float,
        default=10.0,
        help="seconds measured idle first (the denominator of every ratio: its p99 moved "
        "between 0.28 and 0.61 ms over 3-second windows on a shared machine)",
    )
    parser.add_argument(
        "--gap",
        type=float,
        default=5.0,
        help="seconds measured idle after each operation, pooled with the first window: a "
        "long run's idle p99 is then of its whole length, not of its first seconds",
    )
    parser.add_argument(
        "--conversation-steps",
        type=int,
        default=SIZES.steps,
        help="the pruned conversation's steps",
    )
    parser.add_argument(
        "--message-bytes", type=int, default=SIZES.message_bytes, help="and its messages' size"
    )
    parser.add_argument("--keep-last", type=int, default=SIZES.keep_last, help="keep_last's N")
    parser.add_argument(
        "--keep-steps", type=int, default=SIZES.keep_steps, help="the keep_last saver's steps"
    )
    parser.add_argument(
        "--keep-bytes", type=int, default=SIZES.keep_bytes, help="and its messages' size"
    )
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--slice-ms", type=float, help="a slice's budget (saver.slice_ms)")
    parser.add_argument("--slice-pause", type=float, help="the slices' pace (saver.slice_pause)")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="lower the CPU priority of the process running the long operations by this much "
        "once the other tenant's has started: where both clients share the server's cores, "
        "the first one's own Python competes with the second for them, which is not the "
        "server's share of the wait",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="also print where in each operation the waits over twice the idle p99 fell",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated operations to run, of {','.join(OPERATIONS)} (default: all; "
        "delete_thread deletes copy_thread's copy, delete_for_runs' and prune's results "
        "depend on the ones before them)",
    )
    args = parser.parse_args(argv)
    chosen = set((args.only or ",".join(OPERATIONS)).split(","))
    if chosen - set(OPERATIONS):
        parser.error(f"--only {args.only!r}: give names of {', '.join(OPERATIONS)}")
    print(f"streamsaver from {streamsaver.__file__}", file=sys.stderr)
    with script.server(args.url) as url, redis.Redis.from_url(url, socket_timeout=900) as client:
        client.config_set("busy-reply-threshold", 600_000)
        client.config_set("latency-tracking-info-percentiles", "50 99 100")
        tenant = RedisStreamSaver(client, prefix="stall-tenant")
        other = RedisStreamSaver(client, prefix="stall-other")
        config = _config(OTHER)
        for step in range(20):
            config = other.put(config, _checkpoint(step), {"step": step}, {"n": step + 1, "msg": 1})
        started = time.perf_counter()
        saved = tenant._ops.slice_ms, tenant._ops.slice_pause  # type: ignore[attr-defined, unused-ignore]
        if chosen - {
            "busy",
            "ideal_slices",
            "keep_last",
            *STORE_OPERATIONS,
            *CONVERSATION_OPERATIONS,
        }:
            fill(tenant, args.events)
            # nothing is measured yet: the fill's indexes in slices as long as the server allows
            tenant._ops.slice_ms, tenant._ops.slice_pause = 200.0, 0.0  # type: ignore[attr-defined, unused-ignore]
            tenant.rebuild(BIG)
            tenant._ops.slice_ms, tenant._ops.slice_pause = saved  # type: ignore[attr-defined, unused-ignore]
        if chosen & set(STORE_OPERATIONS):
            fill_store(tenant, args.events)
        SIZES.steps, SIZES.message_bytes = args.conversation_steps, args.message_bytes
        SIZES.keep_last, SIZES.keep_steps = args.keep_last, args.keep_steps
        SIZES.keep_bytes = args.keep_bytes
        if chosen & set(CONVERSATION_OPERATIONS):
            converse(tenant, CONVERSATION, SIZES.steps, SIZES.message_bytes)
        print(f"filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)

        if args.slice_pause is None and args.slice_ms is None:
            idle_checks(tenant, chosen, args.events)
        else:
            # given, the pace is fixed, as the saver's options make it (even at the defaults)
            tenant._ops.pace_adapts = False  # type: ignore[attr-defined, unused-ignore]
        if args.slice_ms is not None:
            tenant._ops.slice_ms = args.slice_ms  # type: ignore[attr-defined, unused-ignore]
        if args.slice_pause is not None:
            tenant._ops.slice_pause = args.slice_pause  # type: ignore[attr-defined, unused-ignore]
        stop = mp.Event()
        mine, theirs = mp.Pipe()
        proc = mp.Process(target=reader, args=(url, "stall-other", stop, theirs))
        proc.start()
        time.sleep(0.5)
        if args.nice:
            os.nice(args.nice)
        windows: list[tuple[str, float, float]] = []

        scripts: dict[str, str] = {}
        others: dict[str, str] = {}

        def timed(label: str, run: Callable[[], object]) -> None:
            client.config_resetstat()
            t0 = time.perf_counter()
            run()
            windows.append((label, t0, time.perf_counter()))
            # the server time of each script the operation ran (Redis 7 latency tracking)
            stats = client.info("latencystats")
            # (FCALL: the library's functions; EVALSHA on a server without Functions)
            script_keys = [f"latency_percentiles_usec_{v}" for v in ("fcall", "evalsha")]
            stat: dict[str, Any] = next((stats[k] for k in script_keys if k in stats), {})
            scripts[label] = "/".join(f"{stat.get(q, 0) / 1000:.2f}" for q in QUANTILES)
            # and the longest of every other command (pages of XRANGE, ...), by name
            name, most = max(
                ((k.rsplit("_", 1)[-1], v.get("p100", 0)) for k, v in stats.items()
                 if k not in script_keys and not k.endswith("_info")),
                key=lambda kv: kv[1], default=("", 0),
            )  # fmt: skip
            others[label] = f"{name} {most / 1000:.2f}" if name else ""

        timed("idle", lambda: time.sleep(args.idle))
        same = None
        for name, (label, run) in OPERATIONS.items():
            if name not in chosen:
                continue
            timed(label, partial(run, tenant))
            if name == "rebuild" and args.check:
                # outside every measured window: one replay script blocks the server for seconds
                sliced = digest(client, tenant, BIG)
                keys = tenant._ops._replay_keys(tenant._ops.keys(BIG))
                tenant._execute(Eval("replay", keys, (BIG,)))
                same = sliced == digest(client, tenant, BIG)
            timed("idle", lambda: time.sleep(args.gap))
        stop.set()
        samples = mine.recv()
        proc.join()

        gaps = [(a, b) for label, a, b in windows if label == "idle"]
        idle = [s for s0, s in samples for a, b in gaps if a <= s0 < b]
        idle_p99 = pct(idle, 0.99)
        each = [pct([s for s0, s in samples if a <= s0 < b] or [0.0], 0.99) for a, b in gaps]
        print(f"| {'while the tenant runs':<26} | {'op s':>7} | {'p50 ms':>7} | {'p99 ms':>7} "
              f"| {'max ms':>7} | p99/idle | script p50/p99/max ms "
              f"| longest other ms |")  # fmt: skip
        print(f"|{'-' * 28}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|----------|{'-' * 23}|"
              f"{'-' * 18}|")  # fmt: skip
        for label, a, b in windows:
            if label == "idle" and a != windows[0][1]:
                continue
            # the idle row: every idle window pooled
            got = idle if label == "idle" else [s for s0, s in samples if a <= s0 < b] or [0.0]
            print(
                f"| {label:<26} | {b - a:>7.2f} | {pct(got, 0.5):>7.3f} | {pct(got, 0.99):>7.3f} "
                f"| {max(got) * 1000:>7.1f} | {pct(got, 0.99) / idle_p99:>8.2f} "
                f"| {scripts.get(label, '') if label != 'idle' else '':>21} "
                f"| {others.get(label, '') if label != 'idle' else '':>16} |"
            )
            if args.timeline and label != "idle":
                # where in the operation the waits over twice the idle p99 fell, by tenth
                tenths = [0] * 10
                for s0, s in samples:
                    if a <= s0 < b and s * 1000 > 2 * idle_p99:
                        tenths[min(9, int(10 * (s0 - a) / (b - a)))] += 1
                print(f"|   waits > 2x idle p99, by tenth of the operation: {tenths}")
        print(
            f"(idle: {len(gaps)} windows, {len(idle)} samples, median "
            f"{statistics.median(idle) * 1000:.3f} ms; each window's p99 from "
            f"{min(each):.3f} to {max(each):.3f} ms)"
        )
        if same is not None:
            print(f"{args.events}-event rebuild == one replay script (indexes' digest): {same}")
        client.flushdb()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
