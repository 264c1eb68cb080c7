"""streamsaver: an event-sourced LangGraph checkpointer on Redis Streams."""

from .checkpoint.aio import AsyncRedisStreamSaver
from .checkpoint.base import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_PREFIX
from .checkpoint.saver import RedisStreamSaver
from .core import errors
from .core.codec import SCHEMA_VERSION
from .core.durability import DurabilityError, DurabilityMode
from .core.errors import *  # noqa: F403
from .core.slicing import Replay
from .store.stores import AsyncRedisStreamStore, RedisStreamStore

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_PREFIX",
    "SCHEMA_VERSION",
    "AsyncRedisStreamSaver",
    "AsyncRedisStreamStore",
    "DurabilityError",
    "DurabilityMode",
    "RedisStreamSaver",
    "RedisStreamStore",
    "Replay",
]
# the error names are listed once, where they are defined
__all__ += errors.__all__
