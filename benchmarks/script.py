"""What every ``python -m benchmarks.<name>`` script shares: its argument parser and its server."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from streamsaver.embedded import EmbeddedRedis

__all__ = ["parser", "server", "thread_steps"]


def parser(name: str, doc: str | None, *, url: bool = False) -> argparse.ArgumentParser:
    """The parser of ``python -m benchmarks.<name>``, whose ``--help`` is *doc* as written; with
    *url*, its ``--url`` option (``$REDIS_URL`` by default) for :func:`server`."""
    out = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if url:
        out.add_argument("--url", default=os.environ.get("REDIS_URL"), help="Redis URL")
    return out


def thread_steps(parser: argparse.ArgumentParser) -> None:
    """``--thread-steps``, for a script whose writers each move to a fresh thread that often."""
    parser.add_argument("--thread-steps", type=int, default=50, help="steps per thread (50)")


@contextmanager
def server(url: str | None) -> Iterator[str]:
    """*url*, or without one the url of a throwaway redis-server, stopped on exit."""
    if url:
        yield url
        return
    with EmbeddedRedis() as embedded:
        yield embedded.url
