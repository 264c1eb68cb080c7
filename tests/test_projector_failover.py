"""The projector through a primary's failure, as it meets it: a request in flight to a server
that stops answering (a stalled process, a black-holed path), then the server replaced: on a
cluster its replica takes over (``CLUSTER FAILOVER TAKEOVER``, what an operator runs when the
primary is unreachable), on a standalone server the process is killed and started again on its
data. The projector's client sets no socket timeout (``socket_timeout=None``): its own bounds
must end each wait, it must carry on (its lag returns to 0), and ``stop()`` must end it
wherever it waits. The servers are Redis, or Valkey with ``STREAMSAVER_TEST_SERVER=valkey``."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis.cluster import RedisCluster

from streamsaver import RedisStreamSaver, StreamSaverError
from streamsaver.embedded import EmbeddedCluster, EmbeddedRedis
from streamsaver.projector import Projector

from .conftest import _embedded_binary

BOUND_S = 45.0  # generous: the point is that the lag returns to 0, not how fast
# a client made without timeouts (redis-py's own default is 5 s)
UNBOUNDED: dict[str, Any] = {"socket_timeout": None, "socket_connect_timeout": None}


def _put(saver: RedisStreamSaver, thread: str, n: int) -> None:
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    cp = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
    saver.put(config, cp, generate_metadata(step=n), {"n": n + 1})


def _put_soon(saver: RedisStreamSaver, thread: str, n: int) -> None:
    """A put retried while the server's replacement is still being learned."""
    deadline = time.monotonic() + BOUND_S
    while True:
        try:
            return _put(saver, thread, n)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Running:
    """A projector's ``run()`` in a thread of its own, and what it raised."""

    def __init__(self, projector: Projector) -> None:
        self.projector = projector
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.projector.run()
        except BaseException as exc:  # judged by the test
            self.error = exc

    def alive(self) -> str:
        """'' while it runs, else why not (the test's message)."""
        if self.thread.is_alive():
            return ""
        return f"the projector ended: {self.error!r}"

    def stop_within(self, seconds: float) -> bool:
        self.projector.stop()
        self.thread.join(seconds)
        return not self.thread.is_alive()


def _caught_up(lag: Callable[[], int], running: Running, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    pending = -1
    while pending != 0:
        assert not running.alive(), f"{what}: {running.alive()}"
        try:
            pending = lag()
        except (redis.RedisError, StreamSaverError):
            pending = -1  # the reader's own client is still learning the new layout
        assert time.monotonic() < deadline, f"{what}: {pending} entries still pending"
        time.sleep(0.1)


def _freeze(server: EmbeddedRedis) -> None:
    os.kill(server.process.pid, signal.SIGSTOP)


def _thaw(server: EmbeddedRedis) -> None:
    if server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGCONT)


@pytest.fixture
def durable_server() -> Iterator[EmbeddedRedis]:
    """A server of the test's own, with AOF: one it may freeze, kill and start again on its
    data, as a supervisor restarts a primary that hung."""
    durable = ["--appendonly", "yes", "--appendfsync", "always"]
    with EmbeddedRedis(durable, binary=_embedded_binary()) as server:
        try:
            yield server
        finally:
            _thaw(server)


def test_the_projector_carries_on_after_its_primary_stalls_and_a_replica_takes_over() -> None:
    with EmbeddedCluster(3, replicas=1, binary=_embedded_binary()) as cluster:
        writer = RedisStreamSaver(RedisCluster.from_url(cluster.url, socket_timeout=2), prefix="f")
        reader = RedisStreamSaver(RedisCluster.from_url(cluster.url, socket_timeout=2), prefix="f")
        _put(writer, "t", 1)
        saver = RedisStreamSaver(RedisCluster.from_url(cluster.url, **UNBOUNDED), prefix="f")
        running = Running(Projector(saver, catch_up_s=0.2, min_idle_ms=500))
        lag = lambda: reader.projector_lag().pending  # noqa: E731
        _caught_up(lag, running, "before the failover")
        owner = cluster.owner(writer.client.keyslot(writer._ops.keys("t").log))
        at = next(i for i, p in enumerate(cluster.primaries) if p is owner)
        _freeze(owner)
        try:
            time.sleep(1.0)  # the projector's periodic catch-up reads the stalled primary's feed
            with redis.Redis(port=cluster.replicas_of[at][0].port) as replica:
                replica.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            for n in range(2, 5):
                _put_soon(writer, "t", n)
            _caught_up(lag, running, "after the failover")
            assert reader.get_tuple({"configurable": {"thread_id": "t"}}) is not None
            infos = {i.thread_id: i.checkpoint_id for i in reader.threads()}
            latest = reader.get_tuple({"configurable": {"thread_id": "t"}})
            assert latest is not None
            assert infos == {"t": latest.config["configurable"]["checkpoint_id"]}
            assert running.stop_within(BOUND_S), "stop() did not end the projector"
        finally:
            running.projector.stop()
            _thaw(owner)
        assert running.error is None, repr(running.error)
        for s in (writer, reader, saver):
            s.client.close()


def test_the_projector_carries_on_after_its_server_stalls_and_restarts(
    durable_server: EmbeddedRedis,
) -> None:
    server = durable_server
    writer = RedisStreamSaver(redis.Redis.from_url(server.url, socket_timeout=2), prefix="f")
    _put(writer, "t", 1)
    with RedisStreamSaver.from_conn_string(server.url, prefix="f", socket_timeout=None) as saver:
        running = Running(Projector(saver, catch_up_s=0.2, min_idle_ms=500))
        lag = lambda: writer.projector_lag().pending  # noqa: E731
        _caught_up(lag, running, "before the restart")
        _freeze(server)
        time.sleep(1.0)  # the projector's periodic catch-up waits on the stalled server
        server.kill()
        time.sleep(2.0)  # down for longer than the client's retries
        server.restart()
        for n in range(2, 5):
            _put_soon(writer, "t", n)
        try:
            _caught_up(lag, running, "after the restart")
        finally:
            stopped = running.stop_within(BOUND_S)
        assert stopped, "stop() did not end the projector"
        assert running.error is None, repr(running.error)
    writer.client.close()


def test_stop_ends_a_projector_waiting_on_a_silent_server(
    durable_server: EmbeddedRedis,
) -> None:
    server = durable_server
    writer = RedisStreamSaver(redis.Redis.from_url(server.url, socket_timeout=2), prefix="f")
    _put(writer, "t", 1)
    saver = RedisStreamSaver(redis.Redis.from_url(server.url, **UNBOUNDED), prefix="f")
    # the periodic catch-up and the group's claims every 50 ms: one of them is in flight
    running = Running(Projector(saver, catch_up_s=0.05, min_idle_ms=100))
    _caught_up(lambda: writer.projector_lag().pending, running, "before the stall")
    _freeze(server)
    try:
        time.sleep(1.0)
        stopped = running.stop_within(10.0)
    finally:
        _thaw(server)
    assert stopped, "stop() did not end a projector waiting on a silent server"
    assert running.error is None, repr(running.error)
    saver.client.close()
    writer.client.close()
