"""The exceptions streamsaver raises. Driver errors are translated here, at one boundary.

StreamSaverError
├── InvalidInputError (ValueError)      bad input; nothing was written
│   ├── InvalidConfigError              a RunnableConfig without what the call needs
│   └── PayloadTooLargeError            an event beyond ``max_payload_bytes``
├── UnsupportedServerError              the Redis server lacks a needed feature
├── SlotMovingError                     a cluster slot stayed in motion past slot_move_timeout_s
├── ServerUnavailableError              the server did not answer (also redis ConnectionError)
│   ├── ServerTimeoutError              ... within the socket timeout
│   ├── ConnectionFailedError           no connection: refused, unreachable, unknown host
│   ├── AuthenticationFailedError       a wrong user or password, or none given (never retried)
│   └── TLSError                        a TLS handshake failed: rediss:// on a plain port, or a
│                                       certificate the client does not trust
├── IntegrityError                     stored data is incomplete or inconsistent: a read or
│   │                                   write would otherwise hand back or build partial state
│   ├── CorruptIndexError               an index disagrees with the log: rebuild the thread
│   │   └── DataLostError               ... because the log lacks it: no rebuild helps
│   ├── MissingIndexError               the log is there, its indexes are gone: rebuild them
│   ├── MissingValueError               a checkpoint names a channel value nothing stores
│   ├── DanglingVersionError            a put names a channel value nothing stores (refused)
│   └── LogRewrittenError               a log was compacted or deleted under a paged read
└── InvalidUsageError (RuntimeError)    a call made where it cannot work
    └── SyncOnLoopError                 a sync call of an async saver or store on its event
                                        loop; an ``asyncio.InvalidStateError`` too
"""

from __future__ import annotations

import asyncio
import re
import shlex
from urllib.parse import unquote, urlsplit

import ormsgpack
from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "AuthenticationFailedError",
    "ConnectionFailedError",
    "CorruptIndexError",
    "DanglingVersionError",
    "DataLostError",
    "FencedError",
    "IntegrityError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidUsageError",
    "LogRewrittenError",
    "MissingIndexError",
    "MissingValueError",
    "NoPersistenceWarning",
    "PayloadTooLargeError",
    "ServerTimeoutError",
    "ServerUnavailableError",
    "SlotMovingError",
    "StreamSaverError",
    "SyncOnLoopError",
    "TLSError",
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


class ConnectionFailedError(ServerUnavailableError):
    """No connection could be made: refused, unreachable, or a host name that does not
    resolve. Nothing was sent."""


class AuthenticationFailedError(ServerUnavailableError):
    """The server refused the user or password (or wants one and none was given). Raised on the
    first refusal: retrying a wrong password only delays the error."""


class TLSError(ServerUnavailableError):
    """The TLS handshake failed: a ``rediss://`` URL against a plain port (which fails within
    the connect timeout), a plain ``redis://`` URL against a TLS port, or a certificate the
    client does not trust."""


_UNSURE = (
    "a write in flight may or may not have been applied; calling again is safe, because every "
    "streamsaver write is idempotent (the log may then show the event twice, reads will not)"
)


def _where(url: str | None) -> str:
    """``host:port`` of a URL, without its user or password, for a message to name."""
    if not url:
        return "Redis"
    try:
        parts = urlsplit(url)
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    except ValueError:
        return "Redis"


def _is_tls(exc: BaseException) -> bool:
    text = f"{exc} {exc.__cause__ or ''} {exc.__context__ or ''}".lower()
    return "ssl" in text or "tls" in text or "certificate" in text


def connect_error(
    exc: RedisConnectionError | RedisTimeoutError, url: str
) -> ServerUnavailableError:
    """The typed error for a failure while connecting to ``url`` (its password never shown)."""
    where = _where(url)
    secure = url.lower().startswith(("rediss://", "valkeys://"))
    if isinstance(exc, RedisAuthenticationError) or "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
        return AuthenticationFailedError(
            f"{where} refused the credentials ({exc}): give the right user and password in the "
            f"URL (redis://USER:PASSWORD@host:port) or the server's `requirepass`"
        )
    if secure and (isinstance(exc, RedisTimeoutError) or _is_tls(exc)):
        return TLSError(
            f"TLS handshake with {where} failed ({exc}): is that port serving TLS? Use "
            f"redis:// for a plain port; for a private CA pass ssl_ca_certs=... in the URL"
        )
    if _is_tls(exc):
        return TLSError(f"TLS with {where} failed ({exc}); check the certificates")
    if not secure and "closed by server" in str(exc).lower():
        return ConnectionFailedError(
            f"{where} closed the connection ({exc}): if it serves TLS, use a rediss:// URL"
        )
    if isinstance(exc, RedisTimeoutError):
        return ServerTimeoutError(
            f"{where} did not answer within the connect timeout ({exc}): check the host and "
            f"port, a firewall, or raise connect_timeout"
        )
    return ConnectionFailedError(
        f"cannot connect to {where} ({exc}): is the server running, and are the host and port "
        f"right?"
    )


def unavailable(exc: RedisConnectionError | RedisTimeoutError) -> ServerUnavailableError:
    """The typed error for a driver connection or timeout error."""
    if isinstance(exc, RedisAuthenticationError):
        return AuthenticationFailedError(
            f"Redis refused the credentials ({exc}): give the right user and password"
        )
    if _is_tls(exc):
        return TLSError(f"TLS with Redis failed ({exc}); check the URL scheme and certificates")
    if isinstance(exc, RedisTimeoutError):
        return ServerTimeoutError(f"Redis did not answer in time ({exc}); {_UNSURE}")
    return ServerUnavailableError(f"Redis is unavailable ({exc}); {_UNSURE}")


# What a connection closed under a command raises from redis-py's own code or asyncio's transport
# instead of a ConnectionError: redis-py's asyncio cluster client answers a ConnectionError by
# closing every node's connections (``RedisCluster.aclose`` in its retry), the ones other tasks are
# using included, and a write on a connection closed meanwhile finds its writer or transport set to
# None (redis-py issue 4287): "'NoneType' object has no attribute 'writelines'", "'NoneType' object
# is not callable". Neither is a RedisError, so no retry of redis-py's sees it.
_TORN_IN = (
    "redis/connection.py",
    "redis/asyncio/connection.py",
    "redis/_parsers/",
    "asyncio/streams.py",
    "asyncio/selector_events.py",
    "asyncio/sslproto.py",
)
LOST = (RedisConnectionError, RedisTimeoutError, RedisClusterException, AttributeError, TypeError)


def lost_connection(exc: BaseException) -> RedisConnectionError | RedisTimeoutError | None:
    """``exc`` as the connection error it is, if the command's connection was lost under it
    (one of ``LOST``); None for anything else, a bug of ours among them, to be raised as it
    is."""
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        return exc
    if isinstance(exc, RedisClusterException):
        # no node of the cluster answered while its layout was learned
        if "cannot be connected" not in str(exc):
            return None
        return _caused(RedisConnectionError(str(exc)), exc)
    if not isinstance(exc, (AttributeError, TypeError)) or "NoneType" not in str(exc):
        return None
    tb, where = exc.__traceback__, ""
    while tb is not None:
        where, tb = tb.tb_frame.f_code.co_filename.replace("\\", "/"), tb.tb_next
    if not any(part in where for part in _TORN_IN):
        return None
    closed = RedisConnectionError(f"the connection was closed under the command ({exc})")
    return _caused(closed, exc)


def _caused(error: RedisConnectionError, cause: BaseException) -> RedisConnectionError:
    error.__cause__ = cause
    return error


class ThreadDeletedError(StreamSaverError):
    """A put or put_writes continued the history of a thread that was deleted meanwhile."""


class FencedError(StreamSaverError):
    """With fencing on: the thread's latest checkpoint is no longer the parent this writer had."""


class IntegrityError(StreamSaverError):
    """What is stored is incomplete or inconsistent (a crash, an eviction, an expiry, a hand-edited
    log): streamsaver raises this rather than return or build partial state. The message names
    the thread, namespace, checkpoint and channel or event concerned, and what can repair it."""


class CorruptIndexError(IntegrityError):
    """A derived index disagrees with the log. When the log still holds what the index should
    say, rebuilding the thread's indexes repairs it; when it does not, see ``DataLostError``."""


class DataLostError(CorruptIndexError):
    """An index points into a log that no longer holds that event, or no longer exists (an
    eviction, a restore, a hand edit). A rebuild replays the log, which lacks the data, so it
    cannot bring it back: restore the thread from a backup, or delete it."""


class MissingIndexError(IntegrityError):
    """The thread's log is there but its indexes are gone (evicted or deleted by hand):
    ``streamsaver rebuild <id>`` (or ``saver.rebuild``) restores them from the log."""


class MissingValueError(IntegrityError):
    """A stored checkpoint's ``channel_versions`` names a (channel, version) whose value no
    event stores (lost to a restart from an older snapshot, an expiry or an eviction). Reads of
    that checkpoint raise this rather than return it without the channel."""


class DanglingVersionError(IntegrityError):
    """A ``put`` was refused, nothing written: its checkpoint's ``channel_versions`` names a
    (channel, version) that is neither in its ``new_versions`` nor stored in the thread and
    namespace, and the checkpoint it continues is not in the thread either (or it names
    none). The history the writer continues is gone; reload the thread or start afresh.
    Under a parent the thread holds, such a channel is one LangGraph renamed, keeping its
    version, and is stored with the checkpoint instead."""


class LogRewrittenError(IntegrityError):
    """A read of a log in pages (a copy, an export, history, a verification) found it rewritten
    between two pages by a compaction (``prune``, ``keep_last``, ``delete_for_runs``) or a
    deletion, and could not start again on the new log (it had handed over part of the old
    one, or the log kept being rewritten). What it read is one version of the log, never two;
    a copy wrote nothing. The message names the thread; read it again."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class NoPersistenceWarning(UserWarning):
    """``setup()`` found a server with neither AOF nor RDB snapshots: a restart loses every
    thread. Turn on ``appendonly yes`` (or ``save`` points), or silence this warning class if
    the data is meant to be throwaway."""


class InvalidUsageError(StreamSaverError, RuntimeError):
    """A method was called where it cannot work, e.g. a sync call on the saver's event loop."""


class SyncOnLoopError(InvalidUsageError, asyncio.InvalidStateError):
    """A sync method of ``AsyncRedisStreamSaver`` or ``AsyncRedisStreamStore`` was called on
    the event loop it runs on, where waiting for it would deadlock. Also an
    ``asyncio.InvalidStateError``: what the async peers (``AsyncPostgresStore``,
    ``AsyncSqliteSaver``, LangGraph's batched stores) raise in the same case."""


_CORRUPT = "STREAMSAVER_CORRUPT"
_NO_REBUILD = (
    "the data is lost and a rebuild cannot help (it replays the log, which lacks it): restore "
    "the thread from a backup, or delete it (saver.delete_thread) and start it afresh"
)


def _thread_of(log_key: str) -> str:
    # <prefix>:{<tag>}:log, the tag percent-encoded (core/keys.py); a prefix holds no '{'
    tag = log_key[log_key.find("{") + 1 : log_key.rfind("}")]
    return "" if tag == "%" else unquote(tag)


def _version(key: str) -> str | int | float:
    # core.fields.version_key's text back to the version LangGraph gave
    kind, text = key[:1], key[1:]
    return int(text) if kind == "i" else float(text) if kind == "f" else text


def _integrity(marker: str, payload: list[str]) -> Exception | None:
    """The typed error for an integrity reply: msgpack fields, hex-encoded, because thread ids,
    namespaces and channels may hold any character (lua/shared/common.lua's integrity())."""
    if marker in ("MISSING", "DANGLING"):
        log, ns, checkpoint_id, channel, version = payload
        thread, value = _thread_of(log), f"channel {channel!r} at version {_version(version)!r}"
        if marker == "MISSING":
            return MissingValueError(
                f"checkpoint {checkpoint_id!r} of thread {thread!r} (namespace {ns!r}) names "
                f"{value}, whose value is missing: no stored event holds it (lost to a restart "
                f"from an older snapshot, an expiry or an eviction); refusing to return the "
                f"checkpoint without it. Read an earlier checkpoint that is whole, or "
                f"{_NO_REBUILD}"
            )
        return DanglingVersionError(
            f"put of checkpoint {checkpoint_id!r} refused, nothing written: its "
            f"channel_versions names {value}, which is neither in new_versions nor stored in "
            f"thread {thread!r} (namespace {ns!r}). The history this writer continues is gone "
            f"(a restart from an older snapshot, an expiry, an eviction or a prune): reload "
            f"the thread with get_tuple and continue from what it returns, or start the "
            f"thread afresh"
        )
    if marker == "NOINDEX":
        (log,) = payload
        thread = _thread_of(log)
        return MissingIndexError(
            f"thread {thread!r} has its event log but its indexes are missing (evicted, or "
            f"deleted outside streamsaver); run `streamsaver rebuild "
            f"{shlex.quote(thread)}` (or saver.rebuild({thread!r})) to restore them from the log"
        )
    if marker == "LOST":
        log, what = payload
        return DataLostError(f"thread {_thread_of(log)!r}: {what}; {_NO_REBUILD}")
    return None


def translate(exc: ResponseError) -> Exception:
    """The error to raise for a server reply; unknown ones pass through unchanged."""
    message = str(exc)
    found = re.search(r"STREAMSAVER_(MISSING|DANGLING|NOINDEX|LOST) ([0-9a-f]*)", message)
    if found:
        try:
            payload = ormsgpack.unpackb(bytes.fromhex(found[2]))
            typed = _integrity(found[1], [str(p) for p in payload])
        except (ValueError, TypeError):
            # names that are not UTF-8 (a hand-written log): say what happened without them
            typed = IntegrityError(
                f"stored data is incomplete or missing ({found[1].lower()}: {found[2][:200]}); "
                f"run `streamsaver verify <id>` to see what"
            )
        if typed is not None:
            return typed
    for marker, error in (
        ("STREAMSAVER_DELETED", ThreadDeletedError),
        ("STREAMSAVER_FENCED", FencedError),
        # an event no streamsaver writer makes (lua/checkpoint/append.lua): refused before its XADD
        ("STREAMSAVER_MALFORMED", InvalidInputError),
    ):
        if marker in message:
            return error(message.split(marker, 1)[1].strip())
    if _CORRUPT in message:
        detail = message.split(_CORRUPT, 1)[1].strip()
        return CorruptIndexError(
            f"{detail}; run `streamsaver rebuild <id>` (or saver.rebuild(thread_id)) "
            f"to re-project the thread from its log"
        )
    return exc
