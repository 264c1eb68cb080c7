"""streamsaver: an event-sourced LangGraph checkpointer on Redis Streams.

The public names are imported when first used (PEP 562), not with the package: the savers pull
in LangGraph and langchain_core (~1 s), which ``streamsaver --version``, ``--help`` and the
errors alone do not need.
"""

import importlib as _importlib
import typing as _typing

from .core import errors
from .core.errors import *  # noqa: F403

if _typing.TYPE_CHECKING:
    from .checkpoint.aio import AsyncRedisStreamSaver
    from .checkpoint.base import DEFAULT_MAX_PAYLOAD_BYTES
    from .checkpoint.saver import RedisStreamSaver
    from .core.codec import SCHEMA_VERSION
    from .core.durability import DurabilityError, DurabilityMode
    from .core.keys import DEFAULT_PREFIX
    from .core.slicing import Replay
    from .store.stores import AsyncRedisStreamStore, RedisStreamStore

# name -> the module that defines it
_LAZY = {
    "AsyncRedisStreamSaver": ".checkpoint.aio",
    "DEFAULT_MAX_PAYLOAD_BYTES": ".checkpoint.base",
    "RedisStreamSaver": ".checkpoint.saver",
    "SCHEMA_VERSION": ".core.codec",
    "DurabilityError": ".core.durability",
    "DurabilityMode": ".core.durability",
    "DEFAULT_PREFIX": ".core.keys",
    "Replay": ".core.slicing",
    "AsyncRedisStreamStore": ".store.stores",
    "RedisStreamStore": ".store.stores",
}

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


# every name this module holds is public (__all__) or starts with "_": no helper leaks
def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamsaver' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
