"""Reading what a call targets out of a ``RunnableConfig``, with errors that say how to fix it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

from .errors import InvalidConfigError, InvalidInputError

if TYPE_CHECKING:  # langchain_core costs ~0.3 s to import; the command line's --help needs none
    from langchain_core.runnables import RunnableConfig

__all__ = [
    "MAX_OPTION",
    "MAX_TTL_MS",
    "Target",
    "before_id",
    "bounded_int",
    "check_text",
    "id_list",
    "make_config",
    "target_of",
    "thread_id_str",
]

# The longest TTL taken (about 31,700 years): the scripts compute an expiry time, now plus
# the TTL in ms, in Lua's doubles, exact only below 2**53; past that, or 2**63, what reached
# PEXPIREAT (or a Store item's expiry) was garbage, often a time already past: the data
# was acknowledged and gone at once.
MAX_TTL_MS = 10**15
# The most any count or duration option takes (about 24.8 days in ms, 2 billion entries):
# past it a value reached the server as out of range (XREAD COUNT), overflowed the client's
# clock (a blocking read's timeout) or, taken, stood for "never" (a claim that never came)
MAX_OPTION = 2**31 - 1

_EXAMPLE = "{'configurable': {'thread_id': 'my-thread'}}"


class Target(NamedTuple):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None


def _configurable(config: object) -> Mapping[str, Any]:
    if not isinstance(config, Mapping):
        raise InvalidConfigError(
            f"config must be a mapping such as {_EXAMPLE}, got {type(config).__name__}: {config!r}"
        )
    conf = config.get("configurable")
    if not isinstance(conf, Mapping):
        raise InvalidConfigError(
            f"config has no 'configurable' mapping (got {conf!r}); pass a config such as {_EXAMPLE}"
        )
    return conf


def bounded_int(value: object, name: str, low: int, what: str = "") -> int:
    """``value`` if it is an int from ``low`` to MAX_OPTION, else an InvalidInputError naming
    it, the range and ``what`` it is for."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_OPTION:
        raise InvalidInputError(f"{name}={value!r}: give an int >= {low} and <= {MAX_OPTION}{what}")
    return value


def check_text(value: str, where: str, error: type[InvalidInputError] = InvalidInputError) -> str:
    """``value`` if it can be stored: Redis keys and fields are UTF-8, and a lone surrogate
    (what ``surrogateescape`` makes of undecodable bytes) has no UTF-8 form."""
    if value.isascii():
        return value
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise error(
            f"{where}={value!r} holds a lone surrogate ({value[exc.start]!r} at index "
            f"{exc.start}), which is not text and cannot be stored as UTF-8: give valid "
            f"Unicode, e.g. decode the bytes it came from with errors='replace'"
        ) from None
    return value


def _optional_str(conf: Mapping[str, Any], key: str, default: str | None) -> str | None:
    value = conf.get(key, default)
    if value is None:
        return value
    if isinstance(value, str):
        return check_text(value, f"config['configurable'][{key!r}]", InvalidConfigError)
    raise InvalidConfigError(
        f"config['configurable'][{key!r}] must be a string, got {type(value).__name__}: {value!r}"
    )


def id_list(values: object, name: str) -> list[str]:
    """``values``, a sequence of ids (of threads, of runs), as strings (``thread_id_str``
    each: UUIDs and ints have one obvious string form)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidInputError(f"{name} must be a list of strings, got {values!r}")
    return [thread_id_str(v, f"{name}[{i}]") for i, v in enumerate(values)]


def thread_id_str(thread_id: object, where: str) -> str:
    # LangGraph users pass UUIDs and ints as thread ids; both have one obvious string form.
    if isinstance(thread_id, str):
        return check_text(thread_id, where, InvalidConfigError)
    if isinstance(thread_id, (int, UUID)) and not isinstance(thread_id, bool):
        return str(thread_id)
    if thread_id is None:
        raise InvalidConfigError(
            f"{where} is missing: every call needs the thread to act on, e.g. config={_EXAMPLE}"
        )
    raise InvalidConfigError(
        f"{where} must be a str, int or UUID, got {type(thread_id).__name__}: {thread_id!r}"
    )


def target_of(config: object) -> Target:
    conf = _configurable(config)
    thread_id = thread_id_str(conf.get("thread_id"), "config['configurable']['thread_id']")
    ns = _optional_str(conf, "checkpoint_ns", "") or ""
    checkpoint_id = _optional_str(conf, "checkpoint_id", None) or None
    return Target(thread_id, ns, checkpoint_id)


def before_id(before: object) -> str | None:
    """The id bound of ``list(before=...)``. It is only an id: LangGraph's subgraph replay
    passes ``{'configurable': {'checkpoint_id': <a parent checkpoint's id>}}``, with no
    thread_id and an id from another namespace, so neither is looked at."""
    if before is None:
        return None
    conf = before.get("configurable") if isinstance(before, Mapping) else None
    checkpoint_id = conf.get("checkpoint_id") if isinstance(conf, Mapping) else None
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise InvalidConfigError(
            f"before names no checkpoint_id: {before!r}; pass None for no bound, or a config "
            f"such as {{'configurable': {{'checkpoint_id': '<id>'}}}} (list returns ids below it)"
        )
    return check_text(checkpoint_id, "before['configurable']['checkpoint_id']", InvalidConfigError)


def make_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }
