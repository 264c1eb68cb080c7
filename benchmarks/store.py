"""What the Store costs: each call on RedisStreamStore beside the same call on its peers.

    python -m benchmarks.store [--items N] [--namespaces K] [--calls C] [--url URL]
                               [--pg URL] [--stack URL] [--vector-items V] [--dims D]

Every store is filled alike with N items spread over K namespaces ``("mem", "<i>")``, then
each call is timed C times on each, the stores taking turns call by call so a noisy moment hits
all: ``put`` (an update of an existing item), ``get``, ``search`` of one namespace (limit 10),
of the whole ``("mem",)`` prefix (limit 10) and with a filter, and ``list_namespaces``. Then V
items with a D-dimension embedding (a deterministic fake: no model) go into a store of each
kind with ``index=``, and ``search(query=..., limit=10)`` is timed: exact top-10 over V items;
with ``--stack``, also by a RedisStreamStore on the Stack, through the server's vector index
(its top-10 compared with the exact path's).

Peers: ``InMemoryStore`` (always), ``PostgresStore`` (``--pg``, a database it creates,
without vectors unless pgvector is installed) and ``langgraph-checkpoint-redis``'s
``RedisStore`` (``--stack``, a Redis Stack: ``../shared/scripts/start-redis-stack.sh PORT``).
Memory per item: what the server's ``used_memory`` (Redis), the tables' size (PostgreSQL) or
the heap (``tracemalloc``, InMemoryStore) grew by while filling, over N. Figures are medians
and p99s in ms, and each one's ratio to InMemoryStore's from the same run. Without --url (or
$REDIS_URL) it starts a throwaway redis-server, so its memory is the store's alone.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import Any

import redis
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore

from streamsaver import RedisStreamStore

from . import script
from .stats import NS_PER_MS, median, percentile, settle

Call = Callable[[BaseStore, int], object]

CALLS: dict[str, Call] = {
    "put": lambda s, i: s.put(("mem", str(i % 20)), f"k{i % 50}", {"i": i, "text": "x" * 200}),
    "get": lambda s, i: s.get(("mem", str(i % 20)), f"k{i % 50}"),
    "search one namespace": lambda s, i: s.search(("mem", str(i % 20)), limit=10),
    "search prefix": lambda s, i: s.search(("mem",), limit=10),
    "search filter": lambda s, i: s.search(("mem",), filter={"i": {"$lt": 10}}, limit=10),
    "list_namespaces": lambda s, i: s.list_namespaces(prefix=("mem",)),
}
VECTOR_CALL = "vector search top-10"
INDEXED = "RedisStreamStore (Stack index)"
WORDS = [
    "apple", "pear", "tea", "redis", "stream", "memory",
    "cat", "dog", "rust", "python", "graph", "node",
]  # fmt: skip


def fake_embedder(dims: int) -> Callable[[list[str]], list[list[float]]]:
    def embed(texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            digest = b"".join(
                hashlib.sha256(f"{i}:{text}".encode()).digest() for i in range(dims // 32 + 1)
            )
            out.append([(b - 128) / 128 for b in digest[:dims]])
        return out

    return embed


def _text(i: int) -> str:
    return " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7)) + f" #{i}"


def _fill(store: BaseStore, items: int, namespaces: int, text: Callable[[int], str]) -> None:
    batch: list[PutOp] = []
    for i in range(items):
        value = {"i": i, "text": text(i)}
        batch.append(PutOp(("mem", str(i % namespaces)), f"k{i}", value))
        if len(batch) == 100:
            store.batch(batch)
            batch = []
    if batch:
        store.batch(batch)


class Peers:
    """Opens each store kind on a fresh space; ``memory()`` reads what its backend holds."""

    def __init__(self, url: str, pg: str | None, stack: str | None) -> None:
        self.url, self.pg, self.stack = url, pg, stack
        self.stack_ = contextlib.ExitStack()

    def open(self, index: Any = None) -> dict[str, tuple[BaseStore, Callable[[], int]]]:
        stores: dict[str, tuple[BaseStore, Callable[[], int]]] = {}
        heap = InMemoryStore(index=index)
        stores["InMemoryStore"] = (heap, lambda: tracemalloc.get_traced_memory()[0])
        client = self.stack_.enter_context(redis.Redis.from_url(self.url))
        ours = RedisStreamStore(client, prefix=f"bench-{uuid.uuid4().hex[:6]}", index=index)
        stores["RedisStreamStore"] = (ours, lambda: int(client.info("memory")["used_memory"]))
        if self.pg is not None and index is None:
            stores["PostgresStore"] = self._postgres()
        if self.stack is not None:
            from langgraph.store.redis import RedisStore

            tag = uuid.uuid4().hex[:6]
            stack_client = self.stack_.enter_context(redis.Redis.from_url(self.stack))
            if index is not None:
                # the same store on the Stack: its search goes through the server's index
                indexed = RedisStreamStore(stack_client, prefix=f"bench-{tag}", index=index)
                indexed.setup()
                assert indexed._ops.vectors is not None, "the Stack has no usable RediSearch"
                self.stack_.callback(_drop_index, stack_client, indexed._ops.vectors.name)
                stores[INDEXED] = (
                    indexed,
                    lambda: int(stack_client.info("memory")["used_memory"]),
                )
            peer = RedisStore(
                stack_client, index=index, store_prefix=f"s{tag}", vector_prefix=f"v{tag}"
            )
            peer.setup()
            stores["RedisStore (Stack)"] = (
                peer,
                lambda: int(stack_client.info("memory")["used_memory"]),
            )
        return stores

    def _postgres(self) -> tuple[BaseStore, Callable[[], int]]:
        import psycopg
        from langgraph.store.postgres import PostgresStore

        assert self.pg is not None
        name = f"streamsaver_store_bench_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(self.pg, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        self.stack_.callback(self._drop_db, name)
        url = self.pg.rsplit("/", 1)[0] + "/" + name
        store = self.stack_.enter_context(PostgresStore.from_conn_string(url))
        store.setup()

        def size() -> int:
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0]) if row else 0

        return store, size

    def _drop_db(self, name: str) -> None:
        import psycopg

        assert self.pg is not None
        with psycopg.connect(self.pg, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        self.stack_.close()


def _drop_index(client: redis.Redis, name: str) -> None:
    client.execute_command("FT.DROPINDEX", name, "DD")


def _same_results(stores: dict[str, BaseStore], queries: int = 20) -> bool:
    """Whether the index's top-10 equals the exact path's (items, order, scores)."""

    def rows(store: BaseStore, i: int) -> list[Any]:
        found = store.search(("mem",), query=_text(i * 7919), limit=10)
        return [(f.namespace, f.key, f.score) for f in found]

    return all(
        rows(stores[INDEXED], i) == rows(stores["RedisStreamStore"], i) for i in range(queries)
    )


def _timed(
    stores: dict[str, BaseStore], calls: dict[str, Call], n: int
) -> dict[str, dict[str, list[float]]]:
    times: dict[str, dict[str, list[float]]] = {name: {c: [] for c in calls} for name in stores}
    for call, run in calls.items():
        for i in range(n):
            if i % 50 == 0:
                settle()
            names = list(stores)
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in order:
                t0 = perf_counter_ns()
                run(stores[name], i)
                times[name][call].append((perf_counter_ns() - t0) / NS_PER_MS)
    return times


def _filled(
    opened: dict[str, tuple[BaseStore, Callable[[], int]]],
    items: int,
    namespaces: int,
    text: Callable[[int], str],
) -> tuple[dict[str, BaseStore], dict[str, float]]:
    per_item: dict[str, float] = {}
    for name, (store, memory) in opened.items():
        before = memory()
        _fill(store, items, namespaces, text)
        per_item[name] = (memory() - before) / items
    return {name: s for name, (s, _) in opened.items()}, per_item


def measure(args: argparse.Namespace, url: str) -> tuple[Any, Any, Any, Any, bool | None]:
    tracemalloc.start()
    peers = Peers(url, args.pg, args.stack)
    try:
        stores, memory = _filled(peers.open(), args.items, args.namespaces, lambda i: "x" * 200)
        times = _timed(stores, CALLS, args.calls)
        embed = fake_embedder(args.dims)
        index = {"dims": args.dims, "embed": embed, "fields": ["text"]}
        vstores, vmemory = _filled(peers.open(index), args.vector_items, args.namespaces, _text)
        vsearch: Call = lambda s, i: s.search(("mem",), query=_text(i * 7919), limit=10)  # noqa: E731
        vtimes = _timed(vstores, {VECTOR_CALL: vsearch}, max(10, args.calls // 10))
        same = _same_results(vstores) if INDEXED in vstores else None
    finally:
        peers.close()
        tracemalloc.stop()
    return times, memory, vtimes, vmemory, same


def _cell(times: list[float], base: list[float] | None) -> str:
    cell = f"{median(times):.3f} ms (p99 {percentile(times, 99):.2f})"
    return cell + (f", {median(times) / median(base):.2f}x" if base else "")


def table(
    times: dict[str, dict[str, list[float]]], memory: dict[str, float], items: int
) -> Iterator[str]:
    names = list(times)
    yield "| call | " + " | ".join(names) + " |"
    yield "| --- |" + " --- |" * len(names)
    for call in next(iter(times.values())):
        base = times["InMemoryStore"][call]
        cells = [_cell(times[n][call], None if n == "InMemoryStore" else base) for n in names]
        yield f"| {call} | " + " | ".join(cells) + " |"
    yield (
        f"| memory per item ({items} items) | "
        + " | ".join(f"{memory[n]:.0f} B" for n in names)
        + " |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("store", __doc__, url=True)
    parser.add_argument("--items", type=int, default=1000, help="items stored (default 1000)")
    parser.add_argument("--namespaces", type=int, default=20, help="namespaces (default 20)")
    parser.add_argument("--calls", type=int, default=300, help="timed calls each (default 300)")
    parser.add_argument("--pg", help="PostgreSQL URL for PostgresStore (creates a database)")
    parser.add_argument("--stack", help="Redis Stack URL for langgraph-checkpoint-redis")
    parser.add_argument("--vector-items", type=int, default=10_000, help="default 10000")
    parser.add_argument("--dims", type=int, default=256, help="embedding size (default 256)")
    args = parser.parse_args(argv)
    with script.server(args.url) as url:
        times, memory, vtimes, vmemory, same = measure(args, url)
    print(f"{args.items} items of ~200 bytes in {args.namespaces} namespaces, {args.calls} calls")
    print("each; medians (p99), ratio to InMemoryStore's median in the same run\n")
    print("\n".join(table(times, memory, args.items)))
    print(f"\n{args.vector_items} items with {args.dims}-dimension embeddings (float vectors)\n")
    print("\n".join(table(vtimes, vmemory, args.vector_items)))
    if same is not None:
        print(f"\n{INDEXED}: top-10 equal to RedisStreamStore's exact path on 20 queries: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
