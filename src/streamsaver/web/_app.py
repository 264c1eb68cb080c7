"""The console's ASGI app: pages, the JSON API in the Agent Protocol's thread shape, and the
event streams. Every read goes through an ``AsyncRedisStreamSaver``'s public methods."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from ..checkpoint.aio import AsyncRedisStreamSaver
from ..checkpoint.base import DEFAULT_PREFIX
from ..core.errors import InvalidInputError, StreamSaverError
from ..events import ThreadInfo
from . import _views
from ._auth import TokenGate
from ._hub import FeedHub, feed_stream
from ._sse import feed_after, thread_after, thread_stream

TOKEN_ENV = "STREAMSAVER_TOKEN"
HERE = Path(__file__).parent
PAGE = 50
LATEST = 8  # events read per row: enough to find the node behind the last checkpoint
TIMELINE = 300  # events on one page of a thread's timeline
RUNNING_MS = 10_000


class _ThreadId(Convertor[str]):
    """A thread id in a path: any characters, newlines and slashes included (Starlette's
    ``path`` stops at a newline); the suffix routes are tried first."""

    regex = r"[\s\S]+?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("streamsaver_thread", _ThreadId())


class Console:
    """The saver the routes read through, made on first use inside the server's event loop
    (a mounted app gets no lifespan of its own), with a serde that shows what it cannot
    decode (ciphertext without the key) as such instead of failing the page."""

    def __init__(
        self, source: str | AsyncRedisStreamSaver, prefix: str, key: bytes | str | None
    ) -> None:
        self.source = source
        self.prefix = prefix
        self.key = key
        self._saver: AsyncRedisStreamSaver | None = None
        self.serde: SerializerProtocol = JsonPlusSerializer()  # what the writers used
        self._lock = asyncio.Lock()
        self._stack = AsyncExitStack()
        self.hub: FeedHub | None = None

    def _serde(self, base: SerializerProtocol | None) -> SerializerProtocol:
        if self.key is not None:
            from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

            key = self.key.encode() if isinstance(self.key, str) else self.key
            base = EncryptedSerializer.from_pycryptodome_aes(key=key)
        self.serde = base or self.serde
        return _views.Sealing(self.serde)

    async def saver(self) -> AsyncRedisStreamSaver:
        async with self._lock:
            if self._saver is None:
                if isinstance(self.source, AsyncRedisStreamSaver):
                    given = self.source
                    self._saver = AsyncRedisStreamSaver(
                        given.client,
                        prefix=given.prefix,
                        serde=self._serde(given.serde),
                        allow_eviction=True,  # it only reads (as for a URL, below)
                    )
                else:
                    self._saver = await self._stack.enter_async_context(
                        AsyncRedisStreamSaver.from_conn_string(
                            self.source,
                            prefix=self.prefix,
                            serde=self._serde(None),
                            # it only reads: the server's eviction policy is the writers' call
                            allow_eviction=True,
                        )
                    )
                self.hub = FeedHub(self._saver)
            return self._saver

    async def close(self) -> None:
        if self.hub is not None:
            await self.hub.close()
        await self._stack.aclose()
        self._saver = None


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["shown"] = _views.shown
    env.filters["when"] = _views.when
    return env


def create_app(
    saver_or_url: str | AsyncRedisStreamSaver,
    *,
    token: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    key: bytes | str | None = None,
    running_ms: int = RUNNING_MS,
) -> Starlette:
    """The console as an ASGI app over a Redis URL or an ``AsyncRedisStreamSaver`` (then its
    client and prefix; ``prefix`` is for a URL). ``token``: every request must carry it
    (``Authorization: Bearer``); ``key``: the AES key of an ``EncryptedSerializer``, to show
    values instead of their ciphertext. ``running_ms``: a thread that wrote within it counts
    as running. Mount it anywhere: ``Mount("/console", app=create_app(url))``."""
    if not isinstance(saver_or_url, (str, AsyncRedisStreamSaver)):
        raise InvalidInputError(
            f"create_app needs a Redis URL or an AsyncRedisStreamSaver, got "
            f"{type(saver_or_url).__name__}; for a RedisStreamSaver pass its URL instead"
        )
    if token is not None and not token:
        raise InvalidInputError("token must not be empty; pass None to run without one")
    console = Console(saver_or_url, prefix, key)
    templates = Jinja2Templates(env=_environment())
    routes = _Routes(console, templates, running_ms)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        await console.close()

    app = Starlette(
        routes=routes.table(),
        lifespan=lifespan,
        exception_handlers={
            InvalidInputError: _bad_input,
            StreamSaverError: _server_error,
            HTTPException: _http_error,
        },
    )
    app.state.console = console
    if token is not None:
        app.add_middleware(TokenGate, token=token)
    return app


async def _bad_input(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=400)


async def _server_error(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=502)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code)


def _status(value: object) -> str | None:
    if value in (None, "", "all"):
        return None
    if value not in _views.FROM_PROTOCOL:
        raise InvalidInputError(
            f"status must be one of {', '.join(sorted(_views.FROM_PROTOCOL))}, got {value!r}"
        )
    return _views.FROM_PROTOCOL[str(value)]


def _int(value: object, name: str, default: int, high: int) -> int:
    if value in (None, ""):
        return default
    try:
        number = int(str(value))
    except ValueError:
        number = -1
    if not 0 <= number <= high or isinstance(value, bool):
        raise InvalidInputError(f"{name} must be an integer from 0 to {high}, got {value!r}")
    return number


def _metadata(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError(f"metadata must be an object, got {value!r}")
    return value


class _Routes:
    def __init__(self, console: Console, templates: Jinja2Templates, running_ms: int) -> None:
        self.console = console
        self.templates = templates
        self.running_ms = running_ms

    def table(self) -> list[Route | Mount]:
        return [
            Route("/", self.threads_page),
            Route("/thread", self.thread_page),
            Route("/checkpoint", self.checkpoint_page),
            Route("/live", self.live_page),
            Route("/events", self.events),
            Route("/threads/search", self.search, methods=["POST"]),
            Route("/threads/{thread_id:streamsaver_thread}/state/{checkpoint_id}", self.state),
            Route("/threads/{thread_id:streamsaver_thread}/state", self.state),
            Route(
                "/threads/{thread_id:streamsaver_thread}/history", self.history, methods=["POST"]
            ),
            Route("/threads/{thread_id:streamsaver_thread}/events", self.thread_events),
            Route("/threads/{thread_id:streamsaver_thread}/audit", self.audit),
            Route("/threads/{thread_id:streamsaver_thread}/verify", self.verify),
            Route("/threads/{thread_id:streamsaver_thread}", self.thread),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]

    # --- reads shared by pages and API ----------------------------------------------------

    async def rows(
        self,
        status: str | None,
        metadata: dict[str, Any],
        limit: int,
        after: ThreadInfo | None = None,
        offset: int = 0,
    ) -> tuple[list[dict[str, Any]], ThreadInfo | None]:
        """A page of thread rows, newest activity first, and where the next page starts."""
        saver = await self.console.saver()
        if status == "deleted":
            return await self._deleted(saver, metadata, limit, offset), None
        wanted: set[str] | None = None
        if metadata:
            # threads with a checkpoint whose metadata matches (alist's own filter)
            found = saver.alist(None, filter=metadata)
            wanted = {t.config["configurable"]["thread_id"] async for t in found}
        now_ms = int(time.time() * 1000)
        kept: list[ThreadInfo] = []
        cursor = after
        while len(kept) < offset + limit + 1:
            batch = await _threads(saver, 200, cursor)
            for info in batch:
                if wanted is not None and info.thread_id not in wanted:
                    continue
                if status and _views.status_of(info, now_ms, self.running_ms) != status:
                    continue
                kept.append(info)
            if len(batch) < 200:
                break
            cursor = batch[-1]
        more = len(kept) > offset + limit
        page = kept[offset : offset + limit]
        latest = await saver.alatest_events([i.thread_id for i in page], count=LATEST)
        rows = [_views.thread_row(i, latest[i.thread_id], now_ms, self.running_ms) for i in page]
        return rows, (page[-1] if more and page else None)

    async def _deleted(
        self, saver: AsyncRedisStreamSaver, metadata: dict[str, Any], limit: int, offset: int
    ) -> list[dict[str, Any]]:
        if metadata:  # a deleted thread has no checkpoints left to match
            return []
        alive = set(await saver.athread_ids())
        gone = [t for t in await saver.athread_ids(deleted=True) if t not in alive]
        page = gone[offset : offset + limit]
        found = await asyncio.gather(*(saver.adeletions(t) for t in page))
        return [_views.deleted_row(t, d) for t, d in zip(page, found, strict=True)]

    async def tuple_of(
        self, thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
    ) -> tuple[CheckpointTuple, CheckpointTuple | None]:
        saver = await self.console.saver()
        conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        if checkpoint_id:
            conf["checkpoint_id"] = checkpoint_id
        found = await saver.aget_tuple(RunnableConfig(configurable=conf))
        if found is None:
            what = f"checkpoint {checkpoint_id!r} of " if checkpoint_id else ""
            raise HTTPException(404, f"no {what}thread {thread_id!r} (namespace {checkpoint_ns!r})")
        parent = await saver.aget_tuple(found.parent_config) if found.parent_config else None
        return found, parent

    # --- JSON API -------------------------------------------------------------------------

    async def search(self, request: Request) -> Response:
        body = await _json_body(request)
        rows, _ = await self.rows(
            _status(body.get("status")),
            _metadata(body.get("metadata")),
            _int(body.get("limit"), "limit", 10, 1000),
            offset=_int(body.get("offset"), "offset", 0, 1_000_000),
        )
        return JSONResponse(rows)

    async def thread(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        saver = await self.console.saver()
        latest = (await saver.alatest_events([thread_id], count=LATEST))[thread_id]
        if not latest:
            raise HTTPException(404, f"no thread {thread_id!r}")
        found = await saver.aget_tuple(RunnableConfig(configurable={"thread_id": thread_id}))
        first = await _first_event_time(saver, thread_id)
        newest = latest[0]
        updated = (
            newest.timestamp.isoformat()
            if hasattr(newest, "timestamp")
            else _views.iso(int(newest.id.split("-")[0]))
        )
        if found is None:  # its log holds only what deleted it
            return JSONResponse(
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
        return JSONResponse(
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
        return JSONResponse(_views.state_view(found, parent))

    async def history(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        body = await _json_body(request)
        limit = _int(body.get("limit"), "limit", 10, 1000)
        checkpoint = _metadata(body.get("checkpoint"))
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
                filter=_metadata(body.get("metadata")) or None,
                before=before,
                limit=limit,
            )
        ]
        return JSONResponse(states)

    async def thread_events(self, request: Request) -> Response:
        saver = await self.console.saver()
        after = thread_after(_resume(request, "$"))
        return EventSourceResponse(
            thread_stream(saver, request.path_params["thread_id"], after), ping=10
        )

    async def events(self, request: Request) -> Response:
        saver = await self.console.saver()
        after = feed_after(_resume(request, "$"), saver.prefix)
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
        return JSONResponse(await self._verify(request.path_params["thread_id"]))

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

    # --- pages ----------------------------------------------------------------------------

    def _page(self, request: Request, name: str, **context: Any) -> Response:
        base = request.scope.get("root_path", "").rstrip("/")
        return self.templates.TemplateResponse(request, name, {"base": base, **context})

    async def threads_page(self, request: Request) -> Response:
        q = request.query_params
        status = _status(q.get("status"))
        meta = _views.filters(q.getlist("meta"))
        after = None
        if q.get("after_ms"):
            after = ThreadInfo(
                thread_id=q.get("after_id", ""),
                last_activity_ms=_int(q.get("after_ms"), "after_ms", 0, 2**62),
            )
        rows, more = await self.rows(status, meta, _int(q.get("limit"), "limit", PAGE, 1000), after)
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
        thread_id = _required(request, "thread_id")
        before = request.query_params.get("before") or None
        saver = await self.console.saver()
        # one page of the log, not all of it: a million-event thread opens as fast as a short
        # one, and the audit badge is fetched by the page itself (it walks the whole chain)
        events, older = await saver.ahistory_page(thread_id, before=before, limit=TIMELINE)
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
        thread_id = _required(request, "thread_id")
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


async def _threads(
    saver: AsyncRedisStreamSaver, limit: int, after: ThreadInfo | None
) -> list[ThreadInfo]:
    """A page of ``athreads`` as a list."""
    return [info async for info in saver.athreads(limit=limit, after=after)]


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if value is None:
        raise InvalidInputError(f"the {name} query parameter is required, e.g. ?{name}=t1")
    return value


def _resume(request: Request, default: str) -> str:
    """Where a stream starts: the browser's ``Last-Event-ID`` on a reconnect wins over
    ``?after=`` (the page's own start), so a retry never starts over."""
    return request.headers.get("last-event-id") or request.query_params.get("after") or default


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidInputError(f"the request body must be JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInputError(f"the request body must be a JSON object, got {body!r:.100}")
    return body


async def _first_event_time(saver: AsyncRedisStreamSaver, thread_id: str) -> str | None:
    events = saver.ahistory(thread_id)
    try:
        async for event in events:
            return _views.iso(int(event.id.split("-")[0]))
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    return None


def serve(
    url: str | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Run the console with uvicorn until interrupted. ``url``: default ``$REDIS_URL``;
    ``token``: default ``$STREAMSAVER_TOKEN``; the AES key of an ``EncryptedSerializer``, if
    any, from ``$LANGGRAPH_AES_KEY``."""
    import uvicorn

    url = url or os.environ.get("REDIS_URL")
    if not url:
        raise InvalidInputError("no Redis to read: pass a URL or set $REDIS_URL")
    app: ASGIApp = create_app(
        url,
        token=token or os.environ.get(TOKEN_ENV) or None,
        prefix=prefix,
        key=os.environ.get("LANGGRAPH_AES_KEY") or None,
    )
    # uvicorn at "warning" prints nothing on start: say where to look
    print(f"streamsaver console on http://{host}:{port}/ (Ctrl+C stops it)", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level="warning")
