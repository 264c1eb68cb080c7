"""``streamsaver threads``, ``rebuild``, ``verify`` and ``migrate-keys`` (rebuild and verify
are ``streamsaver projector rebuild|verify`` too)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import InvalidInputError
from ..core.keys import DEFAULT_PREFIX
from .common import Every, Json, Prefix, Url, add, need_url, plural, require_threads

if TYPE_CHECKING:
    from ..checkpoint.saver import RedisStreamSaver

__all__ = ["register", "register_replay"]

Threads = Annotated[
    list[str] | None, typer.Argument(metavar="THREAD_ID", help="the threads (or --all)")
]
# what rebuild and verify took before they took thread ids as every other command does
OldThreads = Annotated[list[str] | None, typer.Option("--thread", metavar="ID", hidden=True)]
SliceMs = Annotated[
    float | None,
    typer.Option(
        help="ms of server time each slice may take: another tenant's call waits at most that "
        "(unset, with --slice-pause unset too: 0.25 while other clients are served, growing to "
        "2 while none is)",
        show_default=False,
    ),
]
SlicePause = Annotated[
    float | None,
    typer.Option(
        help="after each slice, wait this many times as long as it took (0: none); the "
        "operation then holds the server at most 1/(1+pause) of the time (unset, with "
        "--slice-ms unset too: 1 while other clients are served, 0 while none is)",
        show_default=False,
    ),
]


def register(app: typer.Typer) -> None:
    add(app, "threads", threads)
    add(app, "migrate-keys", migrate_keys)
    register_replay(app)


def register_replay(app: typer.Typer) -> None:
    add(app, "rebuild", rebuild)
    add(app, "verify", verify)


def threads(
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    limit: Annotated[int | None, typer.Option(metavar="N", help="at most N threads")] = None,
    as_json: Json = False,
) -> int:
    """List threads, newest activity first, with their latest checkpoint.

    Per thread: last activity (UTC), step and id of its latest root checkpoint, 'interrupted'
    when that checkpoint waits on an interrupt, and the thread id: a table on a terminal, a
    line each in a pipe, a JSON object each with --json. Read from the projector's registry
    plus the events it has not applied yet; without a projector, from the per-slot thread
    indexes.
    """
    from ..checkpoint.saver import RedisStreamSaver
    from .render import console, thread_line, threads_table

    with RedisStreamSaver.from_conn_string(need_url(url), prefix=prefix) as saver:
        infos = saver.threads(limit=limit)
    out = console()
    if as_json:
        for info in infos:
            print(info.model_dump_json())
    elif out.is_terminal:
        out.print(threads_table(infos))
    else:
        for info in infos:
            print(thread_line(info))
    return 0


def migrate_keys(url: Url = None, prefix: Prefix = DEFAULT_PREFIX) -> int:
    """Move a prefix's keys from the layout before tenant-tight ACL patterns.

    Renames the per-slot keys of the old layout (<prefix>:<kind>:{<slot tag>}) to
    <prefix>:{<slot tag>}:<kind> and adds every existing thread to its slot's thread index.
    Run once per prefix, as an admin (needs SCAN, RENAMENX), with the prefix's writers
    stopped; running it again changes nothing. See docs/keyspace.md.
    """
    from ..checkpoint.saver import RedisStreamSaver

    with RedisStreamSaver.from_conn_string(need_url(url), prefix=prefix) as saver:
        done = saver.migrate_keys()
    for old in done.conflicts:
        print(f"left {old}: its new name is taken (a writer ran before the migration)")
    print(f"moved {plural(done.moved, 'key')}; indexed {plural(done.indexed, 'thread')}")
    return 1 if done.conflicts else 0


def _targets(saver: RedisStreamSaver, thread: list[str] | None, every: bool) -> list[str]:
    if every == bool(thread):
        raise InvalidInputError("give THREAD_ID... or --all, not both")
    if every:
        # a deleted thread's log is rebuilt and verified too: it refuses its stale writers
        return saver.thread_ids(deleted=True)
    assert thread is not None
    require_threads(saver, thread)
    return thread


def _per_thread(found: Mapping[str, Iterable[object]], what: str = "") -> None:
    """A line for each thing found, after the thread it was found in."""
    for thread_id, items in found.items():
        for item in items:
            print(f"{thread_id!r}: {what}{item}")


SlicedRun = Callable[["RedisStreamSaver", "list[str] | None", bool, bool], int]


def _sliced(replay: SlicedRun) -> Callable[..., int]:
    """The command that runs ``replay`` (saver, THREAD_ID..., --all, --json) on a saver whose
    replays take slices as --slice-ms and --slice-pause say: rebuild and verify take the same
    options, declared here once."""

    def command(
        thread: Threads = None,
        url: Url = None,
        prefix: Prefix = DEFAULT_PREFIX,
        old: OldThreads = None,
        every: Every = False,
        as_json: Json = False,
        slice_ms: SliceMs = None,
        slice_pause: SlicePause = None,
    ) -> int:
        from ..checkpoint.saver import RedisStreamSaver

        with RedisStreamSaver.from_conn_string(
            need_url(url), prefix=prefix, slice_ms=slice_ms, slice_pause=slice_pause
        ) as saver:
            return replay(saver, [*(thread or ()), *(old or ())] or None, every, as_json)

    # not functools.wraps: typer would follow __wrapped__ to ``replay``'s parameters
    command.__name__, command.__doc__ = replay.__name__, replay.__doc__
    return command


@_sliced
def rebuild(saver: RedisStreamSaver, thread: list[str] | None, every: bool, as_json: bool) -> int:
    """Rebuild thread indexes by replaying their event logs.

    Each thread's stream is replayed through the same Lua projection the writer uses into
    scratch keys, a few milliseconds of server time at a time, and the last slice swaps them
    in: writers carry on meanwhile and readers never see a half-built index. With --all, the
    projector's keys (thread registry, run and metadata indexes) are rebuilt too, per
    cluster slot in the same slices, swapped in by each slot's last. Exits 1 if an event was
    skipped (unknown kind, newer schema, malformed, or an append part whose base or shared
    write is not stored), each named by its event id.
    """
    from redis.exceptions import NoPermissionError

    from ..maintenance.threads import rebuild_threads
    from .progress import progress_bar

    if every and not thread:
        # the thread indexes are derived too: only a SCAN finds logs they lost
        try:
            saver.reindex_threads()
        except NoPermissionError:
            print(
                "this user may not SCAN: rebuilding the threads the thread indexes name "
                "(run as an admin to find every log)",
                file=sys.stderr,
            )
    targets = _targets(saver, thread, every)
    with progress_bar("rebuild") as progress:
        report = rebuild_threads(saver, targets, progress)
    projector = saver.seed_projections() if every else None
    code = 1 if report.skipped else 0
    if as_json:
        print(json.dumps({**asdict(report), "projector_threads": projector}))
        return code
    _per_thread(report.problems, "skipped ")
    print(
        f"rebuilt {plural(report.threads, 'thread')}: {plural(report.applied, 'event')} applied, "
        f"{report.skipped} skipped (unknown kind, newer schema, malformed or "
        f"referencing what is not stored)"
    )
    if projector is not None:
        print(f"rebuilt the projector's keys: {projector} threads registered")
    return code


@_sliced
def verify(saver: RedisStreamSaver, thread: list[str] | None, every: bool, as_json: bool) -> int:
    """Check every reference events make, and the indexes against a replay.

    For each thread, in slices of a few milliseconds of server time: every reference its
    events make must resolve (values, append parts, shared writes, parents, the checkpoints of
    writes); then its stream is replayed into scratch keys and compared with the live indexes.
    Prints every problem
    (see docs/audit.md); exits 1 on any.
    """
    from ..maintenance.threads import verify_threads
    from .progress import progress_bar

    targets = _targets(saver, thread, every)
    with progress_bar("verify") as progress:
        report = verify_threads(saver, targets, progress)
    code = 1 if report.differences else 0
    if as_json:
        print(json.dumps(asdict(report)))
        return code
    _per_thread(report.differences)
    print(
        f"verified {plural(report.threads, 'thread')} ({plural(report.applied, 'event')}): "
        f"{len(report.differences)} with differences"
    )
    return code
