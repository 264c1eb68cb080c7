"""Cleaning up after a test: every key under a prefix deleted."""

from __future__ import annotations

import redis


def _escape_glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def drop_keys(client: redis.Redis, prefix: str) -> None:
    """Delete every key whose name starts with *prefix*."""
    batch: list[bytes] = []
    for key in client.scan_iter(match=_escape_glob(prefix) + "*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)
