"""The console's ASGI app: the routes of the pages (``_pages``) and of the JSON API and event
streams (``_api``), the errors they answer with, and ``serve``. Every read goes through an
``AsyncRedisStreamSaver``'s public methods (``_console``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from ..checkpoint.aio import AsyncRedisStreamSaver
from ..core.errors import InvalidInputError, StreamSaverError
from ..core.keys import DEFAULT_PREFIX
from ._api import Api
from ._auth import TokenGate
from ._console import Console
from ._pages import Pages
from ._responses import error_response

__all__ = ["TOKEN_ENV", "create_app", "serve"]

TOKEN_ENV = "STREAMSAVER_TOKEN"
STATIC = Path(__file__).parent / "static"
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


def create_app(
    saver_or_url: str | AsyncRedisStreamSaver,
    *,
    token: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    key: bytes | str | None = None,
    running_ms: int = RUNNING_MS,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The console as an ASGI app over a Redis URL or an ``AsyncRedisStreamSaver`` (then its
    client and prefix; ``prefix`` is for a URL). ``token``: every request must carry it
    (``Authorization: Bearer``); ``key``: the AES key of an ``EncryptedSerializer``, to show
    values instead of their ciphertext. ``running_ms``: a thread that wrote within it counts
    as running. ``allowed_hosts``: the Host headers it answers (Starlette's
    ``TrustedHostMiddleware``; ``*.example.com`` patterns), refusing any other with 400 so a
    page whose name was re-pointed at this address (DNS rebinding) reads nothing; None
    answers any, for an app whose own middleware checks. Mount it anywhere:
    ``Mount("/console", app=create_app(url))``."""
    if not isinstance(saver_or_url, (str, AsyncRedisStreamSaver)):
        raise InvalidInputError(
            f"create_app needs a Redis URL or an AsyncRedisStreamSaver, got "
            f"{type(saver_or_url).__name__}; for a RedisStreamSaver pass its URL instead"
        )
    if token is not None and not token:
        raise InvalidInputError("token must not be empty; pass None to run without one")
    console = Console(saver_or_url, prefix, key)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        await console.close()

    app = Starlette(
        routes=_table(Pages(console, running_ms), Api(console, running_ms)),
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
    if allowed_hosts is not None:
        # outermost: a foreign Host is refused before the token is even looked at
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    return app


async def _bad_input(request: Request, exc: Exception) -> Response:
    return error_response(request, 400, str(exc))


async def _server_error(request: Request, exc: Exception) -> Response:
    return error_response(request, 502, f"{type(exc).__name__}: {exc}")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(request, exc.status_code, str(exc.detail))


async def _favicon(request: Request) -> Response:
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


def _table(pages: Pages, api: Api) -> list[Route | Mount]:
    return [
        Route("/", pages.threads_page),
        Route("/thread", pages.thread_page),
        Route("/checkpoint", pages.checkpoint_page),
        Route("/live", pages.live_page),
        Route("/favicon.ico", _favicon),
        Route("/events", api.events),
        Route("/threads/search", api.search, methods=["POST"]),
        Route("/threads/{thread_id:streamsaver_thread}/state/{checkpoint_id}", api.state),
        Route("/threads/{thread_id:streamsaver_thread}/state", api.state),
        Route("/threads/{thread_id:streamsaver_thread}/history", api.history, methods=["POST"]),
        Route("/threads/{thread_id:streamsaver_thread}/events", api.thread_events),
        Route("/threads/{thread_id:streamsaver_thread}/audit", api.audit),
        Route("/threads/{thread_id:streamsaver_thread}/verify", api.verify),
        Route("/threads/{thread_id:streamsaver_thread}", api.thread),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


def serve(
    url: str | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    allow_hosts: Sequence[str] = (),
    open_without_token: bool = False,
) -> None:
    """Run the console with uvicorn until interrupted. ``url``: default ``$REDIS_URL``;
    ``token``: default ``$STREAMSAVER_TOKEN``; the AES key of an ``EncryptedSerializer``, if
    any, from ``$LANGGRAPH_AES_KEY``. It answers only requests whose Host is the address it
    listens on, a loopback name, or one of ``allow_hosts`` (DNS rebinding: a page elsewhere
    whose name now points here must not read the threads). Listening beyond the loopback
    interface needs a token, or ``open_without_token``."""
    import socket

    import uvicorn

    url = url or os.environ.get("REDIS_URL")
    if not url:
        raise InvalidInputError("no Redis to talk to: pass a URL or set $REDIS_URL")
    token = token or os.environ.get(TOKEN_ENV) or None
    loopback = host in _LOOPBACK
    if not loopback and token is None and not open_without_token:
        raise InvalidInputError(
            f"--host {host} lets other machines read every thread: set a token (--token or "
            f"$STREAMSAVER_TOKEN), or pass --open-without-token if this network is yours alone"
        )
    named = [*allow_hosts, *(_LOOPBACK if loopback else ())]
    wildcard = host in ("0.0.0.0", "::")
    allowed = ["*"] if wildcard and not allow_hosts else [host, *named]
    app: ASGIApp = create_app(
        url,
        token=token,
        prefix=prefix,
        key=os.environ.get("LANGGRAPH_AES_KEY") or None,
        allowed_hosts=allowed,
    )
    # both checked before the banner: a console that cannot listen, or whose Redis cannot be
    # reached, would otherwise print where to look and then fail, or answer every page with 500
    listening = socket.create_server((host, port), reuse_port=False)
    try:
        _reachable(url)
        print(f"streamsaver console on http://{host}:{port}/ (Ctrl+C stops it)", file=sys.stderr)
        # uvicorn at "warning" prints nothing on start: the banner above says where to look
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        server.run(sockets=[listening])
    finally:
        listening.close()


# the names a loopback console answers to (a browser sends the one typed, port stripped)
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _reachable(url: str) -> None:
    """PING ``url`` once, within the probe's connect timeout; a typed error if it cannot."""
    import redis

    from ..transport.clients import DEFAULT_CONNECT_TIMEOUT_S, client_options, probe_options
    from ..transport.opening import connecting

    options = client_options(DEFAULT_CONNECT_TIMEOUT_S, None, 0, sync=True)
    with connecting(url), redis.Redis.from_url(url, **probe_options(options, sync=True)) as c:
        c.ping()
