"""Bad input gets a typed error naming the value and the remedy, and writes nothing
(DESIGN.md, principle 11), on every public entry of the same shape: a value that holds an
int msgpack cannot, an id that is not Unicode text (a lone surrogate, what ``surrogateescape``
makes of undecodable bytes), a TTL longer than the server's expiry arithmetic holds, an
export file that is not one, and ``--json`` output that must stay JSON (no ``NaN``)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from streamsaver import (
    AsyncRedisStreamStore,
    InvalidConfigError,
    InvalidInputError,
    RedisStreamSaver,
    RedisStreamStore,
)
from streamsaver.cli import main
from streamsaver.core.config import MAX_TTL_MS
from tests.test_tail import checkpoint_at, under

LONE = "\udcff"  # what os.fsdecode makes of the byte 0xff


def _keys(client: redis.Redis, prefix: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{prefix}:*"))


# -- Store values: ints beyond what msgpack holds ---------------------------------------


@pytest.mark.parametrize(
    "value",
    [{"x": 2**64}, {"x": -(2**63) - 1}, {"nested": [{"y": 2**70}]}, {"n": {"k": -(2**100)}}],
)
async def test_store_value_with_an_int_out_of_range(
    store: RedisStreamStore,
    astore: AsyncRedisStreamStore,
    redis_client: redis.Redis,
    prefix: str,
    value: dict[str, Any],
) -> None:
    for put in (
        lambda: store.put(("a",), "k", value),
        lambda: store.put(("a",), "k", value, index=["x"]),
        lambda: store.batch([PutOp(("a",), "ok", {"v": 1}), PutOp(("a",), "k", value)]),
    ):
        with pytest.raises(InvalidInputError, match=r"key 'k' in \('a',\).*64 bits"):
            put()
    with pytest.raises(InvalidInputError, match=r"key 'k' in \('a',\).*64 bits"):
        await astore.aput(("a",), "k", value)
    assert _keys(redis_client, prefix) == []
    # the ends of the range are stored
    store.put(("a",), "edge", {"hi": 2**64 - 1, "lo": -(2**63)})
    item = store.get(("a",), "edge")
    assert item is not None and item.value == {"hi": 2**64 - 1, "lo": -(2**63)}


@pytest.mark.parametrize("index", [[2**64], "text", [b"text"], ["text", None], {"text": 1}])
def test_store_index_fields_that_are_not_paths(
    redis_client: redis.Redis, prefix: str, index: Any
) -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        return [[float(len(t)), 1.0] for t in texts]

    store = RedisStreamStore(
        redis_client, prefix=prefix, index={"dims": 2, "embed": embed, "fields": ["text"]}
    )
    with pytest.raises(InvalidInputError, match=r"index=.*list of paths"):
        store.put(("a",), "k", {"text": "x"}, index=index)
    assert _keys(redis_client, prefix) == []
    store.put(("a",), "k", {"text": "x"}, index=["text"])
    store.put(("a",), "k", {"text": "x"}, index=False)


# -- ids that are not text ---------------------------------------------------------------


def test_store_namespace_and_key_with_a_lone_surrogate(
    store: RedisStreamStore, redis_client: redis.Redis, prefix: str
) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: store.put(("a", f"b{LONE}"), "k", {"v": 1}),
        lambda: store.put(("a",), f"k{LONE}", {"v": 1}),
        lambda: store.get(("a",), f"k{LONE}"),
        lambda: store.get((f"a{LONE}",), "k"),
        lambda: store.delete(("a",), f"k{LONE}"),
        lambda: store.search((f"a{LONE}",)),
        lambda: store.list_namespaces(prefix=(f"a{LONE}",)),
        lambda: store.list_namespaces(suffix=(f"a{LONE}",)),
        lambda: store.history((f"a{LONE}",)),
        lambda: store.history(("a",), f"k{LONE}"),
        lambda: store.batch([PutOp(("a",), "fine", {"v": 1}), GetOp(("a",), f"k{LONE}")]),
        lambda: store.batch(
            [
                PutOp(("a",), "fine", {"v": 1}),
                SearchOp((f"a{LONE}",)),
                ListNamespacesOp((MatchCondition("prefix", ("a", LONE)),)),
            ]
        ),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match=r"lone surrogate.*errors='replace'"):
            call()
    assert _keys(redis_client, prefix) == []


def test_saver_ids_with_a_lone_surrogate(redis_client: redis.Redis, prefix: str) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    first = saver.put(under("t"), checkpoint_at(0, "00000"), {}, {"n": 1})
    before = _keys(redis_client, prefix)
    log = next(k for k in before if k.endswith(b":log"))
    length = redis_client.xlen(log)

    def cfg(**conf: str) -> Any:
        return {"configurable": {"thread_id": "t", "checkpoint_ns": "", **conf}}

    cp = checkpoint_at(1, "00001")
    bad_channel = {**cp, "channel_values": {LONE: 1}, "channel_versions": {LONE: 2}}
    calls: dict[str, Callable[[], Any]] = {
        "thread_id": lambda: saver.put(cfg(thread_id=f"t{LONE}"), cp, {}, {"n": 2}),
        "checkpoint_ns": lambda: saver.put(cfg(checkpoint_ns=LONE), cp, {}, {"n": 2}),
        "checkpoint_id": lambda: saver.get_tuple(cfg(checkpoint_id=LONE)),
        "a checkpoint's id": lambda: saver.put(first, {**cp, "id": f"0{LONE}"}, {}, {"n": 2}),
        "task_id": lambda: saver.put_writes(first, [("n", 1)], f"task{LONE}"),
        "task_path": lambda: saver.put_writes(first, [("n", 1)], "task", f"p{LONE}"),
        "a write's channel": lambda: saver.put_writes(first, [(LONE, 1)], "task"),
        "a channel": lambda: saver.put(first, bad_channel, {}, {LONE: 2}),
        "list": lambda: list(saver.list(cfg(thread_id=LONE))),
        "list before": lambda: list(saver.list(cfg(), before=cfg(checkpoint_id=LONE))),
        "delete_thread": lambda: saver.delete_thread(LONE),
        "copy_thread": lambda: saver.copy_thread("t", f"u{LONE}"),
        "delete_for_runs": lambda: saver.delete_for_runs([f"r{LONE}"]),
        "prune": lambda: saver.prune([f"t{LONE}"]),
        "history": lambda: saver.history(f"t{LONE}"),
        "consumer group": lambda: saver.consumer_group(f"g{LONE}"),
        "consumer": lambda: saver.consumer_group("g", f"c{LONE}"),
        "delta history": lambda: saver.get_delta_channel_history(
            config=cfg(), channels=[f"c{LONE}"]
        ),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidInputError, match="lone surrogate") as caught:
            call()
        assert "errors='replace'" in str(caught.value), name
    # a config's ids are the config's fault: InvalidConfigError, as a missing one is
    with pytest.raises(InvalidConfigError):
        saver.get_tuple(cfg(thread_id=LONE))
    with pytest.raises(InvalidInputError, match="prefix"):
        RedisStreamSaver(redis_client, prefix=f"p{LONE}")
    assert _keys(redis_client, prefix) == before
    assert redis_client.xlen(log) == length


def test_cli_thread_id_with_a_lone_surrogate(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export.jsonl"
    where = ["--url", redis_url, "--prefix", "p"]
    for command in (
        ["history", LONE],
        ["tail", LONE],
        ["verify", "--thread", LONE],
        ["audit", "export", LONE],
        ["audit", "export", LONE, "--out", str(out)],
        ["store", "history", f"a{LONE}"],
    ):
        code = main([*command, *where])
        stdout, err = capsys.readouterr()
        assert code == 2, (command, stdout, err)
        assert "lone surrogate" in err and "Traceback" not in err, (command, err)
        assert stdout == "", (command, stdout)  # an export wrote no header either
    assert not out.exists()


# -- TTLs past what the server's expiry arithmetic holds ----------------------------------


def test_store_ttl_beyond_the_servers_range(
    store: RedisStreamStore, redis_client: redis.Redis, prefix: str
) -> None:
    for ttl in (1e18, 1e13 * 6, float("inf"), 2**64):
        with pytest.raises(InvalidInputError, match=r"ttl=.*<= 16666666666"):
            store.put(("a",), "k", {"v": 1}, ttl=ttl)
        with pytest.raises(InvalidInputError, match=r"default_ttl.*<= 16666666666"):
            RedisStreamStore(redis_client, prefix=prefix, ttl={"default_ttl": ttl})
    assert _keys(redis_client, prefix) == []
    # the longest TTL taken keeps the item, with an expiry that far ahead
    longest = MAX_TTL_MS // 60_000
    store.put(("a",), "k", {"v": 1}, ttl=longest)
    assert store.get(("a",), "k", refresh_ttl=True) is not None
    rows = [
        v
        for key in _keys(redis_client, prefix)
        if key.endswith(b":mitem")
        for f, v in redis_client.hgetall(key).items()
        if f not in (b"h", b"t")
    ]
    (row,) = rows
    expires_ms = int(row.split()[3])
    assert expires_ms - time.time() * 1000 > (longest * 60_000) * 0.999


def test_saver_ttl_beyond_the_servers_range(redis_client: redis.Redis, prefix: str) -> None:
    for ttl in (1e16, 1e12 + 1, float("inf")):
        with pytest.raises(InvalidInputError, match=r"ttl_seconds=.*<= 1000000000000"):
            RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=ttl)
    # the longest taken: the thread's keys expire that far ahead, as the server says
    saver = RedisStreamSaver(redis_client, prefix=prefix, ttl_seconds=MAX_TTL_MS / 1000)
    saver.put(under("t"), checkpoint_at(0, "00000"), {}, {"n": 1})
    assert saver.get_tuple(under("t")) is not None
    log = next(k for k in _keys(redis_client, prefix) if k.endswith(b":log"))
    assert redis_client.pttl(log) > MAX_TTL_MS * 0.999


# -- audit verify --file on what is not an export ------------------------------------------


def _verify_file(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    code = main(["audit", "verify", "--file", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _export(saver: RedisStreamSaver, path: Path) -> list[str]:
    parent: Any = None
    for n in range(2):
        parent = saver.put(under("t", parent), checkpoint_at(n, f"0000{n}"), {}, {"n": n + 1})
    with path.open("w", encoding="utf-8") as file:
        saver.export_audit(["t"], file)
    return path.read_text(encoding="utf-8").splitlines()


def test_audit_verify_file_that_is_not_an_export(
    sync_saver: RedisStreamSaver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _export(sync_saver, tmp_path / "good.jsonl")
    header = json.loads(lines[0])
    assert _verify_file(capsys, tmp_path / "good.jsonl")[0] == 0
    deep = "[" * 100_000 + "]" * 100_000
    cases: dict[str, bytes] = {
        "empty": b"",
        "blank lines only": b"\n\n",
        "string version": "\n".join([json.dumps({**header, "version": "2"}), *lines[1:]]).encode(),
        "bool version": "\n".join([json.dumps({**header, "version": True}), *lines[1:]]).encode(),
        "non-UTF-8 byte": "\n".join(lines).encode()[:-10] + b"\xff\xfe" + b"\n",
        "non-UTF-8 header": b"\xff" + "\n".join(lines).encode(),
        "deep nesting": "\n".join([*lines[:2], deep, *lines[2:]]).encode(),
        "deep header": deep.encode(),
        "a record that is a list": "\n".join([*lines[:2], "[1, 2]", *lines[2:]]).encode(),
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        code, out, err = _verify_file(capsys, path)
        # not an export: the bad input exit code, one line naming the line and the remedy
        (problem,) = err.strip().splitlines()
        assert code == 2, (name, code, out, err)
        assert "streamsaver audit export" in problem, (name, problem)
    # a record of the right shape whose fields were altered is what an export can show:
    # an integrity problem (exit 1), reported, not a crash
    altered = json.dumps({**json.loads(lines[1]), "fields": [[1, 2]]})
    path = tmp_path / "altered.jsonl"
    path.write_text("\n".join([lines[0], altered, *lines[2:]]) + "\n", encoding="utf-8")
    code, out, err = _verify_file(capsys, path)
    assert code == 1 and "BROKEN" in out and err == "", (out, err)


# -- --json output is JSON ------------------------------------------------------------------


def _refuse(constant: str) -> Any:
    raise AssertionError(f"{constant} is not JSON")


def test_json_output_holds_no_nan(
    sync_saver: RedisStreamSaver, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = {"nan": float("nan"), "inf": float("inf"), "neg": [float("-inf"), 1.5]}
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": odd}
    cp["channel_versions"] = {"x": 1}
    parent = sync_saver.put(under("t"), cp, {"score": float("nan")}, {"x": 1})
    sync_saver.put_writes(parent, [("x", float("nan"))], "task")
    where = ["--url", redis_url, "--prefix", sync_saver.prefix]
    for command in (
        ["audit", "show", "t", "--json"],
        ["history", "t", "--json"],
        ["tail", "t", "--json"],
    ):
        assert main([*command, *where]) == 0, command
        out, err = capsys.readouterr()
        rows = [json.loads(line, parse_constant=_refuse) for line in out.splitlines()]
        assert rows, (command, err)
        checkpoint = next(r for r in rows if r.get("kind") == "checkpoint")
        assert checkpoint["metadata"]["score"] is None
        if command[0] == "tail":
            continue  # no values: the channels only
        assert checkpoint["values"]["x"] == {"nan": None, "inf": None, "neg": [None, 1.5]}
        writes = next(r for r in rows if r.get("kind") == "writes")
        assert writes["writes"] == [["x", None]]

    store = RedisStreamStore(sync_saver.client, prefix=sync_saver.prefix)
    store.put(("n",), "k", {"x": float("nan"), "y": [float("inf")]})
    for command in (["store", "history", "n", "--json", "--values"],):
        assert main([*command, *where]) == 0, command
        out, err = capsys.readouterr()
        rows = [json.loads(line, parse_constant=_refuse) for line in out.splitlines()]
        assert [r["value"] for r in rows] == [{"x": None, "y": [None]}], (out, err)


def test_audit_export_holds_no_nan_and_verifies(
    sync_saver: RedisStreamSaver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": {"nan": float("nan"), "inf": [float("inf")]}}
    cp["channel_versions"] = {"x": 1}
    sync_saver.put(under("t"), cp, {}, {"x": 1})
    path = tmp_path / "nan.jsonl"
    with path.open("w", encoding="utf-8") as file:
        sync_saver.export_audit(["t"], file)
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line, parse_constant=_refuse) for line in lines]
    event = next(r for r in records if r["type"] == "event")
    assert event["values"]["x"] == {"nan": None, "inf": [None]}
    assert _verify_file(capsys, path)[0] == 0
    # an export written before NaN became null still verifies: NaN reads as null
    old = path.with_name("old.jsonl")
    old.write_text(
        "\n".join(line.replace('"nan": null', '"nan": NaN') for line in lines) + "\n",
        encoding="utf-8",
    )
    assert "NaN" in old.read_text(encoding="utf-8")
    code, out, _ = _verify_file(capsys, old)
    assert code == 0 and "intact" in out, out


async def test_console_json_holds_no_nan(async_saver: Any) -> None:
    import httpx

    from streamsaver.web import create_app

    cp = empty_checkpoint()
    cp["channel_values"] = {"x": {"nan": float("nan"), "inf": [float("-inf")]}}
    cp["channel_versions"] = {"x": 1}
    await async_saver.aput(under("t"), cp, {"score": float("nan")}, {"x": 1})
    transport = httpx.ASGITransport(app=create_app(async_saver))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as h:
        for path in ("/threads/t/state", "/threads/t/audit"):
            got = await h.get(path)
            # the console's JSON API: a state with NaN was a 500 (JSON refuses NaN); the
            # audit download is JSON lines
            assert got.status_code == 200, (path, got.status_code, got.text[:300])
            for line in got.text.splitlines():
                json.loads(line, parse_constant=_refuse)
        state = (await h.get("/threads/t/state")).json()
        assert state["values"]["x"] == {"nan": None, "inf": [None]}


# -- counts and durations beyond what the server or the client's clocks hold ------------

HUGE = 10**20


@pytest.mark.parametrize(
    "options",
    [
        {"keep_last": HUGE},
        {"slice_ms": float(HUGE)},
        {"slice_pause": float(HUGE)},
        {"durability": "replicated", "durability_timeout_ms": HUGE},
        {"durability": "replicated", "replicas": HUGE},
    ],
    ids=lambda options: next(iter(options.items() - {("durability", "replicated")}))[0],
)
def test_saver_options_beyond_what_the_server_holds(
    redis_client: redis.Redis, prefix: str, options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError, match=r"<= "):
        RedisStreamSaver(redis_client, prefix=prefix, **options)
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    with pytest.raises(InvalidInputError, match=r"feed_maxlen=.*<= "):
        saver.feed_maxlen = HUGE
    assert _keys(redis_client, prefix) == []


@pytest.mark.parametrize(
    ("reader", "options"),
    [
        ("tail", {"block_ms": HUGE}),
        ("tail", {"count": HUGE}),
        ("tail_all", {"poll_ms": HUGE}),
        ("consumer_group", {"min_idle_ms": HUGE}),
        ("consumer_group", {"claim_ms": HUGE}),
        ("consumer_group", {"max_deliveries": HUGE}),
    ],
    ids=lambda x: x if isinstance(x, str) else next(iter(x)),
)
def test_reader_options_beyond_what_the_server_holds(
    redis_client: redis.Redis, prefix: str, reader: str, options: dict[str, Any]
) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    args: tuple[Any, ...] = {"tail": ("t",), "tail_all": (), "consumer_group": ("g", "m")}[reader]
    with pytest.raises(InvalidInputError, match=r"<= "):
        made = getattr(saver, reader)(*args, **options)
        # a reader that checks only when it starts; stopped first, so one that took the
        # value returns at once instead of waiting for events
        made.stop()
        next(iter(made), None)
    assert _keys(redis_client, prefix) == []


def test_export_audit_of_a_bad_id_writes_nothing(redis_client: redis.Redis, prefix: str) -> None:
    saver = RedisStreamSaver(redis_client, prefix=prefix)
    for ids in (["fine", LONE], "fine", [None]):
        out = io.StringIO()
        with pytest.raises(InvalidInputError) as caught:
            saver.export_audit(ids, out)  # type: ignore[arg-type]
        assert out.getvalue() == ""
        assert "thread_ids" in str(caught.value)
    out = io.StringIO()
    assert saver.export_audit([], out) == 0
    assert json.loads(out.getvalue())["type"] == "export"


@pytest.mark.parametrize(
    "options",
    [{"socket_timeout": 1e20}, {"connect_timeout": 1e20}, {"retries": HUGE}],
    ids=lambda options: next(iter(options)),
)
def test_connection_options_beyond_what_the_client_holds(
    redis_url: str, redis_client: redis.Redis, prefix: str, options: dict[str, Any]
) -> None:
    for opened in (RedisStreamSaver, RedisStreamStore):
        with (
            pytest.raises(InvalidInputError, match=r"<= "),
            opened.from_conn_string(redis_url, prefix=prefix, **options),
        ):
            pass
    assert _keys(redis_client, prefix) == []
