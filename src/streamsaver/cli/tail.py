"""``streamsaver tail``: one thread's events, or every thread's, optionally as they happen."""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import InvalidInputError
from ..core.keys import DEFAULT_PREFIX
from .common import INTERRUPTED, OK, Json, Prefix, Url, add, epilog, need_url, require_threads

if TYPE_CHECKING:
    from ..events import SkippedEvent
    from ..tailing.shells import Tail

__all__ = ["register"]

_EPILOG = """\
output: one line per event (--json: one ThreadEvent JSON object per line)
  <time UTC> [<thread>] <kind> ns=<ns> step=<step> <node or task> <channels>

step: a checkpoint's metadata step; for writes, the step of the checkpoint their task ran \
from ('-' until this tail has seen it), here, in --json and in the console alike. node or \
task: the graph node of a writes event; '<node> (Send #<i>)' \
for the step's i-th Send (e.g. a tool call; 'Send #<i>' when its node is unknown); \
'<caller> call #<i>' for a functional-API task call; '<task> error handler' for the handler \
of a failed task's error; 'resume' for the answer of \
Command(resume=...), '<task> resume' for the task that consumed it; else the task id. A \
checkpoint shows its source (input, loop, update, fork) and, when it has Sends pending, \
'sends=<node>,...'. channels: what a writes event wrote, or the channels a checkpoint stored a \
new value for.

examples:
  streamsaver tail my-thread               the thread's history so far
  streamsaver tail my-thread --follow      ... then each new one, until Ctrl-C
  streamsaver tail my-thread --from 1717000000000-3 --follow --json
  streamsaver tail --all --follow          every thread, new events only
  streamsaver tail --all --from '<cursor>' resume where an earlier run stopped

On exit the position to resume from is printed to stderr. Events that cannot be shown \
(unknown kind, newer schema, undecodable) are reported on stderr and skipped."""


def register(app: typer.Typer) -> None:
    add(app, "tail", tail, epilog=epilog(_EPILOG))


def tail(
    thread_id: Annotated[
        str | None, typer.Argument(metavar="THREAD_ID", help="the thread to print")
    ] = None,
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    every: Annotated[
        bool, typer.Option("--all", help="every thread under the prefix (through the feeds)")
    ] = False,
    after: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="ID",
            help="start after this event id; '0' from the beginning (the default, except "
            "with --all --follow: '$'), '$' only new events; with --all, a cursor printed on "
            "exit",
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep waiting for new events until Ctrl-C")
    ] = False,
    as_json: Json = False,
    ns: Annotated[
        str | None, typer.Option(metavar="NAMESPACE", help="only this checkpoint namespace")
    ] = None,
) -> int:
    """Print a thread's events, or every thread's, optionally as they happen.

    The events of one thread (THREAD_ID) or of every thread under the prefix (--all), one
    line each, in order within each thread.
    """
    from ..audit.steps import StepMemory
    from ..checkpoint.saver import RedisStreamSaver
    from ..core.replies import json_line
    from ..tailing.shells import TailAll
    from .render import console, event_line

    url = need_url(url)
    if every == (thread_id is not None):
        raise InvalidInputError("tail: give a THREAD_ID or --all (not both)")
    start = after if after is not None else ("$" if every and follow else "0")

    def skipped(item: SkippedEvent) -> None:
        print(f"streamsaver tail: skipped {item.stream} {item.id}: {item.reason}", file=sys.stderr)

    # SIGTERM (a service manager's stop) ends the tail as Ctrl-C does, the connection closed and
    # the position printed, but as a clean stop: exit 0, where Ctrl-C exits 130 as documented
    signal.signal(signal.SIGTERM, _terminate)
    code = OK
    steps = StepMemory()
    out = console()
    with RedisStreamSaver.from_conn_string(url, prefix=prefix) as saver:
        reader: Tail | TailAll
        if every:
            reader = saver.tail_all(after=start, follow=follow, checkpoint_ns=ns, on_skip=skipped)
        else:
            assert thread_id is not None
            reader = saver.tail(
                thread_id, after=start, follow=follow, checkpoint_ns=ns, on_skip=skipped
            )
            if not follow:
                # after tail() checked the options: a usage error is reported before this.
                # With --follow, waiting for a thread that has not started yet is the point
                require_threads(saver, [thread_id])
        try:
            with reader:
                for event in reader:
                    if as_json:
                        # writes' step as the text line shows it (audit.steps)
                        record = {**event.model_dump(), "step": steps.step(event)}
                        print(json_line(record), flush=True)
                    else:
                        out.print(event_line(event, steps, every))
                        out.file.flush()
        except _Terminated:
            pass
        except KeyboardInterrupt:
            code = INTERRUPTED
        finally:
            if isinstance(reader, TailAll):
                resume = f"'{reader.cursor.model_dump_json()}'"
            else:
                resume = reader.position or start
            print(f"streamsaver tail: resume with --from {resume}", file=sys.stderr)
    return code


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the tail waits, as Ctrl-C's KeyboardInterrupt is."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise _Terminated
