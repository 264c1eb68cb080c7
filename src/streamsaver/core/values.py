"""What the codec does to one value: through the saver's serde (typed, bounded by
``max_payload_bytes``), and what a reader keeps of a list value to append to (``Known``, with
its objects under ``reuse_items``). The base of ``codec.Codec``; no I/O."""

from __future__ import annotations

from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.base import SerializerProtocol

from .config import check_text
from .delta import Known, shallow_state
from .errors import InvalidInputError, PayloadTooLargeError
from .fields import Field

__all__ = ["ABSENT", "Held", "Learned", "ValueCodec"]

# a channel whose event holds no value (core.fields.EMPTY): left out of channel_values
ABSENT = object()

# an event's text fields (docs/events.md) by the names the caller gave them
_NAMES = {"thread": "thread_id", "ns": "checkpoint_ns", "id": "checkpoint_id",
          "parent": "the parent's checkpoint_id", "task": "task_id", "path": "task_path",
          "run": "run_id"}  # fmt: skip

Held = Known | tuple[str, bytes]
"""A value a reader holds: a list (Known, a base for appends) or any other typed value."""

Learned = list[tuple[str, str, Known]]
"""(channel, event field, value) to remember once the event is stored (the head is unset)."""


class ValueCodec:
    """The saver's serde, its payload bound and whether it reuses list items: what encoding
    and decoding share."""

    def __init__(
        self, serde: SerializerProtocol, max_payload_bytes: int, reuse_items: bool = False
    ) -> None:
        self.serde = serde
        self.max_payload_bytes = max_payload_bytes
        # Recognise a list's items already stored by identity: encode and decode only the new
        # ones (docs/reuse.md). Sound only while no code mutates an item in
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
        for name, value in zip(fields[::2], fields[1::2], strict=True):
            if isinstance(value, str) and not value.isascii():
                check_text(value, _NAMES.get(str(name), str(name)))
        return fields

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
