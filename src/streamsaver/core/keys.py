"""The keyspace: every Redis key streamsaver uses is named here.

A thread owns three keys, ``<prefix>:{<tag>}:log|ix|ptr``. They share the hash tag ``{<tag>}``,
so every script touches a single Redis Cluster slot. The tag is the thread id percent-encoded
(RFC 3986 unreserved characters stay as they are): it can hold no ``{``, ``}`` or ``:``, two
thread ids never share a tag, and the thread id is recoverable from any key. Inside the keys,
namespaces, channels and tasks are length-prefixed (``lp``), never escaped.

Every other key of a prefix is per Redis Cluster slot, ``<prefix>:{<slot tag>}:<kind>``
(``core/feeds.py``), so every key of a prefix starts with ``<prefix>:{``: the one ACL pattern of
``key_pattern`` covers them all, and no other prefix's (docs/keyspace.md).
"""

from __future__ import annotations

from binascii import crc_hqx
from typing import NamedTuple
from urllib.parse import quote, unquote

from .config import check_text
from .errors import InvalidInputError
from .slots import SLOTS, slot_tag

__all__ = [
    "DEFAULT_PREFIX",
    "STORE_BUCKETS",
    "StoreKeys",
    "ThreadKeys",
    "compact_keys",
    "escape_glob",
    "key_pattern",
    "log_pattern",
    "lp",
    "rebuild_keys",
    "scratch_keys",
    "store_bucket",
    "store_epoch_key",
    "store_keys",
    "thread_id_of",
    "thread_keys",
    "validate_prefix",
    "verify_keys",
]

DEFAULT_PREFIX = "streamsaver"

# quote("") is "", and an empty hash tag "{}" would hash the whole key instead of the tag,
# splitting the thread across slots. quote() never emits a lone "%", so it is free for "".
_EMPTY_TAG = "%"


class ThreadKeys(NamedTuple):
    log: str
    ix: str
    ptr: str


def validate_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}\r\n"):
        raise InvalidInputError(
            f"prefix={prefix!r} is not usable: give a non-empty string without '{{', '}}' or "
            f"newlines, e.g. prefix='streamsaver'"
        )
    return check_text(prefix, "prefix")


def _tag(thread_id: str) -> str:
    # every thread's keys are named here, whichever call named the thread
    return quote(check_text(thread_id, "thread_id"), safe="") or _EMPTY_TAG


def thread_keys(prefix: str, thread_id: str) -> ThreadKeys:
    base = f"{prefix}:{{{_tag(thread_id)}}}:"
    return ThreadKeys(base + "log", base + "ix", base + "ptr")


def scratch_keys(keys: ThreadKeys) -> tuple[str, str]:
    """Index keys for a verification replay: same slot, and outside every SCAN pattern."""
    return keys.ix + ":verify", keys.ptr + ":verify"


def verify_keys(keys: ThreadKeys) -> tuple[str, str, str, str, str]:
    """A sliced verify's (lua/checkpoint/verify_slice.lua): the scratch indexes (``scratch_keys``),
    its
    cursor, the checkpoints its events still want and those it saw."""
    return (
        *scratch_keys(keys),
        keys.ix + ":verify:at",
        keys.ix + ":verify:pending",
        keys.ix + ":verify:seen",
    )


def rebuild_keys(keys: ThreadKeys) -> tuple[str, str, str]:
    """Where a sliced rebuild (lua/checkpoint/replay_slice.lua) builds the indexes, and its
    cursor."""
    return keys.ix + ":rebuild", keys.ptr + ":rebuild", keys.ix + ":rebuild:at"


def compact_keys(keys: ThreadKeys) -> tuple[str, str, str, str, str]:
    """Where a sliced compaction (lua/checkpoint/compact_slice.lua) builds the new log and its
    indexes,
    its state and its plan; the first three are renamed over ``log``/``ix``/``ptr``. None ends
    in ``:log``, so no SCAN for logs finds them."""
    return (
        keys.log + ":compact",
        keys.ix + ":compact",
        keys.ptr + ":compact",
        keys.ix + ":compact:at",
        keys.ix + ":compact:plan",
    )


def escape_glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def key_pattern(prefix: str) -> str:
    """The glob of every key under ``prefix``, and of no other prefix's keys. Each key is
    ``<prefix>:{...`` (thread keys, and per-slot keys in ``core/feeds.py``), and a prefix holds no
    ``{``, so for prefixes P != Q, ``Q:{`` is never a prefix of ``P:{``: with ``app`` and
    ``app:tenant2``, the character after ``app:`` is ``{`` in one and ``t`` in the other."""
    return escape_glob(validate_prefix(prefix)) + ":{*"


def log_pattern(prefix: str) -> str:
    """SCAN pattern for every thread log under ``prefix``; only the prefix reaches the glob."""
    return escape_glob(prefix) + ":{*}:log"


def thread_id_of(prefix: str, log_key: str) -> str:
    tag = log_key[len(prefix) + 2 : -len("}:log")]
    return "" if tag == _EMPTY_TAG else unquote(tag)


def lp(text: str) -> str:
    """Length prefix, as the Lua scripts build it: byte length, ':', the text."""
    return f"{len(text.encode())}:{text}"


# The Store's keys. A namespace (its labels joined by ".", which no label may hold) lives in one of
# STORE_BUCKETS buckets, chosen by its CRC; a bucket's keys share the hash tag of a fixed slot,
# ``<prefix>:{<slot tag>}:mlog|mix|mitem|mns|mexp|mvec|mft|mnsz`` (lua/store/store.lua says what
# each holds; with the server's vector index, also the documents ``...:mv:<sha1>:<j>``). Reads
# across namespaces (prefix search, list_namespaces) visit every bucket: a fixed, small number of
# keys, found without SCAN, spread evenly over the cluster's slots. The ``m`` suffixes are distinct
# from a thread's ``log|ix|ptr`` and from every per-slot kind, so the tag may equal a thread's (a
# thread id of four such characters) without any key colliding. User data is never part of a key
# name.
STORE_BUCKETS = 256


class StoreKeys(NamedTuple):
    log: str
    ix: str
    item: str
    ns: str
    exp: str
    vec: str
    ft: str
    nsz: str


def store_slice_keys(keys: StoreKeys, mode: str) -> tuple[str, ...]:
    """lua/store/store_slice.lua's keys for ``mode`` ('rebuild' or 'verify', each its own scratch
    keys, so one of each may run at once): the bucket's, then its scratch indexes, state, the
    mvec a rebuild replaced, and the bucket's epoch (same slot)."""
    scratch = tuple(f"{key}:{mode}" for key in (*keys[1:6], keys.nsz))
    state = f"{keys.log}:{mode}"
    return (*keys, *scratch, state, f"{keys.vec}:{mode}-old", store_epoch_key(keys))


def store_epoch_key(keys: StoreKeys) -> str:
    """A hash whose field ``n`` counts the rebuilds that swapped the bucket's indexes in: a
    search's HSCAN cannot go on from one hash in another (lua/store/store_scan.lua)."""
    return f"{keys.log}:epoch"


def store_bucket(namespace: str) -> int:
    return crc_hqx(namespace.encode(), 0) % STORE_BUCKETS


def store_keys(prefix: str, bucket: int) -> StoreKeys:
    base = f"{prefix}:{{{slot_tag(bucket * (SLOTS // STORE_BUCKETS))}}}:"
    kinds = ("mlog", "mix", "mitem", "mns", "mexp", "mvec", "mft", "mnsz")
    return StoreKeys(*(base + kind for kind in kinds))
