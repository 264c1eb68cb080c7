"""The feed keyspace: where tail_all and consumer groups learn about every thread. No I/O.

Every append script also adds a small pointer entry (thread id, event id, kind, namespace,
checkpoint id) to the *feed* of the thread's Redis Cluster slot, ``<prefix>:{<slot tag>}:feed``.
The slot tag is a fixed 4-character string whose CRC16 lands in that slot, so the feed shares
the thread's slot and the append stays one single-slot script. There are at most 16384 feeds
per prefix, and their names are known in advance, so a reader finds them by probing those names
instead of scanning the keyspace. Feeds are derived, trimmed pointers: the thread logs remain
the only source of truth, and nothing (rebuild, replay, reads) needs them.

Poison entries of a consumer group are parked in ``<prefix>:{<slot tag>}:parked``, the same slot.
``delete_thread`` records each deleted log in ``<prefix>:{<slot tag>}:audit`` of the log's slot
(docs/audit.md): the log is gone, the record of its deletion stays. Every append also adds its
thread id to ``<prefix>:{<slot tag>}:threads``, the slot's thread index, so listing threads
needs no ``SCAN`` (a permission that would show every tenant's key names).

Per-slot keys, like thread keys, start with ``<prefix>:{`` (see ``core.keys.key_pattern``): a
prefix cannot hold ``{``, so that one ACL pattern covers exactly one prefix's keys. Their
suffixes (``feed``, ``parked``, ``audit``, ``threads`` and the projector's,
``checkpoint/projections.py``)
differ from every thread key's (``log``, ``ix``, ``ptr``, ...), so a slot tag that is also some
thread's tag names different keys.
"""

from __future__ import annotations

from .keys import escape_glob
from .slots import slot_of, slot_tag

__all__ = [
    "DEFAULT_FEED_MAXLEN",
    "SEED_KINDS",
    "SLOT_KINDS",
    "audit_of_log",
    "feed_key",
    "feed_of_log",
    "feed_pattern",
    "parked_key",
    "slot_key",
    "slot_of_feed",
    "threads_key",
]

# the suffixes of per-slot keys, here and in checkpoint/projections.py: never a thread key's suffix
# (a slot tag can be a thread's tag too). checkpoint/migrate.py moves them from the earlier layout,
# ``<prefix>:<kind>:{<slot tag>}`` (docs/keyspace.md)
# a seed's scratch keys (lua/projector/seed.lua), renamed over the projections it rebuilt, and its
# state
SEED_KINDS = ("registry.seed", "activity.seed", "runs.seed", "meta.seed", "seed")
SLOT_KINDS = (
    "feed", "parked", "audit", "threads", "projector", "registry", "activity", "runs", "meta",
    *SEED_KINDS,
)  # fmt: skip
DEFAULT_FEED_MAXLEN = 10_000


def slot_key(prefix: str, slot: int, kind: str) -> str:
    """A per-slot key: ``kind`` is one of ``SLOT_KINDS`` (never a thread key's suffix)."""
    return f"{prefix}:{{{slot_tag(slot)}}}:{kind}"


def feed_key(prefix: str, slot: int) -> str:
    return slot_key(prefix, slot, "feed")


def parked_key(prefix: str, slot: int) -> str:
    return slot_key(prefix, slot, "parked")


def threads_key(prefix: str, slot: int) -> str:
    """The slot's thread index: a set of the thread ids appended to in it
    (lua/shared/common.lua)."""
    return slot_key(prefix, slot, "threads")


def audit_of_log(prefix: str, log_key: str) -> str:
    """Where deleting this thread is recorded: the audit stream of the log's own slot."""
    return slot_key(prefix, slot_of(log_key), "audit")


def feed_of_log(prefix: str, log_key: str) -> str:
    """The feed a thread's appends notify: the one in the log's own slot."""
    return feed_key(prefix, slot_of(log_key))


def slot_of_feed(prefix: str, key: str) -> int:
    return slot_of(key)


def feed_pattern(prefix: str) -> str:
    """SCAN pattern of every feed under ``prefix`` (for tools; streamsaver itself probes)."""
    return escape_glob(prefix) + ":{*}:feed"
