"""What the sync and asyncio shells of tailing share, free of I/O, as httpx's ``BaseClient``:
the state of a tail's I/O and the flow that does each step a reader core yields (``Shell``),
and where a core flow is (``Driving``). ``sync`` and ``aio`` write only the verbs and the loops
that send and receive; what their public tails tell of where they are is ``views``'.
"""

from __future__ import annotations

import os
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable
from functools import partial
from typing import Any, Protocol, TypeVar
from uuid import uuid4

from ..core.flow import Call, Eval
from ..events import Delivery, ThreadEvent
from ..transport.core import LoadScripts, Pause, Pipeline, Relearn, Scripts, Step, Verbs, rounds
from ..transport.exchange import resending
from ..transport.moves import Moves
from .blocking import NETWORK, Asking, Dedicated, Drop, Exchange, Read, blocking, bounded, own
from .groups import GroupReader
from .steps import SCRIPTS, Batch, Block, Deliver, ScriptCall, TailFlow, TailOp, script_source
from .steps import Pause as Idle

__all__ = [
    "C",
    "Driving",
    "Halted",
    "Saver",
    "Shell",
    "T",
    "default_consumer_name",
    "leaving",
    "raise_errors",
]


class Saver(Protocol):
    """What a tail takes from its saver (either shell): tailing imports no saver, the savers
    import tailing."""

    client: Any
    slot_move_timeout_s: float


class Core(Protocol):
    """A reader core (``ThreadTail``, ``FeedTail``, ``GroupReader``)."""

    def run(self) -> TailFlow: ...


# how a shell's client sends a ``Pipeline``, loads scripts and relearns a cluster's layout
Sending = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]
T = TypeVar("T", ThreadEvent, Delivery)
C = TypeVar("C", bound=Core)


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid4().hex[:8]}"


class Shell(ABC):
    """A tail's I/O: the saver's client, the tail's own connections, whether it was stopped,
    and ``verbs``, what does each step the flows here yield: ``sending`` (how the client sends
    a pipeline, loads scripts and relearns a cluster's layout: ``transport.sending``'s), then
    the shell's own methods. A shell writes only those, sync or asyncio, and drives
    ``flow(op)`` for each step of a reader core."""

    def __init__(self, saver: Saver, cluster: bool, sending: Sending) -> None:
        self.client: Any = saver.client
        self.cluster = cluster
        self.move_timeout_s = saver.slot_move_timeout_s
        self.scripts = Scripts({name: script_source(name) for name in SCRIPTS})
        self.dedicated: dict[str, Dedicated] = {}
        self.stopped = threading.Event()
        self.blocked: Dedicated | None = None
        pipeline, load, learn = (partial(verb, self.client) for verb in sending)
        self.verbs: Verbs = {
            Pipeline: pipeline,
            LoadScripts: load,
            Relearn: learn,
            Pause: lambda step: self.pause(step.seconds),
            Read: self.read,
            Exchange: self.exchange,
            Drop: lambda _: self.drop(),
            Asking: self.asking,
        }

    def flow(self, op: TailOp) -> Generator[Any, Any, Any]:
        """The steps that do ``op``: its reply is the flow's."""
        if isinstance(op, Block):
            moves = Moves(self.move_timeout_s, "a tail's blocking read")
            return blocking(op, moves, self.cluster, self.stopped.is_set)
        if isinstance(op, Idle):
            return _nap(op.ms / 1000)
        if op.own and not self.cluster:
            # down the tail's own connection: the iterating thread's only, idle between reads
            return own(Exchange(op.calls), self.stopped.is_set)
        return _batch(op, self.scripts, self.move_timeout_s, self.cluster)

    def own_connection(self, name: str, node: Any, cls: Any, kwargs: Any) -> Dedicated:
        """The tail's own connection to the node ``name`` ("" on a standalone server), made
        from ``cls`` and ``kwargs`` at first use; the shell connects it."""
        dedicated = self.dedicated.get(name)
        if dedicated is None:
            conn = cls(**bounded(kwargs))
            dedicated = self.dedicated[name] = Dedicated(conn, node)
        return dedicated

    @abstractmethod
    def pause(self, seconds: float) -> Any:
        """Wait ``seconds``; a stop ends the wait at once."""

    @abstractmethod
    def read(self, step: Read) -> Any:
        """Do a ``Read``; a stop ends it at once."""

    @abstractmethod
    def exchange(self, step: Exchange) -> Any:
        """Do an ``Exchange``."""

    @abstractmethod
    def drop(self) -> Any:
        """Close the tail's own connections."""

    @abstractmethod
    def asking(self, step: Asking) -> Any:
        """Do an ``Asking`` (``UNKNOWN`` if the client has not heard of that node)."""


def _nap(seconds: float) -> Generator[Pause, Any, None]:
    yield Pause(seconds)


def _batch(
    op: Batch, scripts: Scripts, move_timeout_s: float, cluster: bool
) -> Generator[Step, Any, list[Any]]:
    """A batch's rounds: replies as the server gave them, for the reader core to judge, and
    a slot that never settled reported as each stopped call's reply, not raised; sent again
    after a lost connection (``resending``), within the batch's one deadline for its slot
    moves and its lost connections alike."""
    moves = Moves(move_timeout_s, "a tail's pipelined read")

    def attempt() -> Generator[Step, Any, list[Any]]:
        ops = [
            Eval(c.name, c.keys, c.args) if isinstance(c, ScriptCall) else Call(c) for c in op.calls
        ]
        return rounds(ops, scripts, moves, translate_errors=False, give_up_as_value=True)

    return resending(attempt, moves, cluster, None, translate_errors=False)


def leaving(core: GroupReader) -> Generator[TailOp, Any, None]:
    """``core`` leaves its group (``GroupReader.leave``); ``core.kept_on`` says on how many
    feeds the member stays, -1 if the server is gone (the others reap it later)."""
    try:
        core.kept_on = yield from core.leave()
    except NETWORK:
        core.kept_on = -1


def raise_errors(replies: Iterable[Any]) -> None:
    """Raise the first server error among ``replies``."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


class Halted(Exception):
    """A step a ``stop()`` cut short: the iteration ends quietly, as after a stopped read."""


class Driving:
    """Where a reader core's flow is, for a shell's loop: ``step`` is the one to do next (None
    once the flow ended), ``due`` says whether to do it now, ``resume`` sends its reply. It
    references neither the public object nor its iterator, so dropping the object (leaving a
    ``for`` loop) finalizes the iterator at once, which closes the connection."""

    def __init__(self, flow: TailFlow, stopped: threading.Event) -> None:
        self.flow = flow
        self.stopped = stopped
        self.step: TailOp | Deliver | None = None
        self.closed = False

    def resume(self, reply: Any) -> None:
        try:
            self.step = self.flow.send(reply)
        except StopIteration:
            self.step = None

    def due(self) -> TailOp | Deliver | None:
        """The step to do now: None once the flow ended, or once stopped before a step that
        waits or hands over (the batches between them run on)."""
        if isinstance(self.step, Batch) or not self.stopped.is_set():
            return self.step
        return None

    def closing(self) -> bool:
        """Whether this call closes the flow (the first one): the shell then finishes and closes
        its connections."""
        if self.closed:
            return False
        self.closed = True
        self.flow.close()
        return True
