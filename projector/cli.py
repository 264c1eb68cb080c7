"""``python -m projector``: run the projector, show its lag, rebuild or verify indexes."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from streamsaver import RedisStreamSaver
from streamsaver import cli as saver_cli

from .service import DEFAULT_GROUP, Projector

__all__ = ["PROG", "build_parser", "main"]

PROG = "python -m projector"

_RUN_EPILOG = """\
Several replicas may run at once: they join one consumer group on the per-slot feeds and
share the work; a crashed one's entries are claimed by the others after --min-idle-ms. Each
batch of a slot's entries is applied, its cursor moved and its deliveries acknowledged in one
Lua script, so a kill at any moment neither loses nor doubles an effect. On its first start
(or when its keys were deleted) it seeds every slot from the thread logs. SIGTERM or Ctrl-C
stops it cleanly. It logs its lag every --log-every seconds; `python -m projector status`
prints it on demand."""


def _commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "run",
        help="keep the thread registry, run index and metadata index current",
        description="Consume every thread's events (a consumer group over the per-slot "
        "feeds) and apply them to the cross-thread projections: the thread registry "
        "(saver.threads(), `streamsaver threads`), the run index (delete_for_runs) and the "
        "metadata index (list(None, filter=...)).",
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    saver_cli.common_options(cmd)
    cmd.add_argument("--group", default=DEFAULT_GROUP, help="consumer group name")
    cmd.add_argument("--consumer", help="this member's name (default: host-pid-random)")
    cmd.add_argument("--batch", type=int, default=1000, help="feed entries per script call")
    cmd.add_argument(
        "--min-idle-ms",
        type=int,
        default=30_000,
        help="claim another member's deliveries after this long unacknowledged",
    )
    cmd.add_argument(
        "--log-every", type=float, default=30.0, metavar="SECONDS", help="log the lag this often"
    )
    cmd.add_argument(
        "--sweep-every",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="this often, forget threads whose log is gone (deleted or expired)",
    )
    cmd.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING...")
    cmd = sub.add_parser(
        "status",
        help="print the projector's lag: entries not applied yet, and the oldest's age",
        description="Per cluster slot with pending entries, and in total: feed entries the "
        "projector has not applied yet and the age of the oldest. Slots marked 'unusable' "
        "have no cursor or a feed trimmed past it: readers read every indexed thread there "
        "until it is seeded.",
    )
    saver_cli.common_options(cmd)
    cmd.add_argument("--json", action="store_true", help="print the ProjectorLag as JSON")


DESCRIPTION = (
    "The streamsaver projector: keeps the cross-thread projections (thread registry, run "
    "index, metadata index) current by consuming every thread's events; rebuilds and verifies "
    "indexes by replay."
)


def build_parser() -> argparse.ArgumentParser:
    return saver_cli.build_parser(PROG, demo=False, extra=_commands, description=DESCRIPTION)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.command not in ("run", "status"):
        return saver_cli.guarded(PROG, args.debug, lambda: saver_cli.dispatch(args, PROG))
    if not args.url:
        print(f"{PROG}: no Redis to talk to: pass --url or set $REDIS_URL", file=sys.stderr)
        return 2

    def command() -> int:
        with RedisStreamSaver.from_conn_string(args.url, prefix=args.prefix) as saver:
            if args.command == "status":
                return _status(saver, args.json)
            return _run(saver, args)

    return saver_cli.guarded(PROG, args.debug, command)


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


def _run(saver: RedisStreamSaver, args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    projector = Projector(
        saver,
        group=args.group,
        consumer=args.consumer,
        batch=args.batch,
        min_idle_ms=args.min_idle_ms,
        log_every_s=args.log_every,
        sweep_every_s=args.sweep_every,
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
