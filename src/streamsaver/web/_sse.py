"""Server-Sent Events: each event's SSE id is the position to resume after (a thread's event
id; for every thread's events, ``_hub.cursor_id``), so a reconnect with ``Last-Event-ID``
misses nothing and repeats nothing, even against another server process: the position is
made of Redis stream ids."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from ..audit.steps import StepMemory
from ..checkpoint.aio import AsyncRedisStreamSaver
from ..core.config import make_config
from ..core.errors import InvalidInputError
from ..core.keys import thread_keys
from ..core.replies import as_text
from ..core.stream_ids import ENTRY_ID, id_key
from ..events import FeedCursor, ThreadEvent
from ._views import event_view

_ID = ENTRY_ID
_THREAD_AFTER = re.compile(rf"^(\$|0|{_ID})$")
_CURSOR = re.compile(rf"^c(\d{{1,5}}:{_ID}(\.\d{{1,5}}:{_ID})*)?$")


def thread_after(value: str) -> str:
    """A thread stream's start: ``$`` (new events), ``0`` (all) or an event id."""
    if not _THREAD_AFTER.match(value):
        raise InvalidInputError(
            f"after / Last-Event-ID must be '$', '0' or an event id like '1700000000000-0', "
            f"got {value[:100]!r}"
        )
    return value


def feed_after(value: str, prefix: str) -> str | FeedCursor:
    """``$``, ``0`` or an SSE id made by ``_hub.cursor_id``."""
    if value in ("$", "0"):
        return value
    if not _CURSOR.match(value):
        raise InvalidInputError(
            f"after / Last-Event-ID of /events must be '$', '0' or an id this server sent "
            f"(c<slot>:<id>...), got {value[:100]!r}"
        )
    pairs = (p.split(":", 1) for p in value[1:].split(".") if p)
    return FeedCursor(prefix=prefix, positions={int(s): pos for s, pos in pairs})


def _message(event: ThreadEvent, event_id: str, step: int | None) -> dict[str, Any]:
    # json.dumps escapes control characters, so no user string can end the SSE field early
    data = json.dumps(event_view(event, step))
    return {"id": event_id, "event": event.kind, "data": data}


async def check_resume(saver: AsyncRedisStreamSaver, thread_id: str, after: str) -> None:
    """An event id past the thread's last event is not a place to resume from (a client of
    another thread or server, or a log deleted since): a typed error, 400, rather than a
    stream that waits for events that would not be the ones after it."""
    if after in ("$", "0"):
        return
    log = thread_keys(saver.prefix, thread_id).log
    last = await saver.client.xrevrange(log, "+", "-", count=1)
    newest = as_text(last[0][0]) if last else "0-0"
    if id_key(after) > id_key(newest):
        raise InvalidInputError(
            f"after / Last-Event-ID {after!r} is past thread {thread_id!r}'s last event "
            f"({newest}): reload the page, or resume from an id this server sent"
        )


async def thread_stream(
    saver: AsyncRedisStreamSaver, thread_id: str, after: str
) -> AsyncIterator[dict[str, Any]]:
    tail = saver.atail(thread_id, after=after)
    steps = StepMemory()
    try:
        async for event in tail:
            if steps.missing(event):
                # its checkpoint is on the page, before this stream: one read, then known
                config = make_config(thread_id, event.checkpoint_ns, event.checkpoint_id or "")
                found = await saver.aget_tuple(config)
                steps.learn(event, found.metadata if found else None)
            yield _message(event, event.id, steps.step(event))
    finally:
        await tail.aclose()
