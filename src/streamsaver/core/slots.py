"""Redis Cluster's slots: the slot of a key, and for every slot a fixed 4-character hash tag that
lands in it, so per-slot keys (feeds, thread indexes, the Store's buckets) can be named in advance
and found by probing names rather than by ``SCAN``. No I/O."""

from __future__ import annotations

from binascii import crc_hqx
from functools import cache

__all__ = ["SLOTS", "slot_of", "slot_tag"]


SLOTS = 16384


_MASK = SLOTS - 1


_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


@cache
def _slot_tags() -> tuple[str, ...]:
    """For every slot, the first 4-character tag (one character, then three, each over
    ``_ALPHABET`` in order) whose CRC16 lands in it. The CRC (XMODEM, initial value 0) is linear
    over bytes of a fixed length, so ``crc(p + q) = crc(p + "\\0\\0\\0") ^ crc(q)``: a dictionary
    of three-character tails turns the search into about one lookup per slot. These names are
    stored keys: never change the enumeration."""
    tails: dict[int, str] = {}
    for a in _ALPHABET:
        for b in _ALPHABET:
            for c in _ALPHABET:
                q = a + b + c
                tails.setdefault(crc_hqx(q.encode(), 0) & _MASK, q)
    heads = [(p, crc_hqx(p.encode() + b"\0\0\0", 0) & _MASK) for p in _ALPHABET]
    tags = []
    for slot in range(SLOTS):
        for p, h in heads:
            tail = tails.get(slot ^ h)
            if tail is not None:
                tags.append(p + tail)
                break
        else:  # pragma: no cover - the alphabet covers every slot (tested)
            raise AssertionError(f"no slot tag for slot {slot}")
    return tuple(tags)


def slot_tag(slot: int) -> str:
    return _slot_tags()[slot]


def slot_of(key: str) -> int:
    """Redis Cluster's slot of ``key`` (its hash tag, or the whole key)."""
    raw = key.encode()
    start = raw.find(b"{")
    if start > -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return crc_hqx(raw, 0) & _MASK
