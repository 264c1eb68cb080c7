"""What a request asks, checked: its query parameters, JSON body and where a stream resumes.
A bad value is an ``InvalidInputError``, which the app answers with a 400 naming it."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from ..core.errors import InvalidInputError
from . import _views

__all__ = ["json_body", "parse_int", "parse_metadata", "parse_status", "required", "resume_from"]


def parse_status(value: object) -> str | None:
    if value in (None, "", "all"):
        return None
    if value not in _views.FROM_PROTOCOL:
        raise InvalidInputError(
            f"status must be one of {', '.join(sorted(_views.FROM_PROTOCOL))}, got {value!r}"
        )
    return _views.FROM_PROTOCOL[str(value)]


def parse_int(value: object, name: str, default: int, high: int) -> int:
    if value in (None, ""):
        return default
    try:
        number = int(str(value))
    except ValueError:
        number = -1
    if not 0 <= number <= high or isinstance(value, bool):
        raise InvalidInputError(f"{name} must be an integer from 0 to {high}, got {value!r}")
    return number


def parse_metadata(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError(f"metadata must be an object, got {value!r}")
    return value


def required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if value is None:
        raise InvalidInputError(f"the {name} query parameter is required, e.g. ?{name}=t1")
    return value


def resume_from(request: Request, default: str) -> str:
    """Where a stream starts: the browser's ``Last-Event-ID`` on a reconnect wins over
    ``?after=`` (the page's own start), so a retry never starts over."""
    return request.headers.get("last-event-id") or request.query_params.get("after") or default


async def json_body(request: Request) -> dict[str, Any]:
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
