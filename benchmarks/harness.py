"""Opening every peer for a workload, running them in turn, and keeping going when one fails."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tqdm import tqdm  # type: ignore[import-untyped]

from .backends import Backend, open_backend
from .config import Config
from .peers import AsyncTarget, Peer, SyncTarget
from .stats import settle

__all__ = [
    "Context",
    "Failures",
    "Opened",
    "Turn",
    "open_async",
    "open_sync",
    "rotated",
    "turns",
]

T = TypeVar("T")
_REASON_CHARS = 200


@dataclass
class Context:
    cfg: Config
    peers: list[Peer]

    def bar(self, desc: str, total: int) -> tqdm[None]:
        return tqdm(total=total, desc=desc, file=sys.stderr, unit="step", mininterval=0.5)

    def taken(
        self, desc: str, opened: Sequence[Opened[T]], count: int, warmup: int, failures: Failures
    ) -> Iterator[Turn[T]]:
        """The :func:`turns` to take, under a progress bar: the machine settled before each
        thread's first step, and a peer that failed skipped from then on."""
        with self.bar(desc, self.cfg.rounds * count * len(opened)) as bar:
            for turn in turns(opened, self.cfg.rounds, count, warmup):
                if turn.index == 0:
                    settle()
                if failures.ok(turn.opened.name):
                    yield turn
                if turn.timed:
                    bar.update()


@dataclass
class Failures:
    """Peers that raised during a workload: reported with the error, skipped from then on."""

    reasons: dict[str, str] = field(default_factory=dict)

    def ok(self, name: str) -> bool:
        return name not in self.reasons

    def record(self, name: str, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:_REASON_CHARS]
        self.reasons.setdefault(name, f"failed: {text}")

    @contextmanager
    def guard(self, name: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # one peer's failure must not lose every other peer's figures
            self.record(name, exc)


@dataclass(frozen=True)
class Opened(Generic[T]):
    peer: Peer
    backend: Backend
    target: T

    @property
    def name(self) -> str:
        return self.peer.name


@dataclass(frozen=True)
class Turn(Generic[T]):
    """One peer's go at one step of one round; round -1 is the untimed warm-up."""

    round: int
    index: int
    opened: Opened[T]
    thread: str

    @property
    def timed(self) -> bool:
        return self.round >= 0


def turns(opened: Sequence[Opened[T]], rounds: int, count: int, warmup: int) -> Iterator[Turn[T]]:
    """Peers take turns step by step, each on its own fresh thread per round, and the peer that
    goes first rotates with the step and the round: a noisy moment on a shared machine then hits
    every peer alike instead of one peer's whole run."""
    for r in range(-1 if warmup else 0, rounds):
        ordered = rotated(opened, r)
        threads = {o.name: f"r{r}-{uuid.uuid4().hex}" for o in ordered}
        for index in range(warmup if r < 0 else count):
            for o in rotated(ordered, index):
                yield Turn(r, index, o, threads[o.name])


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """The same items starting at another place, so no peer always runs first or last."""
    if not items:
        return []
    k = shift % len(items)
    return [*items[k:], *items[:k]]


@contextmanager
def open_sync(
    peers: Sequence[Peer], cfg: Config, failures: Failures
) -> Iterator[list[Opened[SyncTarget]]]:
    with ExitStack() as stack:
        opened: list[Opened[SyncTarget]] = []
        for peer in peers:
            with failures.guard(peer.name):
                backend = stack.enter_context(open_backend(peer.backend, cfg.postgres_url))
                target = stack.enter_context(peer.open_sync(backend))
                opened.append(Opened(peer, backend, target))
        yield opened


@asynccontextmanager
async def open_async(
    peers: Sequence[Peer], cfg: Config, failures: Failures, concurrency: int = 1
) -> AsyncIterator[list[Opened[AsyncTarget]]]:
    async with AsyncExitStack() as stack:
        opened: list[Opened[AsyncTarget]] = []
        for peer in peers:
            if peer.open_async is None:
                continue
            with failures.guard(peer.name):
                backend = stack.enter_context(open_backend(peer.backend, cfg.postgres_url))
                target = await stack.enter_async_context(peer.open_async(backend, concurrency))
                opened.append(Opened(peer, backend, target))
        yield opened
