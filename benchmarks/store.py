"""What the Store costs: each call on RedisStreamStore against the same call on InMemoryStore.

    python -m benchmarks.store [--items N] [--namespaces K] [--calls C] [--url URL]

Both stores are filled alike with N items spread over K namespaces ``("mem", "<i>")``, then
each call is timed C times on each, taking turns call by call so a noisy moment hits both:
``put`` (an update of an existing item), ``get``, ``search`` of one namespace (limit 10), of
the whole ``("mem",)`` prefix (limit 10) and with a filter, and ``list_namespaces``. Figures
are medians and p99s in ms. Without --url (or $REDIS_URL) it starts a throwaway redis-server.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Callable
from time import perf_counter_ns

import redis
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from streamsaver import RedisStreamStore

from .chain_overhead import server
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


def measure(url: str, items: int, namespaces: int, calls: int) -> dict[str, dict[str, list[float]]]:
    client = redis.Redis.from_url(url)
    stores: dict[str, BaseStore] = {
        "InMemoryStore": InMemoryStore(),
        "RedisStreamStore": RedisStreamStore(client, prefix=f"bench-{uuid.uuid4().hex[:6]}"),
    }
    for store in stores.values():
        for i in range(items):
            store.put(("mem", str(i % namespaces)), f"k{i}", {"i": i, "text": "x" * 200})
    times = {name: {call: [] for call in CALLS} for name in stores}
    try:
        for call, run in CALLS.items():
            for i in range(calls):
                if i % 50 == 0:
                    settle()
                order = list(stores) if i % 2 == 0 else list(reversed(stores))
                for name in order:
                    t0 = perf_counter_ns()
                    run(stores[name], i)
                    times[name][call].append((perf_counter_ns() - t0) / NS_PER_MS)
    finally:
        client.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.store",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--items", type=int, default=1000, help="items stored (default 1000)")
    parser.add_argument("--namespaces", type=int, default=20, help="namespaces (default 20)")
    parser.add_argument("--calls", type=int, default=300, help="timed calls each (default 300)")
    parser.add_argument("--url", default=os.environ.get("REDIS_URL"), help="Redis URL")
    args = parser.parse_args(argv)
    with server(args.url) as url:
        times = measure(url, args.items, args.namespaces, args.calls)
    mem, ours = times["InMemoryStore"], times["RedisStreamStore"]
    print(f"{args.items} items in {args.namespaces} namespaces, {args.calls} calls each\n")
    print("| call | InMemoryStore p50 | RedisStreamStore p50 | RedisStreamStore p99 |")
    print("| --- | --- | --- | --- |")
    for call in CALLS:
        print(
            f"| {call} | {median(mem[call]):.3f} ms | {median(ours[call]):.3f} ms | "
            f"{percentile(ours[call], 99):.3f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
