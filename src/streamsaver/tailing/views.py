"""What the public tails, sync and asyncio alike, tell of where they are: read from their
reader core, written once for both shells."""

from __future__ import annotations

from ..events import FeedCursor
from .feeds import FeedTail
from .groups import GroupReader
from .thread import ThreadTail, _Reader

__all__ = ["FeedTailView", "GroupView", "ThreadTailView"]


class _View:
    _core: _Reader

    @property
    def skipped(self) -> int:
        """Events reported (``on_skip``) and skipped."""
        return self._core.skipped


class ThreadTailView(_View):
    """What ``Tail`` and ``AsyncTail`` tell of where they are."""

    _core: ThreadTail

    @property
    def position(self) -> str | None:
        """The id of the last event handed over or skipped (None before any, after ``"$"``):
        ``after=position`` resumes exactly after it."""
        return self._core.position


class FeedTailView(_View):
    """What ``TailAll`` and ``AsyncTailAll`` tell of where they are."""

    _core: FeedTail

    @property
    def cursor(self) -> FeedCursor:
        """Where it is, feed by feed (after the last event handed over): ``after=cursor``
        resumes there."""
        return self._core.cursor


class GroupView(_View):
    """What ``ConsumerGroup`` and ``AsyncConsumerGroup`` tell of their member."""

    _core: GroupReader

    @property
    def kept_on(self) -> int:
        """After close: on how many feeds this member stays, with pending entries; -1 when the
        server was gone (the other members reap it later)."""
        return self._core.kept_on

    @property
    def group(self) -> str:
        """The group's name."""
        return self._core.group

    @property
    def consumer(self) -> str:
        """This member's name in the group."""
        return self._core.consumer

    @property
    def parked(self) -> int:
        """Entries this member parked after ``max_deliveries`` deliveries."""
        return self._core.parked
