"""What the command line shows people, on rich: an event as one styled line (``tail``,
``history``), threads and doctor checks as tables; and decoded values as JSON. Colour only
when the output is a terminal (rich's own detection, which honours NO_COLOR)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .common import plural

if TYPE_CHECKING:
    from ..audit.steps import StepMemory
    from ..events import ThreadDeletion, ThreadEvent, ThreadInfo
    from ..maintenance.doctor import Check

__all__ = [
    "checks_table",
    "console",
    "deletion_line",
    "event_line",
    "short",
    "thread_line",
    "threads_table",
]

_KIND_STYLES = {"checkpoint": "cyan", "writes": "green", "delete": "red", "pruned": "yellow"}
_STATUS_STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red"}


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich would exit 1; a reader that went away (`| head`) is the command line's to handle
        raise BrokenPipeError


def console(stderr: bool = False) -> Console:
    """Lines are never wrapped (a pipe gets each event on one line, whatever the width), and
    user data is never read as markup."""
    return _Console(stderr=stderr, soft_wrap=True, highlight=False, markup=False, emoji=False)


def short(value: object, width: int = 40) -> str:
    """A value in at most ``width`` characters, on one line."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(event: ThreadEvent | ThreadDeletion) -> str:
    return event.timestamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def event_line(event: ThreadEvent, steps: StepMemory, every: bool, values: bool = False) -> Text:
    """``<time> [<thread>] <kind> ns=<ns> step=<step> <who> <channels>``; with ``values``,
    each channel shows a short rendering of its value. ``steps``: the reader's, so writes show
    their checkpoint's step (audit.steps)."""
    step = steps.step(event)
    shown: list[tuple[str, object]] = []
    if event.kind == "checkpoint":
        who = str((event.metadata or {}).get("source", "-"))
        if event.fork:
            who += f" FORK of {event.parent_checkpoint_id}"
        if event.sends:
            who += f" sends={','.join(event.sends)}"
        shown = [
            (f"{channel}+" if channel in event.appended else channel, value)
            for channel, value in (event.values or {}).items()
        ]
    elif event.kind == "writes":
        who = event.task or event.task_id or "-"
        shown = list(event.writes)
    elif event.kind == "pruned" and event.pruned is not None:
        p = event.pruned
        who = f"pruned {plural(p.count, 'event')} {p.first_id}..{p.last_id}"
    elif event.kind == "thread_deleted" and event.thread_deleted is not None:
        d = event.thread_deleted
        who = f"thread deleted: {plural(d.count, 'event')}, last {d.last_id}"
    else:
        runs = "run" if len(event.runs) == 1 else "runs"
        who = f"deleted {plural(len(event.deleted), 'checkpoint')} of {runs} {','.join(event.runs)}"
    line = Text(_when(event), style="dim")
    if every:
        line.append(" " + repr(event.thread_id), style="bold")
    line.append(f" {event.kind:<10}", style=_KIND_STYLES.get(event.kind, "magenta"))
    line.append(f" ns={event.checkpoint_ns!r} step={step if step is not None else '-'} ")
    line.append(who, style="bold" if event.kind == "writes" else "")
    if values and shown:
        line.append(" " + " ".join(f"{channel}={short(value)}" for channel, value in shown))
    else:
        line.append(" " + (",".join(event.channels) or "-"))
    return line


def deletion_line(deletion: ThreadDeletion) -> Text:
    line = Text(_when(deletion), style="dim")
    line.append(" thread_deleted", style="red")
    line.append(
        f" {plural(deletion.events, 'event')}, last {deletion.last_id}"
        f" digest {deletion.head or '-'}"
    )
    return line


def thread_line(info: ThreadInfo) -> str:
    """One thread for a pipe: ``<last activity> step=<n> <interrupted or -> <id> <checkpoint>``."""
    step = "-" if info.step is None else info.step
    waiting = "interrupted" if info.interrupted else "-"
    return f"{_stamp(info)} step={step} {waiting} {info.thread_id!r} {info.checkpoint_id or '-'}"


def _stamp(info: ThreadInfo) -> str:
    return info.last_activity.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def threads_table(infos: Iterable[ThreadInfo]) -> Table:
    """Threads for a terminal, one row each, newest activity first."""
    table = Table("last activity (UTC)", "step", "state", "thread", "latest checkpoint")
    for info in infos:
        table.add_row(
            _stamp(info),
            "-" if info.step is None else str(info.step),
            Text("interrupted", style="yellow") if info.interrupted else "-",
            Text(repr(info.thread_id), style="bold"),
            info.checkpoint_id or "-",
        )
    return table


def checks_table(checks: Iterable[Check]) -> Table:
    """``doctor``'s checks: status, name, what was found and, under it, the remedy."""
    table = Table("", "check", "found", box=None, show_header=False, padding=(0, 1, 0, 0))
    for check in checks:
        detail = Text(check.detail)
        if check.remedy:
            detail.append("\n-> " + check.remedy, style="italic")
        table.add_row(Text(check.status, style=_STATUS_STYLES[check.status]), check.name, detail)
    return table
