"""``streamsaver dev start|url|stop``: the development server the demo leaves running
(``devserver``), for a first look without a Redis of one's own."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .common import add, epilog, group

__all__ = ["app"]

_EPILOG = """\
examples:
  streamsaver dev start                 start it (or say where it runs)
  export REDIS_URL=$(streamsaver dev url)
  streamsaver dev stop                  stop it (its data stays)"""

app = group("dev", "A local development server that keeps running between commands.")


def start(
    port: Annotated[
        int | None, typer.Option(metavar="PORT", help="where to listen (default: 6390, else free)")
    ] = None,
) -> int:
    """Start the development server, or say where it runs already.

    It keeps running after this command, with its data in $STREAMSAVER_DEV_DIR (default
    ~/.local/state/streamsaver/dev), until `streamsaver dev stop`.
    """
    from ..devserver import start_dev

    url, started = start_dev(port)
    print(f"{'started' if started else 'already running'}: export REDIS_URL={url}")
    return 0


def url() -> int:
    """Print the development server's URL; exit 4 if it is not running."""
    from ..devserver import dev_url

    found = dev_url()
    if found is None:
        print(
            "streamsaver: the development server is not running: `streamsaver dev start`",
            file=sys.stderr,
        )
        return 4
    print(found)
    return 0


def stop() -> int:
    """Stop the development server; its data stays for the next start."""
    from ..devserver import stop_dev

    print("stopped" if stop_dev() else "the development server was not running")
    return 0


add(app, "start", start, epilog=epilog(_EPILOG))
add(app, "url", url)
add(app, "stop", stop)
