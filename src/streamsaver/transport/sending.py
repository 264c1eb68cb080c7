"""How a shell sends a ``Pipeline`` step, and learns a cluster's layout, with a redis-py client
(standalone or cluster, sync or asyncio): the little the four shells (the savers', the tails')
would otherwise each write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import PipelineCommand, RedisCluster

from .core import Command, LoadScripts, Pipeline, Relearn

__all__ = [
    "aload_scripts",
    "arelearn",
    "asend_pipeline",
    "load_scripts",
    "relearn",
    "send_pipeline",
]


def send_pipeline(client: Any, step: Pipeline) -> list[Any]:
    """``step``'s commands in one pipeline, errors as values. On a cluster without
    ``step.follow``, a redirected command's reply is the redirection (the core relearns the
    layout once and sends them again), not a round trip of its own per command."""
    if isinstance(client, RedisCluster) and not step.follow:
        command: Any = PipelineCommand  # redis-py leaves it untyped
        stack = [command(tuple(c), {}, i) for i, c in enumerate(step.commands)]
        cluster: Any = client
        pipe = cluster.pipeline(transaction=False)
        return pipe.send_cluster_commands(  # type: ignore[no-any-return]
            stack, raise_on_error=False, allow_redirections=False
        )
    return _pipeline(client, step.commands).execute(raise_on_error=False)  # type: ignore[no-any-return]


async def asend_pipeline(client: Any, step: Pipeline) -> list[Any]:
    pipe = _pipeline(client, step.commands)
    if isinstance(client, AsyncRedisCluster):
        return await pipe.execute(raise_on_error=False, allow_redirections=step.follow)  # type: ignore[no-any-return]
    return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]


def load_scripts(client: Any, step: LoadScripts) -> None:
    """Each of ``step``'s scripts loaded (a cluster client loads it on every primary)."""
    for source in step.sources:
        client.script_load(source)


async def aload_scripts(client: Any, step: LoadScripts) -> None:
    for source in step.sources:
        await client.script_load(source)


def relearn(client: Any, step: Relearn) -> None:
    if not isinstance(client, RedisCluster):
        return  # a standalone server never redirects; nothing to learn
    if step.moved is None:
        client.nodes_manager.initialize()
    else:
        client.nodes_manager.move_slot(step.moved)


async def arelearn(client: Any, step: Relearn) -> None:
    if not isinstance(client, AsyncRedisCluster):
        return
    if step.moved is None:
        await client.nodes_manager.initialize()
    else:
        await client.nodes_manager.move_slot(step.moved)


def _pipeline(client: Any, commands: Sequence[Command]) -> Any:
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return pipe
