"""Events as stream fields, and read replies back into LangGraph types. No I/O.

The field layout is the public event format; docs/events.md describes it for consumers. What a
Lua script must read (kind, ids, versions, metadata) sits in its own field, msgpack-encoded
without ``bin`` values, because Redis's cmsgpack rejects them. Channel values and writes go
through the saver's serde as ``msgpack([type, bytes])``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .config import make_config
from .delta import Known, Written, array_header, shallow_state, split_array
from .errors import CorruptIndexError, InvalidInputError, PayloadTooLargeError

__all__ = [
    "SCHEMA_VERSION",
    "CheckpointEvent",
    "Codec",
    "Field",
    "Held",
    "Learned",
    "parse_version",
    "version_key",
]

SCHEMA_VERSION = 2
# what a checkpoint event's `cp` leaves out: the values and versions have fields of their own
# (nv, b<i>, cv), and so has the id; schema 1 stored the id in `cp` too
_NOT_IN_RECORD = frozenset({"channel_values", "channel_versions", "id"})
Field = str | bytes
_EMPTY = ormsgpack.packb(("empty", b""))
_SHARED = b"\x94\xa6shared"  # ormsgpack.packb(("shared", ref, offset, n))[:8]
_JSON_SCALARS = (str, int, float, bool, type(None))
_ABSENT = object()


def version_key(version: object) -> str:
    """A channel version as text, typed so that 1, 1.0 and "1" stay distinct."""
    if isinstance(version, str):
        return "s" + version
    if isinstance(version, int) and not isinstance(version, bool):
        return f"i{version}"
    if isinstance(version, float):
        return "f" + repr(version)
    raise InvalidInputError(
        f"channel version {version!r} is a {type(version).__name__}; versions must be str, "
        f"int or float (what get_next_version returns)"
    )


def parse_version(key: str) -> str | int | float:
    kind, text = key[0], key[1:]
    if kind == "i":
        return int(text)
    if kind == "f":
        return float(text)
    return text


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack holds
_TWO64 = 2**64
# a filter value no stored value equals (NaN; an int beyond 64 bits no float equals): no form
# lua/shared/meta.lua builds contains it
_NEVER = "~"


def _path(at: tuple[object, ...]) -> str:
    return str(at[0]) + "".join(f"[{step!r}]" for step in at[1:])


def _check_text_at(text: str, what: str, at: tuple[object, ...]) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        _check_text(text, what, _path(at))


def _check_text(text: str, what: str, path: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{what} {text!r} at {path} holds a lone surrogate, which UTF-8 cannot store; "
            f"remove it or replace it (text.encode('utf-8', 'replace').decode())"
        ) from None


def _check_metadata(value: object, path: str, *, stored: bool = True) -> None:
    """``stored``: metadata to put, whose ints must fit in msgpack's 64 bits; a filter's may
    be any size (metadata_form())."""
    # Metadata is stored as plain msgpack so list(filter=...) can compare it inside Redis.
    _check_metadata_at(value, (path,), stored)


def _check_metadata_at(value: object, at: tuple[object, ...], stored: bool) -> None:
    """``at``: the path's root name, then each key and index below it; made into text only
    for an error (every put checks its metadata, every key of it)."""
    kind = type(value)
    if kind is str:
        _check_text_at(value, "metadata string", at)  # type: ignore[arg-type]
        return
    if kind is dict:
        for k, item in value.items():  # type: ignore[attr-defined]
            if not isinstance(k, str):
                raise InvalidInputError(f"metadata key {k!r} at {_path(at)} must be a string")
            _check_text_at(k, "metadata key", at)
            _check_metadata_at(item, (*at, k), stored)
        return
    if isinstance(value, str):
        _check_text_at(value, "metadata string", at)
        return
    if isinstance(value, int) and not isinstance(value, bool):
        if stored and not _INT_MIN <= value <= _INT_MAX:
            raise InvalidInputError(
                f"metadata value at {_path(at)} is the integer {value}, beyond the 64 bits "
                f"msgpack stores ({_INT_MIN} to {_INT_MAX}); store it as a string"
            )
        return
    if isinstance(value, _JSON_SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_metadata_at(item, (*at, i), stored)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidInputError(f"metadata key {k!r} at {_path(at)} must be a string")
            _check_text_at(k, "metadata key", at)
            _check_metadata_at(item, (*at, k), stored)
        return
    path = _path(at)
    raise InvalidInputError(
        f"metadata value at {path} is a {type(value).__name__} ({value!r}); metadata holds "
        f"JSON-like values (str, int, float, bool, None, lists, dicts) so it can be filtered; "
        f"put other data in the graph state"
    )


def _int_form(n: int) -> str:
    return "i0;" if n == 0 else f"{'i-' if n < 0 else 'i'}{abs(n):x};"


def _float_form(f: float) -> str:
    if math.isnan(f):
        return _NEVER
    if f.is_integer() and -_TWO64 < f < _TWO64:
        return _int_form(int(f))
    return f"f{f:.17g};"


def metadata_form(value: object) -> str:
    """A checked (_check_metadata) metadata value as lua/shared/meta.lua reads it from the stored
    bytes: equal forms exactly when Python's == holds (1 == 1.0 == True, [] != {}, NaN equals
    nothing), as InMemorySaver compares. Tuples are lists, as msgpack stores them."""
    if value is None:
        return "z"
    if isinstance(value, bool):
        return "i1;" if value else "i0;"
    if isinstance(value, int):
        if -_TWO64 < value < _TWO64:
            return _int_form(value)
        try:
            f = float(value)
        except OverflowError:
            return _NEVER
        return _float_form(f) if f == value else _NEVER
    if isinstance(value, float):
        return _float_form(value)
    if isinstance(value, str):
        return f"s{len(value.encode())}:{value}"
    if isinstance(value, (list, tuple)):
        return f"l{len(value)}:" + "".join(map(metadata_form, value))
    if isinstance(value, Mapping):
        entries = sorted(
            ((metadata_form(k), metadata_form(v)) for k, v in value.items()),
            key=lambda e: e[0].encode(),
        )
        return f"m{len(entries)}:" + "".join(k + v for k, v in entries)
    raise InvalidInputError(f"metadata value {value!r} is not JSON-like")


Held = Known | tuple[str, bytes]
"""A value a reader holds: a list (Known, a base for appends) or any other typed value."""

Learned = list[tuple[str, str, Known]]
"""(channel, event field, value) to remember once the event is stored (the head is unset)."""


@dataclass
class CheckpointEvent:
    fields: list[Field]
    bases: list[str] = field(default_factory=list)  # heads of the append parts' bases
    learned: Learned = field(default_factory=list)


def _pairs(flat: Sequence[Any]) -> list[tuple[Any, Any]]:
    return list(zip(flat[::2], flat[1::2], strict=True))


class Codec:
    def __init__(
        self, serde: SerializerProtocol, max_payload_bytes: int, reuse_items: bool = False
    ) -> None:
        self.serde = serde
        self.max_payload_bytes = max_payload_bytes
        # Recognise a list's items already stored by identity: encode and decode only the new
        # ones (README, "Reusing list items"). Sound only while no code mutates an item in
        # place once it is checkpointed, so the saver's user opts in.
        self.reuse_items = reuse_items

    def _dumps_typed(self, value: Any, what: str) -> tuple[str, bytes]:
        try:
            return self.serde.dumps_typed(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInputError(
                f"{what} cannot be serialized by {type(self.serde).__name__}: {exc}; store "
                f"values the serializer supports (see langgraph's JsonPlusSerializer), or pass "
                f"serde= a serializer that handles {type(value).__name__}"
            ) from exc

    def dump(self, value: Any, what: str = "a value") -> bytes:
        return ormsgpack.packb(self._dumps_typed(value, what))

    def load(self, raw: bytes) -> Any:
        type_, data = ormsgpack.unpackb(raw)
        return self.serde.loads_typed((type_, data))

    def _checked(self, fields: list[Field], what: str) -> list[Field]:
        size = sum(map(len, fields))
        if size > self.max_payload_bytes:
            raise PayloadTooLargeError(size, self.max_payload_bytes, what)
        return fields

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

    def _held(
        self, value: Any, count: int, base: Known | None
    ) -> tuple[list[Any] | None, list[Any] | None]:
        """What a Known keeps of a list value with reuse_items: its objects and their
        shallow_state. ``base``: a Known whose objects start ``value``, just checked by
        holds(), so its state stands for theirs."""
        if not (self.reuse_items and type(value) is list and len(value) == count):
            return None, None
        if base is not None and base.state is not None:
            return value.copy(), base.state + shallow_state(value[base.count :])
        return value.copy(), shallow_state(value)

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

    def _appended(self, held: Known, items: bytes, count: int) -> list[Any] | None:
        """``held``'s objects followed by the decoded new items (``count`` of them, encoded
        in ``items``), with reuse_items; None to decode the whole value."""
        if not self.reuse_items or held.items is None or len(held.items) != held.count:
            return None
        # a caller may have assigned to an object it got back: then the held bytes decide
        if not held.holds(held.items):
            return None
        if not count:
            return held.items.copy()
        new = self.serde.loads_typed(("msgpack", array_header(count) + items))
        if type(new) is not list or len(new) != count:
            return None
        return [*held.items, *new]

    @staticmethod
    def unshared(raw: bytes, fields_of: Callable[[str], Mapping[bytes, bytes] | None]) -> bytes:
        """An append part that names a write's bytes (``["shared", "<event id> w<i>", offset,
        n]``, see core.delta.Written) as the ordinary part holding them, for a copy into another
        log; any other value as it is. ``fields_of(event id)``: that event's fields."""
        if not raw.startswith(_SHARED):
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
        _check_metadata(metadata, "metadata")
        values = checkpoint["channel_values"]
        # the event's `id` field holds the id: not stored twice (schema 2)
        record = {k: v for k, v in checkpoint.items() if k not in _NOT_IN_RECORD}
        cv: list[str] = []
        for channel, version in checkpoint["channel_versions"].items():
            cv += (channel, version_key(version))
        nv: list[str] = []
        event = CheckpointEvent([])
        blobs: list[Field] = []
        for i, (channel, version) in enumerate(new_versions.items()):
            vkey = version_key(version)
            base = ""
            if channel not in values:
                raw: bytes = _EMPTY
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

    def _compose(
        self,
        version: bytes,
        head: bytes,
        parts: Sequence[bytes],
        extends: bytes,
        held: Held | None,
    ) -> tuple[Any, Held]:
        """Decode a value from its parts (newest first). They end with a whole value, or, when
        ``extends``, where the value the reader holds (``held``) ends."""
        if extends:
            if held is None:
                raise ValueError("the server extended a value this reader does not hold")
            if not isinstance(held, Known):
                if parts:
                    raise ValueError("the server appended to a value that is not a list")
                return self._whole(held), held
            count, body, chain, chain_bytes = held.count, [held.body], held.chain, held.chain_bytes
            snapshot_bytes = held.snapshot_bytes
            tails = parts
            base: Known | None = held
        else:
            type_, data = ormsgpack.unpackb(parts[-1])
            array = split_array(data) if type_ == "msgpack" else None
            if array is None:
                return self._whole((type_, data)), (type_, data)
            count, header = array
            body, chain, chain_bytes, snapshot_bytes = [data[header:]], 0, 0, len(data)
            tails = parts[:-1]
            base = None
        for raw in reversed(tails):
            _, tail, appended = ormsgpack.unpackb(raw)
            body.append(tail)
            count += appended
            chain += 1
            chain_bytes += len(tail)
        value = None
        if base is not None:
            value = self._appended(base, b"".join(body[1:]), count - base.count)
            if value is None:
                base = None
        items = b"".join(body)
        if value is None:
            value = self.serde.loads_typed(("msgpack", array_header(count) + items))
        held_items, state = self._held(value, count, base)
        known = Known(
            version.decode(),
            head.decode(),
            items,
            count,
            chain,
            chain_bytes,
            snapshot_bytes,
            held_items,
            state,
        )
        return value, known

    def _whole(self, typed: tuple[str, bytes]) -> Any:
        return _ABSENT if typed[0] == "empty" else self.serde.loads_typed(typed)

    def checkpoint_tuple(
        self, thread_id: str, reply: Sequence[Any], held: Mapping[str, Held] | None = None
    ) -> tuple[CheckpointTuple, dict[str, Held]]:
        """Decode checkpoint/read.lua's ``{event id, header, values, writes}``, and the values seen.
        ``held``: by channel, the values the script was told (or knows) the reader holds."""
        try:
            return self._checkpoint_tuple(thread_id, reply, held or {})
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            # ormsgpack's decode errors are ValueErrors; anything else here is a log entry
            # that was written by hand or by a broken writer
            eid = reply[0].decode(errors="replace") if reply else "?"
            raise CorruptIndexError(
                f"event {eid} of thread {thread_id!r} cannot be decoded ({exc!r}); inspect it "
                f"with XRANGE, remove or repair it, then rebuild the thread"
            ) from exc

    def _checkpoint_tuple(
        self, thread_id: str, reply: Sequence[Any], held: Mapping[str, Held]
    ) -> tuple[CheckpointTuple, dict[str, Held]]:
        _, header_flat, values_flat, writes_flat = reply
        header = {k.decode(): v for k, v in _pairs(header_flat)}
        ns = header["ns"].decode()
        checkpoint_id = header["id"].decode()
        parent_id = header["parent"].decode()
        record = self.load(header["cp"])
        if "id" not in record:  # schema 2 keeps it in the event's `id` field only
            first = {"v": record["v"]} if "v" in record else {}
            record = {**first, "id": checkpoint_id, **record}
        cv = ormsgpack.unpackb(header["cv"])
        record["channel_versions"] = {ch: parse_version(v) for ch, v in _pairs(cv)}
        values: dict[str, Any] = {}
        seen: dict[str, Held] = {}
        for i in range(0, len(values_flat), 5):
            channel = values_flat[i].decode()
            version, head, parts, extends = values_flat[i + 1 : i + 5]
            value, seen[channel] = self._compose(version, head, parts, extends, held.get(channel))
            if value is not _ABSENT:
                values[channel] = value
        record["channel_values"] = values
        rows = [
            (path.decode(), task.decode(), int(idx), channel.decode(), raw)
            for task, idx, path, channel, raw in zip(
                *(writes_flat[i::5] for i in range(5)), strict=True
            )
        ]
        rows.sort(key=lambda r: writes_sort_key(r[0], r[1], r[2]))
        pending: list[PendingWrite] = [(task, ch, self.load(raw)) for _, task, _, ch, raw in rows]
        checkpoint_tuple = CheckpointTuple(
            config=make_config(thread_id, ns, checkpoint_id),
            checkpoint=record,
            metadata=ormsgpack.unpackb(header["meta"]),
            parent_config=make_config(thread_id, ns, parent_id) if parent_id else None,
            pending_writes=pending,
        )
        return checkpoint_tuple, seen
