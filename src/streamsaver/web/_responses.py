"""What the console answers besides its pages' own templates: JSON that holds any value a
thread holds (NaN and ±Infinity as null, as ``--json`` and exports write them: LangGraph and
``InMemorySaver`` store such floats, and Starlette's own JSON refuses them with a 500), and
errors as a page for a browser, as JSON for the API."""

from __future__ import annotations

import html
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ..core.replies import json_line

__all__ = ["JSON", "error_response", "wants_html"]

# the routes a browser opens; the rest is the JSON API and its event streams
PAGES = frozenset({"/", "/thread", "/checkpoint", "/live", "/favicon.ico"})


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json_line(content, ensure_ascii=False).encode("utf-8")


def wants_html(request: Request) -> bool:
    """A page's route, or a client that asks for HTML before JSON (a browser on a mistyped
    address)."""
    path = request.url.path[len(request.scope.get("root_path", "")) :] or "/"
    accept = request.headers.get("accept", "")
    return path in PAGES or ("text/html" in accept and "application/json" not in accept)


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{status} · streamsaver console</title>
<link rel="stylesheet" href="{base}/static/console.css">
</head>
<body>
<header><strong>streamsaver</strong>
<nav><a href="{base}/">Threads</a> <a href="{base}/live">Live</a></nav></header>
<main><h1>{title}</h1><p class="error">{message}</p><p><a href="{base}/">All threads</a></p></main>
</body>
</html>
"""
_TITLES = {400: "Bad request", 401: "Token required", 404: "Not found", 502: "Redis error"}


def error_response(request: Request, status: int, message: str) -> Response:
    if wants_html(request):
        base = html.escape(request.scope.get("root_path", "").rstrip("/"))
        title = _TITLES.get(status, "Error")
        page = _PAGE.format(status=status, title=title, message=html.escape(message), base=base)
        return HTMLResponse(page, status_code=status)
    return JSON({"error": message}, status_code=status)
