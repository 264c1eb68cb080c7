"""What the savers ask a cluster's nodes for when the transport core yields ``ScanNode`` or
``Views``: written once, as generators of client calls that the sync shell makes and the
async shell awaits (``call_through``, ``acall_through``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from functools import partial
from typing import Any, TypeVar

from ..core.flow import adrive, drive
from ..transport.exchange import ScanNode

__all__ = ["Calls", "acall_through", "call_through", "node_views", "scan_node"]

T = TypeVar("T")
Calls = Generator[Callable[[], Any], Any, T]
"""Client calls, each sent back what it returned (the async shell: what it returned, awaited)."""


def _call(call: Callable[[], T]) -> T:
    return call()


def call_through(calls: Calls[T]) -> T:
    return drive(calls, _call)


async def acall_through(calls: Generator[Callable[[], Awaitable[Any]], Any, T]) -> T:
    return await adrive(calls, _call)


def scan_node(client: Any, step: ScanNode) -> Calls[tuple[int, list[Any]]]:
    """One ``SCAN`` page of the streams on ``step.node`` (the server itself when standalone)."""
    # redis-py leaves client, nodes and replies untyped
    options = {"match": step.pattern, "count": 1000, "_type": "STREAM"}
    if step.node is None:
        return (yield partial(client.scan, step.cursor, **options))  # type: ignore[no-any-return]
    node = client.get_node(node_name=step.node)
    if node is None:  # a node the client has not heard of yet
        yield client.nodes_manager.initialize
        node = client.get_node(node_name=step.node)
    cursors, keys = yield partial(client.scan, step.cursor, target_nodes=node, **options)
    return next(iter(cursors.values())), keys


def node_views(client: Any) -> Calls[dict[str, Any]]:
    """Each primary's ``CLUSTER NODES``: how it sees the cluster."""
    views = {}
    for node in client.get_primaries():
        views[node.name] = yield partial(client.execute_command, "CLUSTER NODES", target_nodes=node)
    return views
