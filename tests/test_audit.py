"""The audit trail of real LangGraph runs: history, export round trip, verifying the export."""

from __future__ import annotations

import base64
import copy
import io
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from streamsaver import AsyncRedisStreamSaver, InvalidInputError, RedisStreamSaver
from streamsaver.audit import ExportWriter, export, read_export, verify_export
from streamsaver.core.flow import Call, Each
from streamsaver.core.keys import thread_keys
from streamsaver.core.replies import jsonable
from streamsaver.events import ThreadDeletion, ThreadEvent, Undecoded
from tests import graphs
from tests.test_cli import _cli


class Recording(RedisStreamSaver):
    """A saver that remembers what LangGraph handed it, to compare the export against."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.written: dict[tuple[str, str], list[list[tuple[str, Any]]]] = defaultdict(list)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        values = checkpoint["channel_values"]
        stored = {ch: copy.deepcopy(values[ch]) for ch in new_versions if ch in values}
        self.stored[checkpoint["id"]].append(stored)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        key = (config["configurable"]["checkpoint_id"], task_id)
        self.written[key].append([(ch, copy.deepcopy(v)) for ch, v in writes])
        super().put_writes(config, writes, task_id, task_path)


def _export(saver: RedisStreamSaver, threads: list[str], **kw: Any) -> list[str]:
    out = io.StringIO()
    saver.export_audit(threads, out, **kw)
    return out.getvalue().splitlines()


def _serde_round_trip(saver: RedisStreamSaver, value: Any) -> Any:
    """What the serializer gives back for ``value`` (e.g. msgpack turns tuples into lists)."""
    return saver.serde.loads_typed(saver.serde.dumps_typed(value))


def _check_against_graph(saver: Recording, event: ThreadEvent) -> None:
    if event.kind == "checkpoint":
        assert event.checkpoint_id is not None
        stored = _serde_round_trip(saver, saver.stored[event.checkpoint_id].pop(0))
        assert event.values is not None and set(event.values) == set(stored)
        for channel, value in event.values.items():
            if channel in event.appended:  # only the items the list gained
                assert stored[channel][-len(value) :] == value
            else:
                assert value == stored[channel]
    elif event.kind == "writes":
        assert event.checkpoint_id is not None and event.task_id is not None
        written = saver.written[(event.checkpoint_id, event.task_id)].pop(0)
        assert list(event.writes) == [(ch, _serde_round_trip(saver, v)) for ch, v in written]


def test_export_of_real_graphs_decodes_to_what_the_graphs_produced(
    redis_client: redis.Redis, prefix: str
) -> None:
    saver = Recording(redis_client, prefix=prefix)
    graphs.time_travel(saver)
    graphs.linear(saver)
    graphs.subgraph(saver)
    graphs.hitl(saver)
    graphs.send_fanout(saver)
    threads = saver.thread_ids()
    lines = _export(saver, threads)
    records = [json.loads(line) for line in lines]
    assert records[0]["format"] == "streamsaver.audit" and records[0]["version"] == 2
    decoded = list(read_export(lines, saver.serde))
    events = [e for e in decoded if isinstance(e, ThreadEvent)]
    assert len(events) == len(decoded) == sum(r["type"] == "event" for r in records)
    kinds = {e.kind for e in events}
    assert kinds == {"checkpoint", "writes"}
    for event in events:
        _check_against_graph(saver, event)
    # every put and put_writes the graphs made is in the export, once
    assert not any(saver.stored.values()) and not any(saver.written.values())
    # the same events as history() reads from Redis, and the readable view is their JSON
    from_redis = [e for t in threads for e in saver.history(t, values=True)]
    assert events == from_redis
    views = [r for r in records if r["type"] == "event"]
    for view, event in zip(views, events, strict=True):
        expected = json.loads(json.dumps(event.model_dump(), default=jsonable))
        assert {k: view[k] for k in expected} == expected
    forks = [e for e in events if e.fork]
    assert forks and all(e.metadata and e.metadata["source"] in ("update", "fork") for e in forks)
    assert all(r["problem"] is None for r in map(vars, verify_export(lines, saver.serde)))


def test_verify_export_needs_no_redis_and_names_a_tampered_line(
    sync_saver: RedisStreamSaver,
) -> None:
    graphs.linear(sync_saver)
    lines = _export(sync_saver, ["linear-1"])
    serde = JsonPlusSerializer()
    [ok] = verify_export(lines, serde)
    assert ok.problem is None and ok.events == len(lines) - 2

    # a stored field changed: the chain names the event
    victim = json.loads(lines[5])
    fields = dict(victim["fields"])
    name = next(n for n in fields if n[0] in "bw" and n[1:].isdigit())
    raw = bytearray(base64.b64decode(fields[name]))
    raw[-1] ^= 1
    victim["fields"] = [[n, base64.b64encode(raw).decode() if n == name else v] for n, v in
                        victim["fields"]]  # fmt: skip
    tampered = [*lines[:5], json.dumps(victim), *lines[6:]]
    [bad] = verify_export(tampered, serde)
    assert bad.problem is not None and f"event {victim['id']} (#5, " in bad.problem
    assert "altered" in bad.problem

    # only the readable view edited: it no longer matches the fields
    view = json.loads(lines[7])
    view["run_id"] = "someone-else"
    [bad] = verify_export([*lines[:7], json.dumps(view), *lines[8:]], serde)
    assert bad.problem is not None and f"event {view['id']}" in bad.problem
    assert "edited" in bad.problem

    # a line removed, and the end cut off
    [bad] = verify_export([*lines[:4], *lines[5:]], serde)
    assert bad.problem is not None and "removed" in bad.problem
    [bad] = verify_export(lines[:-3], serde)
    assert bad.problem is not None and "truncated" in bad.problem
    with pytest.raises(InvalidInputError, match="header"):
        verify_export(lines[1:], serde)


def test_encrypted_values_stay_ciphertext_without_the_key(
    redis_client: redis.Redis, prefix: str
) -> None:
    secret = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    saver = RedisStreamSaver(redis_client, prefix=prefix, serde=secret)
    graphs.linear(saver)
    plain = JsonPlusSerializer()
    sealed = _export(saver, ["linear-1"], serde=plain)
    assert "second:" not in "\n".join(sealed)  # a value the graph wrote, nowhere in clear
    events = [e for e in read_export(sealed, plain) if isinstance(e, ThreadEvent)]
    writes = [v for e in events for _, v in e.writes]
    assert writes and all(isinstance(v, Undecoded) and v.type.endswith("+aes") for v in writes)
    [ok] = verify_export(sealed, plain)
    assert ok.problem is None  # the chain covers the ciphertext: no key needed to verify
    opened = _export(saver, ["linear-1"])  # the saver's own serde holds the key
    assert "second:" in "\n".join(opened)
    [ok] = verify_export(opened, secret)
    assert ok.problem is None


def test_export_streams_page_by_page(sync_saver: RedisStreamSaver) -> None:
    config: Any = {"configurable": {"thread_id": "long"}}
    cp: Any = {"v": 1, "ts": "", "channel_values": {}, "channel_versions": {}, "versions_seen": {}}
    for i in range(1100):
        config = sync_saver.put(config, {**cp, "id": f"{i:06d}"}, {"step": i}, {})
    out = io.StringIO()
    writer = ExportWriter(out, sync_saver.prefix, sync_saver.serde)
    flow = export(sync_saver._ops, writer, ["long"])
    reply: Any = None
    written_before_each_page, read = [], [0]
    try:
        while True:
            op = flow.send(reply)
            # a page comes with reads of the log's first entry (core/pages.py's one_version)
            calls = op.ops if isinstance(op, Each) else (op,)
            at = [
                i
                for i, c in enumerate(calls)
                if isinstance(c, Call)
                and c.args[0] == "XRANGE"
                and b":log" in str(c.args[1]).encode()
                and c.args[-1] != 1
            ]
            if at:
                written_before_each_page.append(writer.events)
            reply = sync_saver._execute(op)
            if at:
                read.append(read[-1] + len(reply[at[0]] if isinstance(op, Each) else reply))
    except StopIteration as done:
        assert done.value == 1100
    # each page written out (to the thread's spool: the section reaches ``out`` once whole)
    # before the next one is read
    assert len(written_before_each_page) > 3
    assert written_before_each_page == read[:-1]
    assert out.getvalue().count("\n") == 1 + 1100 + 1


def test_history_of_a_deleted_thread_shows_its_deletion(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis
) -> None:
    graphs.linear(sync_saver)
    before = sync_saver.verify_chain("linear-1")
    sync_saver.delete_thread("linear-1")
    sync_saver.prune(["linear-2"], strategy="delete")
    # the log starts again with the deletion, which names what it removed, no payload
    [deleted] = sync_saver.history("linear-1")
    assert deleted.kind == "thread_deleted" and deleted.thread_deleted is not None
    assert (deleted.thread_deleted.count, deleted.thread_deleted.last_digest) == (
        before.events,
        before.head,
    )
    assert sync_saver.verify_chain("linear-1").ok
    [record] = sync_saver.deletions("linear-1")
    assert isinstance(record, ThreadDeletion)
    assert (record.events, record.head) == (before.events, before.head)
    [other] = sync_saver.deletions("linear-2")
    assert other.thread_id == "linear-2" and other.events > 0
    sync_saver.delete_thread("never-existed")
    assert sync_saver.deletions("never-existed") == []
    lines = _export(sync_saver, ["linear-1"])
    assert [json.loads(x)["type"] for x in lines] == ["export", "deleted", "event", "end"]


def test_config_metadata_reaches_events_and_list_filters(sync_saver: RedisStreamSaver) -> None:
    graph = graphs.build_linear(sync_saver)
    # LangGraph keys runs by config["metadata"]["run_id"] (as the LangGraph server sets it)
    run_id = "9f0c8d52-0000-4000-8000-000000000001"
    config: Any = {
        "configurable": {"thread_id": "meta"},
        "metadata": {"user": "alice", "tenant": "acme", "run_id": run_id},
    }
    graph.invoke({"log": ["x"], "total": 1}, config)
    graph.invoke({"log": ["y"], "total": 2}, {"configurable": {"thread_id": "meta"}})
    checkpoints = [e for e in sync_saver.history("meta") if isinstance(e, ThreadEvent)]
    first_run = [e for e in checkpoints if e.kind == "checkpoint"][:5]
    for event in first_run:
        assert event.metadata is not None
        assert (event.metadata["user"], event.metadata["tenant"]) == ("alice", "acme")
        assert event.run_id == run_id and event.metadata["step"] == event.step
        assert event.metadata["source"] in ("input", "loop")
    writes = [e for e in checkpoints if e.kind == "writes"]
    assert {e.run_id for e in writes} == {run_id, None}  # the second invoke had no run id
    listed = list(sync_saver.list(None, filter={"user": "alice", "tenant": "acme"}))
    assert {t.config["configurable"]["checkpoint_id"] for t in listed} == {
        e.checkpoint_id for e in first_run
    }
    assert not list(sync_saver.list(None, filter={"user": "bob"}))


async def test_async_history_and_verify(async_saver: AsyncRedisStreamSaver) -> None:
    await graphs.alinear(async_saver)
    events = [e async for e in async_saver.ahistory("linear-1", values=True)]
    assert events and all(isinstance(e, ThreadEvent) for e in events)
    check = await async_saver.averify_chain("linear-1")
    assert check.ok and check.events == len(events)
    out = io.StringIO()
    assert await async_saver.aexport_audit(["linear-1"], out) == len(events)
    assert [e async for e in async_saver.ahistory("linear-1", values=True)] == list(
        read_export(out.getvalue().splitlines(), async_saver.serde)
    )


def test_the_command_line_shows_exports_and_verifies(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    graphs.time_travel(sync_saver)
    graphs.linear(sync_saver)
    where = ("--url", redis_url, "--prefix", sync_saver.prefix)
    shown = _cli("audit", "show", "travel", *where)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == len(list(sync_saver.history("travel")))
    assert any("FORK of" in line for line in lines) and any("log+=" in line for line in lines)
    as_json = _cli("history", "travel", "--json", *where)
    assert [json.loads(x)["id"] for x in as_json.stdout.splitlines()] == [
        e.id for e in sync_saver.history("travel")
    ]

    out = tmp_path / "audit.jsonl"
    assert _cli("audit", "export", "--all", "--out", str(out), *where).returncode == 0
    ok = _cli("audit", "verify", "--file", str(out))  # no Redis given
    assert ok.returncode == 0 and "verified 3 threads" in ok.stdout, ok.stdout + ok.stderr
    records = out.read_text().splitlines()
    edited = json.loads(records[3])
    edited["fields"][0][1] = base64.b64encode(b"writes!").decode()
    out.write_text("\n".join([*records[:3], json.dumps(edited), *records[4:]]) + "\n")
    bad = _cli("audit", "verify", "--file", str(out))
    assert bad.returncode == 1 and f"event {edited['id']}" in bad.stdout

    assert _cli("audit", "verify", "--all", *where).returncode == 0
    log = thread_keys(sync_saver.prefix, "linear-1").log
    entries = redis_client.xrange(log)
    redis_client.xdel(log, entries[2][0])
    broken = _cli("audit", "verify", "linear-1", *where)
    assert broken.returncode == 1
    assert f"BROKEN at event {entries[3][0].decode()}" in broken.stdout

    sync_saver.delete_thread("linear-2")
    gone = _cli("history", "linear-2", *where)
    assert gone.returncode == 0 and "thread_deleted" in gone.stdout


def test_history_pages_cover_the_log_newest_page_first(sync_saver: RedisStreamSaver) -> None:
    """``history_page`` reads one page backwards from an event: the pages, read back to the
    first, are ``history``, each event once."""
    graphs.linear(sync_saver)
    whole = list(sync_saver.history("linear-1"))
    pages: list[Any] = []
    before, more = None, True
    while more:
        events, more = sync_saver.history_page("linear-1", before=before, limit=2)
        assert 1 <= len(events) <= 2
        pages[:0] = events
        before = events[0].id
    assert pages == [e for e in whole if isinstance(e, ThreadEvent)] == whole
    assert sync_saver.history_page("no-such-thread") == ([], False)
    with pytest.raises(InvalidInputError, match=r"before must be an event id.*got '\$'"):
        sync_saver.history_page("linear-1", before="$")
    # an id no stream can hold (a part past 2**64 - 1) is bad input too, not a server error
    for bad in ("18446744073709551616-0", "1-18446744073709551616", "1-", b"1-0"):
        with pytest.raises(InvalidInputError, match="before must be an event id"):
            sync_saver.history_page("linear-1", before=bad)  # type: ignore[arg-type]
    assert sync_saver.history_page("linear-1", before="18446744073709551615-0")[0]
