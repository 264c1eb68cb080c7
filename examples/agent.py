"""A small agent loop that writes through streamsaver: the ``agent`` service of
docker-compose.yml, and a quick way to give a projector something to do.

Each round, every thread takes one turn of a two-node LangGraph graph; every third turn the
graph stops at an ``interrupt()`` for approval, which the next round gives (``Command(resume=)``).
So ``streamsaver threads`` shows threads moving, some of them waiting on an interrupt.

    python -m examples.agent --url redis://localhost:6379/0 --threads 5 --interval 2
"""

from __future__ import annotations

import argparse
import operator
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Annotated, Any

from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from streamsaver import DEFAULT_PREFIX, RedisStreamSaver


class Chat(TypedDict, total=False):
    messages: Annotated[list[str], operator.add]
    turns: int


def build(saver: RedisStreamSaver) -> Any:
    def agent(state: Chat) -> dict[str, Any]:
        turn = state.get("turns", 0) + 1
        return {"messages": [f"agent: answer {turn}"], "turns": turn}

    def review(state: Chat) -> dict[str, Any]:
        if state.get("turns", 0) % 3:
            return {}
        verdict = interrupt(f"approve answer {state['turns']}?")
        return {"messages": [f"human: {verdict}"]}

    builder = StateGraph(Chat).add_sequence([agent, review])
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=saver)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m examples.agent", description=__doc__)
    parser.add_argument("--url", default=os.environ.get("REDIS_URL"), help="default: $REDIS_URL")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help="the saver's key prefix")
    parser.add_argument("--threads", type=int, default=5, help="conversations to keep going")
    parser.add_argument("--rounds", type=int, default=0, help="stop after N rounds (0: never)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between rounds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.url:
        print("agent: pass --url or set $REDIS_URL", file=sys.stderr)
        return 2
    stopped = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with RedisStreamSaver.from_conn_string(args.url, prefix=args.prefix) as saver:
        graph = build(saver)
        done = 0
        while not stopped.is_set() and (args.rounds == 0 or done < args.rounds):
            for n in range(args.threads):
                config: Any = {"configurable": {"thread_id": f"agent-{n}"}}
                if graph.get_state(config).interrupts:
                    graph.invoke(Command(resume="approved"), config)
                else:
                    graph.invoke({"messages": [f"user: question {done + 1}"]}, config)
            done += 1
            print(f"round {done}: {args.threads} threads took a turn", flush=True)
            stopped.wait(args.interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
