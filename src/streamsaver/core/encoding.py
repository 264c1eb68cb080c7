"""Events as stream fields: a checkpoint (its values whole, or appended to what the log holds)
and a task's writes, in the layout docs/events.md gives consumers. No I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)

from .config import check_text
from .delta import Known, Written, array_header, split_array
from .errors import CorruptIndexError, InvalidInputError
from .fields import EMPTY, SCHEMA_VERSION, SHARED, Field, version_key
from .metadata import check_metadata
from .values import Learned, ValueCodec

__all__ = ["CheckpointEvent", "EventEncoder"]

# what a checkpoint event's `cp` leaves out: the values and versions have fields of their own
# (nv, b<i>, cv), and so has the id; schema 1 stored the id in `cp` too
_NOT_IN_RECORD = frozenset({"channel_values", "channel_versions", "id"})


@dataclass
class CheckpointEvent:
    """A checkpoint's event fields, and what the writer learns once the log holds them."""

    fields: list[Field]
    bases: list[str] = field(default_factory=list)  # heads of the append parts' bases
    learned: Learned = field(default_factory=list)


class EventEncoder(ValueCodec):
    """Checkpoints and writes as the stream fields of their events, through the serde."""

    def _value(
        self, channel: str, value: Any, version: str, known: Known | None, written: Written | None
    ) -> tuple[bytes, Known | None]:
        """The event field for one channel value, whole or as an append to ``known`` (naming
        the bytes of a write in ``written`` when the tail is one), and what the saver learns by
        storing it."""
        typed = self._extended(value, known) if self.reuse_items else None
        reused = known if typed is not None else None
        if typed is None:
            typed = self._dumps_typed(value, f"the value of channel {channel!r}")
        type_, data = typed
        array = split_array(data) if type_ == "msgpack" else None
        if array is None:
            return ormsgpack.packb((type_, data)), None
        count, header = array
        items, state = self._held(value, count, reused)
        tail = known.extend(data, count, header) if known is not None else None
        if known is None or tail is None:
            learned = Known(version, "", data[header:], count, 0, 0, len(data), items, state)
            return ormsgpack.packb((type_, data)), learned
        learned = Known(
            version,
            "",
            data[header:],
            count,
            known.chain + 1,
            known.chain_bytes + len(tail),
            known.snapshot_bytes,
            items,
            state,
        )
        shared = written.sharing(tail) if written is not None else None
        if shared is not None:
            # str and int only: checkpoint/read.lua unpacks it with cmsgpack to follow the reference
            return ormsgpack.packb(("shared", *shared, count - known.count)), learned
        return ormsgpack.packb(("append", tail, count - known.count)), learned

    def _extended(self, value: Any, known: Known | None) -> tuple[str, bytes] | None:
        """The serde's encoding of ``value``, built from ``known``'s body and an encoding of
        only the items after it, when ``value`` starts with the very objects ``known`` holds.
        A msgpack array is its header then each item's encoding in turn, so this is the
        serde's own bytes; a serde whose list encoding is anything else (EncryptedSerializer's
        ciphertext, a JSON or pickle fallback) gives back no array, and None sends it whole."""
        if known is None or type(value) is not list or not known.holds(value):
            return None
        new = value[known.count :]
        try:
            type_, data = self.serde.dumps_typed(new)
        except (TypeError, ValueError, OverflowError):
            return None  # the whole value's encoding reports it, naming the channel
        array = split_array(data) if type_ == "msgpack" else None
        if array is None or array[0] != len(new):
            return None
        return type_, b"".join((array_header(len(value)), known.body, memoryview(data)[array[1] :]))

    @staticmethod
    def unshared(raw: bytes, fields_of: Callable[[str], Mapping[bytes, bytes] | None]) -> bytes:
        """An append part that names a write's bytes (``["shared", "<event id> w<i>", offset,
        n]``, see core.delta.Written) as the ordinary part holding them, for a copy into another
        log; any other value as it is. ``fields_of(event id)``: that event's fields."""
        if not raw.startswith(SHARED):
            return raw
        _, ref, offset, count = ormsgpack.unpackb(raw)
        eid, _, name = ref.partition(" ")
        source = fields_of(eid)
        data = source.get(name.encode()) if source is not None else None
        if data is None or not 0 <= offset < len(data):
            raise CorruptIndexError(
                f"an append part names write {ref}, which is not in the log: it was edited "
                f"or trimmed outside streamsaver"
            )
        return ormsgpack.packb(("append", data[offset:], count))

    def checkpoint_event(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        parent_id: str | None,
        known: Callable[[str], Known | None],
        written: Written | None = None,
        sends: Sequence[str] = (),
    ) -> CheckpointEvent:
        """``known(channel)``: a stored list value the channel's new value may append to;
        ``written``: the writes this process appended for the parent checkpoint; ``sends``:
        the node of each pending Send packet (core.nodes.send_targets)."""
        check_metadata(metadata, "metadata")
        values = checkpoint["channel_values"]
        # the event's `id` field holds the id: not stored twice (schema 2)
        record = {k: v for k, v in checkpoint.items() if k not in _NOT_IN_RECORD}
        cv: list[str] = []
        for channel, version in checkpoint["channel_versions"].items():
            cv += (check_text(channel, "a channel name"), version_key(version))
        nv: list[str] = []
        event = CheckpointEvent([])
        blobs: list[Field] = []
        for i, (channel, version) in enumerate(new_versions.items()):
            check_text(channel, "a channel name in new_versions")
            vkey = version_key(version)
            base = ""
            if channel not in values:
                raw: bytes = EMPTY
            else:
                previous = known(channel)
                raw, learned = self._value(channel, values[channel], vkey, previous, written)
                if learned is not None:
                    event.learned.append((channel, f"b{i}", learned))
                    if learned.chain and previous is not None:
                        base = previous.version
                        event.bases.append(previous.head)
            nv += (channel, vkey, base)
            blobs += (f"b{i}", raw)
        run_id = metadata.get("run_id")
        event.fields = [
            "k", "checkpoint",
            "sv", str(SCHEMA_VERSION),
            "thread", thread_id,
            "ns", checkpoint_ns,
            "id", checkpoint["id"],
            "parent", parent_id or "",
            "run", str(run_id) if run_id is not None else "",
            "meta", ormsgpack.packb(metadata),
            "cp", self.dump(record, "the checkpoint record"),
            "cv", ormsgpack.packb(cv),
            "nv", ormsgpack.packb(nv),
            *blobs,
        ]  # fmt: skip
        if sends:
            event.fields += ("sends", ormsgpack.packb(list(sends)))
        self._checked(event.fields, f"checkpoint {checkpoint['id']!r}")
        return event

    def writes_event(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        run_id: str,
        node: str | None = None,
    ) -> list[Field]:
        """``node``: the node a Send's task ran, when the writer knows it (core/nodes.py)."""
        wi: list[str | int] = []
        values: list[Field] = []
        for i, write in enumerate(writes):
            if not (isinstance(write, (tuple, list)) and len(write) == 2):
                raise InvalidInputError(
                    f"writes[{i}] is {write!r}; each write is a (channel, value) pair"
                )
            channel, value = write
            if not isinstance(channel, str):
                raise InvalidInputError(
                    f"writes[{i}] has channel {channel!r} ({type(channel).__name__}); "
                    f"channel names are strings"
                )
            check_text(channel, f"writes[{i}]'s channel")
            wi += (channel, WRITES_IDX_MAP.get(channel, i))
            values += (f"w{i}", self.dump(value, f"the write to channel {channel!r}"))
        fields: list[Field] = [
            "k", "writes",
            "sv", str(SCHEMA_VERSION),
            "thread", thread_id,
            "ns", checkpoint_ns,
            "id", checkpoint_id,
            "task", task_id,
            "path", task_path,
            "run", run_id,
            "wi", ormsgpack.packb(wi),
            *values,
        ]  # fmt: skip
        if node:
            fields += ("node", node)
        return self._checked(fields, f"writes of task {task_id!r}")
