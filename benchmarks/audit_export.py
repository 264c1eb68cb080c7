"""Exporting a long thread streams: peak Python memory of an audit export at two log lengths.

    python -m benchmarks.audit_export [--events N] [--url URL]

Writes N writes events (one 200-byte message each) to one thread and N/5 to another, through
the saver's own append script, then exports each to /dev/null under ``tracemalloc``. An export
that streams shows the same peak for both.
"""

from __future__ import annotations

import os
import sys
import tracemalloc
import uuid

import redis

from streamsaver import RedisStreamSaver

from . import script
from .conversation import make_message

_BATCH = 1000


def _fill(saver: RedisStreamSaver, thread_id: str, events: int) -> None:
    """The events put_writes makes, pipelined a thousand at a time to fill the log quickly."""
    ops = saver._ops
    keys = list(ops.appending(ops.keys(thread_id)))
    script = saver._scripts["append"]
    pipe = saver.client.pipeline(transaction=False)
    for i in range(events):
        fields = ops.codec.writes_event(
            thread_id, "", f"cp{i}", [("messages", make_message(i))], f"task{i}", "", ""
        )
        script(keys=keys, args=list(ops._append_args("", fields)), client=pipe)
        if (i + 1) % _BATCH == 0:
            pipe.execute()
    pipe.execute()


def _peak(saver: RedisStreamSaver, thread_id: str) -> tuple[int, float]:
    with open(os.devnull, "w", encoding="utf-8") as out:
        tracemalloc.start()
        events = saver.export_audit([thread_id], out)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return events, peak / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = script.parser("audit_export", __doc__, url=True)
    parser.add_argument("--events", type=int, default=100_000, help="default 100000")
    args = parser.parse_args(argv)
    with script.server(args.url) as url:
        client = redis.Redis.from_url(url)
        saver = RedisStreamSaver(client, prefix=f"export-{uuid.uuid4().hex[:6]}")
        threads = {"short": args.events // 5, "long": args.events}
        for thread_id, events in threads.items():
            _fill(saver, thread_id, events)
        print("| events exported | peak Python memory |")
        print("| --- | --- |")
        for thread_id in threads:
            exported, peak = _peak(saver, thread_id)
            print(f"| {exported} | {peak:.1f} MiB |")
            saver.delete_thread(thread_id)
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
