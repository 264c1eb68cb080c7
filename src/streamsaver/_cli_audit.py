"""``streamsaver history`` and ``streamsaver audit show|export|verify`` (docs/audit.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from ._chain import ChainCheck
    from .saver import RedisStreamSaver

__all__ = ["add_parsers", "run"]

Common = Callable[[argparse.ArgumentParser], None]

_SHOW_EPILOG = """\
one line per event (--json: one JSON object per line, the ThreadEvent fields):
  <time UTC> <kind> ns=<namespace> step=<step> <who> <channel>=<value> ...
  who: a checkpoint's source (input, loop, update, fork), followed by "FORK of <parent>" when
  its parent is not the previous checkpoint of its namespace; a writes event's node or task.
  A deleted thread shows what delete_thread recorded: when, how many events, the last digest."""


def _decrypt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--decrypt",
        action="store_true",
        help="decode values with EncryptedSerializer (AES key from $LANGGRAPH_AES_KEY); "
        "without it, encrypted values stay ciphertext",
    )


def _show_options(parser: argparse.ArgumentParser, common: Common) -> None:
    common(parser)
    parser.add_argument("thread_id", metavar="THREAD_ID", help="the thread to show")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    _decrypt(parser)


def _threads(parser: argparse.ArgumentParser, common: Common) -> None:
    common(parser)
    parser.add_argument("thread_id", nargs="?", metavar="THREAD_ID")
    parser.add_argument("--all", action="store_true", help="every thread under the prefix")
    _decrypt(parser)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: Common) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    show_help = "print a thread's timeline: every event, forks marked, values in short"
    _show_options(
        sub.add_parser("history", help=show_help, epilog=_SHOW_EPILOG, formatter_class=raw),
        common,
    )
    audit = sub.add_parser(
        "audit",
        help="a thread's audit trail: show it, export it, verify its digest chain",
        description="See docs/audit.md for the digest chain and the export format.",
    )
    verbs = audit.add_subparsers(dest="verb", required=True, metavar="VERB")
    _show_options(
        verbs.add_parser("show", help=show_help, epilog=_SHOW_EPILOG, formatter_class=raw),
        common,
    )
    export = verbs.add_parser(
        "export",
        help="write threads' events, decoded, as versioned JSON lines",
        description="Write one JSON line per event (raw fields and a decoded view), per thread "
        "its deletion records and an end record; streams in constant memory.",
    )
    _threads(export, common)
    export.add_argument("--out", required=True, metavar="FILE", help="where to write ('-': stdout)")
    verify = verbs.add_parser(
        "verify",
        help="check threads' references and digest chains; exits 1 on a reference that does "
        "not resolve or at the first altered, removed or moved event",
        description="Check each thread in Redis (THREAD_ID or --all): that every reference its "
        "events make resolves, and its digest chain; or an export file without Redis (--file: "
        "the chain only). Exits 1 if any check fails.",
    )
    _threads(verify, common)
    verify.add_argument("--file", metavar="FILE", help="an export file to check (no Redis)")
    verify.add_argument("--json", action="store_true", help="one JSON object per thread")


def _serde(args: argparse.Namespace) -> SerializerProtocol | None:
    if not args.decrypt:
        return None
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    return EncryptedSerializer.from_pycryptodome_aes()


def run(args: argparse.Namespace, prog: str) -> int:
    verb = "show" if args.command == "history" else args.verb
    if verb == "verify" and args.file:
        return _verify_file(args)
    if verb != "show" and bool(args.all) == bool(args.thread_id is not None):
        print(f"{prog} audit {verb}: give a THREAD_ID or --all (not both)", file=sys.stderr)
        return 2
    if not args.url:
        print(f"{prog}: no Redis to talk to: pass --url or set $REDIS_URL", file=sys.stderr)
        return 2
    from .cli import require_threads
    from .saver import RedisStreamSaver

    with RedisStreamSaver.from_conn_string(args.url, prefix=args.prefix, serde=_serde(args)) as s:
        if args.thread_id is not None and verb in ("show", "verify"):
            require_threads(s, [args.thread_id])
        if verb == "show":
            return _show(s, args)
        targets = s.thread_ids(deleted=True) if args.all else [args.thread_id]
        if verb == "export":
            return _export(s, targets, args.out)
        return _verify(s, targets, args.json)


def _show(saver: RedisStreamSaver, args: argparse.Namespace) -> int:
    from ._render import deletion_line, event_line, jsonable
    from .events import SkippedEvent

    steps: dict[tuple[str, str, str], int] = {}
    for deletion in saver.deletions(args.thread_id):
        if args.json:
            print(json.dumps({"kind": "thread_deleted", **deletion.model_dump(mode="json")}))
        else:
            print(deletion_line(deletion))
    for event in saver.history(args.thread_id, values=True):
        if isinstance(event, SkippedEvent):
            print(f"skipped {event.id}: {event.reason}", file=sys.stderr)
        elif args.json:
            print(json.dumps(event.model_dump(), default=jsonable, ensure_ascii=False))
        else:
            print(event_line(event, steps, False, values=True))
    return 0


def _export(saver: RedisStreamSaver, targets: list[str], out: str) -> int:
    if out == "-":
        events = saver.export_audit(targets, sys.stdout)
    else:
        with open(out, "w", encoding="utf-8") as file:
            events = saver.export_audit(targets, file)
    print(f"exported {len(targets)} thread(s), {events} event(s)", file=sys.stderr)
    return 0


def _verify(saver: RedisStreamSaver, targets: list[str], as_json: bool) -> int:
    from .maintenance import progress_bar

    failed = 0
    # printed as each thread is checked: the bar keeps itself below the lines on a terminal
    with progress_bar("audit verify") as progress:
        for done, thread_id in enumerate(targets, 1):
            check = saver.verify_chain(thread_id)
            failed += not check.ok
            if progress:
                progress(done, len(targets))
            if as_json:
                print(json.dumps(_chain_json(thread_id, check)))
                continue
            if check.problem is None:
                print(f"{thread_id!r}: {check.events} event(s), chain intact, head {check.head}")
            else:
                print(f"{thread_id!r}: BROKEN at {check.problem}")
            for line in check.references:
                print(f"{thread_id!r}: {line}")
            if check.unchecked:
                print(f"{thread_id!r}: {check.unchecked}", file=sys.stderr)
    if not as_json:
        print(f"verified {len(targets)} thread(s): {failed} broken")
    return 1 if failed else 0


def _chain_json(thread_id: str, check: ChainCheck) -> dict[str, object]:
    return {
        "thread_id": thread_id,
        "ok": check.ok,
        "events": check.events,
        "head": check.head,
        "problem": None if check.problem is None else str(check.problem),
        "references": check.references,
    }


def _verify_file(args: argparse.Namespace) -> int:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from .audit import verify_export

    with open(args.file, encoding="utf-8") as file:
        reports = verify_export(file, _serde(args) or JsonPlusSerializer())
    failed = [r for r in reports if r.problem is not None]
    if args.json:
        for report in reports:
            print(json.dumps({"ok": report.problem is None, **dataclasses.asdict(report)}))
        return 1 if failed else 0
    for report in reports:
        state = "intact" if report.problem is None else f"BROKEN: {report.problem}"
        print(f"{report.thread_id!r}: {report.events} event(s), head {report.head}: {state}")
    print(f"verified {len(reports)} thread(s) in {args.file}: {len(failed)} broken")
    return 1 if failed else 0
