"""A pytest plugin that runs LangGraph's own tests with streamsaver as a checkpointer.

LangGraph's sdist ships its tests; their ``tests/conftest.py`` gives every test that takes a
``sync_checkpointer`` or ``async_checkpointer`` one run per saver it names. Loaded into a pytest
run of those tests (``-p langgraph_plugin``, this folder on ``PYTHONPATH``), this plugin swaps
those two fixtures, before pytest reads them, for ones over ``memory`` (their own
InMemorySaver, as their conftest builds it) and ``streamsaver``: the test bodies run unchanged.
``-k streamsaver`` keeps only streamsaver's runs.

The server is ``STREAMSAVER_LANGGRAPH_REDIS_URL``; each test's saver keeps its keys under a
prefix of its own and deletes them afterwards. tests/test_langgraph_suite.py fetches the sdist
and runs it this way; by hand::

    STREAMSAVER_LANGGRAPH_REDIS_URL=redis://localhost:6379/0 NO_DOCKER=true \\
        PYTHONPATH=/path/to/streamsaver/tests python -m pytest -p langgraph_plugin \\
        -k streamsaver tests/test_checkpoint_migration.py   # in the unpacked sdist
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aredis

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver

URL_VARIABLE = "STREAMSAVER_LANGGRAPH_REDIS_URL"
PARAMS = ["memory", "streamsaver"]


def _url() -> str:
    url = os.environ.get(URL_VARIABLE)
    if not url:
        raise RuntimeError(f"{URL_VARIABLE} is not set: the Redis server streamsaver's runs use")
    return url


def _drop(client: redis.Redis, prefix: str) -> None:
    keys = list(client.scan_iter(match=prefix + ":*", count=1000))
    for start in range(0, len(keys), 500):
        client.unlink(*keys[start : start + 500])


def _fixtures(memory: Callable[[], AbstractContextManager[Any]]) -> tuple[Any, Any]:
    """The two fixtures, ``memory`` being the conftest's own InMemorySaver factory."""

    @pytest.fixture(params=PARAMS)
    def sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[Any]:
        if request.param == "memory":
            with memory() as saver:
                yield saver
            return
        prefix = f"lg{uuid4().hex[:10]}"
        with redis.Redis.from_url(_url()) as client:
            yield RedisStreamSaver(client, prefix=prefix)
            _drop(client, prefix)

    @pytest.fixture(params=PARAMS)
    async def async_checkpointer(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
        if request.param == "memory":
            with memory() as saver:
                yield saver
            return
        prefix = f"lg{uuid4().hex[:10]}"
        client = aredis.Redis.from_url(_url())
        try:
            yield AsyncRedisStreamSaver(client, prefix=prefix)
        finally:
            await client.aclose()
            with redis.Redis.from_url(_url()) as sync_client:
                _drop(sync_client, prefix)

    return sync_checkpointer, async_checkpointer


def pytest_configure(config: pytest.Config) -> None:
    # the test servers run without persistence on purpose
    config.addinivalue_line("filterwarnings", "ignore::streamsaver.NoPersistenceWarning")


def pytest_plugin_registered(plugin: object, plugin_name: str) -> None:
    # pytest reads a conftest's fixtures when it collects the conftest's folder, after this
    # hook: the module's names can still be swapped here
    if not (plugin_name or "").endswith("conftest.py") or not isinstance(plugin, ModuleType):
        return
    if not hasattr(plugin, "sync_checkpointer") or not hasattr(plugin, "async_checkpointer"):
        return
    memory = getattr(plugin, "_checkpointer_memory", None)
    if memory is None:
        raise RuntimeError(
            f"{plugin_name} has checkpointer fixtures but no _checkpointer_memory: this "
            f"LangGraph's test layout is not the one tests/langgraph_plugin.py knows"
        )
    plugin.sync_checkpointer, plugin.async_checkpointer = _fixtures(memory)  # type: ignore[attr-defined]
