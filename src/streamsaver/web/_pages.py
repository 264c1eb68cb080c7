"""The console's pages: server-rendered templates (``templates/``) over the same reads as the
JSON API."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from langchain_core.runnables import RunnableConfig
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from ..core.errors import LogRewrittenError
from ..events import ThreadInfo
from . import _views
from ._console import Console
from ._params import parse_int, parse_status, required
from ._reads import Reads

__all__ = ["Pages"]

HERE = Path(__file__).parent
PAGE = 50
TIMELINE = 300  # events on one page of a thread's timeline


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["shown"] = _views.shown
    env.filters["when"] = _views.when
    return env


class Pages(Reads):
    """The routes that answer HTML."""

    def __init__(self, console: Console, running_ms: int) -> None:
        super().__init__(console, running_ms)
        self.templates = Jinja2Templates(env=_environment())

    def _page(self, request: Request, name: str, **context: Any) -> Response:
        base = request.scope.get("root_path", "").rstrip("/")
        return self.templates.TemplateResponse(request, name, {"base": base, **context})

    async def threads_page(self, request: Request) -> Response:
        q = request.query_params
        status = parse_status(q.get("status"))
        meta = _views.filters(q.getlist("meta"))
        after = None
        if q.get("after_ms"):
            after = ThreadInfo(
                thread_id=q.get("after_id", ""),
                last_activity_ms=parse_int(q.get("after_ms"), "after_ms", 0, 2**62),
            )
        rows, more = await self.rows(
            status, meta, parse_int(q.get("limit"), "limit", PAGE, 1000), after
        )
        context = {
            "rows": rows,
            "status": status or "",
            "statuses": _views.STATUSES,
            "meta": q.getlist("meta"),
            "more": more,
        }
        name = "rows.html" if q.get("fragment") == "rows" else "threads.html"
        return self._page(request, name, **context)

    async def thread_page(self, request: Request) -> Response:
        thread_id = required(request, "thread_id")
        before = request.query_params.get("before") or None
        saver = await self.console.saver()
        # one page of the log, not all of it: a million-event thread opens as fast as a short
        # one, and the audit badge is fetched by the page itself (it walks the whole chain)
        try:
            events, older = await saver.ahistory_page(thread_id, before=before, limit=TIMELINE)
        except LogRewrittenError:
            # the "older" link named an event of a log compacted or deleted since: the newest
            # page of the log that holds the thread now
            before = None
            events, older = await saver.ahistory_page(thread_id, limit=TIMELINE)
        timeline = _views.Timeline()
        for event in events:
            timeline.add(event)
        if not events and before is None:
            raise HTTPException(404, f"no thread {thread_id!r}")
        found = await saver.aget_tuple(RunnableConfig(configurable={"thread_id": thread_id}))
        return self._page(
            request,
            "thread.html",
            thread_id=thread_id,
            timeline=timeline,
            # an older page stays as it is; the newest one appends what happens next
            live=before is None,
            last_id=events[-1].id if events else "0",
            older=events[0].id if older and events else None,
            newer=before is not None,
            pending=_views.state_view(found, None)["pending_writes"] if found else [],
            deletions=await saver.adeletions(thread_id),
        )

    async def checkpoint_page(self, request: Request) -> Response:
        thread_id = required(request, "thread_id")
        found, parent = await self.tuple_of(
            thread_id,
            request.query_params.get("checkpoint_ns", ""),
            request.query_params.get("checkpoint_id") or None,
        )
        return self._page(
            request, "checkpoint.html", thread_id=thread_id, state=_views.state_view(found, parent)
        )

    async def live_page(self, request: Request) -> Response:
        return self._page(request, "live.html")
