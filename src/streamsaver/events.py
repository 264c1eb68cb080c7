"""The events tail consumers read, as pydantic models with a schema version.

``ThreadEvent`` is one entry of a thread's log (docs/events.md), decoded: ids, kind, metadata
and, for a ``writes`` event, the written values through the saver's serializer. A checkpoint
event does not carry the full state (values that did not change are stored once, in earlier
events); ``saver.get_tuple(event.config)`` returns it. ``SkippedEvent`` reports an entry a
tailer could not hand over (unknown kind, newer schema, undecodable, gone); ``FeedCursor`` is
where a ``tail_all`` stopped; ``Delivery`` is one event handed to a consumer-group member.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict, Field, computed_field

from .core.codec import SCHEMA_VERSION
from .core.config import make_config
from .core.nodes import NULL_TASK_ID, RESUME, origin

__all__ = [
    "SCHEMA_VERSION",
    "DeletedHistory",
    "Delivery",
    "FeedCursor",
    "ProjectorLag",
    "Pruned",
    "SkippedEvent",
    "SlotLag",
    "ThreadDeletion",
    "ThreadEvent",
    "ThreadInfo",
    "Undecoded",
]


class _Frozen(BaseModel):
    """Every model here is frozen: what a consumer was handed cannot change under it."""

    model_config = ConfigDict(frozen=True)


EventKind = Literal["checkpoint", "writes", "delete", "pruned", "thread_deleted"]


class Pruned(_Frozen):
    """What a prune trimmed from the log (the ``pruned`` event it appends first)."""

    count: int = Field(description="how many entries were removed")
    first_id: str = Field(description="the first entry removed")
    last_id: str = Field(description="the last entry removed")
    last_digest: str = Field(description="its chain digest ('' if it had none)")


class DeletedHistory(_Frozen):
    """What ``delete_thread`` removed: the ``thread_deleted`` event its deletion's mark holds,
    which starts the thread's log again if its id is used again (its audit record, plus
    ``upto``)."""

    count: int = Field(description="how many events the deleted log held")
    last_id: str | None = Field(description="the deleted log's last entry")
    last_digest: str = Field(description="its chain digest ('' if it had none)")
    upto: str = Field(
        description="the greatest checkpoint id the thread's deleted histories held: writes "
        "continuing a checkpoint up to it that the thread does not hold are refused"
    )


class ThreadEvent(_Frozen):
    """One event of a thread's log. ``schema_version`` is the event's own ``sv``."""

    schema_version: int = Field(description="schema version of the stored event")
    id: str = Field(description="stream entry id in the thread's log, '<unix ms>-<seq>'")
    kind: EventKind
    thread_id: str
    checkpoint_ns: str = ""
    checkpoint_id: str | None = Field(
        default=None, description="the checkpoint put, or the one the writes belong to"
    )
    parent_checkpoint_id: str | None = None
    task_id: str | None = None
    task_path: str | None = None
    sends: tuple[str, ...] = Field(
        default=(),
        description="checkpoint: the node each pending Send packet goes to, in order (a Send "
        "task's path holds its index here); empty if none, or written before 0.x recorded them",
    )
    sent_to: str | None = Field(
        default=None,
        description="writes of a Send's task (or of its error handler): the node its packet "
        "went to, as the writer or the reader found it in the checkpoint's sends; None if "
        "unknown",
    )
    run_id: str | None = None
    timestamp: datetime = Field(description="when the server appended it (from the id), UTC")
    metadata: dict[str, Any] | None = Field(
        default=None, description="checkpoint metadata (source, step, parents, run_id, ...)"
    )
    channels: tuple[str, ...] = Field(
        default=(),
        description="checkpoint: channels whose value this event stores; writes: channels written",
    )
    writes: tuple[tuple[str, Any], ...] = Field(
        default=(), description="writes: the (channel, value) pairs, decoded through the serde"
    )
    deleted: tuple[tuple[str, str], ...] = Field(
        default=(), description="delete: the (namespace, checkpoint id) pairs removed"
    )
    runs: tuple[str, ...] = Field(default=(), description="delete: the run ids that matched")
    origin: str | None = Field(
        default=None,
        description="compaction (prune, keep_last, delete_for_runs): id of the original "
        "event this one is a copy of",
    )
    copy_of: tuple[str, str] | None = Field(
        default=None, description="copy_thread: (source thread id, source event id)"
    )
    pruned: Pruned | None = Field(default=None, description="pruned: what was removed")
    thread_deleted: DeletedHistory | None = Field(
        default=None, description="thread_deleted: what delete_thread removed"
    )
    digest: str | None = Field(
        default=None,
        description="the event's chain digest (dg, docs/audit.md); None if written unchained",
    )
    fork: bool | None = Field(
        default=None,
        description="history: a checkpoint whose parent is not the previous checkpoint of its "
        "namespace in the log (time travel, update_state); None where not computed",
    )
    values: dict[str, Any] | None = Field(
        default=None,
        description="history with values, checkpoint: the values this event stores, by channel "
        "(a list stored as an append part gives only the items appended: see appended)",
    )
    appended: tuple[str, ...] = Field(
        default=(),
        description="history with values: the channels whose entry in values holds only the "
        "items appended to the list's previous value",
    )

    @property
    def config(self) -> RunnableConfig | None:
        """For checkpoint and writes events: the checkpoint's config, for ``get_tuple``."""
        if self.checkpoint_id is None:
            return None
        return make_config(self.thread_id, self.checkpoint_ns, self.checkpoint_id)

    @property
    def step(self) -> int | None:
        step = (self.metadata or {}).get("step")
        return step if isinstance(step, int) and not isinstance(step, bool) else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def node(self) -> str | None:
        """The graph node a writes event came from: a pull task's, which its path names
        ("~__pregel_pull, agent"); a Send's task's (e.g. a tool call), its packet's node
        (``sent_to``). None for a functional-API task call and an error handler (their names
        reach no checkpointer), for the answer of ``Command(resume=...)``, and when
        unknown."""
        if self.kind != "writes":
            return None
        found = origin(self.task_path)
        if found.handler:
            return None
        if found.kind == "pull":
            return found.name
        if found.kind == "send":
            return self.sent_to
        return None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def task(self) -> str | None:
        """Who wrote a writes event, for people: the node; ``<node> (Send #<i>)`` for the
        step's i-th Send packet (``Send #<i>`` when the node is unknown, as in events written
        before 0.x); ``<caller> call #<i>`` for a functional-API task's i-th call;
        ``<who> error handler`` for the handler a failed task's error ran; ``resume`` for
        the answer a ``Command(resume=...)`` gave to an interrupt, and ``<who> resume`` for
        the task that consumed it; else None (the task id is all there is)."""
        if self.kind != "writes":
            return None
        found = origin(self.task_path)
        resumed = RESUME in self.channels
        if found.kind == "send":
            name = self.sent_to
            who: str | None = f"{name} (Send #{found.index})" if name else f"Send #{found.index}"
        elif found.kind == "call":
            call = f"call #{found.index}"
            who = f"{found.name} {call}" if found.name else call
        elif resumed and self.task_id == NULL_TASK_ID:
            return "resume"
        else:
            who = found.name if found.kind == "pull" else None
        if who is None:
            return None
        if found.handler:
            who += " error handler"
        return f"{who} resume" if resumed else who


class Undecoded(_Frozen):
    """A value the serializer could not decode: encrypted and read without the key, or of a
    type it does not know. The stored bytes are left as they are."""

    type: str = Field(description="the serializer's type tag, e.g. 'msgpack+aes'")
    size: int = Field(description="length of the stored bytes")
    error: str = Field(description="what the serializer raised")


class ThreadDeletion(_Frozen):
    """What ``delete_thread`` recorded in the prefix's audit stream before dropping a log."""

    id: str = Field(description="entry id in <prefix>:{<slot tag>}:audit")
    thread_id: str
    timestamp: datetime = Field(description="when the thread was deleted, UTC")
    events: int = Field(description="how many events the deleted log held")
    last_id: str | None = Field(description="the deleted log's last entry, None if it was empty")
    head: str = Field(description="that entry's chain digest ('' if none)")


class SkippedEvent(_Frozen):
    """An entry a tailer reported and skipped instead of handing it over."""

    stream: str = Field(description="the key it was read from (a thread log or a feed)")
    id: str = Field(description="its entry id in that stream")
    thread_id: str | None = None
    event_id: str | None = Field(default=None, description="the thread log entry, when known")
    kind: str | None = None
    schema_version: str | None = None
    reason: str


class FeedCursor(_Frozen):
    """Where a ``tail_all`` is: per cluster slot, the last feed entry handed over.

    Serialize it with ``model_dump_json()`` and give it back (or its JSON) as ``after=`` to
    resume exactly after the last event handled. Slots it does not name are read from their
    beginning: their feed appeared after the cursor was taken.
    """

    prefix: str
    positions: dict[int, str] = Field(default_factory=dict)


class Delivery(_Frozen):
    """One event handed to a consumer-group member; ``group.ack(delivery)`` when done."""

    event: ThreadEvent
    stream: str = Field(description="the feed the group read it from")
    entry_id: str = Field(description="the feed entry to acknowledge")
    deliveries: int = Field(description="how many times the group has delivered it, this included")


class ThreadInfo(_Frozen):
    """One thread of ``saver.threads()``: its latest root-namespace checkpoint and activity."""

    thread_id: str
    checkpoint_id: str | None = Field(
        default=None, description="the latest checkpoint of the root namespace, if any"
    )
    step: int | None = Field(default=None, description="that checkpoint's metadata step")
    last_activity_ms: int = Field(description="when its last event was appended, unix ms")
    interrupted: bool = Field(
        default=False, description="that checkpoint has pending __interrupt__ writes"
    )

    @property
    def last_activity(self) -> datetime:
        return datetime.fromtimestamp(self.last_activity_ms / 1000, tz=timezone.utc)


class SlotLag(_Frozen):
    """The projector's position on one cluster slot's feed."""

    slot: int
    usable: bool = Field(description="seeded, and the feed holds every entry after the cursor")
    cursor: str = Field(description="the last feed entry applied ('' before the first seed)")
    pending: int = Field(description="feed entries after the cursor (counted up to a cap)")
    oldest_ms: int | None = Field(default=None, description="the oldest pending entry, unix ms")


class ProjectorLag(_Frozen):
    """How far the projector is behind the writers: ``saver.projector_lag()``."""

    slots: tuple[SlotLag, ...] = ()
    now_ms: int = Field(description="the server's time when measured, unix ms")

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.slots)

    @property
    def oldest_age_s(self) -> float:
        """Age of the oldest entry not yet applied, in seconds (0 when none)."""
        oldest = [s.oldest_ms for s in self.slots if s.oldest_ms is not None]
        return max(0.0, (self.now_ms - min(oldest)) / 1000) if oldest else 0.0

    @property
    def usable(self) -> bool:
        """Readers use the projections (else they scan): every slot is usable."""
        return bool(self.slots) and all(s.usable for s in self.slots)
