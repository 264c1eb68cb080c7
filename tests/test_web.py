"""The console's HTTP API and pages against a real Redis: each endpoint's contract, tokens,
hostile data, ciphertext, mounting. Event streams: tests/test_web_sse.py; browser:
tests/test_web_browser.py."""

from __future__ import annotations

import html
import json
import re
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis
import redis.asyncio as aredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from starlette.applications import Starlette
from starlette.routing import Mount

from streamsaver import AsyncRedisStreamSaver, InvalidInputError, RedisStreamSaver
from streamsaver.audit import read_export
from streamsaver.web import create_app, serve
from tests.web_support import build

HOSTILE = "<script>alert('x')</script>\"&amp;ü😀/\n;"
START: dict[str, Any] = {"items": [], "note": ""}


def conf(thread_id: str, **metadata: Any) -> RunnableConfig:
    return RunnableConfig(configurable={"thread_id": thread_id}, metadata=metadata)


@pytest.fixture
async def filled(async_saver: AsyncRedisStreamSaver) -> AsyncRedisStreamSaver:
    """``done`` (ran to the end, team a) and ``asks`` (waiting on an interrupt, team b)."""
    await build(async_saver).ainvoke(START, conf("done", team="a"))
    await build(async_saver, ask=True).ainvoke(START, conf("asks", team="b"))
    return async_saver


def client(app: Any, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console", headers=headers
    )


async def test_search_lists_threads_newest_first_with_their_status(
    filled: AsyncRedisStreamSaver,
) -> None:
    async with client(create_app(filled, running_ms=0)) as h:
        rows = (await h.post("/threads/search", json={})).json()
        assert [r["thread_id"] for r in rows] == ["asks", "done"]
        asks, done = rows
        assert (asks["status"], asks["step"], asks["last_node"]) == ("interrupted", 1, "act")
        assert (done["status"], done["step"], done["last_node"]) == ("idle", 2, "act")
        latest = await filled.aget_tuple(conf("done"))
        assert latest is not None
        assert done["checkpoint_id"] == latest.config["configurable"]["checkpoint_id"]

        async def ids(body: dict[str, Any]) -> list[str]:
            reply = await h.post("/threads/search", json=body)
            assert reply.status_code == 200, reply.text
            return [r["thread_id"] for r in reply.json()]

        assert await ids({"status": "interrupted"}) == ["asks"]
        assert await ids({"status": "idle"}) == ["done"]
        assert await ids({"status": "busy"}) == []
        assert await ids({"metadata": {"team": "a"}}) == ["done"]
        assert await ids({"metadata": {"team": "zzz"}}) == []
        assert await ids({"limit": 1}) == ["asks"]
        assert await ids({"limit": 1, "offset": 1}) == ["done"]
    async with client(create_app(filled, running_ms=3_600_000)) as h:
        busy = (await h.post("/threads/search", json={"status": "busy"})).json()
        assert [r["thread_id"] for r in busy] == ["done"]


async def test_deleted_threads_have_their_own_status(filled: AsyncRedisStreamSaver) -> None:
    await filled.adelete_thread("done")
    async with client(create_app(filled)) as h:
        rows = (await h.post("/threads/search", json={"status": "deleted"})).json()
        assert [(r["thread_id"], r["status"]) for r in rows] == [("done", "deleted")]
        assert [r["thread_id"] for r in (await h.post("/threads/search", json={})).json()] == [
            "asks"
        ]
        assert (await h.get("/threads/done")).json()["status"] == "deleted"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"status": "sleeping"}, "'sleeping'"),
        ({"limit": -1}, "-1"),
        ({"limit": "many"}, "'many'"),
        ({"metadata": [1]}, "[1]"),
        ([1, 2], "[1, 2]"),
    ],
)
async def test_bad_search_is_a_400_naming_the_value(
    async_saver: AsyncRedisStreamSaver, body: Any, named: str
) -> None:
    async with client(create_app(async_saver)) as h:
        reply = await h.post("/threads/search", json=body)
        assert reply.status_code == 400
        assert named in reply.json()["error"]
        reply = await h.post("/threads/search", content=b"{not json")
        assert reply.status_code == 400 and "JSON" in reply.json()["error"]


async def test_thread_in_the_agent_protocol_shape(filled: AsyncRedisStreamSaver) -> None:
    async with client(create_app(filled, running_ms=0)) as h:
        thread = (await h.get("/threads/asks")).json()
        assert thread["thread_id"] == "asks"
        assert thread["status"] == "interrupted"
        assert thread["values"]["items"] == ["plan 0"]
        assert thread["metadata"]["team"] == "b"
        assert thread["last_node"] == "act"
        assert [v[0]["value"] for v in thread["interrupts"].values()] == ["approve?"]
        assert thread["created_at"] <= thread["updated_at"]
        missing = await h.get("/threads/nope")
        assert missing.status_code == 404 and "'nope'" in missing.json()["error"]


async def test_state_and_its_diff_from_the_parent(filled: AsyncRedisStreamSaver) -> None:
    async with client(create_app(filled)) as h:
        latest = (await h.get("/threads/done/state")).json()
        assert latest["values"]["items"] == ["plan 0", "act auto"]
        assert latest["next"] == []
        parent_id = latest["parent_checkpoint"]["checkpoint_id"]
        parent = (await h.get(f"/threads/done/state/{parent_id}")).json()
        assert parent["checkpoint"]["checkpoint_id"] == parent_id
        assert parent["values"]["items"] == ["plan 0"]
        assert parent["next"] == ["act"]
        diff = latest["diff"]
        assert diff["changed"]["items"] == {"before": ["plan 0"], "after": ["plan 0", "act auto"]}
        assert diff["changed"]["note"] == {"before": "", "after": "auto"}
        assert "branch:to:act" in diff["removed"]
        asks = (await h.get("/threads/asks/state")).json()
        assert [w["channel"] for w in asks["pending_writes"]] == ["__interrupt__"]
        gone = await h.get("/threads/done/state/1f000000-0000-6000-8000-000000000000")
        assert gone.status_code == 404


async def test_history_newest_first_with_limit_and_before(filled: AsyncRedisStreamSaver) -> None:
    expected = [t.config["configurable"]["checkpoint_id"] async for t in filled.alist(conf("done"))]
    assert len(expected) == 4
    async with client(create_app(filled)) as h:
        states = (await h.post("/threads/done/history", json={"limit": 10})).json()
        assert [s["checkpoint"]["checkpoint_id"] for s in states] == expected
        page = (
            await h.post("/threads/done/history", json={"limit": 2, "before": expected[0]})
        ).json()
        assert [s["checkpoint"]["checkpoint_id"] for s in page] == expected[1:3]
        by_step = await h.post("/threads/done/history", json={"metadata": {"step": 1}})
        assert [s["metadata"]["step"] for s in by_step.json()] == [1]


async def test_audit_export_and_verify(filled: AsyncRedisStreamSaver) -> None:
    events = [e async for e in filled.ahistory("done")]
    async with client(create_app(filled)) as h:
        export = await h.get("/threads/done/audit")
        assert export.headers["content-type"].startswith("application/x-ndjson")
        assert "attachment" in export.headers["content-disposition"]
        records = [json.loads(line) for line in export.text.splitlines()]
        assert records[0]["type"] == "export"
        decoded = list(read_export(export.text.splitlines(), filled.serde))
        assert [e.id for e in decoded] == [e.id for e in events]
        assert [r["id"] for r in records if r["type"] == "event"] == [e.id for e in events]
        verify = (await h.get("/threads/done/verify")).json()
        assert verify["ok"] is True and verify["events"] == len(events)


async def test_pages_render_threads_timeline_and_checkpoint(filled: AsyncRedisStreamSaver) -> None:
    async with client(create_app(filled)) as h:
        page = (await h.get("/")).text
        assert "thread?thread_id=done" in page and "thread?thread_id=asks" in page
        rows = (await h.get("/?fragment=rows&status=interrupted")).text
        assert "asks" in rows and "done" not in rows and "<html" not in rows
        thread = (await h.get("/thread", params={"thread_id": "asks"})).text
        # the badge is filled in by the page from /verify (tests/test_web_browser.py)
        assert 'id="verify" data-src="/threads/asks/verify"' in thread
        assert 'data-live="/threads/asks/events?after=' in thread and 'id="older"' not in thread
        assert thread.count('class="kind-checkpoint') == 3  # the input, plan's, act's
        assert 'class="kind-writes interrupt"' in thread
        latest = (await h.get("/threads/done/state")).json()["checkpoint"]["checkpoint_id"]
        page = await h.get("/checkpoint", params={"thread_id": "done", "checkpoint_id": latest})
        assert page.status_code == 200
        assert "~ items" in page.text and "act auto" in page.text
        assert (await h.get("/thread")).status_code == 400


async def test_a_long_thread_opens_one_page_at_a_time(async_saver: AsyncRedisStreamSaver) -> None:
    """The timeline reads one page of the log (newest first), not all of it: a thread of a
    million events opened as slowly as its length. Older pages follow the "older events"
    link, stay still, and together hold every event once."""
    from streamsaver.web import _pages

    for _ in range(4):
        await build(async_saver).ainvoke(START, conf("long"))
    every = [e.id async for e in async_saver.ahistory("long")]
    assert len(every) > 2 * 7
    seen: list[str] = []
    pages = 0
    params: dict[str, str] = {"thread_id": "long"}
    old, _pages.TIMELINE = _pages.TIMELINE, 7
    try:
        async with client(create_app(async_saver)) as h:
            while True:
                page = (await h.get("/thread", params=params)).text
                pages += 1
                ids = re.findall(r'<tr class="kind-[^"]*" data-id="([^"]+)"', page)
                assert 1 <= len(ids) <= 7
                assert ("data-live=" in page) == (pages == 1)
                seen[:0] = ids
                older = re.search(r'id="older" href="[^"]*before=([^"]+)"', page)
                if older is None:
                    break
                params = {"thread_id": "long", "before": html.unescape(older.group(1))}
            assert seen == every and pages == -(-len(every) // 7)
            bad = await h.get("/thread", params={"thread_id": "long", "before": "x*"})
            assert bad.status_code == 400 and "before must be an event id" in bad.text
    finally:
        _pages.TIMELINE = old
    events, more = await async_saver.ahistory_page("long", limit=3)
    assert [e.id for e in events] == every[-3:] and more
    events, more = await async_saver.ahistory_page("long", before=every[3], limit=10)
    assert [e.id for e in events] == every[:3] and not more
    with pytest.raises(InvalidInputError, match="limit must be an integer"):
        await async_saver.ahistory_page("long", limit=0)


async def test_forks_are_branches(async_saver: AsyncRedisStreamSaver) -> None:
    graph = build(async_saver)
    await graph.ainvoke(START, conf("f"))
    history = [s async for s in graph.aget_state_history(conf("f"))]
    await graph.ainvoke(None, history[2].config)  # replay from the checkpoint after plan
    async with client(create_app(async_saver)) as h:
        page = (await h.get("/thread", params={"thread_id": "f"})).text
    assert page.count('<span class="badge fork">fork</span>') == 1
    assert 'class="branch b1">1<' in page


async def test_hostile_strings_render_inert(async_saver: AsyncRedisStreamSaver) -> None:
    huge = "<b>" + "x" * 1_000_000
    await build(async_saver).ainvoke({"items": [HOSTILE, huge], "note": HOSTILE}, conf(HOSTILE))
    async with client(create_app(async_saver)) as h:
        pages = [
            (await h.get("/")).text,
            (await h.get("/thread", params={"thread_id": HOSTILE})).text,
            (await h.get("/checkpoint", params={"thread_id": HOSTILE})).text,
        ]
        for page in pages:
            assert "<script>alert" not in page and "<b>x" not in page
            assert "&lt;script&gt;alert(" in page
        assert "more characters)" in pages[2]  # the huge value is cut on the page...
        assert len(pages[2]) < 200_000
        path = quote(HOSTILE, safe="")
        state = (await h.get(f"/threads/{path}/state")).json()
        assert state["values"]["items"][:3] == [HOSTILE, huge, "plan 2"]  # ...and whole in JSON
        assert state["values"]["note"] == "auto"
        assert (await h.get(f"/threads/{path}")).json()["thread_id"] == HOSTILE


async def test_token_is_required_on_every_route(filled: AsyncRedisStreamSaver) -> None:
    app = create_app(filled, token="s3cret")
    routes = [
        ("GET", "/"),
        ("GET", "/thread?thread_id=done"),
        ("GET", "/checkpoint?thread_id=done"),
        ("GET", "/live"),
        ("GET", "/events"),
        ("GET", "/static/console.js"),
        ("POST", "/threads/search"),
        ("GET", "/threads/done"),
        ("GET", "/threads/done/state"),
        ("POST", "/threads/done/history"),
        ("GET", "/threads/done/events"),
        ("GET", "/threads/done/audit"),
        ("GET", "/threads/done/verify"),
        ("GET", "/nowhere"),
    ]
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
        async with client(app, **headers) as h:
            for method, path in routes:
                reply = await h.request(method, path)
                assert reply.status_code == 401, (headers, path)
                assert reply.headers["www-authenticate"].startswith("Bearer")
    async with client(app, authorization="Bearer s3cret") as h:
        for method, path in routes:
            if not path.endswith("events"):  # a stream never ends: tests/test_web_sse.py
                assert (await h.request(method, path)).status_code != 401, path
    async with client(app) as h:
        assert (await h.get("/?token=s3cret")).status_code == 200
        assert (await h.get("/threads/done")).status_code == 200  # the cookie it set


async def test_ciphertext_unless_started_with_the_key(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = b"0123456789abcdef"
    monkeypatch.setenv("LANGGRAPH_AES_KEY", key.decode())
    writer = AsyncRedisStreamSaver(
        aredis.Redis.from_url(redis_url),
        prefix=prefix,
        serde=EncryptedSerializer.from_pycryptodome_aes(),
    )
    await build(writer).ainvoke({"items": ["secret"], "note": ""}, conf("enc"))
    await writer.client.aclose()
    for key_given, shown in ((None, False), (key, True)):
        app = create_app(redis_url, prefix=prefix, key=key_given)
        async with client(app) as h:
            reply = await h.get("/threads/enc/state")
            assert reply.status_code == 200, reply.text
            state = reply.json()
            page = (await h.get("/checkpoint", params={"thread_id": "enc"})).text
        await app.state.console.close()
        if shown:
            assert state["values"]["items"] == ["secret", "plan 1", "act auto"]
            assert "secret" in page
        else:
            assert state["values"]["items"]["__undecoded__"] == "msgpack+aes"
            assert "secret" not in json.dumps(state) and "secret" not in page


async def test_mounted_in_another_app_links_under_its_path(
    filled: AsyncRedisStreamSaver,
) -> None:
    outer = Starlette(routes=[Mount("/ops/console", app=create_app(filled))])
    async with client(outer) as h:
        page = (await h.get("/ops/console/")).text
        assert 'href="/ops/console/thread?thread_id=done"' in page
        assert 'src="/ops/console/static/console.js"' in page
        assert (await h.get("/ops/console/threads/done")).json()["thread_id"] == "done"


def test_create_app_refuses_what_it_cannot_read(redis_url: str) -> None:
    with (
        redis.Redis.from_url(redis_url) as sync_client,
        pytest.raises(InvalidInputError, match="RedisStreamSaver"),
    ):
        create_app(RedisStreamSaver(sync_client))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="token"):
        create_app(redis_url, token="")


async def test_latest_events_one_round_trip_for_a_page(filled: AsyncRedisStreamSaver) -> None:
    found = await filled.alatest_events(["done", "asks", "none"], count=2)
    done = [e async for e in filled.ahistory("done")]
    assert [e.id for e in found["done"]] == [e.id for e in reversed(done[-2:])]
    assert found["none"] == []
    with pytest.raises(InvalidInputError, match="count"):
        await filled.alatest_events(["done"], count=0)


def test_latest_events_sync_twin(sync_saver: RedisStreamSaver) -> None:
    build(sync_saver).invoke(START, conf("s"))
    newest = sync_saver.latest_events(["s"], count=3)["s"]
    assert [e.id for e in newest] == [e.id for e in reversed(list(sync_saver.history("s")))][:3]


async def test_subgraph_namespaces_are_grouped(async_saver: AsyncRedisStreamSaver) -> None:
    from langgraph.graph import START as FIRST
    from langgraph.graph import StateGraph

    from tests.web_support import State

    inner = build(None)
    outer = StateGraph(State)
    outer.add_node("inner", inner)
    outer.add_edge(FIRST, "inner")
    await outer.compile(checkpointer=async_saver).ainvoke(START, conf("nested"))
    namespaces = {e.checkpoint_ns async for e in async_saver.ahistory("nested")}
    (sub,) = namespaces - {""}
    async with client(create_app(async_saver)) as h:
        page = (await h.get("/thread", params={"thread_id": "nested"})).text
    assert f'<span class="ns">{sub}</span>' in page and '<span class="ns">(root)</span>' in page
    inner_checkpoints = [
        e
        async for e in async_saver.ahistory("nested")
        if e.kind == "checkpoint" and e.checkpoint_ns == sub
    ]
    assert inner_checkpoints
    assert page.count('class="kind-checkpoint subgraph"') == len(inner_checkpoints)


async def test_threads_page_pages_with_a_cursor(async_saver: AsyncRedisStreamSaver) -> None:
    graph = build(async_saver)
    for thread_id in ("p1", "p2", "p3"):
        await graph.ainvoke(START, conf(thread_id))
    async with client(create_app(async_saver)) as h:
        first = (await h.get("/", params={"limit": 2})).text
        assert "thread_id=p3" in first and "thread_id=p2" in first and "thread_id=p1" not in first
        (link,) = re.findall(r'id="next" href="/([^"]*)"', first)
        second = (await h.get("/" + html.unescape(link) + "&limit=2")).text
        assert "thread_id=p1" in second and "thread_id=p2" not in second
        assert 'id="next"' not in second


def test_serve_needs_a_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(InvalidInputError, match="REDIS_URL"):
        serve(None)
