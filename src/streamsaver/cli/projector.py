"""``streamsaver projector run|status|rebuild|verify`` (also ``python -m projector ...`` from a
checkout: the repository's projector/ folder runs this group as a program of its own)."""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import InvalidInputError
from ..core.keys import DEFAULT_PREFIX
from . import maintain
from .common import Json, Prefix, Url, add, epilog, group, need_url

if TYPE_CHECKING:
    from ..checkpoint.saver import RedisStreamSaver

__all__ = ["DESCRIPTION", "app", "register"]

DESCRIPTION = (
    "The streamsaver projector: keeps the cross-thread projections (thread registry, run "
    "index, metadata index) current by consuming every thread's events; rebuilds and verifies "
    "indexes by replay."
)

_RUN_EPILOG = (
    "Several replicas may run at once: they join one consumer group on the per-slot feeds and "
    "share the work; a crashed one's entries are claimed by the others after --min-idle-ms. "
    "Each batch of a slot's entries is applied, its cursor moved and its deliveries "
    "acknowledged in one Lua script, so a kill at any moment neither loses nor doubles an "
    "effect. On its first start (or when its keys were deleted) it seeds every slot from the "
    "thread logs. SIGTERM or Ctrl-C stops it cleanly. It logs its lag every --log-every "
    "seconds; `streamsaver projector status` prints it on demand."
)

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def register(target: typer.Typer) -> None:
    add(target, "run", run, epilog=epilog(_RUN_EPILOG))
    add(target, "status", status)
    maintain.register_replay(target)


def run(
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    group_name: Annotated[str, typer.Option("--group", help="consumer group name")] = "projector",
    consumer: Annotated[
        str | None, typer.Option(help="this member's name (default: host-pid-random)")
    ] = None,
    batch: Annotated[
        int,
        typer.Option(
            min=1,
            help="most feed entries a script call applies (it stops sooner, after 0.25 ms of "
            "server time)",
        ),
    ] = 1000,
    min_idle_ms: Annotated[
        int,
        typer.Option(min=1, help="claim another member's deliveries after this long unacked"),
    ] = 30_000,
    log_every: Annotated[
        float, typer.Option(metavar="SECONDS", help="log the lag this often")
    ] = 30.0,
    sweep_every: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="this often, forget threads whose log is gone (deleted or expired)",
        ),
    ] = 300.0,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> int:
    """Keep the thread registry, run index and metadata index current.

    Consumes every thread's events (a consumer group over the per-slot feeds) and applies them
    to the cross-thread projections: the thread registry (saver.threads(), `streamsaver
    threads`), the run index (delete_for_runs) and the metadata index (list(None,
    filter=...)).
    """
    from ..checkpoint.saver import RedisStreamSaver
    from ..projector.service import Projector

    level = log_level.upper()
    if level not in _LEVELS:
        raise InvalidInputError(f"--log-level {log_level!r}: give one of {', '.join(_LEVELS)}")
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with RedisStreamSaver.from_conn_string(need_url(url), prefix=prefix) as saver:
        projector = Projector(
            saver,
            group=group_name,
            consumer=consumer,
            batch=batch,
            min_idle_ms=min_idle_ms,
            log_every_s=log_every,
            sweep_every_s=sweep_every,
        )

        def stop(signum: int, frame: FrameType | None) -> None:
            projector.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        totals = projector.run()
    print(
        f"applied {totals.applied} entries in {totals.batches} batches; "
        f"{totals.reseeded} slots seeded again",
        flush=True,
    )
    return 0


def status(url: Url = None, prefix: Prefix = DEFAULT_PREFIX, as_json: Json = False) -> int:
    """Print the projector's lag: entries not applied yet, and the oldest's age.

    Per cluster slot with pending entries, and in total: feed entries the projector has not
    applied yet and the age of the oldest. Slots marked 'unusable' have no cursor or a feed
    trimmed past it: readers read every indexed thread there until it is seeded.
    """
    from ..checkpoint.saver import RedisStreamSaver

    with RedisStreamSaver.from_conn_string(need_url(url), prefix=prefix) as saver:
        return _status(saver, as_json)


def _status(saver: RedisStreamSaver, as_json: bool) -> int:
    lag = saver.projector_lag()
    if as_json:
        print(lag.model_dump_json())
        return 0
    for s in lag.slots:
        if s.pending or not s.usable:
            state = "" if s.usable else " unusable"
            print(f"slot {s.slot}: {s.pending} pending after {s.cursor or '-'}{state}")
    if not saver.projector_seeded():
        print("not seeded: no projector has run yet, and readers read every indexed thread")
    print(
        f"lag: {lag.pending} entries pending, oldest {lag.oldest_age_s:.1f} s; "
        f"{len(lag.slots)} slots with a feed, "
        f"{sum(1 for s in lag.slots if not s.usable)} unusable"
    )
    return 0


app = group("projector", DESCRIPTION)
register(app)
