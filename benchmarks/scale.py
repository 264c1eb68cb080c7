"""Many short threads on one server, then deleted: what each costs, and what listing them costs.

    python -m benchmarks.scale [--threads 100000] [--turns 1] [--cluster] [--node-bytes N]

For each peer (streamsaver, langgraph-checkpoint-plainredis) on a fresh server of its own (a
redis-server, or with --cluster a 3-primary cluster): --threads threads of a chat
(benchmarks.chat: a MessagesState graph, --turns turns of ~150-byte messages each, every
thread's metadata naming one of 1,000 users), written by --concurrency async callers, then
every thread deleted. It reports:

- bytes per live thread and per deleted thread (``used_memory`` less the clients' buffers, of
  every primary, against a baseline taken after setup; streamsaver's projector keys included,
  after its sweep), and the keys left;
- streamsaver only (plainredis has no such operation): ``thread_ids()``, the first page of
  ``threads()``, the console's threads page (GET /), the projector's lag while the threads
  are written (``streamsaver projector run`` runs beside the writers, sampled every 30 s) and
  how long it takes to reach 0 after the last write, and ``streamsaver rebuild --all`` (the
  command, default slices);
- both: ``list(None, filter={"user": ...})`` (one thread in 1,000 matches), the write and
  delete phases' wall time. Deleting stops after --delete-limit seconds (plainredis'
  ``delete_thread`` reads its whole registry each time: at 100,000 threads its phase would
  take hours); the bytes and keys per deleted thread are then of the threads deleted.

Times are medians of --repeat runs (a run over 10 s is not repeated). Compare within one run:
the last column of each table is streamsaver's figure over plainredis'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.embedded import EmbeddedCluster, EmbeddedRedis

from . import chat, script

__all__ = ["PeerRun", "Report", "main", "run"]

PREFIX = "scale"
STREAMSAVER = "streamsaver"
PLAINREDIS = "langgraph-checkpoint-plainredis"
_LONG_S = 10.0  # a measurement that took this long is not repeated
# a lag reading runs a script on every slot that has a feed: ~1.6 s of server time at 16384
# slots, so it is taken seldom, not to slow down what it measures
_LAG_POLL_S = 30.0
_CATCH_UP_POLL_S = 2.0
_CATCH_UP_LIMIT_S = 900.0
_NONE, _TIMES = "\u2013", "\u00d7"  # a table's empty cell, and "times"


@dataclass
class Lag:
    max_pending: int = 0
    max_age_s: float = 0.0
    catch_up_s: float = 0.0  # from the last write until nothing is pending


@dataclass
class PeerRun:
    name: str
    absent: str = ""  # why the peer could not run, else empty
    write_s: float = 0.0
    delete_s: float = 0.0
    live_bytes: int = 0  # used_memory above the baseline, every primary
    deleted_bytes: int = 0  # what the deleted threads left: above the baseline, less the rest
    live_keys: int = 0
    deleted_keys: int = 0
    deleted: int = 0  # threads deleted within --delete-limit
    delete_error: str = ""  # what stopped the deletion early, if anything did
    listed: int = 0  # checkpoints list(None, filter=...) returned
    ids: int = 0  # thread_ids() returned
    page: int = 0  # rows of threads()' first page
    ops: dict[str, float] = field(default_factory=dict)  # seconds
    lag: Lag | None = None

    def per_thread(self, threads: int) -> tuple[float, float]:
        return self.live_bytes / threads, self.deleted_bytes / max(self.deleted, 1)


@dataclass
class Report:
    threads: int
    turns: int
    topology: str
    server: str
    node_bytes: int
    peers: list[PeerRun]

    def peer(self, name: str) -> PeerRun:
        return next(p for p in self.peers if p.name == name)


# -- servers ----------------------------------------------------------------------------------


@dataclass
class Topology:
    url: str
    ports: list[int]
    clustered: bool

    def primaries(self) -> list[redis.Redis]:
        return [redis.Redis(host="127.0.0.1", port=port) for port in self.ports]

    def sum_info(self, section: str, name: str) -> int:
        total = 0
        for client in self.primaries():
            with client:
                total += int(client.info(section).get(name, 0))
        return total

    def used_memory(self) -> int:
        """What the data holds: ``used_memory`` less the clients' buffers, which grow with the
        connections the writers opened and are no thread's."""
        return self.sum_info("memory", "used_memory") - self.sum_info(
            "memory", "mem_clients_normal"
        )

    def keys(self) -> int:
        total = 0
        for client in self.primaries():
            with client:
                total += int(client.dbsize())
        return total

    def server(self) -> str:
        with self.primaries()[0] as client:
            info = client.info("server")
        name = "Valkey" if info.get("server_name") == "valkey" else "Redis"
        return f"{name} {info.get('valkey_version', info.get('redis_version'))}"

    def sync_client(self) -> Any:
        return RedisCluster.from_url(self.url) if self.clustered else redis.Redis.from_url(self.url)

    def async_client(self, concurrency: int) -> Any:
        if self.clustered:
            return AsyncRedisCluster.from_url(self.url)
        return redis.asyncio.Redis.from_url(self.url, max_connections=max(100, 2 * concurrency))


@contextmanager
def servers(clustered: bool, node_bytes: int | None) -> Iterator[Topology]:
    """A fresh redis-server, or a 3-primary cluster, with ``stream-node-max-bytes`` set."""
    if clustered:
        with EmbeddedCluster(3) as cluster:
            found = Topology(cluster.url, [n.port for n in cluster.primaries], True)
            _configure(found, node_bytes)
            yield found
    else:
        with EmbeddedRedis() as server:
            found = Topology(server.url, [server.port], False)
            _configure(found, node_bytes)
            yield found


def _configure(found: Topology, node_bytes: int | None) -> None:
    for client in found.primaries():
        with client:
            if node_bytes is not None:
                client.config_set("stream-node-max-bytes", node_bytes)


def _node_bytes(found: Topology) -> int:
    with found.primaries()[0] as client:
        return int(client.config_get("stream-node-max-bytes")["stream-node-max-bytes"])


# -- driving ----------------------------------------------------------------------------------


class Progress:
    """One line on stderr, rewritten in place on a terminal, every few seconds elsewhere."""

    def __init__(self, what: str, total: int, quiet: bool) -> None:
        self.what, self.total, self.quiet = what, total, quiet
        self.done = 0
        self.started = self._last = time.monotonic()
        self._tty = sys.stderr.isatty()

    def step(self, extra: str = "") -> None:
        self.done += 1
        now = time.monotonic()
        if self.quiet or (now - self._last < (0.5 if self._tty else 10.0)):
            return
        self._last = now
        self._show(extra)

    def _show(self, extra: str = "", end: str = "") -> None:
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        line = f"{self.what}: {self.done:,}/{self.total:,} ({rate:,.0f}/s){extra}"
        print(("\r" if self._tty else "") + line + (end or ("" if self._tty else "\n")),
              end="", file=sys.stderr, flush=True)  # fmt: skip

    def close(self) -> float:
        if not self.quiet:
            self._show(end="\n")
        return time.monotonic() - self.started


async def _each(
    count: int,
    concurrency: int,
    job: Callable[[int], Awaitable[None]],
    progress: Progress,
    limit_s: float | None = None,
) -> float:
    """Run ``job(0..count-1)`` with ``concurrency`` callers, none started after ``limit_s``;
    seconds it took (``progress.done`` says how many ran)."""
    numbers = iter(range(count))
    until = None if limit_s is None else time.monotonic() + limit_s

    async def caller() -> None:
        for n in numbers:
            await job(n)
            progress.step()
            if until is not None and time.monotonic() > until:
                return

    await asyncio.gather(*(caller() for _ in range(min(concurrency, count))))
    return progress.close()


async def _delete_all(
    out: PeerRun,
    delete: Callable[[int], Awaitable[None]],
    args: argparse.Namespace,
    found: Topology,
    baseline: tuple[int, int],
    after: Callable[[], None] = lambda: None,
) -> None:
    """Delete the threads, for --delete-limit at most, and what the deleted ones left: what
    the server holds above the baseline less the live threads' share still standing."""
    progress = Progress(f"{out.name}: threads deleted", args.threads, args.quiet)
    try:
        out.delete_s = await _each(
            args.threads, args.concurrency, delete, progress, args.delete_limit
        )
    except redis.RedisError as exc:  # what was written and deleted so far is still measured
        out.delete_s = progress.close()
        out.delete_error = f"{type(exc).__name__}: {exc}"[:300]
    out.deleted = progress.done
    after()
    standing = (args.threads - out.deleted) / args.threads
    out.deleted_bytes = round(_settled_memory(found) - baseline[0] - out.live_bytes * standing)
    out.deleted_keys = round(found.keys() - baseline[1] - out.live_keys * standing)


def _timed(run: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
        if times[-1] > _LONG_S:
            break
    return statistics.median(times), result


async def _atimed(run: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = await run()
        times.append(time.perf_counter() - started)
        if times[-1] > _LONG_S:
            break
    return statistics.median(times), result


def void(_: object) -> None:
    """Drop a value (a lambda that calls for its effect)."""


def _settled_memory(found: Topology) -> int:
    # the server gives back clients' grown buffers in its cron, within a second or two (up to
    # ~1 MB after the functions library was sent): a reading taken sooner counts them
    time.sleep(2.0)
    return found.used_memory()


# -- streamsaver ------------------------------------------------------------------------------


class _Projecting:
    """``streamsaver projector run`` in a process of its own beside the writers, as deployed,
    its lag sampled while they write."""

    def __init__(self, found: Topology) -> None:
        self.found = found
        self.client = found.sync_client()
        self.saver = RedisStreamSaver(self.client, prefix=PREFIX)
        self.lag = Lag()
        self._process: subprocess.Popen[str] | None = None
        self._drain = threading.Thread()
        self._sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="scale-lag")

    def __enter__(self) -> _Projecting:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "streamsaver", "projector", "run", "--url", self.found.url,
             "--prefix", PREFIX, "--log-every", "3600", "--log-level", "INFO"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # it seeds the (empty) prefix, then joins its group: the writes begin after that
        said = []
        for line in self._process.stderr or ():
            said.append(line)
            if "joined group" in line:
                break
        else:
            raise RuntimeError(f"the projector did not start: {''.join(said)[-2000:]}")
        self._drain = threading.Thread(target=self._process.stderr.read, daemon=True)  # type: ignore[union-attr]
        self._drain.start()
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._sampling.wait(_LAG_POLL_S):
            self._note(fresh=False)

    def _note(self, fresh: bool = True) -> int:
        lag = self.saver.projector_lag(fresh=fresh)
        self.lag.max_pending = max(self.lag.max_pending, lag.pending)
        self.lag.max_age_s = max(self.lag.max_age_s, lag.oldest_age_s)
        return lag.pending

    def caught_up(self) -> None:
        """After the last write: how long until the projector has applied everything."""
        self._sampling.set()
        self._sampler.join()
        started = time.monotonic()
        while self._note() and time.monotonic() - started < _CATCH_UP_LIMIT_S:
            time.sleep(_CATCH_UP_POLL_S)
        self.lag.catch_up_s = time.monotonic() - started

    def __exit__(self, *exc: object) -> None:
        self._sampling.set()
        if self._sampler.is_alive():
            self._sampler.join()
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=60)
            self._drain.join(timeout=10)
            if self._process.stderr is not None:
                self._process.stderr.close()
        self.client.close()


def _rebuild_all(found: Topology) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamsaver", "rebuild", "--all", "--url", found.url,
         "--prefix", PREFIX, "--json"],
        capture_output=True, text=True, check=False, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"rebuild --all exited {done.returncode}: {done.stderr[-2000:]}")


async def _console_page(saver: AsyncRedisStreamSaver) -> int:
    from streamsaver.web import create_app

    transport = httpx.ASGITransport(app=create_app(saver, running_ms=0))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        reply = await client.get("/")
    reply.raise_for_status()
    return len(reply.content)


async def _streamsaver(found: Topology, args: argparse.Namespace) -> PeerRun:
    out = PeerRun(STREAMSAVER)
    wanted = chat.metadata_filter()
    client = found.async_client(args.concurrency)
    saver = AsyncRedisStreamSaver(client, prefix=PREFIX)
    sync_client = found.sync_client()
    sync = RedisStreamSaver(sync_client, prefix=PREFIX)
    try:
        await saver.asetup()
        sync.setup()
        graph = chat.build_chat(saver)
        baseline = _settled_memory(found)
        baseline_keys = found.keys()
        with _Projecting(found) as projecting:
            progress = Progress(f"{STREAMSAVER}: threads written", args.threads, args.quiet)
            out.write_s = await _each(
                args.threads, args.concurrency, lambda n: chat.achat(graph, n, args.turns),
                progress,
            )  # fmt: skip
            projecting.caught_up()
            out.lag = projecting.lag
        out.live_bytes = _settled_memory(found) - baseline
        out.live_keys = found.keys() - baseline_keys

        out.ops["thread_ids"], ids = _timed(sync.thread_ids, args.repeat)
        out.ids = len(ids)
        out.ops["threads_page"], page = _timed(lambda: sync.threads(limit=20), args.repeat)
        out.page = len(page)
        listing = lambda: list(sync.list(None, filter=wanted))  # noqa: E731
        out.ops["list_filter"], listed = _timed(listing, args.repeat)
        out.listed = len(listed)
        out.ops["console_threads"], _ = await _atimed(lambda: _console_page(saver), args.repeat)
        out.ops["rebuild_all"], _ = _timed(lambda: _rebuild_all(found), 1)

        # then what the projector's periodic sweep does to the deleted threads' registry rows
        await _delete_all(
            out, lambda n: saver.adelete_thread(f"t{n}"), args, found,
            (baseline, baseline_keys), lambda: void(sync.sweep_projections()),
        )  # fmt: skip
    finally:
        await client.aclose()
        sync_client.close()
    return out


# -- plainredis -------------------------------------------------------------------------------


@asynccontextmanager
async def _plainredis(found: Topology, concurrency: int) -> AsyncIterator[Any]:
    from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver

    client = found.async_client(concurrency)
    sync_client = found.sync_client()
    try:
        yield AsyncRedisSaver(client, prefix=PREFIX), RedisSaver(sync_client, prefix=PREFIX)
    finally:
        await client.aclose()
        sync_client.close()


async def _plain(found: Topology, args: argparse.Namespace) -> PeerRun:
    out = PeerRun(PLAINREDIS)
    try:
        opened = _plainredis(found, args.concurrency)
        saver, sync = await opened.__aenter__()
    except ImportError as exc:
        return PeerRun(PLAINREDIS, absent=f"not installed ({exc})")
    try:
        graph = chat.build_chat(saver)
        baseline = _settled_memory(found)
        baseline_keys = found.keys()
        progress = Progress(f"{PLAINREDIS}: threads written", args.threads, args.quiet)
        try:
            out.write_s = await _each(
                args.threads, args.concurrency, lambda n: chat.achat(graph, n, args.turns),
                progress,
            )  # fmt: skip
        except redis.RedisError as exc:
            # its keys share no hash tag: a cluster refuses its multi-key commands
            progress.close()
            return PeerRun(PLAINREDIS, absent=f"{type(exc).__name__}: {exc}"[:300])
        out.live_bytes = _settled_memory(found) - baseline
        out.live_keys = found.keys() - baseline_keys
        wanted = chat.metadata_filter()
        listing = lambda: list(sync.list(None, filter=wanted))  # noqa: E731
        out.ops["list_filter"], listed = _timed(listing, args.repeat)
        out.listed = len(listed)
        await _delete_all(
            out, lambda n: saver.adelete_thread(f"t{n}"), args, found, (baseline, baseline_keys)
        )
    finally:
        await opened.__aexit__(None, None, None)
    return out


# -- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> Report:
    peers: list[PeerRun] = []
    server, node_bytes = "", 0
    for name, measure in ((STREAMSAVER, _streamsaver), (PLAINREDIS, _plain)):
        if args.peers and not any(p in name for p in args.peers):
            continue
        with servers(args.cluster, args.node_bytes) as found:
            server, node_bytes = found.server(), _node_bytes(found)
            try:
                done = asyncio.run(measure(found, args))
            except Exception as exc:  # a peer that fails is reported, the others still run
                done = PeerRun(name, absent=f"failed: {type(exc).__name__}: {exc}"[:300])
            peers.append(done)
            # a long run's figures survive whatever happens to the peers after this one
            print(f"{name}: {json.dumps(asdict(done))}", file=sys.stderr, flush=True)
    topology = "3-primary cluster" if args.cluster else "standalone"
    return Report(args.threads, args.turns, topology, server, node_bytes, peers)


def _ratio(mine: float | None, theirs: float | None) -> str:
    if not mine or not theirs:
        return _NONE
    return f"{mine / theirs:.2f}{_TIMES}"


def _seconds(value: float | None) -> str:
    if value is None:
        return _NONE
    return f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def render(report: Report) -> str:
    n = report.threads
    by = {p.name: p for p in report.peers}
    ours, theirs = by.get(STREAMSAVER), by.get(PLAINREDIS)
    if theirs is not None and theirs.absent:
        theirs = None
    lines = [
        f"{n:,} threads of {report.turns} chat turn(s), {report.topology}, {report.server}, "
        f"stream-node-max-bytes {report.node_bytes}",
        "",
        f"| | {STREAMSAVER} | plainredis | {STREAMSAVER} ÷ plainredis |",
        "|---|---:|---:|---:|",
    ]

    def row(label: str, mine: float | None, other: float | None, shown: Callable[..., str]) -> None:
        lines.append(f"| {label} | {shown(mine)} | {shown(other)} | {_ratio(mine, other)} |")

    def get(peer: PeerRun | None, attr: str) -> float | None:
        return None if peer is None else float(getattr(peer, attr))

    def op(peer: PeerRun | None, name: str) -> float | None:
        return None if peer is None else peer.ops.get(name)

    size = lambda v: _NONE if v is None else f"{v:,.0f} B"  # noqa: E731
    row("bytes per live thread", _per(ours, n, 0), _per(theirs, n, 0), size)
    row("bytes per deleted thread", _per(ours, n, 1), _per(theirs, n, 1), size)
    count = lambda v: _NONE if v is None else f"{v:,.0f}"  # noqa: E731
    row("keys, live", get(ours, "live_keys"), get(theirs, "live_keys"), count)
    row("keys left after deleting", get(ours, "deleted_keys"), get(theirs, "deleted_keys"), count)
    row("writing the threads", get(ours, "write_s"), get(theirs, "write_s"), _seconds)
    row("deleting them", get(ours, "delete_s"), get(theirs, "delete_s"), _seconds)
    if any(p.deleted < n for p in (ours, theirs) if p is not None):
        row("threads deleted within --delete-limit", get(ours, "deleted"),
            get(theirs, "deleted"), count)  # fmt: skip
    row("`list(None, filter=...)`", op(ours, "list_filter"), op(theirs, "list_filter"), _seconds)
    for key, label in (
        ("thread_ids", "`thread_ids()`"),
        ("threads_page", "`threads(limit=20)`, first page"),
        ("console_threads", "console threads page (GET /)"),
        ("rebuild_all", "`streamsaver rebuild --all`"),
    ):
        row(label, op(ours, key), None, _seconds)
    if ours is not None and ours.lag is not None:
        lag = ours.lag
        for label, value in (
            ("projector lag while writing, most entries pending", f"{lag.max_pending:,}"),
            ("projector lag, oldest pending entry", f"{lag.max_age_s:.1f} s"),
            ("projector: last write to lag 0", _seconds(lag.catch_up_s)),
        ):
            lines.append(f"| {label} | {value} | {_NONE} | {_NONE} |")
    for peer in report.peers:
        if peer.absent:
            lines.append(f"\n{peer.name}: ABSENT ({peer.absent})")
        elif peer.delete_error:
            lines.append(f"\n{peer.name}: deleting stopped after {peer.deleted:,} threads: "
                         f"{peer.delete_error}")  # fmt: skip
    return "\n".join(lines)


def _per(peer: PeerRun | None, threads: int, which: int) -> float | None:
    if peer is None or (which and not peer.deleted):
        return None
    return peer.per_thread(threads)[which]


def _parser() -> argparse.ArgumentParser:
    parser = script.parser("scale", __doc__)
    parser.add_argument("--threads", type=int, default=100_000, help="threads written (100000)")
    parser.add_argument("--turns", type=int, default=1, help="chat turns per thread (1)")
    parser.add_argument("--concurrency", type=int, default=32, help="async callers (32)")
    parser.add_argument("--cluster", action="store_true", help="on a 3-primary cluster")
    parser.add_argument(
        "--node-bytes",
        type=int,
        metavar="N",
        help="stream-node-max-bytes for the servers (default: the server's, 4096)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each read (3)")
    parser.add_argument(
        "--delete-limit",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="stop deleting after this long (600): the bytes per deleted thread are then of "
        "those deleted",
    )
    parser.add_argument(
        "--peers",
        type=lambda text: tuple(p.strip() for p in text.split(",") if p.strip()),
        default=(),
        metavar="NAME,...",
        help="only the peers whose name contains one of these",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads < 1:
        _parser().error(f"--threads must be at least 1, got {args.threads}")
    report = run(args)
    print(render(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(asdict(report), out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
