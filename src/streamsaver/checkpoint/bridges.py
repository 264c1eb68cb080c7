"""The other colour's half of LangGraph's interface, for each saver: the sync saver's async
methods (``InThread``) and the async saver's sync ones (``OnLoop``), each passing the call on
to its twin, which is the saver's own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ..core.errors import SyncOnLoopError
from ..core.flow import T

__all__ = ["InThread", "OnLoop", "run_on"]

History = dict[str, DeltaChannelHistory]


def run_on(loop: asyncio.AbstractEventLoop | None, coro: Coroutine[Any, Any, T], what: str) -> T:
    """``coro`` run on ``loop`` (an async saver's or store's) from another thread, waited for.
    On the loop itself waiting would deadlock, and before it runs nothing would run it: both
    raise SyncOnLoopError, whose message ends with ``what`` (the async call to use there and
    the sync class to use instead)."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or running is loop:
        coro.close()
        raise SyncOnLoopError(what)
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


class InThread(BaseCheckpointSaver[str]):
    """LangGraph calls these when a graph with the sync saver runs async; its client blocks,
    so each call moves to a worker thread instead of stalling the event loop."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def collect() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(collect):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> History:
        history = self.get_delta_channel_history
        # the saver's own returns a dict (LangGraph's base declares a Mapping)
        return cast(History, await asyncio.to_thread(history, config=config, channels=channels))


class OnLoop(BaseCheckpointSaver[str]):
    """The sync interface of the async saver, for callers on other threads (LangGraph's sync
    ``graph.get_state`` & co): each call runs on the saver's event loop, and waits for it."""

    loop: asyncio.AbstractEventLoop | None

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return run_on(
            self.loop,
            coro,
            "Synchronous calls to AsyncRedisStreamSaver are only allowed from a thread other "
            "than its event loop's, once that loop runs; on the loop use the async interface "
            "(e.g. `await checkpointer.aget_tuple(...)`, `await graph.ainvoke(...)`), and in "
            "synchronous code use RedisStreamSaver",
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(self._sync(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self.aprune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> History:
        history = self.aget_delta_channel_history(config=config, channels=channels)
        return cast(History, self._sync(history))
