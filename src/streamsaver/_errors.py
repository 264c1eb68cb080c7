"""The exceptions streamsaver raises. Driver errors are translated here, at one boundary.

StreamSaverError
├── InvalidInputError (ValueError)      bad input; nothing was written
│   ├── InvalidConfigError              a RunnableConfig without what the call needs
│   └── PayloadTooLargeError            an event beyond ``max_payload_bytes``
├── UnsupportedServerError              the Redis server lacks a needed feature
├── SlotMovingError                     a cluster slot stayed in motion past slot_move_timeout_s
├── IntegrityError                     stored data is incomplete or inconsistent: a read or
│   │                                   write would otherwise hand back or build partial state
│   └── CorruptIndexError               an index points at an event the log no longer has
└── InvalidUsageError (RuntimeError)    a call made where it cannot work (e.g. sync on the loop)
"""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "CorruptIndexError",
    "FencedError",
    "IntegrityError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidUsageError",
    "PayloadTooLargeError",
    "ServerTimeoutError",
    "ServerUnavailableError",
    "SlotMovingError",
    "StreamSaverError",
    "ThreadDeletedError",
    "UnsupportedServerError",
]


class StreamSaverError(Exception):
    """Base class of every error streamsaver raises on its own account."""


class InvalidInputError(StreamSaverError, ValueError):
    """An argument cannot be stored or used as given; nothing was written."""


class InvalidConfigError(InvalidInputError):
    """A ``RunnableConfig`` lacks what the call needs, or holds a value of the wrong type."""


class PayloadTooLargeError(InvalidInputError):
    """One event would exceed the saver's ``max_payload_bytes``."""

    def __init__(self, size: int, limit: int, what: str) -> None:
        super().__init__(
            f"{what} encodes to {size} bytes, above max_payload_bytes={limit}; store large "
            f"blobs elsewhere and keep a reference in the state, or raise max_payload_bytes "
            f"when constructing the saver (Redis itself caps a value at 512 MB)"
        )
        self.size = size
        self.limit = limit


class UnsupportedServerError(StreamSaverError):
    """The Redis server is too old, or lacks a feature the chosen options need."""


class SlotMovingError(StreamSaverError):
    """A command kept meeting its cluster slot mid-migration (``TRYAGAIN``, redirections) for
    longer than ``slot_move_timeout_s``; it did not run. The message names the slot."""


class ServerUnavailableError(StreamSaverError, RedisConnectionError):
    """The server did not answer, after the client's own retries."""


class ServerTimeoutError(ServerUnavailableError, RedisTimeoutError):
    """The server did not answer within the client's socket timeout."""


_UNSURE = (
    "a write in flight may or may not have been applied; calling again is safe, because every "
    "streamsaver write is idempotent (the log may then show the event twice, reads will not)"
)


def unavailable(exc: RedisConnectionError | RedisTimeoutError) -> ServerUnavailableError:
    """The typed error for a driver connection or timeout error."""
    if isinstance(exc, RedisTimeoutError):
        return ServerTimeoutError(f"Redis did not answer in time ({exc}); {_UNSURE}")
    return ServerUnavailableError(f"Redis is unavailable ({exc}); {_UNSURE}")


class ThreadDeletedError(StreamSaverError):
    """A put or put_writes continued the history of a thread that was deleted meanwhile."""


class FencedError(StreamSaverError):
    """With fencing on: the thread's latest checkpoint is no longer the parent this writer had."""


class IntegrityError(StreamSaverError):
    """What is stored is incomplete or inconsistent (a crash, an eviction, an expiry, a hand-edited
    log): streamsaver raises this rather than return or build partial state. The message names
    the thread, namespace, checkpoint and channel or event concerned, and what can repair it."""


class CorruptIndexError(IntegrityError):
    """A derived index points at a log entry that is gone. Rebuild the thread's indexes."""


class InvalidUsageError(StreamSaverError, RuntimeError):
    """A method was called where it cannot work, e.g. a sync call on the saver's event loop."""


_CORRUPT = "STREAMSAVER_CORRUPT"


def translate(exc: ResponseError) -> Exception:
    """The error to raise for a server reply; unknown ones pass through unchanged."""
    message = str(exc)
    for marker, error in (
        ("STREAMSAVER_DELETED", ThreadDeletedError),
        ("STREAMSAVER_FENCED", FencedError),
    ):
        if marker in message:
            return error(message.split(marker, 1)[1].strip())
    if _CORRUPT in message:
        detail = message.split(_CORRUPT, 1)[1].strip()
        return CorruptIndexError(
            f"{detail}; run `streamsaver rebuild --thread <id>` (or saver.rebuild(thread_id)) "
            f"to re-project the thread from its log"
        )
    return exc
