"""Fault injection: each kind of damage a stored log can suffer, and what verify, audit verify,
rebuild, get_tuple and copy_thread report about it (docs/audit.md, "What verification checks").

Every kind is caught by ``verify`` or ``audit verify`` with a non-zero exit; no path answers with
a raw server error.
"""

from __future__ import annotations

from typing import Any

import ormsgpack
import pytest
import redis

from streamsaver import IntegrityError, RedisStreamSaver
from streamsaver.core.keys import thread_keys
from tests.test_cli import _cli as run_cli
from tests.test_shared_writes import SHARED, _config, _start, _step

Entries = list[tuple[bytes, dict[bytes, bytes]]]


def _conversation(saver: RedisStreamSaver, thread_id: str = "t", steps: int = 3) -> Entries:
    """A chat thread: each step a written message and a checkpoint whose list value appends to
    the previous one, naming the write's bytes (a shared part); the first step stores it whole.
    """
    _start(saver, thread_id)
    for n in range(steps):
        _step(saver, thread_id, n)
    entries: Entries = saver.client.xrange(saver._ops.keys(thread_id).log)
    return entries


def _checkpoints(entries: Entries) -> Entries:
    return [(eid, f) for eid, f in entries if f[b"k"] == b"checkpoint"]


def _cold(saver: RedisStreamSaver) -> RedisStreamSaver:
    """A saver holding nothing in its cache: its reads follow every stored part."""
    return RedisStreamSaver(saver.client, prefix=saver.prefix)


def _text(raw: bytes) -> str:
    return raw.decode()


def _cli(command: str, thread_id: str, saver: RedisStreamSaver, url: str) -> int:
    """The exit code of ``streamsaver verify --thread`` or ``streamsaver audit verify``."""
    where = ("--url", url, "--prefix", saver.prefix)
    if command == "verify":
        return run_cli("verify", "--thread", thread_id, *where).returncode
    return run_cli("audit", "verify", thread_id, *where).returncode


def _refs(saver: RedisStreamSaver, thread_id: str) -> list[str]:
    return [line for line in saver.verify(thread_id)[2] if line.startswith("ref ")]


def _index_diffs(saver: RedisStreamSaver, thread_id: str) -> list[str]:
    return [line for line in saver.verify(thread_id)[2] if not line.startswith("ref ")]


def _named(lines: list[str], *words: str) -> bool:
    """Whether one line names every word (an event id, a checkpoint id, what is missing)."""
    return any(all(word in line for word in words) for line in lines)


def test_an_intact_thread_passes_every_check(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    _conversation(sync_saver)
    assert sync_saver.verify("t")[2] == []
    check = sync_saver.verify_chain("t")
    assert check.ok and check.references == []
    assert _cli("verify", "t", sync_saver, redis_url) == 0
    assert _cli("audit", "t", sync_saver, redis_url) == 0
    assert sync_saver.rebuild("t").problems == []
    sync_saver.copy_thread("t", "copy")  # a copy is as whole as its source
    assert sync_saver.verify("copy")[2] == []
    assert sync_saver.verify_chain("copy").ok


def test_missing_value(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    """The writes event whose bytes the latest checkpoint's append part names is deleted."""
    entries = _conversation(sync_saver)
    eid, latest = _checkpoints(entries)[-1]
    assert latest[b"b0"].startswith(SHARED)
    writes_id = ormsgpack.unpackb(latest[b"b0"])[1].split(" ")[0]
    sync_saver.client.xdel(sync_saver._ops.keys("t").log, writes_id)

    with pytest.raises(IntegrityError, match=writes_id):
        _cold(sync_saver).get_tuple(_config("t"))
    # the checkpoint the removed writes belong to: its pending writes are not all there
    owner = {
        "configurable": {**_config("t")["configurable"], "checkpoint_id": _text(latest[b"parent"])}
    }
    with pytest.raises(IntegrityError, match=writes_id):
        _cold(sync_saver).get_tuple(owner)
    assert _named(_refs(sync_saver, "t"), _text(eid), writes_id)
    check = sync_saver.verify_chain("t")
    assert check.problem is not None  # the event after the removed one no longer follows it
    assert _named(check.references, _text(eid), writes_id)
    assert _cli("verify", "t", sync_saver, redis_url) == 1
    assert _cli("audit", "t", sync_saver, redis_url) == 1

    replay = sync_saver.rebuild("t")
    assert _named(replay.problems, _text(eid), writes_id)
    # the checkpoint is skipped whole, not read without its value
    config = {
        "configurable": {**_config("t")["configurable"], "checkpoint_id": _text(latest[b"id"])}
    }
    assert sync_saver.get_tuple(config) is None


def test_missing_event(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    """A checkpoint's event is deleted while the indexes still point at it."""
    checkpoints = _checkpoints(_conversation(sync_saver))
    gone_eid, gone = checkpoints[2]
    child_eid, child = checkpoints[3]
    assert child[b"parent"] == gone[b"id"]
    sync_saver.client.xdel(sync_saver._ops.keys("t").log, gone_eid)
    gone_config = {
        "configurable": {**_config("t")["configurable"], "checkpoint_id": _text(gone[b"id"])}
    }

    with pytest.raises(IntegrityError, match=_text(gone_eid)):
        sync_saver.get_tuple(gone_config)
    refs = _refs(sync_saver, "t")
    assert _named(refs, _text(child_eid), "parent", _text(gone[b"id"]))  # the child's parent
    assert _named(_index_diffs(sync_saver, "t"), _text(gone[b"id"]))  # the stale index entry
    assert sync_saver.verify_chain("t").problem is not None
    assert _cli("verify", "t", sync_saver, redis_url) == 1
    assert _cli("audit", "t", sync_saver, redis_url) == 1

    # every later checkpoint appends to the value the deleted event stored: skipped, named
    replay = sync_saver.rebuild("t")
    assert _named(replay.problems, _text(child_eid), "not stored")
    assert sync_saver.get_tuple(gone_config) is None


def _bogus(saver: RedisStreamSaver, model: dict[bytes, bytes], **changes: Any) -> str:
    """Append, by hand (as an edit outside streamsaver would), a copy of checkpoint event
    ``model`` with ``changes``; returns its entry id."""
    fields = {k: v for k, v in model.items() if k not in (b"ch", b"dg")}
    fields[b"id"] = f"bogus-{len(changes)}-{sorted(changes)[0]}".encode()
    for name, value in changes.items():
        fields[name.encode()] = value
    eid: bytes = saver.client.xadd(saver._ops.keys("t").log, fields)  # type: ignore[arg-type]
    return eid.decode()


def test_bogus_references(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    """Hand-written entries whose shared part, base or parent points nowhere."""
    checkpoints = _checkpoints(_conversation(sync_saver))
    _, model = checkpoints[-1]
    nv = ormsgpack.unpackb(model[b"nv"])
    part = ormsgpack.unpackb(model[b"b0"])
    nowhere = _bogus(sync_saver, model, b0=ormsgpack.packb(["shared", "1-1 w0", 0, 1]))
    # an id Redis itself refuses (beyond 64 bits): must not surface as a server error
    overflow = _bogus(
        sync_saver, model, b0=ormsgpack.packb(["shared", "99999999999999999999999-0 w0", 0, 1])
    )
    malformed = _bogus(sync_saver, model, b0=ormsgpack.packb(["shared", 7, "x", 1]))
    no_base = _bogus(
        sync_saver,
        model,
        nv=ormsgpack.packb([nv[0], nv[1], "i999"]),
        b0=ormsgpack.packb(["append", b"\x01", 1]),
    )
    orphan = _bogus(sync_saver, model, parent=b"no-such-checkpoint")
    assert part[0] == "shared"

    refs = _refs(sync_saver, "t")
    assert _named(refs, nowhere, "1-1 w0")
    assert _named(refs, overflow, "99999999999999999999999-0 w0")
    assert _named(refs, malformed, "malformed")
    assert _named(refs, no_base, "i999")
    assert _named(refs, orphan, "parent", "no-such-checkpoint")
    check = sync_saver.verify_chain("t")
    for eid in (nowhere, overflow, malformed, no_base, orphan):
        assert _named(check.references, eid)
    assert _cli("verify", "t", sync_saver, redis_url) == 1
    assert _cli("audit", "t", sync_saver, redis_url) == 1

    with pytest.raises(IntegrityError, match=nowhere):
        sync_saver.copy_thread("t", "copy")
    replay = sync_saver.rebuild("t")
    for eid in (nowhere, overflow, malformed, no_base):
        assert _named(replay.problems, eid)
    assert not _named(replay.problems, orphan)  # a dangling parent breaks no read: kept
    # the references that do not resolve were not projected: reads see the valid history
    latest = sync_saver.get_tuple(_config("t"))
    assert latest is not None and latest.config["configurable"]["checkpoint_id"] == (
        "bogus-1-parent"
    )
    assert _index_diffs(sync_saver, "t") == []


@pytest.mark.parametrize(
    "part",
    [
        ["shared", "99999999999999999999999-0 w0", 0, 1],
        ["shared", "1-1 w0", 0, 1],
        ["shared", 7, "x", 1],
        ["append", b"\x01", 1],  # to a base version that is not stored
    ],
)
def test_copy_thread_names_the_event_whose_part_does_not_resolve(
    sync_saver: RedisStreamSaver, part: list[Any]
) -> None:
    _, model = _checkpoints(_conversation(sync_saver))[-1]
    channel, version, _ = ormsgpack.unpackb(model[b"nv"])
    eid = _bogus(
        sync_saver,
        model,
        b0=ormsgpack.packb(part),
        nv=ormsgpack.packb([channel, version, "i999" if part[0] == "append" else ""]),
    )
    with pytest.raises(IntegrityError, match=eid):
        sync_saver.copy_thread("t", "copy")
        sync_saver.copy_thread("t", "copy")


def test_truncated_log(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    """The oldest entries are trimmed without the tombstone a prune leaves."""
    entries = _conversation(sync_saver)
    log = sync_saver._ops.keys("t").log
    first_kept = entries[3][0]
    sync_saver.client.xtrim(log, minid=first_kept, approximate=False)
    assert sync_saver.client.xlen(log) == len(entries) - 3
    first_checkpoint = _checkpoints(entries[3:])[0]

    with pytest.raises(IntegrityError):
        _cold(sync_saver).get_tuple(_config("t"))
    refs = _refs(sync_saver, "t")
    assert _named(refs, _text(first_checkpoint[0]), "parent")
    assert _index_diffs(sync_saver, "t") != []
    check = sync_saver.verify_chain("t")
    assert check.problem is not None and "does not start the chain" in check.problem.reason
    assert _cli("verify", "t", sync_saver, redis_url) == 1
    assert _cli("audit", "t", sync_saver, redis_url) == 1
    replay = sync_saver.rebuild("t")
    assert _named(replay.problems, _text(first_checkpoint[0]), "not stored")


def test_a_prune_is_not_damage(sync_saver: RedisStreamSaver) -> None:
    """What a prune trims is covered by its tombstone: no dangling parent, no missing value."""
    _conversation(sync_saver)
    sync_saver.prune(["t"], strategy="keep_latest")
    assert sync_saver.verify("t")[2] == []
    check = sync_saver.verify_chain("t")
    assert check.ok and check.references == []


def test_evicted_index(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    """The derived indexes are gone (an eviction, a FLUSH of the wrong keys): the log is whole,
    verify names what is missing, and a rebuild restores every read."""
    _conversation(sync_saver)
    before = list(sync_saver.list(_config("t")))
    keys = thread_keys(sync_saver.prefix, "t")
    sync_saver.client.delete(keys.ix, keys.ptr)

    diffs = sync_saver.verify("t")[2]
    assert diffs and all(line.split()[1] == "missing" for line in diffs)
    assert _cli("verify", "t", sync_saver, redis_url) == 1
    assert sync_saver.verify_chain("t").ok  # the log itself is intact
    assert _cli("audit", "t", sync_saver, redis_url) == 0

    assert sync_saver.rebuild("t").problems == []
    assert sync_saver.verify("t")[2] == []
    assert list(sync_saver.list(_config("t"))) == before


def _alter(client: redis.Redis, log: str, entries: Entries, eid: bytes, **changes: bytes) -> None:
    """Rewrite the log with one entry's fields changed, every id kept."""
    client.delete(log)
    for entry_id, fields in entries:
        if entry_id == eid:
            fields = {**fields, **{k.encode(): v for k, v in changes.items()}}
        client.xadd(log, fields, id=entry_id)  # type: ignore[arg-type]


def test_altered_entry(sync_saver: RedisStreamSaver, redis_url: str) -> None:
    """A field of a projected event is rewritten into something that cannot be decoded."""
    entries = _conversation(sync_saver)
    eid, _ = _checkpoints(entries)[-1]
    _alter(sync_saver.client, sync_saver._ops.keys("t").log, entries, eid, cv=b"\xc1")

    with pytest.raises(IntegrityError, match=_text(eid)):
        _cold(sync_saver).get_tuple(_config("t"))
    with pytest.raises(IntegrityError, match=_text(eid)):
        list(_cold(sync_saver).list(_config("t")))
    check = sync_saver.verify_chain("t")
    assert check.problem is not None and check.problem.event_id == _text(eid)
    assert "altered" in check.problem.reason
    assert _index_diffs(sync_saver, "t") != []  # a replay cannot project it: the index has it
    assert _cli("verify", "t", sync_saver, redis_url) == 1
    assert _cli("audit", "t", sync_saver, redis_url) == 1
    replay = sync_saver.rebuild("t")
    assert _named(replay.problems, _text(eid), "cv")


def test_altered_value_is_caught_by_the_chain_alone(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    """An edit that keeps every reference valid (a message's text) only the digests show."""
    entries = _conversation(sync_saver)
    eid, writes = next((e, f) for e, f in entries if f[b"k"] == b"writes")
    edited = writes[b"w0"].replace(b"message 0", b"massage 0")
    assert edited != writes[b"w0"]
    _alter(sync_saver.client, sync_saver._ops.keys("t").log, entries, eid, w0=edited)

    assert sync_saver.verify("t")[2] == []
    assert _cli("verify", "t", sync_saver, redis_url) == 0
    check = sync_saver.verify_chain("t")
    assert check.problem is not None and "altered" in check.problem.reason
    assert check.references == []
    assert _cli("audit", "t", sync_saver, redis_url) == 1


def test_writes_sent_before_their_checkpoint_are_not_dangling(sync_saver: RedisStreamSaver) -> None:
    """LangGraph may send a step's writes before its checkpoint: the checkpoint comes later in
    the log, and that is a reference that resolves."""
    _conversation(sync_saver, steps=1)
    latest = sync_saver.get_tuple(_config("t"))
    assert latest is not None
    ahead = {"configurable": {**latest.config["configurable"], "checkpoint_id": "zz-next"}}
    sync_saver.put_writes(ahead, [("messages", "early")], "task")
    assert _named(_refs(sync_saver, "t"), "writes of checkpoint zz-next")  # not yet stored
    checkpoint = {**latest.checkpoint, "id": "zz-next"}
    sync_saver.put(latest.config, checkpoint, {"source": "loop", "step": 9}, {})
    assert sync_saver.verify("t")[2] == []


async def test_async_audit_verify_names_the_same_references(
    sync_saver: RedisStreamSaver, async_saver: Any
) -> None:
    _, model = _checkpoints(_conversation(sync_saver))[-1]
    eid = _bogus(sync_saver, model, parent=b"no-such-checkpoint")
    check = await async_saver.averify_chain("t")
    assert not check.ok and check.references == sync_saver.verify_chain("t").references
    assert _named(check.references, eid, "no-such-checkpoint")
    assert (await async_saver.averify("t"))[2] == sync_saver.verify("t")[2]
