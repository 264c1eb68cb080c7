"""The sync shells: ``Tail``, ``TailAll`` and ``ConsumerGroup``, and the I/O they do with a
redis-py client (``SyncShell``). ``stop()`` from another thread ends a blocked read at once by
shutting its connection down.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from ..events import Delivery, ThreadEvent
from ..transport.core import Pipeline, run
from ..transport.resp import packed
from ..transport.sending import load_scripts, relearn, send_pipeline
from .base import C, Driving, Halted, Saver, Shell, T, leaving, raise_errors
from .blocking import GRACE_S, NETWORK, UNKNOWN, Asking, Dedicated, Exchange, Read, within
from .feeds import FeedTail
from .groups import GroupReader
from .steps import Batch, Deliver, TailFlow, TailOp
from .thread import ThreadTail
from .views import FeedTailView, GroupView, ThreadTailView

__all__ = ["ConsumerGroup", "SyncShell", "Tail", "TailAll"]


class SyncShell(Shell):
    def __init__(self, saver: Saver) -> None:
        sending = (send_pipeline, load_scripts, relearn)
        super().__init__(saver, isinstance(saver.client, RedisCluster), sending)
        self.lock = threading.Lock()
        # the pool connection the iteration's pipeline is on: a stop() shuts it down
        self.busy: set[Any] = set()
        self.cut: set[Any] = set()  # those a stop() shut down
        # the thread iterating, while it does a step: its steps end at a stop (a group's leave,
        # after the iteration, and ack() from other threads do not)
        self.driving: int | None = None
        if not self.cluster:
            self.verbs = {**self.verbs, Pipeline: self.pipeline}

    def send(self, op: TailOp) -> Any:
        return run(self.flow(op), self.verbs)

    def pause(self, seconds: float) -> None:
        self.stopped.wait(seconds)

    def _connection(self, key: str | None) -> Dedicated:
        if self.cluster:
            assert key is not None, "a blocking read on a cluster names its key"
            node = self.client.get_node_from_key(key)
            pool = self.client.get_redis_connection(node).connection_pool
            name = node.name
        else:
            node, pool, name = None, self.client.connection_pool, ""
        return self.own_connection(name, node, pool.connection_class, pool.connection_kwargs)

    def _connected(self, dedicated: Dedicated) -> Dedicated:
        if not dedicated.connected:
            if not isinstance(dedicated.conn.retry, _Stoppable):
                dedicated.conn.retry = _Stoppable(dedicated.conn.retry, self.stopped)
            dedicated.conn.connect()
            dedicated.connected = True
        return dedicated

    def read(self, step: Read) -> Any:
        op, dedicated = step.op, self._connection(step.op.key)
        # marked before connecting: a stop() meanwhile shuts the handshake's socket down too
        with self.lock:
            self.blocked = dedicated
        try:
            if self.stopped.is_set():
                return None
            self._connected(dedicated)
            if self.stopped.is_set():  # stopped while the socket was being made
                self.drop()
                return None
            dedicated.conn.send_command(*op.args)
            return dedicated.conn.read_response(timeout=op.block_ms / 1000 + GRACE_S)
        except ResponseError as exc:
            return exc
        except NETWORK:
            if self.stopped.is_set():  # stop() shut the connection down
                self.drop()
                return None
            raise
        finally:
            with self.lock:
                self.blocked = None

    def pipeline(self, step: Pipeline) -> list[Any]:
        """``step`` on a connection of the client's pool, as ``send_pipeline`` sends it, where a
        ``stop()`` reaches it: its socket is shut down, and the step ends ``Halted``."""
        if self._halted():
            raise Halted
        pool = self.client.connection_pool
        conn = pool.get_connection()
        if self.driving == threading.get_ident():
            # the iteration's: a stop() shuts it down (an ack() from another thread goes on)
            with self.lock:
                self.busy.add(conn)

        # a client without a socket timeout would wait on a silent server for good
        bound = {} if conn.socket_timeout else {"timeout": within()}
        callbacks = self.client.response_callbacks

        def attempt() -> list[Any]:
            if conn in self.cut or self._halted():  # not sent again once stopped
                raise Halted
            conn.send_packed_command(packed(conn, step.commands))
            replies: list[Any] = []
            for command in step.commands:
                # what the client's parse_response does, with the bound
                try:
                    reply = conn.read_response(**bound)
                except ResponseError as exc:
                    replies.append(exc)
                    continue
                name = command[0]
                replies.append(callbacks[name](reply) if name in callbacks else reply)
            return replies

        try:
            # the connection's retry policy, as the client's own pipeline uses it
            return conn.retry.call_with_retry(attempt, lambda _: conn.disconnect())  # type: ignore[no-any-return]
        except BaseException as exc:
            # replies may still be in flight: the pool's next user must not read them
            conn.disconnect()
            if conn in self.cut and not isinstance(exc, Halted):
                raise Halted from exc
            raise
        finally:
            with self.lock:
                self.busy.discard(conn)
                self.cut.discard(conn)
            pool.release(conn)

    def _halted(self) -> bool:
        """Whether the step being sent is cut short: the iteration's own, once stopped (or
        sent again after a stop() shut its connection down)."""
        return self.stopped.is_set() and self.driving == threading.get_ident()

    def exchange(self, step: Exchange) -> list[Any]:
        conn = self._connected(self._connection(None)).conn
        conn.send_packed_command(packed(conn, step.calls))
        return [_reply(conn) for _ in step.calls]

    def asking(self, step: Asking) -> Any:
        node = self.client.get_node(host=step.host, port=step.port)
        if node is None:
            return UNKNOWN
        pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.execute_command(*step.args)
        return pipe.execute(raise_on_error=False)[-1]

    def drop(self) -> None:
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
            self.cut.update(self.busy)
            conns = [*self.busy, *([self.blocked.conn] if self.blocked is not None else [])]
        for conn in conns:
            sock = getattr(conn, "_sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.stopped.set()
        self.drop()


class _Stoppable:
    """A connection's retry policy that retries nothing once stopped: redis-py retries a
    whole connect and handshake, and a retry after ``stop()`` shut the socket down would wait
    on a new one that no stop reaches."""

    def __init__(self, retry: Any, stopped: threading.Event) -> None:
        self.retry = retry
        self.stopped = stopped

    def call_with_retry(
        self, do: Any, fail: Any, is_retryable: Any = None, with_failure_count: bool = False
    ) -> Any:
        def retryable(error: Exception) -> bool:
            return not self.stopped.is_set() and (is_retryable is None or is_retryable(error))

        return self.retry.call_with_retry(do, fail, retryable, with_failure_count)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.retry, name)


def _reply(conn: Any) -> Any:
    """The next reply on ``conn``, a server error as a value."""
    try:
        return conn.read_response()
    except ResponseError as exc:
        return exc


class _Driver(Driving):
    """Runs a core flow with a ``SyncShell`` (``Driving`` says why it stands apart)."""

    def __init__(self, io: SyncShell, flow: TailFlow, finish: Callable[[], None]) -> None:
        super().__init__(flow, io.stopped)
        self.io = io
        self.finish = finish
        try:
            # the start (resolving "$", finding feeds, joining a group) runs in the call, so
            # "new events" means events appended after it
            self.resume(None)
            while isinstance(self.step, Batch):
                self.resume(io.send(self.step))
        except BaseException:
            self.shutdown()
            raise

    def items(self) -> Generator[Any, None, None]:
        try:
            while (step := self.due()) is not None:
                if isinstance(step, Deliver):
                    yield step.item
                    self.resume(None)
                else:
                    self.io.driving = threading.get_ident()
                    try:
                        reply = self.io.send(step)
                    finally:
                        self.io.driving = None
                    self.resume(reply)
        except Halted:
            return
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.closing():
            try:
                self.finish()
            finally:
                self.io.close()


_S = TypeVar("_S", bound="_Driven[Any, Any]")


class _Driven(Generic[T, C]):
    """What ``Tail``, ``TailAll`` and ``ConsumerGroup`` share: an iterator over what their
    reader core delivers, driven by a ``SyncShell`` of their own, and its stopping."""

    def __init__(self, saver: Saver, core: C) -> None:
        self._core = core
        self._io = io = SyncShell(saver)
        self._driver = _Driver(io, core.run(), self._finisher())
        self._items: Generator[T, None, None] = self._driver.items()

    def _finisher(self) -> Callable[[], None]:
        """What to run once reading is over, before the connection closes; it must not
        reference ``self`` (see ``Driving``)."""
        return lambda: None

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

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Tail(ThreadTailView, _Driven[ThreadEvent, ThreadTail]):
    """``saver.tail(...)``: one thread's events, in order. ``position`` is the id of the last
    event handed over (or skipped): ``saver.tail(thread_id, after=position)`` resumes exactly
    after it. ``skipped`` counts events reported and skipped."""


class TailAll(FeedTailView, _Driven[ThreadEvent, FeedTail]):
    """``saver.tail_all(...)``: every thread's events, through the feeds. ``cursor`` is where
    it is (after the last event handed over): ``saver.tail_all(after=cursor)`` resumes."""


class ConsumerGroup(GroupView, _Driven[Delivery, GroupReader]):
    """``saver.consumer_group(...)``: this process's member of a consumer group over every
    thread's events. Iterate for ``Delivery`` values and ``ack()`` each one handled; one not
    acknowledged within ``min_idle_ms`` is delivered again (to any member), and one delivered
    ``max_deliveries`` times is parked. ``close()`` leaves the group: the member is deleted
    unless entries are still pending for it (``kept_on`` says on how many feeds)."""

    def _finisher(self) -> Callable[[], None]:
        core, io = self._core, self._io
        return lambda: run(leaving(core), {Batch: io.send})

    def ack(self, *deliveries: Delivery) -> None:
        """Acknowledge handled deliveries (one round trip); safe from any thread."""
        raise_errors(self._io.send(self._core.ack_call(deliveries)))

    def destroy(self) -> int:
        """Delete the group from every feed, pending entries included; returns on how many."""
        self.close()
        return run(self._core.destroy(), {Batch: self._io.send})
