"""The keyword options a saver passes on, each named and typed once for ``**options`` (PEP 692).

A reader's options go to its core in ``tailing``, which holds their defaults and checks their
values; ``from_conn_string``'s go to the saver's constructor, which does the same. The sync
and async savers' methods take them as ``**options: Unpack[...]``, so neither shell repeats
a list of parameters the other or the core already has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core.durability import DurabilityMode
from ..events import FeedCursor
from ..tailing.feeds import FeedReadOptions
from ..tailing.steps import Report

__all__ = [
    "GroupOptions",
    "SaverOptions",
    "TailAllOptions",
    "TailOptions",
    "check_options",
]


class SaverOptions(TypedDict, total=False):
    """The constructor's options that ``from_conn_string`` passes on (its defaults apply)."""

    prefix: str
    serde: SerializerProtocol | None
    max_payload_bytes: int
    delta_cache_bytes: int
    durability: DurabilityMode
    replicas: int
    durability_timeout_ms: int
    fencing: bool
    ttl_seconds: float | None
    audit_retention_seconds: float | None
    keep_last: int | None
    chain: bool
    allow_eviction: bool
    reuse_items: bool
    slice_ms: float | None
    slice_pause: float | None


class _ReadOptions(TypedDict, total=False):
    block_ms: int
    count: int
    on_skip: Report | None


class _Following(_ReadOptions, total=False):
    follow: bool
    checkpoint_ns: str | None


class TailOptions(_Following, total=False):
    """``tail``'s options (``tailing.thread.ThreadTail``'s)."""

    after: str


class TailAllOptions(_Following, FeedReadOptions, total=False):
    """``tail_all``'s options (``tailing.feeds.FeedTail``'s)."""

    after: str | FeedCursor


class GroupOptions(FeedReadOptions, total=False):
    """``consumer_group``'s options (``tailing.groups.GroupReader``'s)."""

    start: str
    min_idle_ms: int
    max_deliveries: int
    claim_ms: int | None
    reap_idle_ms: int


def check_options(options: Mapping[str, object], known: frozenset[str], method: str) -> None:
    """Refuse what the method does not take, as Python would, although what it passes the
    options to would take it (a reader core's ``clock``)."""
    for name in options:
        if name not in known:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")
