"""``streamsaver history`` and ``streamsaver audit show|export|verify`` (docs/audit.md)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.config import check_text
from ..core.errors import InvalidInputError
from ..core.keys import DEFAULT_PREFIX
from .common import (
    Every,
    Json,
    Prefix,
    Url,
    add,
    epilog,
    group,
    need_url,
    plural,
    require_threads,
)
from .maintain import SliceMs, SlicePause

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from ..checkpoint.saver import RedisStreamSaver
    from ..core.chain import ChainCheck

__all__ = ["register"]

_SHOW_EPILOG = """\
one line per event (--json: one ThreadEvent JSON object per line):
  <time UTC> <kind> ns=<namespace> step=<step> <who> <channel>=<value> ...

who: a checkpoint's source (input, loop, update, fork), followed by "FORK of <parent>" when \
its parent is not the previous checkpoint of its namespace; a writes event's node or task. \
A deleted thread shows what delete_thread recorded: when, how many events, the last digest."""

ThreadId = Annotated[str, typer.Argument(metavar="THREAD_ID", help="the thread to show")]
SomeThread = Annotated[
    str | None, typer.Argument(metavar="THREAD_ID", help="one thread (or --all)")
]
Decrypt = Annotated[
    bool,
    typer.Option(
        help="decode values with EncryptedSerializer (AES key from $LANGGRAPH_AES_KEY; needs "
        "pip install 'streamsaver[encryption]'); without it, encrypted values stay ciphertext"
    ),
]


def register(app: typer.Typer) -> None:
    epilog_text = epilog(_SHOW_EPILOG)
    add(app, "history", show, epilog=epilog_text)
    audit = group("audit", "A thread's audit trail: show it, export it, verify its digest chain.")
    add(audit, "show", show, epilog=epilog_text)
    add(audit, "export", export)
    add(audit, "verify", verify)
    app.add_typer(audit)


def _serde(decrypt: bool) -> SerializerProtocol | None:
    if not decrypt:
        return None
    try:
        import Crypto  # noqa: F401  (pycryptodome, which EncryptedSerializer's AES needs)
    except ImportError:
        raise InvalidInputError(
            "--decrypt needs pycryptodome: pip install 'streamsaver[encryption]'"
        ) from None
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    return EncryptedSerializer.from_pycryptodome_aes()


@contextmanager
def _threads(
    url: str | None,
    prefix: str,
    decrypt: bool,
    thread_id: str | None,
    every: bool,
    *,
    known: bool = False,
    slice_ms: float | None = None,
    slice_pause: float | None = None,
) -> Iterator[tuple[RedisStreamSaver, list[str]]]:
    """A saver and the threads THREAD_ID or --all names (a deleted thread's too); ``known``:
    a THREAD_ID must have a log or a deletion record."""
    from ..checkpoint.saver import RedisStreamSaver

    if every == (thread_id is not None):
        raise InvalidInputError("give a THREAD_ID or --all (not both)")
    if thread_id is not None:
        # before an export writes its header (or creates --out): bad input writes nothing
        check_text(thread_id, "THREAD_ID")
    serde = _serde(decrypt)
    with RedisStreamSaver.from_conn_string(
        need_url(url), prefix=prefix, serde=serde, slice_ms=slice_ms, slice_pause=slice_pause
    ) as saver:
        if known and thread_id is not None:
            require_threads(saver, [thread_id])
        yield saver, saver.thread_ids(deleted=True) if every else [str(thread_id)]


def show(
    thread_id: ThreadId,
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    as_json: Json = False,
    decrypt: Decrypt = False,
) -> int:
    """Print a thread's timeline: every event, forks marked, values in short."""
    from ..checkpoint.saver import RedisStreamSaver

    serde = _serde(decrypt)
    with RedisStreamSaver.from_conn_string(need_url(url), prefix=prefix, serde=serde) as saver:
        require_threads(saver, [thread_id])
        return _show(saver, thread_id, as_json)


def export(
    thread_id: SomeThread = None,
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    every: Every = False,
    out: Annotated[
        str, typer.Option("--out", metavar="FILE", help="where to write ('-': stdout)")
    ] = "-",
    decrypt: Decrypt = False,
) -> int:
    """Write threads' events, decoded, as versioned JSON lines.

    One JSON line per event (raw fields and a decoded view), per thread its deletion records
    and an end record; streams in constant memory.
    """
    with _threads(url, prefix, decrypt, thread_id, every) as (saver, targets):
        return _export(saver, targets, out)


def verify(
    thread_id: SomeThread = None,
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    every: Every = False,
    file: Annotated[
        str | None, typer.Option(metavar="FILE", help="an export file to check (no Redis)")
    ] = None,
    as_json: Json = False,
    decrypt: Decrypt = False,
    slice_ms: SliceMs = None,
    slice_pause: SlicePause = None,
) -> int:
    """Check threads' references and digest chains; exits 1 on a reference that does not
    resolve or at the first altered, removed or moved event.

    Each thread in Redis (THREAD_ID or --all): every reference its events make must resolve,
    and its digest chain must hold; or an export file without Redis (--file: the chain only).
    """
    if file is not None:
        return _verify_file(file, as_json, _serde(decrypt))
    paced = {"slice_ms": slice_ms, "slice_pause": slice_pause}
    with _threads(url, prefix, decrypt, thread_id, every, known=True, **paced) as (saver, targets):
        return _verify(saver, targets, as_json)


def _show(saver: RedisStreamSaver, thread_id: str, as_json: bool) -> int:
    from ..audit.steps import StepMemory
    from ..core.replies import json_line
    from ..events import SkippedEvent
    from .render import console, deletion_line, event_line

    out = console()
    steps = StepMemory()
    for deletion in saver.deletions(thread_id):
        if as_json:
            print(json_line({"kind": "thread_deleted", **deletion.model_dump(mode="json")}))
        else:
            out.print(deletion_line(deletion))
    for event in saver.history(thread_id, values=True):
        if isinstance(event, SkippedEvent):
            print(f"skipped {event.id}: {event.reason}", file=sys.stderr)
        elif as_json:
            # writes' step as the text line shows it (audit.steps)
            print(json_line({**event.model_dump(), "step": steps.step(event)}))
        else:
            out.print(event_line(event, steps, False, values=True))
    return 0


def _export(saver: RedisStreamSaver, targets: list[str], out: str) -> int:
    if out == "-":
        events = saver.export_audit(targets, sys.stdout)
    else:
        with open(out, "w", encoding="utf-8") as file:
            events = saver.export_audit(targets, file)
    print(f"exported {plural(len(targets), 'thread')}, {plural(events, 'event')}", file=sys.stderr)
    return 0


def _verify(saver: RedisStreamSaver, targets: list[str], as_json: bool) -> int:
    from .progress import progress_bar

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
                events = plural(check.events, "event")
                print(f"{thread_id!r}: {events}, chain intact, head {check.head}")
            else:
                print(f"{thread_id!r}: BROKEN at {check.problem}")
            for line in check.references:
                print(f"{thread_id!r}: {line}")
            if check.unchecked:
                print(f"{thread_id!r}: {check.unchecked}", file=sys.stderr)
    if not as_json:
        print(f"verified {plural(len(targets), 'thread')}: {failed} broken")
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


def _verify_file(path: str, as_json: bool, serde: SerializerProtocol | None) -> int:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from ..audit.exports import export_lines, verify_export

    with open(path, "rb") as file:
        reports = verify_export(export_lines(file), serde or JsonPlusSerializer())
    failed = [r for r in reports if r.problem is not None]
    if as_json:
        for report in reports:
            print(json.dumps({"ok": report.problem is None, **dataclasses.asdict(report)}))
        return 1 if failed else 0
    for report in reports:
        state = "intact" if report.problem is None else f"BROKEN: {report.problem}"
        events = plural(report.events, "event")
        print(f"{report.thread_id!r}: {events}, head {report.head}: {state}")
    print(f"verified {plural(len(reports), 'thread')} in {path}: {len(failed)} broken")
    return 1 if failed else 0
