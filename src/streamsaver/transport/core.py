"""The transport core, free of I/O: what to send for a batch of operations and what the replies
mean. The sync and asyncio shells of the savers and of tailing only do the steps ``rounds``
yields (a pipeline, a script load, a pause), through ``transport/exchange.py``, and hand the replies
back (``run``/``arun``).

One round runs every pending operation in one pipeline; then, in this order:
- a read-only user's ``NOPERM`` on a read-only script: the same round again as ``EVALSHA_RO``,
  and every later call too (``Scripts.read_only``);
- ``FCALL`` refused (Redis 6.2, or a user whose ACL rules predate Functions): the same round
  again by ``EVALSHA``, and every later call too (``Scripts.functions``);
- missing scripts (a new server, or a restarted or failed-over one without the script cache;
  Functions are persisted and replicated): the library (or each script) loaded once, and the
  calls that missed them sent again in one more pipeline, never one round trip per call; a
  user who may not load the library gets a typed error naming the command that does;
- a slot in motion (``transport/moves.py``): those operations, and only those, again after a pause.

``Scripts`` is the one seam between an ``Eval`` and how the server runs it (``FCALL`` of the
library's function; ``EVALSHA`` on a server without Functions): encoding the command,
recognising a missing script or function, what loads it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from redis.exceptions import (
    AskError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ResponseError,
)

from ..core.durability import Durability
from ..core.errors import SlotMovingError, UnsupportedServerError, lost_connection, translate
from ..core.flow import Call, Done, Each, Eval, Op, Pause, advance
from ..lua import (
    FULL_TWINS,
    LIBRARY,
    LIBRARY_NAME,
    NO_WRITES,
    OOM_ANSWERED,
    READ_ONLY,
    function_name,
)
from .moves import Moves, is_demoted, is_moving

__all__ = [
    "Command",
    "Durably",
    "LoadScripts",
    "LoadThere",
    "Pause",
    "Pipeline",
    "Relearn",
    "Scripts",
    "Step",
    "Verbs",
    "arun",
    "durable_rounds",
    "key_of",
    "loaded",
    "only",
    "raise_translated",
    "rounds",
    "run",
    "what",
]

Command = tuple[Any, ...]
R = TypeVar("R")


class Scripts:
    """How an ``Eval`` reaches the server: ``FCALL`` of the library's function (``lua.LIBRARY``;
    ``FCALL_RO`` for one that never writes, what a read-only user may run), or, on a server
    without Functions (Redis 6.2) or for a user whose ACL rules predate them, ``EVALSHA`` by the
    SHA1 of its source (``EVALSHA_RO`` once the user has shown it may only read)."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)
        self.shas = {
            name: hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
            for name, source in self.sources.items()
        }
        self.names = {name: function_name(name) for name in self.sources}
        # FCALL until the server or the user refuses it (``refuses_functions``)
        self.functions = True
        # set at the first NOPERM of a read-only script by EVALSHA: the user may only read
        self.read_only = False

    def verb(self, op: Eval) -> str:
        """FCALL_RO for a function that never writes (a read-only user's keys allow nothing
        else), else FCALL. By the script cache: EVALSHA, or EVALSHA_RO for a script that
        only reads once its user may only read (a NOPERM on EVALSHA, which declares its keys
        read-write); not always EVALSHA_RO, since a cluster client asks the server for that
        command's keys (COMMAND GETKEYS), a round trip EVALSHA spares."""
        if self.functions:
            return "FCALL_RO" if op.script in NO_WRITES else "FCALL"
        return "EVALSHA_RO" if self.read_only and op.script in READ_ONLY else "EVALSHA"

    def command(self, op: Eval | Call, full: bool = False) -> Command:
        """The command that runs ``op``; ``full``: its function's twin for a server out of
        memory (``lua.FULL_TWINS``)."""
        if isinstance(op, Eval):
            if full:
                name = function_name(op.script, full=True)
                return ("FCALL", name, len(op.keys), *op.keys, *op.args)
            which = self.names if self.functions else self.shas
            return (self.verb(op), which[op.script], len(op.keys), *op.keys, *op.args)
        return op.args

    def full(self, op: Eval | Call, reply: object) -> bool:
        """Whether ``reply`` is a full server's refusal of a function whose twin may run there
        (``lua.FULL_TWINS``): it frees before it writes, when it can."""
        return (
            self.functions
            and isinstance(op, Eval)
            and op.script in FULL_TWINS
            and isinstance(reply, OutOfMemoryError)
        )

    def needs_read_only(self, op: Eval | Call, reply: object) -> bool:
        """Whether ``reply`` says ``op`` must run again as EVALSHA_RO."""
        return (
            isinstance(op, Eval)
            and not self.functions
            and not self.read_only
            and op.script in READ_ONLY
            and isinstance(reply, NoPermissionError)
        )

    def refuses_functions(self, op: Eval | Call, reply: object) -> bool:
        """Whether ``reply`` says ``op`` must run again by the script cache: a server that
        does not know FCALL, or a user whose ACL rules name EVALSHA and not FCALL (made by an
        earlier ``streamsaver acl``)."""
        return (
            isinstance(op, Eval)
            and self.functions
            and isinstance(reply, ResponseError)
            and _NO_FCALL.search(str(reply)) is not None
        )

    def missing(self, reply: object) -> bool:
        """Whether ``reply`` says the server does not hold the script or the function."""
        if self.functions:
            return isinstance(reply, ResponseError) and "function not found" in str(reply).lower()
        return isinstance(reply, NoScriptError)

    def answer(self, op: Eval | Call, reply: object) -> object:
        """``reply``, or what ``op``'s script answers on a server out of memory where the
        server refused its function before it started (``lua.OOM_ANSWERED``)."""
        if (
            isinstance(reply, OutOfMemoryError)
            and isinstance(op, Eval)
            and op.script in OOM_ANSWERED
        ):
            return [b"oom", str(reply).encode()]
        return reply

    def loads(self, names: Iterable[str]) -> list[Command]:
        """The commands that put the scripts ``names`` on a server that lacks them: the
        library, or each script in the script cache."""
        if self.functions:
            return [("FUNCTION", "LOAD", LIBRARY)]
        return [("SCRIPT", "LOAD", self.sources[name]) for name in dict.fromkeys(names)]


# Redis 6.2: "unknown command `FCALL`"; 7.0+: "unknown command 'FCALL'"; an ACL without it:
# "... no permissions to run the 'fcall' command"
_NO_FCALL = re.compile(r"(unknown command|permissions to run the) [`']fcall", re.IGNORECASE)


def loaded(exc: ResponseError, user_may_load: bool = True) -> None:
    """What a refused load means: nothing, where the library was there already (a server
    that loaded it meanwhile: the library's name names its contents); else the error, typed
    where the user may not load it (the runtime roles of ``acl.py``), naming who may."""
    if "already exists" in str(exc):
        return
    if isinstance(exc, NoPermissionError) and "function" in str(exc).lower():
        raise UnsupportedServerError(
            f"the server lacks streamsaver's functions (library {LIBRARY_NAME!r}) and this "
            f"user may not load them ({exc}): an admin loads them once, with `streamsaver "
            f"functions load URL` as a user that may (`streamsaver acl --role loader`); "
            f"docs/security.md"
        ) from exc
    raise exc


def key_of(op: Op) -> str | None:
    """The key an operation's slot is found by, for an error message to name."""
    if isinstance(op, Eval):
        return op.keys[0] if op.keys else None
    if isinstance(op, Call) and len(op.args) > 1 and isinstance(op.args[1], str):
        return op.args[1]
    return None


def what(op: Op) -> str:
    """An operation as an error message names it."""
    if isinstance(op, Eval):
        return f"script {op.script!r}"
    if isinstance(op, Call):
        return f"{op.args[0]!r}"
    if isinstance(op, Each):
        return f"a pipeline of {len(op.ops)} commands"
    return f"a SCAN for {op.pattern!r}"


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Send ``commands`` in one pipeline; the replies come back in order, errors as values.
    ``follow``: a cluster client may follow ``MOVED`` and ``ASK`` itself (redis-py sends each
    redirected command again on its own); without it, a redirection is the command's reply."""

    commands: Sequence[Command]
    follow: bool = False


@dataclass(frozen=True, slots=True)
class LoadScripts:
    """Send each of these loading commands (``Scripts.loads``) to every primary: what a
    server without the library or the scripts needs. A refusal is raised (``loaded`` judges
    it), but a node that says the library exists already does not stop the others."""

    commands: Sequence[Command]


@dataclass(frozen=True, slots=True)
class Relearn:
    """Refresh the cluster's slot map: from ``moved`` (a MOVED reply), or all of it (None)."""

    moved: MovedError | None


Step = Pipeline | LoadScripts | Relearn | Pause


def rounds(
    ops: Sequence[Eval | Call],
    scripts: Scripts,
    moves: Moves,
    *,
    translate_errors: bool = True,
    give_up_as_value: bool = False,
    first: list[Any] | None = None,
) -> Generator[Step, Any, list[Any]]:
    """Run ``ops``; their replies in order, a server error as a value in its place (translated
    to streamsaver's types with ``translate_errors``). A slot still in motion after the
    ``moves`` deadline raises ``SlotMovingError``, or with ``give_up_as_value`` is the reply
    of each operation it stopped (a reader reports it and reads on). ``first``: the replies of
    the first pipeline, where the shell sent it itself (its hot path)."""
    if first is None:
        first = yield Pipeline([scripts.command(one) for one in ops])
    if not any(isinstance(reply, Exception) for reply in first):
        return first  # everything ran: nothing below applies, and a graph's calls end here
    got: list[Any] | None = _unlost(first)
    replies: list[Any] = [None] * len(ops)
    todo = list(range(len(ops)))
    while todo:
        pending = [ops[i] for i in todo]
        if got is None:
            got = _unlost((yield Pipeline([scripts.command(one) for one in pending])))
        if any(scripts.refuses_functions(one, r) for one, r in zip(pending, got, strict=True)):
            scripts.functions = False
            got = _unlost((yield Pipeline([scripts.command(one) for one in pending])))
        if any(scripts.needs_read_only(one, r) for one, r in zip(pending, got, strict=True)):
            scripts.read_only = True
            got = _unlost((yield Pipeline([scripts.command(one) for one in pending])))
        # a full server refused a function that frees first when it can: its twin decides
        # by its first write, as a script run by EVALSHA did (lua.FULL_TWINS)
        full = [j for j, r in enumerate(got) if scripts.full(pending[j], r)]
        if full:
            again = _unlost((yield Pipeline([scripts.command(pending[j], True) for j in full])))
            for j, reply in zip(full, again, strict=True):
                got[j] = reply
        # After a failover or a finished move, a batch's commands for every slot that moved
        # come back MOVED: learn the layout once and send them again in one pipeline, rather
        # than the client resending each on its own (a 16384-name probe took tens of seconds
        # so). What an ASK, or a layout changing again, redirects the client then follows.
        redirected = [j for j, r in enumerate(got) if isinstance(r, AskError)]  # MOVED too
        if redirected:
            if any(isinstance(got[j], MovedError) for j in redirected):
                yield Relearn(None)
            again = _unlost(
                (yield Pipeline([scripts.command(pending[j]) for j in redirected], True))
            )
            for j, reply in zip(redirected, again, strict=True):
                got[j] = reply
        missing = [j for j, r in enumerate(got) if scripts.missing(r)]
        if missing:
            names = [pending[j].script for j in missing]  # type: ignore[union-attr]
            try:
                yield LoadScripts(scripts.loads(names))
            except ResponseError as exc:
                loaded(exc)
            again = _unlost((yield Pipeline([scripts.command(pending[j]) for j in missing])))
            for j, reply in zip(missing, again, strict=True):
                got[j] = reply
        for i, reply in zip(todo, got, strict=True):
            replies[i] = scripts.answer(ops[i], reply)
        # a slot in motion: those ops did not run; the others are not sent again
        moving = [i for i in todo if is_moving(replies[i])]
        if moving:
            try:
                yield Pause(moves.wait(replies[moving[0]], key_of(ops[moving[0]])))
            except SlotMovingError as exc:
                if not give_up_as_value:
                    raise
                for i in moving:
                    replies[i] = exc
                break
        todo, got = moving, None
    if not translate_errors:
        return replies
    return [translate(r) if isinstance(r, ResponseError) else r for r in replies]


def _unlost(replies: list[Any]) -> list[Any]:
    """``replies``, unless a command's connection was lost under it: a cluster client's
    pipeline hands that back as the command's reply, and it is raised here, for the exchange to
    send the operation again (transport.exchange.resending) as it does when the client raises it.
    Left
    as a value, it reached a caller as if the server had answered it (a tail's probe died)."""
    for reply in replies:
        if isinstance(reply, Exception) and lost_connection(reply) is not None:
            raise reply
    return replies


@dataclass(frozen=True, slots=True)
class Durably:
    """Send ``commands`` (a write, then its ``WAIT``/``WAITAOF``) in one pipeline on one
    connection, since a WAIT counts the writes of its own connection: on a cluster, to the node
    serving ``key``, or after an ``ASK`` to the node at ``asked`` (host, port), ``ASKING``
    first; if that node is unknown, learn the layout and send to ``key``'s node. Reply: the
    write's reply and the WAIT's, errors as values."""

    commands: tuple[Command, Command]
    key: str
    asked: tuple[str, int] | None


@dataclass(frozen=True, slots=True)
class LoadThere:
    """Send ``command`` (``Scripts.loads``) to the node a ``Durably`` of the same ``key`` and
    ``asked`` goes to."""

    command: Command
    key: str
    asked: tuple[str, int] | None


DurableStep = Durably | LoadThere | Relearn | Pause


def durable_rounds(
    op: Eval | Call,
    scripts: Scripts,
    durability: Durability,
    wait: Command,
    moves: Moves,
    cluster: bool,
) -> Generator[DurableStep, Any, Any]:
    """A write acknowledged as ``durability`` asks, in one round trip each time: the write and
    its ``wait`` on the connection ``Durably`` names. The connection is the shell's own, not
    the client's routing, so a redirection is followed here: the write did not run, its WAIT
    counted nothing, and both are sent again where the slot is."""
    key: Any = op.keys[0] if isinstance(op, Eval) else op.args[1]
    asked: tuple[str, int] | None = None
    loads, full = 0, False
    while True:
        reply, ack = yield Durably((scripts.command(op, full), wait), key, asked)
        reply = scripts.answer(op, reply)
        went, asked = asked, None
        if not full and scripts.full(op, reply):
            full, asked = True, went
        elif scripts.refuses_functions(op, reply):
            scripts.functions = False
            asked = went
        elif scripts.missing(reply) and isinstance(op, Eval) and loads < 2:
            loads += 1  # a new server, or one restarted or failed over without the scripts
            command = scripts.loads((op.script,))[0]
            try:
                yield LoadThere(command, key, went)
            except ResponseError as exc:
                loaded(exc)
        elif cluster and isinstance(reply, MovedError):
            yield Pause(moves.wait(reply, key))
            yield Relearn(reply)
        elif cluster and isinstance(reply, AskError):
            yield Pause(moves.wait(reply, key))
            asked = (reply.host, int(reply.port))
        elif cluster and not isinstance(reply, Exception) and is_demoted(ack):
            # the node turned replica while WAIT waited (a failover): the write may be on the
            # promoted replica, but nothing acknowledged it; sent again where the slot is now, it is
            # (writes are idempotent)
            yield Pause(moves.wait(ack, key))
            yield Relearn(None)
        else:
            if isinstance(reply, Exception):
                raise reply
            if isinstance(ack, Exception):
                raise ack
            durability.check_ack(ack)
            return reply


Verbs = Mapping[type, Callable[[Any], Any]]


def run(flow: Generator[Any, Any, R], verbs: Verbs) -> R:
    """Drive a core flow with a sync shell's verbs: each step done by ``verbs[type(step)]``
    and its result sent back; an error the verb raised is thrown back in, where the core
    decides (a lost connection is sent again, anything else raised as it is)."""
    step = advance(flow)
    while not isinstance(step, Done):
        try:
            reply, error = verbs[type(step)](step), None
        except Exception as exc:
            reply, error = None, exc
        step = advance(flow, reply, error)
    return step.value


async def arun(flow: Generator[Any, Any, R], verbs: Verbs) -> R:
    """``run`` with an asyncio shell's verbs (each returns an awaitable)."""
    step = advance(flow)
    while not isinstance(step, Done):
        try:
            reply, error = await verbs[type(step)](step), None
        except Exception as exc:
            reply, error = None, exc
        step = advance(flow, reply, error)
    return step.value


def raise_translated(exc: Exception) -> NoReturn:
    """Raise ``exc`` as streamsaver raises it: a server error in its typed form, caused by the
    reply; anything else (and a server error it has no type for) as it is."""
    typed = translate(exc) if isinstance(exc, ResponseError) else exc
    if typed is exc:
        raise exc
    raise typed from exc


def only(replies: list[Any]) -> Any:
    """The reply of a one-operation round, raised if it is an error."""
    reply = replies[0]
    if isinstance(reply, Exception):
        raise reply
    return reply
