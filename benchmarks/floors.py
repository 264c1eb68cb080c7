"""The two floors every figure is held against.

- The raw floor: the bytes a saver call carries, sent as one bare redis-py command per call
  (``XADD`` for ``put`` and ``put_writes``, ``XREVRANGE`` for ``get_tuple`` and a ``list`` page),
  prepared before timing. It is what Redis and the network cost with no saver logic at all.
- The floor saver: ``InMemorySaver`` plus one redis-py ``PING`` round trip in each
  ``get_tuple``, ``put``, ``put_writes`` and ``list`` page: serialization cost plus one round trip
  per call, the least a checkpointer on redis-py can spend without caching.
- The socket floor: the same with the ``PING`` written to a bare socket and ``+PONG`` read back,
  no client library: the physical floor of a network checkpointer. redis-py's own cost per call
  (its pool, command packing, reply parsing) is the distance between the two.

The raw floor replays a trace that :class:`RecordingSaver` captures while running the same
workload untimed, so it sends exactly the bytes ``InMemorySaver`` stores for each call.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis
import redis.asyncio
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver

__all__ = [
    "AsyncPingFloorSaver",
    "AsyncPingSocket",
    "AsyncRawFloor",
    "Op",
    "PingFloorSaver",
    "PingSocket",
    "RawFloor",
    "RecordingSaver",
]

# LangGraph's names, short enough for the overrides' signatures to fit on one line

_FILL_BATCH = 500
_PING = b"PING\r\n"
_PONG = b"+PONG\r\n"


@dataclass(frozen=True)
class Op:
    """One saver call as the raw floor sends it."""

    kind: Literal["get", "list", "put", "writes"]
    # field/value pairs of the XADD for put and writes
    fields: tuple[bytes, ...] = ()
    # entries a get or list reads back
    count: int = 1


class RecordingSaver(InMemorySaver):
    """An ``InMemorySaver`` that also notes each call and the bytes it stores for it."""

    def __init__(self) -> None:
        super().__init__()
        self._ops: list[Op] = []
        # LangGraph calls put/put_writes from its background executor threads
        self._lock = threading.Lock()

    def take(self) -> list[Op]:
        """The calls recorded since the last take."""
        with self._lock:
            ops, self._ops = self._ops, []
        return ops

    def _note(self, op: Op) -> None:
        with self._lock:
            self._ops.append(op)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._note(Op("get"))
        return super().get_tuple(config)

    def list(self, config: RunnableConfig | None, **kw: Any) -> Iterator[CheckpointTuple]:
        self._note(Op("list", count=kw.get("limit") or 10))
        return super().list(config, **kw)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        bare = checkpoint.copy()
        values: dict[str, Any] = bare.pop("channel_values")  # type: ignore[misc]
        fields = [
            b"checkpoint",
            self.serde.dumps_typed(bare)[1],
            b"metadata",
            self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))[1],
        ]
        for channel in new_versions:
            if channel in values:
                fields += [channel.encode(), self.serde.dumps_typed(values[channel])[1]]
        self._note(Op("put", tuple(fields)))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        fields = [b"task", task_id.encode()]
        for channel, value in writes:
            fields += [channel.encode(), self.serde.dumps_typed(value)[1]]
        self._note(Op("writes", tuple(fields)))
        super().put_writes(config, writes, task_id, task_path)


def _command(key: str, op: Op) -> tuple[Any, ...]:
    if op.kind in ("put", "writes"):
        return ("XADD", key, "*", *op.fields)
    return ("XREVRANGE", key, "+", "-", "COUNT", op.count)


class RawFloor:
    """Sends recorded calls as bare commands, one round trip each."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def run(self, key: str, ops: Sequence[Op]) -> None:
        for op in ops:
            self.client.execute_command(*_command(key, op))  # type: ignore[no-untyped-call]

    def fill(self, key: str, op: Op, count: int) -> None:
        """Append ``count`` copies of a put, pipelined: history depth setup, not a measurement."""
        for start in range(0, count, _FILL_BATCH):
            with self.client.pipeline(transaction=False) as pipe:
                for _ in range(min(_FILL_BATCH, count - start)):
                    pipe.execute_command(*_command(key, op))  # type: ignore[no-untyped-call]
                pipe.execute()


class AsyncRawFloor:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client

    async def run(self, key: str, ops: Sequence[Op]) -> None:
        for op in ops:
            await self.client.execute_command(*_command(key, op))  # type: ignore[no-untyped-call]


class PingSocket:
    """One TCP connection that sends ``PING`` and reads ``+PONG``: a round trip with no client
    library, no pool and no reply parser."""

    def __init__(self, host: str, port: int) -> None:
        self._sock = socket.create_connection((host, port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # LangGraph calls put/put_writes from its background executor threads
        self._lock = threading.Lock()

    def ping(self) -> None:
        with self._lock:
            self._sock.sendall(_PING)
            reply = b""
            while len(reply) < len(_PONG):
                chunk = self._sock.recv(len(_PONG) - len(reply))
                if not chunk:
                    raise ConnectionError("the server closed the socket floor's connection")
                reply += chunk
        if reply != _PONG:
            raise ConnectionError(f"PING answered {reply!r}")

    def close(self) -> None:
        self._sock.close()


class AsyncPingSocket(asyncio.Protocol):
    """The async socket floor: concurrent callers' ``PING``s share one connection, written as
    they come and answered in order (Redis replies in order), as an auto-pipelining client
    would send them."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._buffer = b""

    @classmethod
    async def connect(cls, host: str, port: int) -> AsyncPingSocket:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_connection(cls, host, port)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._buffer.startswith(_PONG):
            self._buffer = self._buffer[len(_PONG) :]
            self._waiting.popleft().set_result(None)
        if self._buffer and not _PONG.startswith(self._buffer):
            self.connection_lost(ConnectionError(f"PING answered {self._buffer!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        while self._waiting:
            self._waiting.popleft().set_exception(exc or ConnectionError("connection closed"))

    async def ping(self) -> None:
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("the socket floor's connection is closed")
        done = asyncio.get_running_loop().create_future()
        self._waiting.append(done)
        self._transport.write(_PING)
        await done

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class PingFloorSaver(InMemorySaver):
    """``InMemorySaver`` with one bare Redis round trip in each call a graph run makes: through
    redis-py (the floor saver) or a bare socket (the socket floor)."""

    def __init__(self, client: redis.Redis | PingSocket) -> None:
        super().__init__()
        self.client = client

    def get_tuple(self, *args: Any, **kw: Any) -> CheckpointTuple | None:
        self.client.ping()
        return super().get_tuple(*args, **kw)

    def list(self, *args: Any, **kw: Any) -> Iterator[CheckpointTuple]:
        self.client.ping()
        return super().list(*args, **kw)

    def put(self, *args: Any, **kw: Any) -> RunnableConfig:
        self.client.ping()
        return super().put(*args, **kw)

    def put_writes(self, *args: Any, **kw: Any) -> None:
        self.client.ping()
        super().put_writes(*args, **kw)


class AsyncPingFloorSaver(InMemorySaver):
    """The async floor: the round trip is awaited, then ``InMemorySaver``'s sync body runs.

    ``InMemorySaver``'s async methods call ``self.get_tuple`` and friends, so these call the
    base class's sync methods directly to avoid a second, blocking round trip.
    """

    def __init__(self, client: redis.asyncio.Redis | AsyncPingSocket) -> None:
        super().__init__()
        self.client = client

    async def aget_tuple(self, *args: Any, **kw: Any) -> CheckpointTuple | None:
        await self.client.ping()
        return InMemorySaver.get_tuple(self, *args, **kw)

    async def alist(self, *args: Any, **kw: Any) -> AsyncIterator[CheckpointTuple]:
        await self.client.ping()
        for item in InMemorySaver.list(self, *args, **kw):
            yield item

    async def aput(self, *args: Any, **kw: Any) -> RunnableConfig:
        await self.client.ping()
        return InMemorySaver.put(self, *args, **kw)

    async def aput_writes(self, *args: Any, **kw: Any) -> None:
        await self.client.ping()
        InMemorySaver.put_writes(self, *args, **kw)
