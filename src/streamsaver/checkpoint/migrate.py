"""``migrate-keys``: move a prefix's per-slot keys from the layout before tenant-tight ACL
patterns to today's, and index the threads written before the thread indexes. No I/O.

Before, per-slot keys were ``<prefix>:<kind>:{<slot tag>}``, outside ``<prefix>:{*``, the one
ACL pattern of a tenant (``core.keys.key_pattern``). Both names share the hash tag, so ``RENAMENX``
moves each within its slot, keeping a feed's consumer groups. Run it once per prefix, as an
admin (it uses ``SCAN`` to find the logs, the permission tenants no longer have), with the
prefix's writers stopped: a writer of the new version would start a new feed beside the old one,
and RENAMENX then leaves the old one where it is (reported as a conflict).
"""

from __future__ import annotations

import builtins
from typing import NamedTuple

from ..core.feeds import SEED_KINDS, SLOT_KINDS, slot_key, threads_key
from ..core.flow import Call, Each, Flow, ScanLogs
from ..core.keys import log_pattern, thread_id_of
from ..core.slots import SLOTS, slot_of, slot_tag

__all__ = ["Migrated", "migrate_keys", "old_slot_key", "reindex_threads"]

_BATCH = 4096


class Migrated(NamedTuple):
    moved: int
    conflicts: builtins.list[str]  # old names left in place: the new name was taken
    indexed: int  # threads added to their slot's thread index


def old_slot_key(prefix: str, slot: int, kind: str) -> str:
    """A per-slot key's name before this layout (never a thread index: it did not exist)."""
    return f"{prefix}:{kind}:{{{slot_tag(slot)}}}"


def migrate_keys(prefix: str) -> Flow[Migrated]:
    pairs = [
        (old_slot_key(prefix, s, kind), slot_key(prefix, s, kind))
        for s in range(SLOTS)
        for kind in SLOT_KINDS
        # neither existed in that layout
        if kind != "threads" and kind not in SEED_KINDS
    ]
    moved, conflicts = 0, []
    for start in range(0, len(pairs), _BATCH):
        chunk = pairs[start : start + _BATCH]
        found = yield Each(tuple(Call(("EXISTS", old)) for old, _ in chunk))
        present = [p for p, n in zip(chunk, found, strict=True) if n == 1]
        done = yield Each(tuple(Call(("RENAMENX", old, new), write=True) for old, new in present))
        for (old, _), ok in zip(present, done, strict=True):
            if isinstance(ok, Exception):
                raise ok
            if ok:
                moved += 1
            else:
                conflicts.append(old)
    indexed = yield from reindex_threads(prefix)
    return Migrated(moved, conflicts, indexed)


def reindex_threads(prefix: str) -> Flow[int]:
    """Add every thread log under ``prefix`` to its slot's thread index; returns how many were
    missing. The index is derived, like every key but the logs (DESIGN.md, principle 1), but
    only a SCAN can find logs no index names: an admin's job (``rebuild --all``)."""
    by_slot: dict[int, builtins.list[str]] = {}
    for key in (yield ScanLogs(log_pattern(prefix))):
        log = key.decode() if isinstance(key, bytes) else key
        by_slot.setdefault(slot_of(log), []).append(thread_id_of(prefix, log))
    added = yield Each(
        tuple(
            Call(("SADD", threads_key(prefix, slot), *threads), write=True)
            for slot, threads in by_slot.items()
        )
    )
    indexed = 0
    for reply in added:
        if isinstance(reply, Exception):
            raise reply
        indexed += int(reply)
    return indexed
