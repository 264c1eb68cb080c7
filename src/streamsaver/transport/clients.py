"""The redis-py client options both savers (and ``streamsaver doctor``) connect with: timeouts
and retries, checked once. No I/O."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio.retry import Retry as AsyncRetryBase
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError
from redis.retry import Retry

from ..core.errors import InvalidInputError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_RETRIES",
    "DEFAULT_SOCKET_TIMEOUT_S",
    "AsyncRetry",
    "SyncRetry",
    "client_options",
    "probe_options",
]


DEFAULT_CONNECT_TIMEOUT_S = 5.0


DEFAULT_RETRIES = 3

# How long a reply may take by default. What the library sends holds the server a few ms (its
# long operations go in slices) and a tail's blocking reads bound themselves (tailing/blocking.py),
# so a reply that has not come in 10 s means a server that stopped answering (a freeze, a
# black-holed path, a failover), which must reach the caller as an error, not a wait without end.
DEFAULT_SOCKET_TIMEOUT_S = 10.0
# beyond a durability WAIT's own timeout, what its reply may take
_WAIT_MARGIN_S = 1.0
# past about 24.8 days a timeout overflows the clock of the client's sockets (OverflowError);
# past 100 retries of a timeout each, a call on a silent server is a wait without end in all
# but name
_MOST_TIMEOUT_S = 2_147_483
_MOST_RETRIES = 100


def _retryable(error: Exception, also: Callable[[Exception], bool] | None) -> bool:
    # a wrong password stays wrong: retrying it only turns a clear refusal into seconds of wait
    if isinstance(error, AuthenticationError):
        return False
    return also is None or also(error)


class SyncRetry(Retry):
    """redis-py's retry (exponential backoff) that never retries an authentication error."""

    def call_with_retry(
        self, do: Any, fail: Any, is_retryable: Any = None, with_failure_count: bool = False
    ) -> Any:
        return super().call_with_retry(
            do, fail, lambda e: _retryable(e, is_retryable), with_failure_count
        )


class AsyncRetry(AsyncRetryBase):
    """The asyncio twin of ``SyncRetry``."""

    async def call_with_retry(
        self, do: Any, fail: Any, is_retryable: Any = None, with_failure_count: bool = False
    ) -> Any:
        return await super().call_with_retry(
            do, fail, lambda e: _retryable(e, is_retryable), with_failure_count
        )


def client_options(
    connect_timeout: float | None,
    socket_timeout: float | None,
    retries: int,
    *,
    sync: bool,
    wait_ms: object = None,
) -> dict[str, Any]:
    """``from_url`` keywords of ``from_conn_string``, sync and async. A connect timeout by
    default: a TLS client on a plain port otherwise waits a long time for a handshake.
    ``wait_ms``: the longest a reply may legitimately take (a durability mode's WAIT); the
    socket timeout is raised past it, or the socket would give up on a WAIT still within its
    own timeout."""
    for name, value in (("connect_timeout", connect_timeout), ("socket_timeout", socket_timeout)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value <= _MOST_TIMEOUT_S
        ):
            raise InvalidInputError(
                f"{name}={value!r}: give seconds > 0 and <= {_MOST_TIMEOUT_S}, or None for no limit"
            )
    if (
        not isinstance(retries, int)
        or isinstance(retries, bool)
        or not 0 <= retries <= _MOST_RETRIES
    ):
        raise InvalidInputError(
            f"retries={retries!r}: give an int >= 0 and <= {_MOST_RETRIES} (each retry may wait "
            f"a socket timeout)"
        )
    if socket_timeout is not None and isinstance(wait_ms, int) and not isinstance(wait_ms, bool):
        socket_timeout = max(float(socket_timeout), wait_ms / 1000 + _WAIT_MARGIN_S)
    backoff = ExponentialBackoff(cap=1.0, base=0.05)
    retry = SyncRetry(backoff, retries) if sync else AsyncRetry(backoff, retries)
    return {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "retry": retry,
    }


def probe_options(options: dict[str, Any], *, sync: bool) -> dict[str, Any]:
    """The first connection's keywords: no retries, and the connect timeout as socket timeout,
    because a TLS handshake runs under the socket timeout. So a server that is down, refuses
    the password, or speaks plain text to a rediss:// URL fails within one connect timeout."""
    backoff = ExponentialBackoff(cap=1.0, base=0.05)
    retry = SyncRetry(backoff, 0) if sync else AsyncRetry(backoff, 0)
    return {**options, "socket_timeout": options["socket_connect_timeout"], "retry": retry}
