"""``streamsaver doctor``: the checks (``maintenance.doctor``) as a table or as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from ..maintenance.doctor import diagnose
from .common import PROBLEM, UNAVAILABLE
from .render import checks_table, console

__all__ = ["run"]


def run(url: str, prefix: str, as_json: bool) -> int:

    checks = diagnose(url, prefix)
    if as_json:
        print(json.dumps([asdict(c) for c in checks]))
    else:
        console().print(checks_table(checks))
    failed = [c for c in checks if c.status == "fail"]
    if any(c.name in ("reachable", "auth", "tls") for c in failed):
        return UNAVAILABLE
    return PROBLEM if failed else 0
