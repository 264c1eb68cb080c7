"""What the console shows, as plain JSON-ready dicts: thread rows, timeline events, a
checkpoint's state and its diff from the parent. I/O-free; the routes feed it what they read."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from ..audit.steps import StepMemory
from ..audit.timeline import Lenient
from ..core.replies import json_line
from ..events import SkippedEvent, ThreadDeletion, ThreadEvent, ThreadInfo, Undecoded

# The console's statuses, and the Agent Protocol's name for each in the JSON API.
STATUSES = ("running", "interrupted", "idle", "deleted")
PROTOCOL_STATUS = {"running": "busy", "interrupted": "interrupted", "idle": "idle"}
FROM_PROTOCOL = {"busy": "running", **{s: s for s in STATUSES}}

# Values bigger than this (as JSON) are cut in pages: a state can hold megabytes.
SHOWN_CHARS = 20_000


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def when(value: str | None) -> str:
    """An ISO time as a page shows it: UTC to the millisecond, ``2026-01-02 03:04:05.678``."""
    return "" if not value else value.replace("T", " ")[:23]


def status_of(info: ThreadInfo, now_ms: int, running_ms: int) -> str:
    """No process reports that a run ended, so a thread that wrote within ``running_ms`` is
    taken as running; an interrupt's pending writes win, since the run is waiting on them."""
    if info.interrupted:
        return "interrupted"
    return "running" if now_ms - info.last_activity_ms <= running_ms else "idle"


def last_node(
    events: Sequence[ThreadEvent | SkippedEvent], checkpoint_id: str | None
) -> str | None:
    """The node that ran last: one with writes on the latest checkpoint (running, or waiting
    on an interrupt), else one whose writes made it (on its parent). Not simply the newest
    writes in the log: LangGraph's async durability saves a step's writes and checkpoints
    in any order."""
    known = [e for e in events if isinstance(e, ThreadEvent)]  # newest first
    parent = next(
        (
            e.parent_checkpoint_id
            for e in known
            if e.kind == "checkpoint" and e.checkpoint_id == checkpoint_id
        ),
        None,
    )
    for wanted in (checkpoint_id, parent):
        for event in known:
            if event.kind == "writes" and event.node and event.checkpoint_id == wanted and wanted:
                return event.node
    return next((e.node for e in known if e.kind == "writes" and e.node), None)


def thread_row(
    info: ThreadInfo, events: Sequence[ThreadEvent | SkippedEvent], now_ms: int, running_ms: int
) -> dict[str, Any]:
    status = status_of(info, now_ms, running_ms)
    return {
        "thread_id": info.thread_id,
        "status": PROTOCOL_STATUS[status],
        "console_status": status,
        "updated_at": iso(info.last_activity_ms),
        "checkpoint_id": info.checkpoint_id,
        "step": info.step,
        "last_node": last_node(events, info.checkpoint_id),
        "interrupted": info.interrupted,
    }


def deleted_row(thread_id: str, deletions: Sequence[ThreadDeletion]) -> dict[str, Any]:
    last = deletions[-1] if deletions else None
    return {
        "thread_id": thread_id,
        "status": "deleted",
        "console_status": "deleted",
        "updated_at": last.timestamp.isoformat() if last else None,
        "checkpoint_id": None,
        "step": None,
        "last_node": None,
        "interrupted": False,
    }


class Sealed(dict[str, Any]):
    """What the console's serde gives for a value it cannot decode (ciphertext without the
    key): a dict, because the saver fills the decoded checkpoint record in by key, that
    says what it stands for."""

    def __init__(self, type_: str, size: int, error: str) -> None:
        super().__init__()
        self.undecoded = Undecoded(type=type_, size=size, error=error)


class Sealing(Lenient):
    """The saver's serde, giving ``Sealed`` for what it cannot decode."""

    def unreadable(self, data: tuple[str, bytes], exc: Exception) -> Any:
        return Sealed(data[0], len(data[1]), type(exc).__name__)


def _unsealed(value: Any) -> Any:
    if isinstance(value, (Sealed, Undecoded)):
        found = value.undecoded if isinstance(value, Sealed) else value
        return {"__undecoded__": found.type, "bytes": found.size, "error": found.error}
    if isinstance(value, dict):
        return {k: _unsealed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unsealed(v) for v in value]
    return value


def plain(value: Any) -> Any:
    """A decoded value as JSON can hold it (NaN and ±Infinity as None, which JSON responses
    refuse); ciphertext without the key says only what it is."""
    return json.loads(json_line(_unsealed(value)))


def shown(value: Any) -> str:
    """Pretty JSON for a page, cut at ``SHOWN_CHARS`` (the JSON API returns it whole)."""
    text = json.dumps(plain(value), indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) > SHOWN_CHARS:
        return text[:SHOWN_CHARS] + f"\n… ({len(text) - SHOWN_CHARS} more characters)"
    return text


def event_view(event: ThreadEvent, step: int | None = None) -> dict[str, Any]:
    """One timeline entry. ``step``: for writes, the step of the checkpoint they belong to,
    from the reader's ``StepMemory`` (audit.steps)."""
    channels = [c for c, _ in event.writes] if event.kind == "writes" else list(event.channels)
    return {
        "id": event.id,
        "time": event.timestamp.isoformat(),
        "kind": event.kind,
        "thread_id": event.thread_id,
        "checkpoint_ns": event.checkpoint_ns,
        "checkpoint_id": event.checkpoint_id,
        "parent_checkpoint_id": event.parent_checkpoint_id,
        "step": event.step if event.kind == "checkpoint" else step,
        "node": event.node,
        "task": event.task,
        "task_id": event.task_id,
        "run_id": event.run_id,
        "channels": channels or list(event.channels),
        "interrupt": any(c == "__interrupt__" for c, _ in event.writes),
        "fork": bool(event.fork),
        "deleted": [list(d) for d in event.deleted],
    }


class Timeline:
    """A thread's events in log order, with each fork on a branch of its own: a checkpoint
    whose parent already has a child starts a new branch, numbered in order of appearance."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.skipped = 0
        self._steps = StepMemory()
        self._branch: dict[tuple[str, str], int] = {}
        self._children: dict[tuple[str, str], int] = {}
        self._branches = 0
        self.namespaces: dict[str, int] = {}

    def add(self, event: ThreadEvent | SkippedEvent) -> None:
        if not isinstance(event, ThreadEvent):
            self.skipped += 1
            return
        ns = event.checkpoint_ns
        key = (ns, event.checkpoint_id or "")
        view = event_view(event, self._steps.step(event))
        if event.kind == "checkpoint":
            parent = (ns, event.parent_checkpoint_id or "")
            siblings = self._children.get(parent, 0)
            self._children[parent] = siblings + 1
            if parent in self._branch and siblings == 0:
                self._branch[key] = self._branch[parent]
            else:
                self._branch[key] = self._branches
                self._branches += 1
        view["branch"] = self._branch.get(key, 0)
        self.namespaces[ns] = self.namespaces.get(ns, 0) + 1
        self.events.append(view)


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Channel by channel: what the checkpoint added, removed and changed from its parent."""
    before = {k: plain(v) for k, v in old.items()}
    after = {k: plain(v) for k, v in new.items()}
    return {
        "added": {k: after[k] for k in sorted(after.keys() - before.keys())},
        "removed": {k: before[k] for k in sorted(before.keys() - after.keys())},
        "changed": {
            k: {"before": before[k], "after": after[k]}
            for k in sorted(after.keys() & before.keys())
            if before[k] != after[k]
        },
        "unchanged": sorted(k for k in after.keys() & before.keys() if before[k] == after[k]),
    }


def state_view(found: CheckpointTuple, parent: CheckpointTuple | None) -> dict[str, Any]:
    """The Agent Protocol's ThreadState, plus the pending writes and the diff from the
    parent checkpoint."""
    conf = found.config["configurable"]
    checkpoint = found.checkpoint
    values = checkpoint["channel_values"]
    interrupts = [
        {"task_id": task, "value": plain(value)}
        for task, channel, value in found.pending_writes or ()
        if channel == "__interrupt__"
    ]
    parent_conf = found.parent_config["configurable"] if found.parent_config else None
    return {
        "values": plain(values),
        # LangGraph triggers a node by a value in its ``branch:to:<node>`` channel
        "next": sorted(c.split(":", 2)[2] for c in values if c.startswith("branch:to:")),
        "checkpoint": {
            "thread_id": conf["thread_id"],
            "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": conf["checkpoint_id"],
        },
        "metadata": plain(found.metadata),
        "created_at": checkpoint.get("ts"),
        "parent_checkpoint": (
            None
            if parent_conf is None
            else {
                "thread_id": parent_conf["thread_id"],
                "checkpoint_ns": parent_conf.get("checkpoint_ns", ""),
                "checkpoint_id": parent_conf["checkpoint_id"],
            }
        ),
        "interrupts": interrupts,
        "pending_writes": [
            {"task_id": task, "channel": channel, "value": plain(value)}
            for task, channel, value in found.pending_writes or ()
        ],
        "diff": diff(parent.checkpoint["channel_values"] if parent else {}, values),
    }


def filters(pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` strings (the page's metadata filter) as a dict. A value that reads as a
    JSON number, boolean or null is that (metadata ``step=3`` is the integer 3); any other
    value is the string as typed."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not key.strip():
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value.strip()
        out[key.strip()] = (
            parsed if isinstance(parsed, (int, float, bool, type(None))) else value.strip()
        )
    return out
