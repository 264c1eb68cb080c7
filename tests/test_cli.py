"""The command lines (streamsaver, python -m projector) and docker-compose.yml, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
import typer
import yaml
from examples import agent

from streamsaver import RedisStreamSaver, cli
from streamsaver.core.keys import thread_keys
from streamsaver.events import ThreadInfo
from tests.test_tail import checkpoint_at, under

ROOT = Path(__file__).resolve().parent.parent


def _cli(
    *args: str, module: str = "streamsaver", url: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    if url:
        env["REDIS_URL"] = url
    command = [sys.executable, "-m", module, *args] if module else [sys.executable, "-m", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)


def _fill(saver: RedisStreamSaver, threads: list[str]) -> None:
    for t in threads:
        parent: Any = None
        for step in range(3):
            checkpoint = checkpoint_at(step, f"0000{step}")
            parent = saver.put(under(t, parent), checkpoint, {"step": step}, {"n": step + 1})
            saver.put_writes(parent, [("n", step)], "task")
        # activity is kept in ms and ties list by thread id: keep each thread's last ms its own
        time.sleep(0.002)


def test_verify_finds_a_damaged_index_and_rebuild_repairs_it(
    sync_saver: RedisStreamSaver, redis_client: redis.Redis, redis_url: str
) -> None:
    _fill(sync_saver, ["a", "b{c}"])
    prefix = sync_saver.prefix
    ok = _cli("verify", "--all", "--prefix", prefix, module="projector", url=redis_url)
    assert ok.returncode == 0, ok.stderr
    assert "verified 2 threads (12 events): 0 with differences" in ok.stdout

    reads = list(sync_saver.list({"configurable": {"thread_id": "b{c}"}}))
    keys = thread_keys(prefix, "b{c}")
    redis_client.hdel(keys.ptr, next(iter(redis_client.hkeys(keys.ptr))))
    redis_client.zadd(keys.ix, {"c2:xx00009": 0})
    bad = _cli("verify", "--thread", "b{c}", "--prefix", prefix, module="projector", url=redis_url)
    assert bad.returncode == 1
    assert "'b{c}': ix extra c2:xx00009" in bad.stdout
    assert "'b{c}': ptr missing" in bad.stdout

    fixed = _cli("rebuild", "--thread", "b{c}", "--prefix", prefix, url=redis_url)
    assert fixed.returncode == 0, fixed.stderr
    assert "rebuilt 1 thread: 6 events applied, 0 skipped" in fixed.stdout
    assert list(sync_saver.list({"configurable": {"thread_id": "b{c}"}})) == reads
    assert _cli("verify", "--all", "--prefix", prefix, url=redis_url).returncode == 0


def test_threads_lists_every_thread_of_the_prefix_only(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    _fill(sync_saver, ["x", "y:z", ""])
    out = _cli("threads", "--url", redis_url, "--prefix", sync_saver.prefix, "--json")
    assert out.returncode == 0, out.stderr
    infos = [ThreadInfo.model_validate_json(line) for line in out.stdout.splitlines()]
    # newest activity first, each with its latest checkpoint (no projector runs: a scan)
    assert [i.thread_id for i in infos] == ["", "y:z", "x"]
    assert infos == sync_saver.threads()
    assert {(i.checkpoint_id, i.step, i.interrupted) for i in infos} == {("00002", 2, False)}
    text = _cli("threads", "--url", redis_url, "--prefix", sync_saver.prefix, "--limit", "2")
    lines = text.stdout.splitlines()
    assert len(lines) == 2 and lines[0].endswith(" step=2 - '' 00002")


def test_commands_without_a_server_say_how_to_give_one() -> None:
    out = _cli("threads")
    assert out.returncode == 2
    assert "pass --url or set $REDIS_URL" in out.stderr


def test_demo_runs_a_graph_and_prints_its_history(redis_url: str, prefix: str) -> None:
    out = _cli("demo", "--url", redis_url, "--prefix", prefix)
    assert out.returncode == 0, out.stderr
    assert "history, newest first:" in out.stdout
    assert "14 events, 8 checkpoints and 6 writes" in out.stdout
    assert "final messages: ['user: question 1', 'agent: answer 1'" in out.stdout


def test_help_describes_every_command() -> None:
    out = _cli("--help")
    assert out.returncode == 0
    for command in ("demo", "threads", "rebuild", "verify"):
        assert command in out.stdout


def test_docker_compose_agrees_with_the_code() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) >= {"redis", "projector", "redis-stack"}

    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert "redis-data" in compose["volumes"]

    for name in ("projector", "agent"):
        service = services[name]
        # the URL comes from the environment, and must name the compose redis service
        assert service["environment"]["REDIS_URL"].startswith("redis://redis:")
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["build"] == "."
    command = services["projector"]["command"]
    assert command[:4] == ["streamsaver", "projector", "run", "--prefix"]
    run = typer.main.get_command(cli.app).commands["projector"].commands["run"]  # type: ignore[attr-defined]
    args = run.make_context("run", command[3:]).params
    assert args["url"] is None and args["prefix"] == "streamsaver"
    command = services["agent"]["command"]
    assert command[:3] == ["python", "-m", "examples.agent"]
    agent_args = agent.build_parser().parse_args(command[3:])
    assert agent_args.url is None and agent_args.prefix == args["prefix"]
    assert services["redis-stack"]["profiles"] == ["peers"]
    assert services["redis-stack"]["image"].startswith("redis/redis-stack-server:")
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY src ./src" in dockerfile and "COPY projector" not in dockerfile
    assert "COPY examples ./examples" in dockerfile and "langgraph" in dockerfile


def test_the_example_agent_writes_threads_a_projector_reads(
    sync_saver: RedisStreamSaver, redis_url: str
) -> None:
    out = _cli(
        "examples.agent", "--prefix", sync_saver.prefix, "--threads", "3", "--rounds", "4",
        "--interval", "0", module="", url=redis_url,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "round 4: 3 threads took a turn"
    infos = sync_saver.threads()
    assert sorted(i.thread_id for i in infos) == ["agent-0", "agent-1", "agent-2"]
    # turn 3 stopped at interrupt(); round 4 approved it: no thread waits now
    assert not any(i.interrupted for i in infos)
    history = list(sync_saver.list({"configurable": {"thread_id": "agent-1"}}, limit=1))
    assert history[0].checkpoint["channel_values"]["messages"][-1] == "human: approved"
