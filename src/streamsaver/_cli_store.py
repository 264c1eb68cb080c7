"""``streamsaver store history|rebuild|verify|sweep`` (docs/store.md)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .memory_events import MemoryEvent

__all__ = ["add_parsers", "run"]

Common = Callable[[argparse.ArgumentParser], None]

_HISTORY_EPILOG = """\
one line per event, oldest first (--json: one JSON object per line, the MemoryEvent fields):
  <time UTC> <kind> <namespace> <key> [thread=... run=... node=...] [why=expired] <digests>
  kind: put, delete, touch (a read restarted the item's TTL); digests: the value's before and
  after (sha1 of the serde's bytes, first 12 hex digits; '-' none); with --values, a put's
  value as JSON."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: Common) -> None:
    store = sub.add_parser(
        "store",
        help="the LangGraph Store: an item's history, rebuild, verify, TTL sweep",
        description="Commands for RedisStreamStore's keys under the prefix.",
    )
    commands = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    history = commands.add_parser(
        "history",
        help="every put and delete of a namespace (or one of its items), oldest first",
        epilog=_HISTORY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common(history)
    history.add_argument("namespace", metavar="NAMESPACE", help="its labels joined by '.'")
    history.add_argument("key", nargs="?", metavar="KEY", help="only this item")
    history.add_argument("--json", action="store_true", help="one JSON object per line")
    history.add_argument("--values", action="store_true", help="decode each put's value")
    for name, text in (
        ("rebuild", "re-project every Store index from the event streams; exits 1 on a skip"),
        ("verify", "compare every Store index with a replay and check the digest chains; "
         "exits 1 on any difference"),
        ("sweep", "delete every item whose TTL ran out (an event each)"),
    ):  # fmt: skip
        common(commands.add_parser(name, help=text, description=text))


def run(args: argparse.Namespace, prog: str) -> int:
    from .store import RedisStreamStore

    if not args.url:
        print(f"{prog}: no Redis to talk to: pass --url or set $REDIS_URL", file=sys.stderr)
        return 2
    with RedisStreamStore.from_conn_string(args.url, prefix=args.prefix) as store:
        if args.store_command == "history":
            namespace = tuple(args.namespace.split("."))
            for event in store.history(namespace, args.key, values=args.values):
                print(event.model_dump_json() if args.json else _line(event))
            return 0
        if args.store_command == "rebuild":
            replay = store.rebuild()
            for problem in replay.problems:
                print(f"skipped {problem}")
            print(f"rebuilt the store: {replay.applied} events applied, {replay.skipped} skipped")
            return 1 if replay.skipped else 0
        if args.store_command == "verify":
            applied, _, problems = store.verify()
            broken = [(b, c) for b, c in store.verify_chain() if not c.ok]
            for problem in problems:
                print(problem)
            for bucket, check in broken:
                print(f"bucket {bucket} chain: {check.problem}")
            print(
                f"verified the store ({applied} events): {len(problems)} index differences, "
                f"{len(broken)} broken chains"
            )
            return 1 if problems or broken else 0
        print(f"swept {store.sweep_ttl()} expired items")
        return 0


def _line(event: MemoryEvent) -> str:
    who = " ".join(
        f"{name}={value}"
        for name, value in (
            ("thread", event.thread_id),
            ("run", event.run_id),
            ("node", event.node),
            ("why", event.why),
        )
        if value is not None
    )
    when = event.at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    parts = [when, event.kind, repr(".".join(event.namespace)), repr(event.key), who]
    digests = f"{event.old_digest[:12] or '-'} -> {event.value_digest[:12] or '-'}"
    value = f" {json.dumps(event.value, default=str)}" if event.value is not None else ""
    return " ".join(p for p in parts if p) + f" {digests}{value}"
