"""Logs written in the schema 1 layout (docs/events.md) stay the source of truth: they read,
rebuild and verify as they did, alone and followed by events of the current layout.

Schema 1 differs from the current one in what this file's ``_as_schema_1`` undoes: the
checkpoint record ``cp`` held the checkpoint id too, and the chain digests ``ch`` and ``dg``
were 40 hex characters each. The old layout is written out here rather than taken from the
library, so a change to the library's chain cannot move this test along with it."""

from __future__ import annotations

import hashlib
import io
from typing import Annotated, Any

import ormsgpack
import redis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from streamsaver import RedisStreamSaver
from streamsaver.audit import verify_export
from streamsaver.core.keys import thread_keys

Pairs = list[tuple[bytes, bytes]]


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(saver: RedisStreamSaver) -> Any:
    def agent(state: _State) -> dict[str, Any]:
        return {
            "messages": [
                AIMessage(f"reply {len(state['messages'])}", id=f"m{len(state['messages'])}")
            ]
        }

    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=saver)


def _run(saver: RedisStreamSaver, turns: range) -> None:
    graph = _graph(saver)
    for turn in turns:
        graph.invoke({"messages": [HumanMessage(f"ask {turn}", id=f"h{turn}")]}, _config())


def _config() -> Any:
    return {"configurable": {"thread_id": "t"}}


def _lp(raw: bytes) -> bytes:
    return b"%d:%s" % (len(raw), raw)


def _as_schema_1(saver: RedisStreamSaver, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> Any:
    """The entries as schema 1 wrote them, chained anew as schema 1 chained them."""
    previous = b""
    for entry_id, fields in entries:
        pairs: Pairs = []
        for name, value in fields.items():
            if name == b"sv":
                value = b"1"
            elif name == b"cp":
                record = saver.serde.loads_typed(tuple(ormsgpack.unpackb(value)))
                assert "id" not in record  # the current layout keeps it in `id` only
                record = {"v": record["v"], "id": fields[b"id"].decode(), **record}
                value = ormsgpack.packb(saver.serde.dumps_typed(record))
            if name not in (b"ch", b"dg"):
                pairs.append((name, value))
        ch = hashlib.sha1(b"".join(_lp(n) + _lp(v) for n, v in pairs)).hexdigest().encode()
        previous = hashlib.sha1(previous + ch).hexdigest().encode()
        yield entry_id, [*pairs, (b"ch", ch), (b"dg", previous)]


def _reads(saver: RedisStreamSaver) -> list[Any]:
    return [
        (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
        for t in saver.list(_config())
    ]


def _old_log(redis_client: redis.Redis, prefix: str) -> tuple[RedisStreamSaver, RedisStreamSaver]:
    """A thread written now (prefix ``<prefix>``) and the same thread in the schema 1 layout
    (prefix ``<prefix>o``), rebuilt from its log alone."""
    new = RedisStreamSaver(redis_client, prefix=prefix)
    _run(new, range(4))
    old = RedisStreamSaver(redis_client, prefix=prefix + "o")
    log = thread_keys(old.prefix, "t").log
    for entry_id, pairs in _as_schema_1(new, redis_client.xrange(thread_keys(prefix, "t").log)):
        redis_client.xadd(log, dict(pairs), id=entry_id)
    assert old.rebuild("t")[:2] == (20, 0)  # 4 turns: 3 checkpoints and 2 writes each
    return new, old


def test_a_schema_1_log_reads_rebuilds_and_verifies_as_written(
    redis_client: redis.Redis, prefix: str
) -> None:
    new, old = _old_log(redis_client, prefix)
    assert _reads(old) == _reads(new) and len(_reads(old)) == 12
    assert old.verify("t")[1:] == (0, [])
    check = old.verify_chain("t")
    assert check.ok and check.events == 20
    entries = redis_client.xrange(thread_keys(old.prefix, "t").log)
    assert check.head == entries[-1][1][b"dg"].decode()
    events = list(old.tail("t", after="0", follow=False))
    assert [e.schema_version for e in events] == [1] * 20
    assert [e.digest for e in events] == [f[b"dg"].decode() for _, f in entries]
    # an altered schema 1 event still breaks its chain (the last one: ids only grow)
    eid, fields = entries[-1]
    ms, seq = eid.split(b"-")
    log = thread_keys(old.prefix, "t").log
    redis_client.xdel(log, eid)
    redis_client.xadd(log, {**fields, b"run": b"forged"}, id=ms + b"-" + b"%d" % (int(seq) + 1))
    broken = old.verify_chain("t")
    assert broken.problem is not None and "altered" in broken.problem.reason


def test_current_events_after_schema_1_ones_chain_read_and_export(
    redis_client: redis.Redis, prefix: str
) -> None:
    new, old = _old_log(redis_client, prefix)
    _run(new, range(4, 6))
    _run(old, range(4, 6))
    # the new checkpoints' ids differ between the two threads; their states do not
    latest = [s.get_tuple(_config()) for s in (old, new)]
    assert latest[0] and latest[1]
    assert latest[0].checkpoint["channel_values"] == latest[1].checkpoint["channel_values"]
    assert len(latest[0].checkpoint["channel_values"]["messages"]) == 12
    assert len(_reads(old)) == 18
    events = list(old.tail("t", after="0", follow=False))
    assert [e.schema_version for e in events] == [1] * 20 + [2] * 10
    check = old.verify_chain("t")
    assert check.ok and check.events == 30, check.problem
    out = io.StringIO()
    old.export_audit(["t"], out)
    [report] = verify_export(out.getvalue().splitlines(), old.serde)
    assert report.problem is None and report.events == 30 and report.head == check.head
    before = _reads(old)
    old.rebuild("t")
    assert _reads(old) == before
    assert old.verify("t")[1:] == (0, [])
