"""``streamsaver functions load``: what an admin runs once per server or cluster so that
tenants' least-privilege users (``streamsaver acl``) can run (docs/security.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .common import Json, Url, add, epilog, group, need_url, plural

__all__ = ["app"]

_EPILOG = """\
Run it as a user that may load functions: an admin, or one made with
`streamsaver acl --role loader`. A tenant's user may call the library's functions, never load
code of its own. Functions are persisted and replicated, so this is needed once per server
or cluster and per streamsaver version (each has its own library, so versions run side by
side during a rolling upgrade); and on a node added to a cluster without `redis-cli --cluster
add-node`, which copies them.

examples:
  streamsaver functions load redis://admin:pw@localhost:6379/0
  streamsaver functions load --json rediss://loader:pw@host:6380/0"""

app = group("functions", "streamsaver's Redis Functions library: what tenants' users call.")

Target = Annotated[str | None, typer.Argument(metavar="URL", help="the server (default: --url)")]


def load(target: Target = None, url: Url = None, as_json: Json = False) -> int:
    """Load this version's functions library on every primary that lacks it.

    Idempotent: nodes that hold it already are left alone. Other streamsaver versions'
    libraries are listed, for an admin to delete (FUNCTION DELETE <name>) once no client of
    that version runs.
    """
    from ..maintenance.functions import load_library

    done = load_library(need_url(target or url))
    if as_json:
        print(json.dumps(vars(done)))
        return 0
    print(
        f"{done.library}: loaded on {plural(len(done.loaded), 'node')}"
        f"{' (' + ', '.join(done.loaded) + ')' if done.loaded else ''}, "
        f"already on {len(done.present)}"
    )
    for node, names in done.stale.items():
        print(f"{node} also holds {', '.join(names)} (other streamsaver versions)")
    return 0


add(app, "load", load, epilog=epilog(_EPILOG))
