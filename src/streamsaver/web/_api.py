"""The JSON API, in the Agent Protocol's thread shape (docs/console.md), and the event streams
(Server-Sent Events: ``_sse``, ``_hub``)."""

from __future__ import annotations

import io
import time
from typing import Any
from urllib.parse import quote

from langchain_core.runnables import RunnableConfig
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..checkpoint.aio import AsyncRedisStreamSaver
from ..events import ThreadInfo
from . import _views
from ._hub import feed_stream
from ._params import json_body, parse_int, parse_metadata, parse_status, resume_from
from ._reads import LATEST, Reads
from ._responses import JSON
from ._sse import check_resume, feed_after, thread_after, thread_stream

__all__ = ["Api"]


class Api(Reads):
    """The routes that answer JSON or a stream of events."""

    async def search(self, request: Request) -> Response:
        body = await json_body(request)
        rows, _ = await self.rows(
            parse_status(body.get("status")),
            parse_metadata(body.get("metadata")),
            parse_int(body.get("limit"), "limit", 10, 1000),
            offset=parse_int(body.get("offset"), "offset", 0, 1_000_000),
        )
        return JSON(rows)

    async def thread(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        saver = await self.console.saver()
        latest = (await saver.alatest_events([thread_id], count=LATEST))[thread_id]
        if not latest:
            # a deleted thread holds no log, only its deletion's mark
            deleted = await saver.adeletions(thread_id)
            if not deleted:
                raise HTTPException(404, f"no thread {thread_id!r}")
            return JSON(
                {
                    "thread_id": thread_id,
                    "created_at": None,
                    "updated_at": deleted[-1].timestamp.isoformat(),
                    "metadata": {},
                    "status": "deleted",
                    "values": None,
                    "interrupts": {},
                }
            )
        found = await saver.aget_tuple(RunnableConfig(configurable={"thread_id": thread_id}))
        first = await _first_event_time(saver, thread_id)
        newest = latest[0]
        updated = (
            newest.timestamp.isoformat()
            if hasattr(newest, "timestamp")
            else _views.iso(int(newest.id.split("-")[0]))
        )
        if found is None:  # its log holds only what deleted it
            return JSON(
                {
                    "thread_id": thread_id,
                    "created_at": first,
                    "updated_at": updated,
                    "metadata": {},
                    "status": "deleted",
                    "values": None,
                    "interrupts": {},
                }
            )
        state = _views.state_view(found, None)
        info = ThreadInfo(
            thread_id=thread_id,
            last_activity_ms=int(newest.id.split("-")[0]),
            interrupted=bool(state["interrupts"]),
        )
        status = _views.status_of(info, int(time.time() * 1000), self.running_ms)
        return JSON(
            {
                "thread_id": thread_id,
                "created_at": first,
                "updated_at": updated,
                "metadata": state["metadata"],
                "status": _views.PROTOCOL_STATUS[status],
                "values": state["values"],
                "interrupts": {i["task_id"]: i["value"] for i in state["interrupts"]},
                "last_node": _views.last_node(latest, state["checkpoint"]["checkpoint_id"]),
                "checkpoint": state["checkpoint"],
            }
        )

    async def state(self, request: Request) -> Response:
        found, parent = await self.tuple_of(
            request.path_params["thread_id"],
            request.query_params.get("checkpoint_ns", ""),
            request.path_params.get("checkpoint_id"),
        )
        return JSON(_views.state_view(found, parent))

    async def history(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        body = await json_body(request)
        limit = parse_int(body.get("limit"), "limit", 10, 1000)
        checkpoint = parse_metadata(body.get("checkpoint"))
        conf: dict[str, Any] = {
            "thread_id": thread_id,
            "checkpoint_ns": str(checkpoint.get("checkpoint_ns", "")),
        }
        before_id = body.get("before")
        if isinstance(before_id, dict):
            before_id = before_id.get("checkpoint_id")
        before = None
        if before_id:
            before = RunnableConfig(configurable={**conf, "checkpoint_id": str(before_id)})
        saver = await self.console.saver()
        states = [
            {k: v for k, v in _views.state_view(t, None).items() if k != "diff"}
            async for t in saver.alist(
                RunnableConfig(configurable=conf),
                filter=parse_metadata(body.get("metadata")) or None,
                before=before,
                limit=limit,
            )
        ]
        return JSON(states)

    async def thread_events(self, request: Request) -> Response:
        saver = await self.console.saver()
        after = thread_after(resume_from(request, "$"))
        await check_resume(saver, request.path_params["thread_id"], after)
        return EventSourceResponse(
            thread_stream(saver, request.path_params["thread_id"], after), ping=10
        )

    async def events(self, request: Request) -> Response:
        saver = await self.console.saver()
        after = feed_after(resume_from(request, "$"), saver.prefix)
        assert self.console.hub is not None
        return EventSourceResponse(feed_stream(saver, self.console.hub, after), ping=10)

    async def audit(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        saver = await self.console.saver()
        out = io.StringIO()
        await saver.aexport_audit([thread_id], out, serde=self.console.serde)
        name = quote(thread_id, safe="")[:100] or "thread"
        return Response(
            out.getvalue(),
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="audit-{name}.jsonl"'},
        )

    async def verify(self, request: Request) -> Response:
        return JSON(await self._verify(request.path_params["thread_id"]))

    async def _verify(self, thread_id: str) -> dict[str, Any]:
        check = await (await self.console.saver()).averify_chain(thread_id)
        return {
            "ok": check.ok,
            "events": check.events,
            "head": check.head,
            "problem": None if check.problem is None else str(check.problem),
            "references": list(check.references),
            "unchecked": check.unchecked,
        }


async def _first_event_time(saver: AsyncRedisStreamSaver, thread_id: str) -> str | None:
    events = saver.ahistory(thread_id)
    try:
        async for event in events:
            return _views.iso(int(event.id.split("-")[0]))
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    return None
