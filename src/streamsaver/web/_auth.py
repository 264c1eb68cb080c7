"""The console's one gate: with a token set, every request (pages, API, event streams, static
files) must carry it, as ``Authorization: Bearer <token>`` or, for a browser, the cookie that a
first visit with ``?token=<token>`` sets."""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "streamsaver_token"


class TokenGate:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def _matches(self, offered: str | None) -> bool:
        # compare_digest: the time taken must not tell how much of a guess was right
        return offered is not None and hmac.compare_digest(offered.encode(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        scheme, _, bearer = headers.get("authorization", "").partition(" ")
        cookie = SimpleCookie(headers.get("cookie", ""))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        in_query = query.get("token", [None])[0]
        if self._matches(in_query):
            await self.app(scope, receive, _setting_cookie(send, in_query or "", scope))
        elif (scheme.lower() == "bearer" and self._matches(bearer)) or (
            COOKIE in cookie and self._matches(cookie[COOKIE].value)
        ):
            await self.app(scope, receive, send)
        else:
            await _unauthorized(send)


def _setting_cookie(send: Send, token: str, scope: Scope) -> Send:
    path = scope.get("root_path", "") or "/"

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            value = f"{COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict"
            message = {**message, "headers": [*message["headers"], (b"set-cookie", value.encode())]}
        await send(message)

    return wrapped


async def _unauthorized(send: Send) -> None:
    body = b'{"error": "a bearer token is required: Authorization: Bearer <token>"}'
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="streamsaver"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
