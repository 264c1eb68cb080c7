"""A search that looks at every item under its namespace prefix (a filter, a ranking without
the server's vector index, a deep page), and a listing of the namespaces, in slices
(lua/store/store_scan.lua): in one script, a namespace of a million items (or a million namespaces)
held the server, and every tenant on it, for seconds.

The slices' answers are put together into what one script would have answered at the moment
of the last slice. HSCAN answers every item that stays in a bucket from its first page to its
last at least once, and such an item did not change since the first page; every item that
changed meanwhile has an event in the bucket's log after the id the first page read, so the
'since' slices, reading the log after it, answer those items as they are at the end. A scan
that was one call already is that script: nothing follows it."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from ..core.flow import Each, Eval, Flow
from ..core.keys import StoreKeys, store_bucket, store_epoch_key
from ..core.replies import as_text
from ..core.slicing import round_width

__all__ = ["scan_items"]

_CHUNK = 32


def scan_items(
    keys: Sequence[StoreKeys],
    cluster: bool,
    prefix: str,
    kind: str,
    vec: bool,
    slice_ms: float,
) -> Flow[builtins.list[Any]]:
    """Every live item under ``prefix`` as rows ``[member, ...]``, ``kind`` 'rank' (no
    values) or 'values' (with vectors if ``vec``), as lua/store/store_scan.lua gives them; or, kind
    'names', every namespace holding a live item. In no order. A caller waits for it: the
    slices follow each other without pauses; each is a separate command, so other clients
    are served between them."""
    head = (prefix, kind, "vec" if vec else "")
    buckets = builtins.list(range(len(keys)))
    # each call's buckets and where it goes on: on a cluster a script may not span slots; on
    # one server a call names _CHUNK buckets' keys, which it converts before it starts
    per_call = 1 if cluster else _CHUNK
    pending = [(buckets[i : i + per_call], "") for i in range(0, len(buckets), per_call)]
    # by member (an item's lp(namespace) .. key, or a namespace): one bucket holds each
    rows: dict[bytes, builtins.list[Any]] = {}
    starts: dict[int, str] = {}
    rounds, width = 0, round_width(slice_ms)
    while pending:
        # the first round asks every bucket at once (most are small or empty); the rest go
        # as a long operation's rounds do, sharing one slice
        batch = pending if not rounds else pending[:width]
        rest = pending[len(batch) :]
        budget = f"{slice_ms / len(batch):g}"
        replies = yield Each(
            tuple(
                Eval(
                    "store_scan",
                    [key for b in bs for key in _scanned(keys[b])],
                    ("scan", *head, budget, where),
                )
                for bs, where in batch
            )
        )
        rounds += 1
        for (bs, _), reply in zip(batch, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            where, restarted, started, *found = reply
            if int(restarted):
                # a rebuild swapped the bucket's indexes in: what its pages gave is void
                void = bs[int(restarted) - 1]
                rows = {m: r for m, r in rows.items() if _bucket(m, kind) != void}
            for i in range(0, len(started), 2):
                starts[bs[int(started[i]) - 1]] = as_text(started[i + 1])
            for row in found:
                rows[row[0]] = row
            if where:
                rest += _going_on(bs, as_text(where))
        pending = rest
    if rounds > 1:
        yield from _since(keys, head, slice_ms, starts, rows)
    if kind == "names":
        return builtins.list(rows)
    return builtins.list(rows.values())


def _since(
    keys: Sequence[StoreKeys],
    head: tuple[str, str, str],
    slice_ms: float,
    starts: dict[int, str],
    rows: dict[bytes, builtins.list[Any]],
) -> Flow[None]:
    """Bring ``rows`` to the items' state now: every item an event after the bucket's first
    page names, read again (a row), or gone (its member alone)."""
    todo = dict(starts)
    while todo:
        batch = builtins.list(todo.items())
        budget = f"{slice_ms / len(batch):g}"
        replies = yield Each(
            tuple(
                Eval(
                    "store_scan",
                    (keys[b].log, keys[b].item, keys[b].ns, keys[b].vec, keys[b].exp),
                    ("since", *head, budget, after),
                )
                for b, after in batch
            )
        )
        for (b, _), reply in zip(batch, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            last, through, *changed = reply
            for row in changed:
                if len(row) == 1:
                    rows.pop(row[0], None)
                else:
                    rows[row[0]] = row
            if int(through):
                del todo[b]
            else:
                todo[b] = as_text(last)


def _going_on(
    buckets: builtins.list[int], where: str
) -> builtins.list[tuple[builtins.list[int], str]]:
    """The calls that go on from ``where`` ('<n> <cursor> <epoch>', n counted in
    ``buckets``): the bucket half-read alone, then those after it. A script's arguments are
    converted before it runs, outside its budget: each call names only the keys it reads."""
    n, cursor, *epoch = where.split(" ")
    at = int(n) - 1
    if cursor == "0":
        return [(buckets[at:], "")]
    after = [(buckets[at + 1 :], "")] if at + 1 < len(buckets) else []
    return [([buckets[at]], " ".join(("1", cursor, *epoch))), *after]


def _scanned(keys: StoreKeys) -> tuple[str, ...]:
    return (keys.log, keys.item, keys.ns, keys.vec, store_epoch_key(keys), keys.nsz, keys.exp)


def _bucket(member: bytes, kind: str) -> int:
    """The bucket of an item's member, lp(namespace) .. key, or of a namespace."""
    if kind == "names":
        return store_bucket(member.decode())
    length, _, rest = member.partition(b":")
    return store_bucket(rest[: int(length)].decode())
