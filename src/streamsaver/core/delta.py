"""Append-only channel values stored as their new items (principle 7). No I/O.

LangGraph's serde encodes a list as one msgpack array: a header, then each item's encoding in
turn. When a channel's new encoding has the same items' bytes as a value already stored, only
the new items' bytes (the tail) are stored, with a link to that base. Reading concatenates the
parts and decodes once, so a reader gets back the very bytes the serde produced: values are
compared as bytes, never as objects, and anything that is not a msgpack array is stored whole.

With ``reuse_items`` (opt-in, docs/reuse.md) a Known also keeps the objects its
body encodes: a new value that starts with those very objects is encoded from the held body
plus the new items' encoding, and a read that extends it decodes only the new items. The bytes
are the same; what changes is that object identity stands for "unchanged". Beside the objects
it keeps what can be assigned on each (``shallow_state``: attributes and slots, a mapping's
keys and values, a list's elements), so an assignment since (``m.id = ...``, what
``add_messages`` does to id-less messages; ``m.content = ...``; ``d["k"] = v`` on an
``OrderedDict`` item) makes the value encoded and decoded whole again; a change inside an
attribute's own value (``m.tool_calls.append``) is not seen, which is why the option stays
opt-in.

A new full value (a snapshot) is stored once the tails since the last snapshot outweigh it
SNAPSHOT_SPACING times, so snapshots are spaced geometrically (each about 1 + SNAPSHOT_SPACING
times the last) and their total stays within (1 + 1/SNAPSHOT_SPACING) of the final value: storage
is proportional to the data. MAX_CHAIN bounds the parts a read may have to follow; reads by a
saver that holds the value (it wrote or read it) follow none, so only cold reads pay it.

A tail is usually what a node just wrote: ``add_messages`` appends the written message, whose
encoding is the same bytes inside the ``put_writes`` event. The cache remembers the writes this
process sent for a thread's latest checkpoint, so the next checkpoint can name those bytes
(``Written``) instead of storing them again.
"""

from __future__ import annotations

import operator
import struct
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, time, timedelta
from decimal import Decimal
from enum import Enum
from fractions import Fraction
from pathlib import PurePath
from typing import Any
from uuid import UUID

from cachetools import LRUCache

__all__ = [
    "ENTRY_BYTES",
    "ITEM_BYTES",
    "MAX_CHAIN",
    "SNAPSHOT_SPACING",
    "DeltaCache",
    "Known",
    "Written",
    "array_header",
    "shallow_state",
    "split_array",
]

MAX_CHAIN = 1024
# 3: snapshots total at most 4/3 of the final value, and a cold read follows at most MAX_CHAIN
# parts; 1 (twice the value) cost 0.4 KB more per step of a 1,000-step conversation
SNAPSHOT_SPACING = 3
# below this a reference ("<event id> w<i>", offset, count) saves too little to be worth a lookup
MIN_SHARED_BYTES = 64

# What an entry costs beside its body: the Known, its version and head strings, the dict slots and
# the (thread, namespace) key. Measured at ~630 bytes per thread holding one channel (CPython 3.11,
# tracemalloc); counting only bodies let many small lists hold several times the bound.
ENTRY_BYTES = 640
# What a held object (reuse_items) costs beside its encoding: a decoded message takes ~1,340 bytes
# more than its msgpack bytes whatever its length (CPython 3.11, tracemalloc, 150 messages of 20 to
# 2,000 characters), and its shallow_state ~10 references more. Counted for every item, though the
# graph usually holds the same objects: the bound is on what the cache alone may keep alive.
ITEM_BYTES = 1500


def split_array(data: bytes) -> tuple[int, int] | None:
    """(item count, header length) of a msgpack array, or None for anything else."""
    if not data:
        return None
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, 1
    if first == 0xDC and len(data) >= 3:
        return struct.unpack_from(">H", data, 1)[0], 3
    if first == 0xDD and len(data) >= 5:
        return struct.unpack_from(">I", data, 1)[0], 5
    return None


def shallow_state(items: list[Any]) -> list[Any]:
    """Each item, then what can be assigned on it in place: a mapping's keys and values (any
    mapping: ``OrderedDict`` and ``defaultdict`` too), a sequence's or set's elements, an
    object's attributes (``__dict__`` and every ``__slots__`` of its classes, pydantic's extras
    and private attributes), closed by a marker. Compared item by item with ``is``, it tells
    whether anything was assigned on a held item since; an element added or removed changes
    the length. An item of a mutable type none of these describe (a ``bytearray``, an array)
    gets a marker never equal to another, so its list is encoded whole every time: re-encoding
    is slower, storing stale bytes is wrong."""
    state: list[Any] = []
    for item in items:
        state.append(item)
        _assignable(item, state)
        state.append(_END)
    return state


# closes an item's state, so a value moved from one item into the next is seen as moved
_END = object()
# what cannot change in place: held by identity, nothing to look into
_ATOMS = (str, bytes, int, float, complex, bool, type(None), Enum, date, time, timedelta, UUID,
          Decimal, Fraction, range, PurePath, frozenset)  # fmt: skip
# slots that hold no value of their own: the attribute dict (looked into as such), weak
# references, and which fields a pydantic model had set (changed only with a field's value,
# which its __dict__ shows)
_NOT_STATE = frozenset({"__dict__", "__weakref__", "__pydantic_fields_set__"})


def _assignable(item: Any, state: list[Any]) -> None:
    """Append to ``state`` what can be assigned on ``item`` itself (see shallow_state)."""
    plan = _PLANS.get(type(item))
    if plan is None:
        if len(_PLANS) > 4096:  # classes made on the fly must not grow it without bound
            _PLANS.clear()
        plan = _PLANS[type(item)] = _plan(type(item))
    mapping, elements, slots, opaque = plan
    if mapping:
        state += item
        state += item.values()
    elif elements:
        state += item
    fields = getattr(item, "__dict__", None)
    if fields is not None:
        # values only: an object's attribute names are its class's (one added or removed
        # changes the length)
        state += fields.values()
    elif opaque:
        state.append(object())
    for name in slots:
        state.append(getattr(item, name, _END))


# per type: (a mapping, a collection of elements, its classes' value slots, nothing to look
# into unless it has a __dict__); types are few (messages, dicts), so the plans stay few
_Plan = tuple[bool, bool, tuple[str, ...], bool]
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    if issubclass(cls, _ATOMS):
        return False, False, (), False
    mapping = issubclass(cls, Mapping)
    elements = not mapping and issubclass(cls, (list, tuple, deque, set))
    slots: list[str] = []
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        names = (declared,) if isinstance(declared, str) else tuple(declared)
        slots += (n for n in names if n not in _NOT_STATE)
    return mapping, elements, tuple(slots), not (mapping or elements or slots)


def array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 0x10000:
        return b"\xdc" + struct.pack(">H", count)
    return b"\xdd" + struct.pack(">I", count)


@dataclass(slots=True)
class Known:
    """A list value this process knows is stored, as a possible base for the next tail."""

    version: str  # version key (see core.codec.version_key)
    head: str  # "<event id> <field>" of its newest part: the script checks it before appending
    body: bytes  # the items' encodings, without the array header
    count: int
    chain: int  # tails since the snapshot
    chain_bytes: int
    snapshot_bytes: int
    # with reuse_items: the objects ``body`` encodes, item for item (a list of its own, so a
    # caller changing the list it got back changes nothing here), and their shallow_state
    items: list[Any] | None = None
    state: list[Any] | None = None

    def holds(self, value: list[Any]) -> bool:
        """Whether ``value`` starts with the held objects, none of them assigned to since."""
        held, state = self.items, self.state
        if held is None or state is None or len(value) < len(held):
            return False
        if not all(map(operator.is_, held, value)):
            return False
        now = shallow_state(held)
        return len(now) == len(state) and all(map(operator.is_, state, now))

    def extend(self, data: bytes, count: int, header: int) -> bytes | None:
        """The tail that turns this value into ``data``, if the policy allows one."""
        # bytes.startswith is a memcmp; comparing memoryview slices goes item by item
        if count < self.count or not data.startswith(self.body, header):
            return None
        tail = data[header + len(self.body) :]
        if (
            self.chain + 1 > MAX_CHAIN
            or self.chain_bytes + len(tail) > SNAPSHOT_SPACING * self.snapshot_bytes
        ):
            return None
        return tail


@dataclass(frozen=True, slots=True)
class Written:
    """The writes this process appended for one checkpoint: ``(ref, field bytes)``, ref being
    ``"<event id> w<i>"``."""

    checkpoint_id: str
    fields: tuple[tuple[str, bytes], ...]
    # what it counts against the cache's bound
    size: int = 0

    @classmethod
    def of(cls, checkpoint_id: str, fields: tuple[tuple[str, bytes], ...]) -> Written:
        return cls(checkpoint_id, fields, sum(len(raw) for _, raw in fields) + ENTRY_BYTES)

    def sharing(self, tail: bytes) -> tuple[str, int] | None:
        """(ref, offset) of a write whose field ends with exactly ``tail``, if any."""
        if len(tail) < MIN_SHARED_BYTES:
            return None
        for ref, raw in self.fields:
            if raw.endswith(tail):
                return ref, len(raw) - len(tail)
        return None


@dataclass(frozen=True, slots=True)
class _Group:
    """What the cache holds for one (thread, namespace): its list values by channel, and the
    writes of its latest checkpoint. Replaced, never changed, so its size stays what the LRU
    counted."""

    values: dict[str, Known]
    written: Written | None = None
    size: int = 0  # what it counts against the bound (_group)


def _group(values: dict[str, Known], written: Written | None) -> _Group:
    return _Group(values, written, sum(map(_cost, values.values())) + _size(written))


_NO_GROUP = _Group({})
_SIZE = operator.attrgetter("size")


class DeltaCache:
    """Per (thread, namespace), the last list value seen stored for each channel: the base
    for the next append, and what reads can skip. LRU over (thread, namespace), bounded by
    ``max_bytes`` counted as each entry's body plus ``ENTRY_BYTES``; a (thread, namespace)
    evicted takes its writes with it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._groups: LRUCache[tuple[str, str], _Group] = LRUCache(max_bytes, _SIZE)
        # the sync saver is called from LangGraph's background threads
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """The bytes counted against ``max_bytes``."""
        return int(self._groups.currsize)

    def __len__(self) -> int:
        """How many (thread, namespace) pairs it holds values for."""
        return len(self._groups)

    def get(self, key: tuple[str, str, str]) -> Known | None:
        with self._lock:
            return self._find(key[:2]).values.get(key[2])

    def held(self, thread_id: str, checkpoint_ns: str) -> dict[str, Known]:
        """Every channel value held for the thread and namespace (a copy)."""
        with self._lock:
            return dict(self._find((thread_id, checkpoint_ns)).values)

    def put(self, key: tuple[str, str, str], known: Known) -> None:
        if known.items is not None and _cost(known) > self.max_bytes:
            # its bytes alone may still fit: appends need only them
            known.items = known.state = None
        if _cost(known) > self.max_bytes:
            self.drop(key)
            return
        with self._lock:
            group = self._find(key[:2])
            self._store(key[:2], _group({**group.values, key[2]: known}, group.written))

    def _find(self, scope: tuple[str, str]) -> _Group:
        # one lookup (LRUCache.get asks `in` first): this is on every call's path
        try:
            return self._groups[scope]
        except KeyError:
            return _NO_GROUP

    def _store(self, scope: tuple[str, str], group: _Group) -> None:
        if not group.values and group.written is None:
            self._groups.pop(scope, None)
            return
        try:
            self._groups[scope] = group
        except ValueError:  # larger than the whole bound: what it replaces goes too
            self._groups.pop(scope, None)

    def wrote(
        self, scope: tuple[str, str], checkpoint_id: str, fields: list[tuple[str, bytes]]
    ) -> None:
        """Remember writes appended for ``checkpoint_id``; those of an older checkpoint go."""
        with self._lock:
            group = self._find(scope)
            old = group.written
            if old is not None and old.checkpoint_id == checkpoint_id:
                fields = [*old.fields, *fields]
            new = Written.of(checkpoint_id, tuple(fields))
            self._store(
                scope, _group(group.values, new if new.size <= self.max_bytes // 4 else None)
            )

    def written(self, scope: tuple[str, str], checkpoint_id: str | None) -> Written | None:
        with self._lock:
            found = self._find(scope).written
            return found if found is not None and found.checkpoint_id == checkpoint_id else None

    def drop_thread(self, thread_id: str) -> None:
        """Forget every value held for the thread, in every namespace."""
        with self._lock:
            for scope in [s for s in self._groups if s[0] == thread_id]:
                del self._groups[scope]

    def drop(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            group = self._groups.get(key[:2])
            if group is None or key[2] not in group.values:
                return
            values = {channel: v for channel, v in group.values.items() if channel != key[2]}
            if values:
                self._store(key[:2], _group(values, group.written))
            else:
                # an empty group would only keep its writes: eviction goes by groups
                del self._groups[key[:2]]


def _cost(known: Known) -> int:
    return len(known.body) + ENTRY_BYTES + (ITEM_BYTES * len(known.items) if known.items else 0)


def _size(written: Written | None) -> int:
    return written.size if written is not None else 0
