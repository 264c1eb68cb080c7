"""``get_delta_channel_history`` in one round trip. No I/O.

LangGraph's ``DeltaChannel`` rebuilds its value from the writes of a checkpoint's ancestors, back
to the nearest one storing a value for it (the seed). ``BaseCheckpointSaver``'s default walk
reads every ancestor with one ``get_tuple``; here lua/checkpoint/delta_history.lua walks the parent
chain
inside Redis and returns the requested channels' writes and seeds, which this module decodes
into exactly what the default walk returns: per ancestor, writes in ``writes_sort_key`` order
(as ``get_tuple``'s ``pending_writes``), ancestors oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite, writes_sort_key

from ..core.config import check_text, target_of
from ..core.errors import CorruptIndexError, InvalidInputError
from ..core.flow import Eval, Flow
from ..core.keys import lp
from ..core.values import ABSENT
from .ops import Operations

__all__ = ["delta_channel_history"]


def _channels(channels: object) -> list[str]:
    if isinstance(channels, (str, bytes)) or not isinstance(channels, Sequence):
        raise InvalidInputError(
            f"channels={channels!r}: give a list of channel names (strings), e.g. ['messages']"
        )
    for i, channel in enumerate(channels):
        if not isinstance(channel, str):
            raise InvalidInputError(
                f"channels[{i}]={channel!r} is a {type(channel).__name__}; channel names are "
                f"strings"
            )
        check_text(channel, f"channels[{i}]")
    return list(channels)


def delta_channel_history(
    ops: Operations, config: RunnableConfig, channels: Sequence[str]
) -> Flow[dict[str, DeltaChannelHistory]]:
    names = _channels(channels)
    if not names:
        return {}
    target = target_of(config)
    reply = yield Eval(
        "delta_history",
        ops.keys(target.thread_id),
        (lp(target.checkpoint_ns), target.checkpoint_id or "", *dict.fromkeys(names)),
    )
    writes: dict[str, list[PendingWrite]] = {name: [] for name in names}
    seeds: dict[str, Any] = {}
    if reply:
        try:
            # nearest ancestor first; the result lists writes oldest first
            for ancestor_writes, ancestor_seeds in reversed(reply[0]):
                _add_writes(ops, ancestor_writes, writes)
                _add_seeds(ops, ancestor_seeds, seeds)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise CorruptIndexError(
                f"the DeltaChannel history of checkpoint {target.checkpoint_id or '(latest)'} "
                f"in namespace {target.checkpoint_ns!r} of thread {target.thread_id!r} cannot be "
                f"decoded ({exc!r}); inspect the thread's log with XRANGE, repair it, then "
                f"rebuild the thread"
            ) from exc
    result: dict[str, DeltaChannelHistory] = {}
    for name in names:
        entry: DeltaChannelHistory = {"writes": writes[name]}
        if name in seeds:
            entry["seed"] = seeds[name]
        result[name] = entry
    return result


def _add_writes(ops: Operations, flat: Sequence[Any], into: dict[str, list[PendingWrite]]) -> None:
    rows = [
        (path.decode(), task.decode(), int(idx), channel.decode(), raw)
        for task, idx, path, channel, raw in zip(*(flat[i::5] for i in range(5)), strict=True)
    ]
    rows.sort(key=lambda r: writes_sort_key(r[0], r[1], r[2]))
    for _, task, _, channel, raw in rows:
        into[channel].append((task, channel, ops.codec.load(raw)))


def _add_seeds(ops: Operations, flat: Sequence[Any], into: dict[str, Any]) -> None:
    for channel, version, head, parts in zip(*(flat[i::4] for i in range(4)), strict=True):
        value, _ = ops.codec._compose(version, head, parts, b"", None)
        if value is not ABSENT:
            into[channel.decode()] = value
