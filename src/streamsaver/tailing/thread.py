"""One thread's log (``ThreadTail``), and what every reader core shares (options, ``_Reader``)."""

from __future__ import annotations

from ..core.codec import Codec
from ..core.config import bounded_int, thread_id_str
from ..core.errors import InvalidInputError
from ..core.keys import thread_keys
from ..core.marks import MARK_FIELDS, marked_events
from ..core.nodes import SendTargets
from ..core.stream_ids import id_key, is_entry_id
from ..events import SkippedEvent
from .decode import Entry, _check, _in_namespace, decode_event, entries, streams
from .naming import SEEN, name_batch
from .steps import DEFAULT_BLOCK_MS, DEFAULT_COUNT, Batch, Block, Deliver, Report, Step, TailFlow


def _after(after: object) -> str:
    """``"$"``, ``"0"`` or a stream id, as a position: ``"$"`` or an exact id."""
    if after == "$":
        return "$"
    if after in ("0", 0):
        return "0-0"
    if isinstance(after, bytes):
        after = after.decode()
    if is_entry_id(after):
        return after
    raise InvalidInputError(
        f"after={after!r}: give '$' (only new events), '0' (from the beginning) or a stream id "
        f"'<ms>-<seq>' to resume exactly after it"
    )


def _namespace(checkpoint_ns: object) -> str | None:
    if checkpoint_ns is None or isinstance(checkpoint_ns, str):
        return checkpoint_ns
    raise InvalidInputError(f"checkpoint_ns={checkpoint_ns!r}: give a string or None")


class _Reader:
    def __init__(self, codec: Codec, on_skip: Report | None) -> None:
        self.codec = codec
        self.on_skip = on_skip
        self.skipped = 0
        # the Send targets of the checkpoints read, to name their Sends' writes (naming.py)
        self.sends = SendTargets(SEEN)

    def report(self, skipped: SkippedEvent) -> None:
        self.skipped += 1
        if self.on_skip is not None:
            self.on_skip(skipped)


def _first_id(reply: object) -> str:
    if isinstance(reply, Exception):
        raise reply
    found = entries(reply)
    return found[0][0] if found else ""


# --- one thread ------------------------------------------------------------------------------


class ThreadTail(_Reader):
    """One thread's events in log order. ``position`` is the id of the last entry handed over
    or skipped: ``after=position`` resumes exactly after it."""

    def __init__(
        self,
        prefix: str,
        codec: Codec,
        thread_id: object,
        *,
        after: object = "$",
        follow: bool = True,
        checkpoint_ns: object = None,
        block_ms: int = DEFAULT_BLOCK_MS,
        count: int = DEFAULT_COUNT,
        on_skip: Report | None = None,
    ) -> None:
        super().__init__(codec, on_skip)
        self.thread_id = thread_id_str(thread_id, "thread_id")
        keys = thread_keys(prefix, self.thread_id)
        self.log = keys.log
        self._mark_read = ("HMGET", keys.ptr, *MARK_FIELDS)
        self.after = _after(after)
        self.follow = bool(follow)
        self.ns = _namespace(checkpoint_ns)
        self.block_ms = bounded_int(block_ms, "block_ms", 1)
        self.count = bounded_int(count, "count", 1)
        self.position: str | None = None if self.after == "$" else self.after
        # the log's first entry id when its end was read (follow=False): another one means it
        # was rewritten since (core/pages.py)
        self.first = ""

    def _last(self) -> Step:
        """The log's last id ("0-0" if none); and, for a tail that ends there, its first,
        kept in ``first``."""
        last_read = ("XREVRANGE", self.log, "+", "-", "COUNT", 1)
        if self.follow:
            # a follow tail of a deleted thread reads its deletion when the id is used again:
            # the new log starts with it (core/marks.py); tail_all reads it at once
            (reply,) = yield Batch((last_read,))
            last = entries(_check(reply))
            return last[0][0] if last else "0-0"
        reply, head, mark = yield Batch(
            (last_read, ("XRANGE", self.log, "-", "+", "COUNT", 1), self._mark_read)
        )
        self.first = _first_id(head)
        last = entries(_check(reply))
        if not last:
            # a deleted thread's log is gone: its mark holds the events it is
            marked = marked_events(_check(mark))
            return marked[-1][0] if marked else "0-0"
        return last[0][0]

    def _marked(self, mark: object, after: str, upto: str) -> list[Entry]:
        """The events of a deleted thread's mark (core/marks.py) after ``after``, up to
        ``upto``."""
        low, high = id_key(after), id_key(upto)
        return [(i, f) for i, f in marked_events(_check(mark)) if low < id_key(i) <= high]

    def run(self) -> TailFlow:
        pos = self.after
        if pos == "$" or not self.follow:
            last = yield from self._last()
            if pos == "$":
                pos = last
            end = last
        self.position = pos
        while True:
            if self.follow:
                reply = yield Block(
                    (
                        "XREAD",
                        "COUNT",
                        self.count,
                        "BLOCK",
                        self.block_ms,
                        "STREAMS",
                        self.log,
                        pos,
                    ),
                    self.log,
                    self.block_ms,
                )
                batch = [e for key, es in streams(_check(reply)) if key == self.log for e in es]
            else:
                if id_key(pos) >= id_key(end):
                    return
                reply, head, mark = yield Batch(
                    (
                        ("XRANGE", self.log, "(" + pos, end, "COUNT", self.count),
                        ("XRANGE", self.log, "-", "+", "COUNT", 1),
                        self._mark_read,
                    )
                )
                batch = entries(_check(reply))
                if not _first_id(head):
                    batch = self._marked(mark, pos, end)
                if _first_id(head) != self.first:
                    # rewritten (compacted, deleted) since the end was read: the new log's ids
                    # all follow the old one's, so the old end would stop it short, silently.
                    # It goes on as a follow tail does, after its position in the new log: the
                    # tombstone, then copies naming their originals (docs/retention.md)
                    end = yield from self._last()
                elif not batch:
                    return
            decoded = [(decode_event(self.codec, self.log, i, f or {}), i) for i, f in batch]
            for item, entry_id in name_batch(self.sends, decoded):
                pos = self.position = entry_id
                if isinstance(item, SkippedEvent):
                    self.report(item)
                elif _in_namespace(item, self.ns):
                    yield Deliver(item)
