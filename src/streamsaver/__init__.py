"""streamsaver: an event-sourced LangGraph checkpointer on Redis Streams."""

from ._base import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_PREFIX
from ._codec import SCHEMA_VERSION
from ._durability import DurabilityError, DurabilityMode
from ._errors import (
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
from ._ops import Replay
from .aio import AsyncRedisStreamSaver
from .saver import RedisStreamSaver
from .store import AsyncRedisStreamStore, RedisStreamStore

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
