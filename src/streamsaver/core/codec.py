"""Events as stream fields, and read replies back into LangGraph types. No I/O.

The field layout is the public event format; docs/events.md describes it for consumers. What a
Lua script must read (kind, ids, versions, metadata) sits in its own field, msgpack-encoded
without ``bin`` values, because Redis's cmsgpack rejects them. Channel values and writes go
through the saver's serde as ``msgpack([type, bytes])``.

``Codec`` is both directions over one serde: ``encoding`` builds the events, ``decoding`` reads
replies back, ``values`` holds what both do to one value; ``fields`` is the format's vocabulary
and ``metadata`` checks metadata and gives the forms filters compare.
"""

from __future__ import annotations

from .decoding import ReplyDecoder
from .encoding import CheckpointEvent, EventEncoder
from .fields import SCHEMA_VERSION, Field, parse_version, version_key
from .metadata import metadata_form
from .values import Held, Learned

__all__ = [
    "SCHEMA_VERSION",
    "CheckpointEvent",
    "Codec",
    "Field",
    "Held",
    "Learned",
    "metadata_form",
    "parse_version",
    "version_key",
]


class Codec(EventEncoder, ReplyDecoder):
    """A saver's codec: its serde, its payload bound and whether it reuses list items
    (``ValueCodec``), events built (``EventEncoder``) and replies read (``ReplyDecoder``)."""
