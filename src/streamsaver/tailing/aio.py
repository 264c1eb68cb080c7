"""The asyncio shells: ``AsyncTail``, ``AsyncTailAll`` and ``AsyncConsumerGroup``, and the I/O
they do with a redis-py asyncio client (``AsyncShell``). A tail also ends when its task is
cancelled; a connection cancelled mid-exchange is dropped, since a reply would arrive on it
that nobody reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import LOST
from ..events import Delivery, ThreadEvent
from ..transport.core import LoadScripts, Pipeline, arun
from ..transport.resp import packed
from ..transport.sending import aload_scripts, arelearn, asend_pipeline
from .base import C, Driving, Halted, Saver, Shell, T, leaving, raise_errors
from .blocking import GRACE_S, UNKNOWN, Asking, Dedicated, Exchange, Read, within
from .feeds import FeedTail
from .groups import GroupReader
from .steps import Batch, Block, Deliver, TailFlow, TailOp
from .thread import ThreadTail
from .views import FeedTailView, GroupView, ThreadTailView

__all__ = ["AsyncConsumerGroup", "AsyncShell", "AsyncTail", "AsyncTailAll"]

R = TypeVar("R")
_RECANCEL_S = 0.05


def _raise_swallowed_cancel() -> None:
    """Raise a cancel the current task was sent but never saw raised.

    redis-py's asyncio connection can swallow a ``CancelledError`` delivered while it sends a
    command (seen with redis-py 8.1 on Python 3.11: ``send_command`` returns normally and the
    task's ``cancelling()`` stays 1). A tail's loop of reads would then never end; checking
    around each step ends it at the next one. Python 3.10 has no ``cancelling()``."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError


class AsyncShell(Shell):
    def __init__(self, saver: Saver) -> None:
        sending = (asend_pipeline, aload_scripts, arelearn)
        super().__init__(saver, isinstance(saver.client, AsyncRedisCluster), sending)
        self.wake: asyncio.Event | None = None
        self.halt: asyncio.Event | None = None  # set by stop(): ends any step of the iteration
        if not self.cluster and not self.client.connection_pool.connection_kwargs.get(
            "socket_timeout"
        ):
            # a client with no socket timeout (None) would wait on a silent server for good;
            # one that names none has redis-py's default, as a cluster client has
            self.verbs = {
                **self.verbs,
                Pipeline: _within(self.verbs[Pipeline]),
                LoadScripts: _within(self.verbs[LoadScripts]),
            }

    async def send(self, op: TailOp) -> Any:
        return await arun(self.flow(op), self.verbs)

    async def execute(self, op: TailOp) -> Any:
        """``send``, checked for a swallowed cancel before and after."""
        _raise_swallowed_cancel()
        if self.halt is None:
            self.halt = asyncio.Event()
            if self.stopped.is_set():
                self.halt.set()
        sending = asyncio.ensure_future(self.send(op))
        halted = asyncio.ensure_future(self.halt.wait())
        try:
            await asyncio.wait({sending, halted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            halted.cancel()
            if not sending.done():
                # stopped (or cancelled) mid-step: the step's connection is dropped with it
                await _cancel(sending)
        if sending.cancelled():
            raise Halted
        reply = sending.result()
        _raise_swallowed_cancel()
        return reply

    async def pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        # short naps, so a stop() from another thread is seen; cancellation ends it at once
        while not self.stopped.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    async def _connection(self, key: str | None, node: Any = None) -> Dedicated:
        """The tail's own connection to ``key``'s node (or to ``node``)."""
        if self.cluster:
            if node is None:
                assert key is not None, "a blocking read on a cluster names its key"
                # a tail may be a fresh client's first use: the slot map is learned on first call
                await self.client.initialize()
                node = self.client.get_node_from_key(key)
            cls, kwargs, name = node.connection_class, node.connection_kwargs, node.name
        else:
            pool = self.client.connection_pool
            node, cls, kwargs, name = None, pool.connection_class, pool.connection_kwargs, ""
        dedicated = self.own_connection(name, node, cls, kwargs)
        if not dedicated.connected:
            await dedicated.conn.connect()
            dedicated.connected = True
        return dedicated

    async def _dropping(self, work: Awaitable[R]) -> R:
        """``work`` on the tail's own connection; cancelled or failed mid-way, the connection
        is dropped."""
        try:
            return await work
        except BaseException:
            await self.drop()
            raise

    async def read(self, step: Read) -> Any:
        return await self._dropping(self._read(step.op))

    async def _read(self, op: Block) -> Any:
        if self.stopped.is_set():
            return None
        # set before connecting: a stop() meanwhile ends a connect or a handshake too
        wake = self.wake = asyncio.Event()
        try:
            read = asyncio.ensure_future(self._blocking_read(op))
            woken = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({read, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
                if not read.done():
                    # stopped (or cancelled): the reply, if any, would arrive on a
                    # connection nobody reads, so it is dropped
                    await _cancel(read)
                    await self.drop()
            return read.result() if not read.cancelled() else None
        except ResponseError as exc:
            return exc
        finally:
            self.blocked = None
            self.wake = None

    async def _blocking_read(self, op: Block) -> Any:
        dedicated = await self._connection(op.key)
        self.blocked = dedicated
        await dedicated.conn.send_command(*op.args)
        # not read_response(timeout=...): redis-py 8 answers that timeout with None, as a
        # blocking read that found nothing, so a silent server passed for a quiet one, and the
        # late reply was read as the next read's
        return await _bounded(dedicated.conn.read_response(), op.block_ms / 1000 + GRACE_S)

    async def exchange(self, step: Exchange) -> list[Any]:
        return await self._dropping(self._exchange(step))

    async def _exchange(self, step: Exchange) -> list[Any]:
        conn = (await self._connection(None)).conn
        await conn.send_packed_command(packed(conn, step.calls))
        return [await _reply(conn) for _ in step.calls]

    async def asking(self, step: Asking) -> Any:
        node = self.client.get_node(step.host, step.port)
        if node is None:
            return UNKNOWN
        # on the tail's own connection to that node: redis-py's cluster pipeline, on a lost
        # connection, closes every connection of the client and sends again without the
        # target node ("No way to dispatch this command", redis-py 8.1)
        try:
            conn = (await self._connection(None, node)).conn
            await conn.send_packed_command(packed(conn, [("ASKING",), step.args]))
            await conn.read_response()
            return await _reply(conn)
        except LOST:
            await self.drop()
            raise

    async def drop(self) -> None:
        # a copy: a step cut short may still be making a connection meanwhile
        dropped, self.dedicated = list(self.dedicated.values()), {}
        for dedicated in dropped:
            await dedicated.conn.disconnect()

    async def stop(self) -> None:
        """End the tail; a blocked read returns at once (its connection is dropped)."""
        self.stopped.set()
        if self.wake is not None:
            self.wake.set()
        if self.halt is not None:
            self.halt.set()

    async def close(self) -> None:
        self.stopped.set()
        await self.drop()


async def _cancel(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait for it to end. Again while it runs on: redis-py's asyncio
    connection can swallow a cancel delivered while it sends (``_raise_swallowed_cancel``),
    and the task then waits on its next read for as long as the socket timeout allows."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=_RECANCEL_S)
    if not task.cancelled():
        task.exception()  # retrieved: the step's error is moot once it was cut short


async def _bounded(work: Awaitable[R], seconds: float) -> R:
    """``work``, given up after ``seconds`` as redis-py gives up after a socket timeout: with
    its ``TimeoutError``, the connection cancelled mid-read disconnected (redis-py does that)."""
    try:
        return await asyncio.wait_for(work, seconds)
    except asyncio.TimeoutError as exc:
        raise RedisTimeoutError(f"no reply within {seconds:g} s") from exc


def _within(verb: Callable[[Any], Awaitable[R]]) -> Callable[[Any], Awaitable[R]]:
    """``verb`` given up after ``within()``: for a client that sets no socket timeout."""

    async def bounded(step: Any) -> R:
        return await _bounded(verb(step), within())

    return bounded


async def _reply(conn: Any) -> Any:
    """The next reply on ``conn``, a server error as a value."""
    try:
        return await conn.read_response()
    except ResponseError as exc:
        return exc


class _Driver(Driving):
    """The asyncio twin of ``sync``'s; the start runs on ``async with`` or the first
    iteration (a constructor cannot wait)."""

    def __init__(
        self, io: AsyncShell, flow: TailFlow, finish: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(flow, io.stopped)
        self.io = io
        self.finish = finish
        self.started = False

    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        try:
            self.resume(None)
            while isinstance(self.step, Batch):
                self.resume(await self.io.execute(self.step))
        except Halted:
            await self.shutdown()
        except BaseException:
            await self.shutdown()
            raise

    async def items(self) -> AsyncGenerator[Any, None]:
        try:
            await self.start()
            while (step := self.due()) is not None:
                if isinstance(step, Deliver):
                    yield step.item
                    self.resume(None)
                else:
                    self.resume(await self.io.execute(step))
        except Halted:
            return
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        if self.closing():
            try:
                await self.finish()
            finally:
                await self.io.close()


async def _nothing() -> None:
    return None


_A = TypeVar("_A", bound="_Driven[Any, Any]")


class _Driven(Generic[T, C]):
    """The asyncio twin of ``sync``'s, an async iterator and context manager."""

    def __init__(self, saver: Saver, core: C) -> None:
        self._core = core
        self._io = io = AsyncShell(saver)
        self._driver = _Driver(io, core.run(), self._finisher())
        self._items: AsyncGenerator[T, None] = self._driver.items()

    def _finisher(self) -> Callable[[], Awaitable[None]]:
        return _nothing

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        return await self._items.__anext__()

    async def start(self) -> None:
        """Run the start now (resolve ``"$"``, find feeds, join the group); ``async with``
        and the first iteration do it."""
        await self._driver.start()

    async def stop(self) -> None:
        """End the iteration from another task (a blocked read returns at once)."""
        await self._io.stop()

    async def aclose(self) -> None:
        """End the iteration and close its connection; safe to call more than once."""
        self._io.stopped.set()
        try:
            await self._items.aclose()
        except RuntimeError:  # running in another task right now: stop() ends it
            await self._io.stop()
            return
        await self._driver.shutdown()

    async def __aenter__(self: _A) -> _A:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class AsyncTail(ThreadTailView, _Driven[ThreadEvent, ThreadTail]):
    """``saver.atail(...)``: the asyncio twin of ``Tail``."""


class AsyncTailAll(FeedTailView, _Driven[ThreadEvent, FeedTail]):
    """``saver.atail_all(...)``: the asyncio twin of ``TailAll``."""


class AsyncConsumerGroup(GroupView, _Driven[Delivery, GroupReader]):
    """``saver.aconsumer_group(...)``: the asyncio twin of ``ConsumerGroup``."""

    def _finisher(self) -> Callable[[], Awaitable[None]]:
        core, io = self._core, self._io
        return lambda: arun(leaving(core), {Batch: io.send})

    async def ack(self, *deliveries: Delivery) -> None:
        raise_errors(await self._io.send(self._core.ack_call(deliveries)))

    async def destroy(self) -> int:
        await self.aclose()
        return await arun(self._core.destroy(), {Batch: self._io.send})
