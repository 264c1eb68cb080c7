"""One ``tail_all`` per console process, shared by every ``/events`` client.

A tail per client would read and decode each event once per client: 200 open Live pages
would cost 200 blocking reads and 200 decodes of every event. The hub reads once and keeps
the last ``size`` events; a client follows it by sequence number. A client that starts from
a position (``Last-Event-ID`` after a reconnect, or one that fell out of the hub's window)
first catches up with a tail of its own that stops at the feeds' current end, then follows
the hub from where it was when the catch-up began, skipping per slot what it already sent:
within a slot, feed ids are ordered, so nothing is missed and nothing is sent twice.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..audit.steps import StepMemory
from ..checkpoint.aio import AsyncRedisStreamSaver
from ..core.keys import thread_keys
from ..core.slots import slot_of
from ..core.stream_ids import id_key
from ..events import FeedCursor
from ._views import event_view


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    slot: int
    feed_id: str
    kind: str
    data: str


class Behind(Exception):
    """The client wants entries the hub no longer holds."""


class FeedHub:
    def __init__(self, saver: AsyncRedisStreamSaver, size: int = 4096) -> None:
        self.saver = saver
        self.entries: deque[Entry] = deque(maxlen=size)
        self.next_seq = 0
        self.positions: dict[int, str] = {}
        self.error: BaseException | None = None
        self.lock = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()

    async def start(self) -> None:
        if self._task is None or self._task.done():
            self.error = None
            self._started = asyncio.Event()
            self._task = asyncio.create_task(self._run())
        await self._started.wait()
        if self.error is not None:
            raise self.error

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        tail = self.saver.atail_all(after="$")
        steps = StepMemory()
        try:
            async with tail:
                self.positions = dict(tail.cursor.positions)
                self._started.set()
                async for event in tail:
                    slot = slot_of(thread_keys(self.saver.prefix, event.thread_id).log)
                    positions = dict(tail.cursor.positions)
                    data = json.dumps(event_view(event, steps.step(event)))
                    async with self.lock:
                        # with the entry, under the lock: a new client reads both as one
                        self.positions = positions
                        self.entries.append(
                            Entry(self.next_seq, slot, positions[slot], event.kind, data)
                        )
                        self.next_seq += 1
                        self.lock.notify_all()
        except Exception as exc:  # the clients end their streams and reconnect
            self.error = exc
        finally:
            self._started.set()
            async with self.lock:
                self.lock.notify_all()

    async def after(self, seq: int) -> list[Entry]:
        """The entries from ``seq`` on, waiting for one if there are none yet."""
        async with self.lock:
            while self.next_seq <= seq and self.error is None:
                await self.lock.wait()
        if self.error is not None:
            raise self.error
        oldest = self.entries[0].seq if self.entries else self.next_seq
        if seq < oldest:
            raise Behind
        # from the right: a client that keeps up wants the last few of thousands
        return [self.entries[-i] for i in range(self.next_seq - seq, 0, -1)]


def cursor_id(positions: dict[int, str]) -> str:
    """A position across every slot's feed as an SSE id: ``c<slot>:<feed id>.<slot>:...``."""
    return "c" + ".".join(f"{slot}:{pos}" for slot, pos in sorted(positions.items()))


def _message(data: str, kind: str, positions: dict[int, str]) -> dict[str, Any]:
    return {"id": cursor_id(positions), "event": kind, "data": data}


async def _catch_up(
    saver: AsyncRedisStreamSaver, start: str | FeedCursor, positions: dict[int, str]
) -> AsyncIterator[dict[str, Any]]:
    tail = saver.atail_all(after=start, follow=False)
    steps = StepMemory()
    try:
        async for event in tail:
            positions.clear()
            positions.update(tail.cursor.positions)
            data = json.dumps(event_view(event, steps.step(event)))
            yield _message(data, event.kind, positions)
        positions.clear()
        positions.update(tail.cursor.positions)
    finally:
        await tail.aclose()


async def feed_stream(
    saver: AsyncRedisStreamSaver, hub: FeedHub, after: str | FeedCursor
) -> AsyncIterator[dict[str, Any]]:
    """Every thread's events for one client, from ``after`` (``$``, ``0`` or a cursor)."""
    await hub.start()
    positions: dict[int, str] = {}
    start: str | FeedCursor | None = after
    seq = hub.next_seq
    if after == "$":
        async with hub.lock:
            positions, start, seq = dict(hub.positions), None, hub.next_seq
    while True:
        if start is not None:
            seq = hub.next_seq  # before the catch-up: the hub's entries from here overlap it
            async for message in _catch_up(saver, start, positions):
                yield message
        try:
            while True:
                for entry in await hub.after(seq):
                    seq = entry.seq + 1
                    if id_key(entry.feed_id) <= id_key(positions.get(entry.slot, "0-0")):
                        continue  # the catch-up sent it
                    positions[entry.slot] = entry.feed_id
                    yield _message(entry.data, entry.kind, positions)
        except Behind:
            start = FeedCursor(prefix=saver.prefix, positions=positions)
