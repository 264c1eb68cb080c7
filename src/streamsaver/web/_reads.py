"""The reads the pages and the JSON API share: a page of thread rows, and a checkpoint with
its parent."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from starlette.exceptions import HTTPException

from ..checkpoint.aio import AsyncRedisStreamSaver
from ..events import ThreadInfo
from . import _views
from ._console import Console

__all__ = ["LATEST", "Reads"]

LATEST = 8  # events read per row: enough to find the node behind the last checkpoint


class Reads:
    """What every route reads through: the console's saver, and when a thread counts as
    running."""

    def __init__(self, console: Console, running_ms: int) -> None:
        self.console = console
        self.running_ms = running_ms

    async def rows(
        self,
        status: str | None,
        metadata: dict[str, Any],
        limit: int,
        after: ThreadInfo | None = None,
        offset: int = 0,
    ) -> tuple[list[dict[str, Any]], ThreadInfo | None]:
        """A page of thread rows, newest activity first, and where the next page starts."""
        saver = await self.console.saver()
        if status == "deleted":
            return await self._deleted(saver, metadata, limit, offset), None
        wanted: set[str] | None = None
        if metadata:
            # threads with a checkpoint whose metadata matches (alist's own filter)
            found = saver.alist(None, filter=metadata)
            wanted = {t.config["configurable"]["thread_id"] async for t in found}
        now_ms = int(time.time() * 1000)
        kept: list[ThreadInfo] = []
        cursor = after
        while len(kept) < offset + limit + 1:
            batch = await _threads(saver, 200, cursor)
            for info in batch:
                if wanted is not None and info.thread_id not in wanted:
                    continue
                if status and _views.status_of(info, now_ms, self.running_ms) != status:
                    continue
                kept.append(info)
            if len(batch) < 200:
                break
            cursor = batch[-1]
        more = len(kept) > offset + limit
        page = kept[offset : offset + limit]
        latest = await saver.alatest_events([i.thread_id for i in page], count=LATEST)
        rows = [_views.thread_row(i, latest[i.thread_id], now_ms, self.running_ms) for i in page]
        return rows, (page[-1] if more and page else None)

    async def _deleted(
        self, saver: AsyncRedisStreamSaver, metadata: dict[str, Any], limit: int, offset: int
    ) -> list[dict[str, Any]]:
        if metadata:  # a deleted thread has no checkpoints left to match
            return []
        alive = set(await saver.athread_ids())
        gone = [t for t in await saver.athread_ids(deleted=True) if t not in alive]
        page = gone[offset : offset + limit]
        found = await asyncio.gather(*(saver.adeletions(t) for t in page))
        return [_views.deleted_row(t, d) for t, d in zip(page, found, strict=True)]

    async def tuple_of(
        self, thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
    ) -> tuple[CheckpointTuple, CheckpointTuple | None]:
        saver = await self.console.saver()
        conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        if checkpoint_id:
            conf["checkpoint_id"] = checkpoint_id
        found = await saver.aget_tuple(RunnableConfig(configurable=conf))
        if found is None:
            what = f"checkpoint {checkpoint_id!r} of " if checkpoint_id else ""
            raise HTTPException(404, f"no {what}thread {thread_id!r} (namespace {checkpoint_ns!r})")
        parent = await saver.aget_tuple(found.parent_config) if found.parent_config else None
        return found, parent


async def _threads(
    saver: AsyncRedisStreamSaver, limit: int, after: ThreadInfo | None
) -> list[ThreadInfo]:
    """A page of ``athreads`` as a list."""
    return [info async for info in saver.athreads(limit=limit, after=after)]
