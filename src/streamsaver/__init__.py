"""streamsaver: an event-sourced LangGraph checkpointer on Redis Streams."""

from .checkpoint.aio import AsyncRedisStreamSaver
from .checkpoint.base import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_PREFIX
from .checkpoint.saver import RedisStreamSaver
from .core.codec import SCHEMA_VERSION
from .core.durability import DurabilityError, DurabilityMode
from .core.errors import (
    AuthenticationFailedError,
    ConnectionFailedError,
    CorruptIndexError,
    DanglingVersionError,
    DataLostError,
    FencedError,
    IntegrityError,
    InvalidConfigError,
    InvalidInputError,
    InvalidUsageError,
    MissingIndexError,
    MissingValueError,
    NoPersistenceWarning,
    PayloadTooLargeError,
    ServerTimeoutError,
    ServerUnavailableError,
    SlotMovingError,
    StreamSaverError,
    ThreadDeletedError,
    TLSError,
    UnsupportedServerError,
)
from .core.slicing import Replay
from .store.stores import AsyncRedisStreamStore, RedisStreamStore

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_PREFIX",
    "SCHEMA_VERSION",
    "AsyncRedisStreamSaver",
    "AsyncRedisStreamStore",
    "AuthenticationFailedError",
    "ConnectionFailedError",
    "CorruptIndexError",
    "DanglingVersionError",
    "DataLostError",
    "DurabilityError",
    "DurabilityMode",
    "FencedError",
    "IntegrityError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidUsageError",
    "MissingIndexError",
    "MissingValueError",
    "NoPersistenceWarning",
    "PayloadTooLargeError",
    "RedisStreamSaver",
    "RedisStreamStore",
    "Replay",
    "ServerTimeoutError",
    "ServerUnavailableError",
    "SlotMovingError",
    "StreamSaverError",
    "TLSError",
    "ThreadDeletedError",
    "UnsupportedServerError",
]
