"""The sync and asyncio shells of tailing: they only send what ``tailing`` yields.

Blocking reads (``XREAD BLOCK``, ``XREADGROUP BLOCK``) go down a connection of their own, made
from the saver client's connection settings and closed with the tail: they never hold a
connection of the saver's pool, and they wait with a read timeout of the block time plus a
grace period, whatever ``socket_timeout`` the client has. On a standalone server the events
that feed pointers name are fetched down that connection too (it idles between blocking reads,
and it skips the pool on the way from a reply to its events). Everything else (probes,
acknowledgements, group scripts; pointer fetches on a cluster) is pipelined on the saver's
client.

Stopping: leaving a ``for`` loop (or ``close()`` / ``aclose()``) ends a tail at once; its
connection is closed. ``stop()`` from another thread ends a blocked read at once by shutting
that connection down: it needs no ``CLIENT UNBLOCK``, a permission that would let any user
abort any other's blocking reads. An asyncio tail also ends
when its task is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Sequence,
)
from functools import partial
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar
from uuid import uuid4

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import LOST, unavailable
from ..core.flow import Call, Eval
from ..events import Delivery, FeedCursor, ThreadEvent
from ..transport.core import (
    LoadScripts,
    Pause,
    Pipeline,
    Relearn,
    Scripts,
    Step,
    Verbs,
    arun,
    rounds,
    run,
)
from ..transport.exchange import resending
from ..transport.moves import Moves, is_demoted
from ..transport.resp import packed
from ..transport.sending import (
    aload_scripts,
    arelearn,
    asend_pipeline,
    load_scripts,
    relearn,
    send_pipeline,
)
from .feeds import FeedTail
from .groups import GroupReader
from .steps import SCRIPTS, Batch, Block, Command, Deliver, ScriptCall, TailOp, script_source
from .thread import ThreadTail

__all__ = [
    "AsyncConsumerGroup",
    "AsyncTail",
    "AsyncTailAll",
    "ConsumerGroup",
    "Tail",
    "TailAll",
    "default_consumer_name",
]


class Saver(Protocol):
    """What a tail takes from its saver (either shell): tailing imports no saver, the savers
    import tailing."""

    client: Any
    slot_move_timeout_s: float


T = TypeVar("T", ThreadEvent, Delivery)
R = TypeVar("R")
_GRACE_S = 5.0  # a blocking read's timeout is its block time plus this
_NETWORK = (RedisConnectionError, RedisTimeoutError)
# _asked's answer when the node a read was asked to was lost: send the read again
_LOST = object()


def _ops(calls: Sequence[Command | ScriptCall]) -> list[Eval | Call]:
    """A batch's calls as the transport core's operations."""
    return [
        Eval(call.name, call.keys, call.args) if isinstance(call, ScriptCall) else Call(call)
        for call in calls
    ]


def _flow(
    op: Batch, scripts: Scripts, move_timeout_s: float, cluster: bool
) -> Generator[Step, Any, list[Any]]:
    """A batch's rounds: replies as the server gave them, for the reader core to judge, and
    a slot that never settled reported as each stopped call's reply, not raised; sent again
    after a lost connection (``resending``), within the batch's one deadline for its slot
    moves and its lost connections alike."""
    moves = Moves(move_timeout_s, "a tail's pipelined read")

    def attempt() -> Generator[Step, Any, list[Any]]:
        ops = _ops(op.calls)
        return rounds(ops, scripts, moves, translate_errors=False, give_up_as_value=True)

    return resending(attempt, moves, cluster, None, translate_errors=False)


def _unblocked(args: Command) -> Command:
    """A blocking read's command without its ``BLOCK <ms>``."""
    at = args.index("BLOCK")
    return (*args[:at], *args[at + 2 :])


_ASKED_NAP_S = 0.05  # between reads of a slot half moved, which cannot block


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid4().hex[:8]}"


# --- sync ------------------------------------------------------------------------------------


class _Dedicated:
    """One connection of the tail's own: ``stop()`` ends a blocked read by closing it."""

    def __init__(self, conn: Any, node: Any) -> None:
        self.conn = conn
        self.node = node  # the cluster node it talks to, None on a standalone server
        self.connected = False


class _SyncIO:
    def __init__(self, saver: Saver) -> None:
        self.client: Any = saver.client
        self.cluster = isinstance(saver.client, RedisCluster)
        self.move_timeout_s = saver.slot_move_timeout_s
        self.scripts = Scripts({name: script_source(name) for name in SCRIPTS})
        self.dedicated: dict[str, _Dedicated] = {}
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.blocked: _Dedicated | None = None
        # a pause ends at stop()
        self.verbs: Verbs = {
            Pipeline: partial(send_pipeline, self.client),
            LoadScripts: partial(load_scripts, self.client),
            Relearn: partial(relearn, self.client),
            Pause: lambda step: self.stopped.wait(step.seconds),
        }

    def execute(self, op: TailOp) -> Any:
        if isinstance(op, Batch):
            return self.own_batch(op) if op.own and not self.cluster else self.batch(op)
        if isinstance(op, Block):
            return self.block(op)
        self.stopped.wait(op.ms / 1000)
        return None

    def batch(self, op: Batch) -> list[Any]:
        return run(_flow(op, self.scripts, self.move_timeout_s, self.cluster), self.verbs)

    def _connection(self, key: str | None) -> _Dedicated:
        if self.cluster:
            assert key is not None, "a blocking read on a cluster names its key"
            node = self.client.get_node_from_key(key)
            pool = self.client.get_redis_connection(node).connection_pool
            name = node.name
        else:
            node, pool, name = None, self.client.connection_pool, ""
        dedicated = self.dedicated.get(name)
        if dedicated is None:
            dedicated = _Dedicated(pool.connection_class(**pool.connection_kwargs), node)
            self.dedicated[name] = dedicated
        if not dedicated.connected:
            dedicated.conn.connect()
            dedicated.connected = True
        return dedicated

    def _on_own(self, key: str | None, exchange: Callable[[_Dedicated], R]) -> R:
        """``exchange`` on the reader's own connection; once more, on a new connection, after a
        network error."""
        for attempt in range(2):
            try:
                return exchange(self._connection(key))
            except _NETWORK as exc:
                self.close_connections()
                if attempt or self.stopped.is_set():
                    raise unavailable(exc) from exc
        raise AssertionError("unreachable")

    def block(self, op: Block) -> Any:
        def read(dedicated: _Dedicated) -> Any:
            with self.lock:
                self.blocked = dedicated
            try:
                if self.stopped.is_set():
                    return None
                dedicated.conn.send_command(*op.args)
                return dedicated.conn.read_response(timeout=op.block_ms / 1000 + _GRACE_S)
            except ResponseError as exc:
                return exc
            except _NETWORK:
                if self.stopped.is_set():  # stop() shut the connection down
                    self.close_connections()
                    return None
                raise
            finally:
                with self.lock:
                    self.blocked = None

        moves = Moves(self.move_timeout_s, "a tail's blocking read")
        while not self.stopped.is_set():
            reply = self._on_own(op.key, read)
            if self.cluster and is_demoted(reply):
                # the slot is served by the promoted replica now: learn the layout, read there
                self.stopped.wait(moves.wait(reply, op.key))
                self.client.nodes_manager.initialize()
                continue
            if not (self.cluster and isinstance(reply, AskError)):  # MovedError is one
                return reply
            pause = moves.wait(reply, op.key)
            if isinstance(reply, MovedError):
                self.client.nodes_manager.move_slot(reply)
                self.stopped.wait(pause)
                continue
            reply = self._asked(reply, op, moves)
            if reply is not _LOST:
                return reply
        return None

    def _asked(self, ask: AskError, op: Block, moves: Moves) -> Any:
        """The read sent where ``ask`` says its key went, mid-migration: once, without
        blocking (ASKING allows one command), and after a nap if it found nothing. ``_LOST``
        when that node's connection was lost (it failed over mid-migration): the layout is
        learned again, and the read is sent again within ``moves``' deadline."""
        node = self.client.get_node(host=ask.host, port=ask.port)
        if node is None:  # a node the client has not heard of yet
            self.client.nodes_manager.initialize()
            return None
        pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.execute_command(*_unblocked(op.args))
        try:
            reply = pipe.execute(raise_on_error=False)[-1]
        except LOST as exc:
            self.stopped.wait(moves.after_lost(exc, self.cluster))
            # a layout still unknown is learned from the next read's redirect
            with contextlib.suppress(*_NETWORK):
                self.client.nodes_manager.initialize()
            return _LOST
        if not reply:
            self.stopped.wait(min(op.block_ms / 1000, _ASKED_NAP_S))
        return reply

    def own_batch(self, op: Batch) -> list[Any]:
        """Reads pipelined down the tail's own connection (the iterating thread's only)."""

        def exchange(dedicated: _Dedicated) -> list[Any]:
            conn = dedicated.conn
            conn.send_packed_command(packed(conn, op.calls))
            replies: list[Any] = []
            for _ in op.calls:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
            return replies

        return self._on_own(None, exchange)

    def close_connections(self) -> None:
        for dedicated in self.dedicated.values():
            dedicated.conn.disconnect()
        self.dedicated.clear()

    def stop(self) -> None:
        """End the tail: at once if it waits in a blocking read, else at its next step. Safe
        from any thread. The blocked read's own connection is shut down, which wakes the
        reading thread; the server drops the read when it sees the connection close."""
        self.stopped.set()
        # the reader marks itself blocked before it checks stopped, and this reads the mark
        # after setting stopped: either the reader sees stopped, or this sees the mark
        with self.lock:
            target = self.blocked
        sock = getattr(target.conn, "_sock", None) if target is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.stopped.set()
        self.close_connections()


class _SyncDriver:
    """Runs a core flow with a ``_SyncIO``. It references neither the public object nor its
    iterator, so dropping the object (leaving a ``for`` loop) finalizes the iterator at once,
    which closes the connection."""

    def __init__(
        self,
        io: _SyncIO,
        flow: Generator[TailOp | Deliver, Any, None],
        finish: Callable[[], None] | None,
    ) -> None:
        self.io = io
        self.flow = flow
        self.finish = finish
        self.closed = False
        try:
            # the start (resolving "$", finding feeds, joining a group) runs in the call, so
            # "new events" means events appended after it
            self.step = self.advance(None)
        except BaseException:
            self.shutdown()
            raise

    def advance(self, reply: Any) -> TailOp | Deliver | None:
        """Send ``reply``; run non-blocking batches at once; the next other step (None: done)."""
        try:
            step = self.flow.send(reply)
            while isinstance(step, Batch):
                step = self.flow.send(self.io.execute(step))
        except StopIteration:
            return None
        return step

    def items(self) -> Generator[Any, None, None]:
        try:
            step = self.step
            while step is not None and not self.io.stopped.is_set():
                if isinstance(step, Deliver):
                    yield step.item
                    step = self.advance(None)
                else:
                    step = self.advance(self.io.execute(step))
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.flow.close()
        try:
            if self.finish is not None:
                self.finish()
        finally:
            self.io.close()


_S = TypeVar("_S", bound="_SyncDriven[Any]")


class _SyncDriven(Generic[T]):
    def __init__(self, io: _SyncIO, flow: Generator[TailOp | Deliver, Any, None]) -> None:
        self._io = io
        self._driver = _SyncDriver(io, flow, self._finisher())
        self._items: Generator[T, None, None] = self._driver.items()

    def _finisher(self) -> Callable[[], None] | None:
        """What to run once reading is over, before the connection closes; it must not
        reference ``self`` (see ``_SyncDriver``)."""
        return None

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        return next(self._items)

    def stop(self) -> None:
        """End the iteration from another thread (a blocked read returns at once)."""
        self._io.stop()

    def close(self) -> None:
        """End the iteration and close its connection; safe to call more than once."""
        self._io.stop()
        try:
            self._items.close()
        except ValueError:
            return  # iterating in another thread right now: stop() makes it end by itself
        self._driver.shutdown()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _ThreadTailView:
    """What ``Tail`` and ``AsyncTail`` tell of where they are."""

    _core: ThreadTail

    @property
    def position(self) -> str | None:
        return self._core.position

    @property
    def skipped(self) -> int:
        return self._core.skipped


class _FeedTailView:
    """What ``TailAll`` and ``AsyncTailAll`` tell of where they are."""

    _core: FeedTail

    @property
    def cursor(self) -> FeedCursor:
        return self._core.cursor

    @property
    def skipped(self) -> int:
        return self._core.skipped


class _GroupView:
    """What ``ConsumerGroup`` and ``AsyncConsumerGroup`` tell of their member."""

    _core: GroupReader
    _kept: list[int]

    @property
    def kept_on(self) -> int:
        """After close: on how many feeds this member stays, with pending entries."""
        return self._kept[0]

    @property
    def group(self) -> str:
        return self._core.group

    @property
    def consumer(self) -> str:
        return self._core.consumer

    @property
    def skipped(self) -> int:
        return self._core.skipped

    @property
    def parked(self) -> int:
        """Entries this member parked after ``max_deliveries`` deliveries."""
        return self._core.parked


class Tail(_ThreadTailView, _SyncDriven[ThreadEvent]):
    """``saver.tail(...)``: one thread's events, in order. ``position`` is the id of the last
    event handed over (or skipped): ``saver.tail(thread_id, after=position)`` resumes exactly
    after it. ``skipped`` counts events reported and skipped."""

    def __init__(self, saver: Saver, core: ThreadTail) -> None:
        self._core = core
        super().__init__(_SyncIO(saver), core.run())


class TailAll(_FeedTailView, _SyncDriven[ThreadEvent]):
    """``saver.tail_all(...)``: every thread's events, through the feeds. ``cursor`` is where
    it is (after the last event handed over): ``saver.tail_all(after=cursor)`` resumes."""

    def __init__(self, saver: Saver, core: FeedTail) -> None:
        self._core = core
        super().__init__(_SyncIO(saver), core.run())


class ConsumerGroup(_GroupView, _SyncDriven[Delivery]):
    """``saver.consumer_group(...)``: this process's member of a consumer group over every
    thread's events. Iterate for ``Delivery`` values and ``ack()`` each one handled; one not
    acknowledged within ``min_idle_ms`` is delivered again (to any member), and one delivered
    ``max_deliveries`` times is parked. ``close()`` leaves the group: the member is deleted
    unless entries are still pending for it (``kept_on`` says on how many feeds)."""

    def __init__(self, saver: Saver, core: GroupReader) -> None:
        self._core = core
        self._kept = [0]
        io = _SyncIO(saver)
        super().__init__(io, core.run())

    def _finisher(self) -> Callable[[], None] | None:
        core, io, kept = self._core, self._io, self._kept

        def leave() -> None:
            try:
                kept[0] = _drive_sync(core.leave(), io.batch)
            except _NETWORK:
                kept[0] = -1  # the server is gone; the others reap this member later

        return leave

    def ack(self, *deliveries: Delivery) -> None:
        """Acknowledge handled deliveries (one round trip); safe from any thread."""
        for reply in self._io.batch(self._core.ack_call(deliveries)):
            if isinstance(reply, Exception):
                raise reply

    def destroy(self) -> int:
        """Delete the group from every feed, pending entries included; returns on how many."""
        self.close()
        return _drive_sync(self._core.destroy(), self._io.batch)


def _drive_sync(flow: Generator[TailOp, Any, R], batch: Callable[[Batch], Any]) -> R:
    reply: Any = None
    try:
        while True:
            step = flow.send(reply)
            if not isinstance(step, Batch):
                raise AssertionError(f"{step!r} in a one-shot flow")
            reply = batch(step)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


# --- asyncio ---------------------------------------------------------------------------------


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


class _AsyncIO:
    def __init__(self, saver: Saver) -> None:
        self.client: Any = saver.client
        self.cluster = isinstance(saver.client, AsyncRedisCluster)
        self.move_timeout_s = saver.slot_move_timeout_s
        self.scripts = Scripts({name: script_source(name) for name in SCRIPTS})
        self.dedicated: dict[str, _Dedicated] = {}
        self.stopped = threading.Event()
        self.blocked: _Dedicated | None = None
        self.verbs: Verbs = {
            Pipeline: partial(asend_pipeline, self.client),
            LoadScripts: partial(aload_scripts, self.client),
            Relearn: partial(arelearn, self.client),
            Pause: lambda step: self._nap(step.seconds),
        }
        self.wake: asyncio.Event | None = None

    async def execute(self, op: TailOp) -> Any:
        _raise_swallowed_cancel()
        if isinstance(op, Batch):
            reply = await (self.own_batch(op) if op.own and not self.cluster else self.batch(op))
        elif isinstance(op, Block):
            reply = await self.block(op)
        else:
            await self._nap(op.ms / 1000)
            reply = None
        _raise_swallowed_cancel()
        return reply

    async def batch(self, op: Batch) -> list[Any]:
        return await arun(_flow(op, self.scripts, self.move_timeout_s, self.cluster), self.verbs)

    async def _nap(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        # short naps, so a stop() from another thread is seen; cancellation ends it at once
        while not self.stopped.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    async def _connection(self, key: str | None, node: Any = None) -> _Dedicated:
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
        dedicated = self.dedicated.get(name)
        if dedicated is None:
            dedicated = _Dedicated(cls(**kwargs), node)
            self.dedicated[name] = dedicated
        if not dedicated.connected:
            await dedicated.conn.connect()
            dedicated.connected = True
        return dedicated

    async def _on_own(self, key: str | None, exchange: Callable[[_Dedicated], Awaitable[R]]) -> R:
        """``exchange`` on the reader's own connection; once more, on a new connection, after a
        network error. Cancelled mid-way, the connection is dropped: a reply would arrive on it
        that nobody reads."""
        for attempt in range(2):
            try:
                return await exchange(await self._connection(key))
            except _NETWORK as exc:
                await self._drop()
                if attempt or self.stopped.is_set():
                    raise unavailable(exc) from exc
            except BaseException:
                await self._drop()
                raise
        raise AssertionError("unreachable")

    async def block(self, op: Block) -> Any:
        async def read(dedicated: _Dedicated) -> Any:
            if self.stopped.is_set():
                return None
            self.blocked = dedicated
            wake = self.wake = asyncio.Event()
            try:
                await dedicated.conn.send_command(*op.args)
                read = asyncio.ensure_future(
                    dedicated.conn.read_response(timeout=op.block_ms / 1000 + _GRACE_S)
                )
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait({read, woken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
                    if not read.done():
                        # stopped (or cancelled): the reply, if any, would arrive on a
                        # connection nobody reads, so it is dropped
                        read.cancel()
                        with contextlib.suppress(BaseException):
                            await read
                        await self._drop()
                return read.result() if not read.cancelled() else None
            except ResponseError as exc:
                return exc
            finally:
                self.blocked = None
                self.wake = None

        moves = Moves(self.move_timeout_s, "a tail's blocking read")
        while not self.stopped.is_set():
            reply = await self._on_own(op.key, read)
            if self.cluster and is_demoted(reply):
                await self._nap(moves.wait(reply, op.key))
                await self.client.nodes_manager.initialize()
                continue
            if not (self.cluster and isinstance(reply, AskError)):  # MovedError is one
                return reply
            pause = moves.wait(reply, op.key)
            if isinstance(reply, MovedError):
                await self.client.nodes_manager.move_slot(reply)
                await self._nap(pause)
                continue
            reply = await self._asked(reply, op, moves)
            if reply is not _LOST:
                return reply
        return None

    async def _asked(self, ask: AskError, op: Block, moves: Moves) -> Any:
        """As ``_SyncIO._asked``."""
        node = self.client.get_node(ask.host, ask.port)
        if node is None:
            await self.client.nodes_manager.initialize()
            return None
        # on the tail's own connection to that node: redis-py's cluster pipeline, on a lost
        # connection, closes every connection of the client and sends again without the
        # target node ("No way to dispatch this command", redis-py 8.1)
        try:
            conn = (await self._connection(None, node)).conn
            await conn.send_packed_command(packed(conn, [("ASKING",), _unblocked(op.args)]))
            await conn.read_response()
            try:
                reply = await conn.read_response()
            except ResponseError as exc:
                reply = exc
        except LOST as exc:
            await self._drop()
            await self._nap(moves.after_lost(exc, self.cluster))
            with contextlib.suppress(*_NETWORK):
                await self.client.nodes_manager.initialize()
            return _LOST
        if not reply:
            await self._nap(min(op.block_ms / 1000, _ASKED_NAP_S))
        return reply

    async def own_batch(self, op: Batch) -> list[Any]:
        async def exchange(dedicated: _Dedicated) -> list[Any]:
            conn = dedicated.conn
            await conn.send_packed_command(packed(conn, op.calls))
            replies: list[Any] = []
            for _ in op.calls:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
            return replies

        return await self._on_own(None, exchange)

    async def _drop(self) -> None:
        for dedicated in self.dedicated.values():
            await dedicated.conn.disconnect()
        self.dedicated.clear()

    async def stop(self) -> None:
        """End the tail; a blocked read returns at once (its connection is dropped)."""
        self.stopped.set()
        if self.wake is not None:
            self.wake.set()

    async def close(self) -> None:
        self.stopped.set()
        await self._drop()


class _AsyncDriver:
    """The asyncio twin of ``_SyncDriver``; the start runs on ``async with`` or the first
    iteration (a constructor cannot wait)."""

    def __init__(
        self,
        io: _AsyncIO,
        flow: Generator[TailOp | Deliver, Any, None],
        finish: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self.io = io
        self.flow = flow
        self.finish = finish
        self.closed = False
        self.started = False
        self.step: TailOp | Deliver | None = None

    async def advance(self, reply: Any) -> TailOp | Deliver | None:
        try:
            step = self.flow.send(reply)
            while isinstance(step, Batch):
                step = self.flow.send(await self.io.execute(step))
        except StopIteration:
            return None
        return step

    async def start(self) -> None:
        if not self.started:
            self.started = True
            try:
                self.step = await self.advance(None)
            except BaseException:
                await self.shutdown()
                raise

    async def items(self) -> AsyncGenerator[Any, None]:
        try:
            await self.start()
            step = self.step
            while step is not None and not self.io.stopped.is_set():
                if isinstance(step, Deliver):
                    yield step.item
                    step = await self.advance(None)
                else:
                    step = await self.advance(await self.io.execute(step))
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.flow.close()
        try:
            if self.finish is not None:
                await self.finish()
        finally:
            await self.io.close()


_A = TypeVar("_A", bound="_AsyncDriven[Any]")


class _AsyncDriven(Generic[T]):
    def __init__(self, io: _AsyncIO, flow: Generator[TailOp | Deliver, Any, None]) -> None:
        self._io = io
        self._driver = _AsyncDriver(io, flow, self._finisher())
        self._items: AsyncGenerator[T, None] = self._driver.items()

    def _finisher(self) -> Callable[[], Awaitable[None]] | None:
        return None

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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class AsyncTail(_ThreadTailView, _AsyncDriven[ThreadEvent]):
    """``saver.atail(...)``: the asyncio twin of ``Tail``."""

    def __init__(self, saver: Saver, core: ThreadTail) -> None:
        self._core = core
        super().__init__(_AsyncIO(saver), core.run())


class AsyncTailAll(_FeedTailView, _AsyncDriven[ThreadEvent]):
    """``saver.atail_all(...)``: the asyncio twin of ``TailAll``."""

    def __init__(self, saver: Saver, core: FeedTail) -> None:
        self._core = core
        super().__init__(_AsyncIO(saver), core.run())


class AsyncConsumerGroup(_GroupView, _AsyncDriven[Delivery]):
    """``saver.aconsumer_group(...)``: the asyncio twin of ``ConsumerGroup``."""

    def __init__(self, saver: Saver, core: GroupReader) -> None:
        self._core = core
        self._kept = [0]
        super().__init__(_AsyncIO(saver), core.run())

    def _finisher(self) -> Callable[[], Awaitable[None]] | None:
        core, io, kept = self._core, self._io, self._kept

        async def leave() -> None:
            try:
                kept[0] = await _drive_async(core.leave(), io.batch)
            except _NETWORK:
                kept[0] = -1

        return leave

    async def ack(self, *deliveries: Delivery) -> None:
        for reply in await self._io.batch(self._core.ack_call(deliveries)):
            if isinstance(reply, Exception):
                raise reply

    async def destroy(self) -> int:
        await self.aclose()
        return await _drive_async(self._core.destroy(), self._io.batch)


async def _drive_async(
    flow: Generator[TailOp, Any, R], batch: Callable[[Batch], Awaitable[Any]]
) -> R:
    reply: Any = None
    try:
        while True:
            step = flow.send(reply)
            if not isinstance(step, Batch):
                raise AssertionError(f"{step!r} in a one-shot flow")
            reply = await batch(step)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
