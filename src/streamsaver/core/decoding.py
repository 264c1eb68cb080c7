"""Read replies back into LangGraph types: checkpoint/read.lua's reply as a ``CheckpointTuple``,
each value composed from its parts (whole, or appended to what the reader holds). No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import CheckpointTuple, PendingWrite, writes_sort_key

from .config import make_config
from .delta import Known, array_header, split_array
from .errors import CorruptIndexError
from .fields import parse_version
from .values import ABSENT, Held, ValueCodec

__all__ = ["ReplyDecoder"]


def _pairs(flat: Sequence[Any]) -> list[tuple[Any, Any]]:
    return list(zip(flat[::2], flat[1::2], strict=True))


class ReplyDecoder(ValueCodec):
    """checkpoint/read.lua's replies decoded, through the serde, into LangGraph's types."""

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
        return ABSENT if typed[0] == "empty" else self.serde.loads_typed(typed)

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
            if value is not ABSENT:
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
