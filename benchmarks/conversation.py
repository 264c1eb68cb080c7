"""The agent step, built the way LangGraph's loop builds checkpoints.

One step reads the latest checkpoint, records the node's write of one 200-byte message to
``messages`` against it, and puts a child checkpoint whose ``messages`` value is the whole list
with the message appended: the growing conversation every chat agent produces. New versions come
from the saver's own ``get_next_version`` and ``new_versions`` names only the changed channel, so
a saver that stores deltas can; the parent config chains each checkpoint to the previous one.
"""

from __future__ import annotations

import functools
import random
import string
import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    copy_checkpoint,
    create_checkpoint,
    empty_checkpoint,
)

__all__ = [
    "MESSAGE_BYTES",
    "Next",
    "aagent_step",
    "agent_step",
    "astart_thread",
    "make_message",
    "next_checkpoint",
    "start_thread",
    "text",
    "thread_config",
]

MESSAGE_BYTES = 200
_LETTERS = string.ascii_lowercase
CHANNEL = "messages"
NODE = "agent"

Saver = BaseCheckpointSaver[Any]


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


@functools.cache
def text(seed: Hashable, size: int = MESSAGE_BYTES) -> str:
    """Deterministic pseudo-random words: repeated filler would let a compressing store (TOAST
    in PostgreSQL) look far smaller than it is with real messages. Cached, because making one
    costs more than some savers' whole call; recording the raw floor's trace fills the cache
    before anything is timed."""
    rng = random.Random(str(seed))
    words: list[str] = []
    length = 0
    while length < size:
        word = "".join(rng.choices(_LETTERS, k=rng.randint(2, 9)))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def make_message(step: int) -> BaseMessage:
    kind = HumanMessage if step % 2 == 0 else AIMessage
    return kind(content=text(step), id=f"m{step}")


@dataclass(frozen=True)
class Next:
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions


def next_checkpoint(saver: Saver, previous: Checkpoint, message: Any, step: int) -> Next:
    base = copy_checkpoint(previous)
    seen = base["channel_versions"].get(CHANNEL)
    version = saver.get_next_version(seen, None)
    base["channel_values"][CHANNEL] = [*base["channel_values"].get(CHANNEL, []), message]
    base["channel_versions"][CHANNEL] = version
    if seen is not None:
        base["versions_seen"][NODE] = {CHANNEL: seen}
    checkpoint = create_checkpoint(base, None, step)
    metadata: CheckpointMetadata = {"source": "loop", "step": step, "parents": {}}
    return Next(checkpoint, metadata, {CHANNEL: version})


def _input_checkpoint() -> tuple[Checkpoint, CheckpointMetadata]:
    metadata: CheckpointMetadata = {"source": "input", "step": -1, "parents": {}}
    return empty_checkpoint(), metadata


def start_thread(saver: Saver, thread_id: str) -> None:
    """The input checkpoint LangGraph writes before the first step, so put_writes has a parent."""
    checkpoint, metadata = _input_checkpoint()
    saver.put(thread_config(thread_id), checkpoint, metadata, {})


async def astart_thread(saver: Saver, thread_id: str) -> None:
    checkpoint, metadata = _input_checkpoint()
    await saver.aput(thread_config(thread_id), checkpoint, metadata, {})


def _missing(thread_id: str) -> RuntimeError:
    return RuntimeError(f"thread {thread_id!r} has no checkpoint; start_thread() it first")


def agent_step(saver: Saver, thread_id: str, step: int) -> None:
    latest = saver.get_tuple(thread_config(thread_id))
    if latest is None:
        raise _missing(thread_id)
    message = make_message(step)
    saver.put_writes(latest.config, [(CHANNEL, message)], str(uuid.uuid4()))
    nxt = next_checkpoint(saver, latest.checkpoint, message, step)
    saver.put(latest.config, nxt.checkpoint, nxt.metadata, nxt.new_versions)


async def aagent_step(saver: Saver, thread_id: str, step: int) -> None:
    latest = await saver.aget_tuple(thread_config(thread_id))
    if latest is None:
        raise _missing(thread_id)
    message = make_message(step)
    await saver.aput_writes(latest.config, [(CHANNEL, message)], str(uuid.uuid4()))
    nxt = next_checkpoint(saver, latest.checkpoint, message, step)
    await saver.aput(latest.config, nxt.checkpoint, nxt.metadata, nxt.new_versions)
