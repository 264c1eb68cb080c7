"""``streamsaver store history|tail|rebuild|verify|sweep`` (docs/store.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import InvalidInputError
from ..core.keys import DEFAULT_PREFIX
from .common import Json, Prefix, Url, add, epilog, group, need_url

if TYPE_CHECKING:
    from ..memory_events import MemoryEvent
    from ..store.stores import RedisStreamStore

__all__ = ["app"]

_LINES = """\
oldest first, one line per event (--json: a MemoryEvent JSON object each):
  <time UTC> <kind> <namespace> <key> [thread= run= node=] [why=expired]
    <digests>

kind: put, delete, touch (a read restarted the item's TTL); digests: the value's before and \
after (sha1 of the serde's bytes, first 12 hex digits; '-' none); with --values, a put's \
value as JSON."""

_TAIL_EPILOG = (
    _LINES
    + """

examples:
  streamsaver store tail                   every event so far, every namespace
  streamsaver store tail --follow --values ... then each new one, until Ctrl-C
  streamsaver store tail --from '<cursor>' resume where an earlier run stopped

On exit the cursor to resume from is printed to stderr."""
)

Values = Annotated[bool, typer.Option("--values", help="decode each put's value")]

app = group("store", "The LangGraph Store: its history, live tail, rebuild, verify, TTL sweep.")


@contextmanager
def _open(url: str | None, prefix: str) -> Iterator[RedisStreamStore]:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from ..core.errors import connect_error
    from ..store.stores import RedisStreamStore

    url = need_url(url)
    with ExitStack() as stack:
        # RedisStreamStore.from_conn_string lets the driver's connect errors through, where
        # the savers' raise the typed ones: translated here, as the savers do
        try:
            store = stack.enter_context(RedisStreamStore.from_conn_string(url, prefix=prefix))
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise connect_error(exc, url) from exc
        yield store


def history(
    namespace: Annotated[str, typer.Argument(metavar="NAMESPACE", help="its labels joined by '.'")],
    key: Annotated[str | None, typer.Argument(metavar="KEY", help="only this item")] = None,
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    as_json: Json = False,
    values: Values = False,
) -> int:
    """Every put and delete of a namespace (or one of its items), oldest first."""
    with _open(url, prefix) as store:
        for event in store.history(tuple(namespace.split(".")), key, values=values):
            print(event.model_dump_json() if as_json else _line(event))
    return 0


def tail(
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    after: Annotated[
        str | None,
        typer.Option("--from", metavar="CURSOR", help="resume after this cursor (printed on exit)"),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep waiting for new events until Ctrl-C")
    ] = False,
    poll: Annotated[
        float, typer.Option(metavar="SECONDS", help="with --follow: how often to look")
    ] = 0.5,
    as_json: Json = False,
    values: Values = False,
) -> int:
    """Print the Store's events of every namespace, optionally as they happen."""
    from pydantic import ValidationError

    from ..memory_events import StoreCursor

    try:
        cursor = None if after is None else StoreCursor.model_validate_json(after)
    except ValidationError:
        raise InvalidInputError(
            f"--from {after!r} is not a Store cursor: give the JSON `store tail` printed on exit"
        ) from None
    if poll <= 0:
        raise InvalidInputError(f"--poll {poll!r}: give a number of seconds > 0")
    positions = dict(cursor.positions) if cursor is not None else {}
    with _open(url, prefix) as store:
        try:
            for event in store.tail(cursor, follow=follow, poll_s=poll, values=values):
                positions[event.bucket] = event.id
                print(event.model_dump_json() if as_json else _line(event), flush=True)
        except KeyboardInterrupt:
            pass
        finally:
            resume = StoreCursor(positions=positions).model_dump_json()
            print(f"streamsaver store tail: resume with --from '{resume}'", file=sys.stderr)
    return 0


def rebuild(url: Url = None, prefix: Prefix = DEFAULT_PREFIX) -> int:
    """Re-project every Store index from the event streams; exits 1 on a skip."""
    with _open(url, prefix) as store:
        replay = store.rebuild()
    for problem in replay.problems:
        print(f"skipped {problem}")
    print(f"rebuilt the store: {replay.applied} events applied, {replay.skipped} skipped")
    return 1 if replay.skipped else 0


def verify(url: Url = None, prefix: Prefix = DEFAULT_PREFIX) -> int:
    """Compare every Store index with a replay and check the digest chains; exits 1 on any
    difference."""
    with _open(url, prefix) as store:
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


def sweep(url: Url = None, prefix: Prefix = DEFAULT_PREFIX) -> int:
    """Delete every item whose TTL ran out (an event each)."""
    with _open(url, prefix) as store:
        print(f"swept {store.sweep_ttl()} expired items")
    return 0


add(app, "history", history, epilog=epilog(_LINES))
add(app, "tail", tail, epilog=epilog(_TAIL_EPILOG))
add(app, "rebuild", rebuild)
add(app, "verify", verify)
add(app, "sweep", sweep)


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
