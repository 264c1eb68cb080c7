"""How a shell sends a ``Pipeline`` step, and learns a cluster's layout, with a redis-py client
(standalone or cluster, sync or asyncio): the little the four shells (the savers', the tails')
would otherwise each write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import PipelineCommand, RedisCluster
from redis.exceptions import ResponseError

from .core import Command, LoadScripts, Pipeline, Relearn, loaded

__all__ = [
    "aload_scripts",
    "arelearn",
    "asend_pipeline",
    "load_scripts",
    "relearn",
    "routed",
    "send_pipeline",
]


def send_pipeline(client: Any, step: Pipeline) -> list[Any]:
    """``step``'s commands in one pipeline, errors as values. On a cluster without
    ``step.follow``, a redirected command's reply is the redirection (the core relearns the
    layout once and sends them again), not a round trip of its own per command."""
    if isinstance(client, RedisCluster) and not step.follow:
        command: Any = PipelineCommand  # redis-py leaves it untyped
        stack = [command(tuple(c), routed(client, c), i) for i, c in enumerate(step.commands)]
        cluster: Any = client
        pipe = cluster.pipeline(transaction=False)
        return pipe.send_cluster_commands(  # type: ignore[no-any-return]
            stack, raise_on_error=False, allow_redirections=False
        )
    return _pipeline(client, step.commands).execute(raise_on_error=False)  # type: ignore[no-any-return]


async def asend_pipeline(client: Any, step: Pipeline) -> list[Any]:
    if isinstance(client, AsyncRedisCluster):
        # redis-py leaves its cluster pipeline untyped
        cluster: Any = client
        await cluster.initialize()
        pipe = cluster.pipeline(transaction=False)
        for command in step.commands:
            pipe.execute_command(*command, **routed(cluster, command))
        return await pipe.execute(raise_on_error=False, allow_redirections=step.follow)  # type: ignore[no-any-return]
    pipe = _pipeline(client, step.commands)
    return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]


def load_scripts(client: Any, step: LoadScripts) -> None:
    """Each of ``step``'s loading commands on every primary (the server itself when
    standalone), each node on its own: one that holds the library already (another client
    loaded it meanwhile) must not keep it from the others."""
    cluster: Any = client  # redis-py leaves get_primaries untyped
    nodes = cluster.get_primaries() if isinstance(client, RedisCluster) else [None]
    for command in step.commands:
        for node in nodes:
            try:
                _on(client, command, node)
            except ResponseError as exc:
                loaded(exc)


async def aload_scripts(client: Any, step: LoadScripts) -> None:
    if isinstance(client, AsyncRedisCluster):
        await client.initialize()
    nodes = client.get_primaries() if isinstance(client, AsyncRedisCluster) else [None]
    for command in step.commands:
        for node in nodes:
            try:
                await _on(client, command, node)
            except ResponseError as exc:
                loaded(exc)


def _on(client: Any, command: Command, node: Any) -> Any:
    if node is None:
        return client.execute_command(*command)
    return client.execute_command(*command, target_nodes=node)


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


def routed(client: Any, command: Command) -> dict[str, Any]:
    """Where a cluster client sends ``command``: an ``FCALL``'s keys the client would ask the
    server for (``COMMAND GETKEYS``, a round trip per command, as for any command whose keys
    move), so it goes to its first key's primary, as redis-py sends an ``EVALSHA``."""
    clustered = isinstance(client, RedisCluster | AsyncRedisCluster)
    if clustered and command[0] in ("FCALL", "FCALL_RO") and int(command[2]) > 0:
        return {"target_nodes": client.get_node_from_key(command[3])}
    return {}


def _pipeline(client: Any, commands: Sequence[Command]) -> Any:
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return pipe
