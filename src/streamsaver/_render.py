"""Events as one line of text for people (``streamsaver tail``, ``streamsaver history``), and
decoded values as JSON."""

from __future__ import annotations

from pydantic_core import to_jsonable_python

from .events import ThreadDeletion, ThreadEvent

__all__ = ["deletion_line", "event_line", "jsonable", "short"]

Steps = dict[tuple[str, str, str], int]


def jsonable(value: object) -> object:
    """``json.dumps(default=...)`` for decoded values: what JSON cannot hold becomes its repr."""
    try:
        return to_jsonable_python(value)
    except Exception:  # anything a serializer gave back that JSON cannot hold
        return repr(value)


def short(value: object, width: int = 40) -> str:
    """A value in at most ``width`` characters, on one line."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(event: ThreadEvent | ThreadDeletion) -> str:
    return event.timestamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def event_line(event: ThreadEvent, steps: Steps, every: bool, values: bool = False) -> str:
    """``<time> [<thread>] <kind> ns=<ns> step=<step> <who> <channels>``; with ``values``,
    each channel shows a short rendering of its value. ``steps`` remembers checkpoint steps,
    so writes show the step their task ran in."""
    key = (event.thread_id, event.checkpoint_ns, event.checkpoint_id or "")
    step: int | None = event.step
    shown: list[tuple[str, object]] = []
    if event.kind == "checkpoint":
        if step is not None:
            steps[key] = step
        who = str((event.metadata or {}).get("source", "-"))
        if event.fork:
            who += f" FORK of {event.parent_checkpoint_id}"
        shown = [
            (f"{channel}+" if channel in event.appended else channel, value)
            for channel, value in (event.values or {}).items()
        ]
    elif event.kind == "writes":
        seen = steps.get(key)
        step = None if seen is None else seen + 1
        who = event.node or (event.task_id or "-")
        shown = list(event.writes)
    elif event.kind == "pruned" and event.pruned is not None:
        p = event.pruned
        who = f"pruned {p.count} event(s) {p.first_id}..{p.last_id}"
    elif event.kind == "thread_deleted" and event.thread_deleted is not None:
        d = event.thread_deleted
        who = f"thread deleted: {d.count} event(s), last {d.last_id}"
    else:
        who = f"deleted {len(event.deleted)} checkpoint(s) of run(s) {','.join(event.runs)}"
    parts = [_when(event)]
    if every:
        parts.append(repr(event.thread_id))
    parts += [
        f"{event.kind:<10}",
        f"ns={event.checkpoint_ns!r}" if event.checkpoint_ns else "ns=''",
        f"step={step if step is not None else '-'}",
        who,
    ]
    if values and shown:
        parts.append(" ".join(f"{channel}={short(value)}" for channel, value in shown))
    else:
        parts.append(",".join(event.channels) or "-")
    return " ".join(parts)


def deletion_line(deletion: ThreadDeletion) -> str:
    return (
        f"{_when(deletion)} thread_deleted {deletion.events} event(s), last {deletion.last_id} "
        f"digest {deletion.head or '-'}"
    )
