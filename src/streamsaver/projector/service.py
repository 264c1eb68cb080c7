"""The projector service (``streamsaver projector run``): keeps the cross-thread projections
current.

Consumer-group members (``saver.consumer_group``) share the feeds: a delivery only says "slot S
has new entries". The work itself is cursor-driven: ``lua/projector/project.lua`` applies the slot's
feed
entries after the cursor stored in Redis, in order, moves the cursor and acknowledges the
deliveries, in one script. So members never apply an entry twice or out of order, whichever
of them gets which delivery, and a member killed at any point leaves either all of a batch's
effects or none; what it held is claimed by the others (XAUTOCLAIM), or re-read by its
successor from the cursor.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from ..checkpoint.saver import RedisStreamSaver
from ..core.slots import slot_of
from ..events import Delivery, SkippedEvent
from ..tailing.shells import ConsumerGroup

__all__ = ["DEFAULT_GROUP", "Projector", "Totals"]

log = logging.getLogger("projector")

DEFAULT_GROUP = "projector"


@dataclass
class Totals:
    applied: int = 0  # feed entries this member applied
    batches: int = 0
    reseeded: int = 0  # slots seeded again (their feed was trimmed past the cursor)
    unknown: list[str] = field(default_factory=list)  # entries of kinds this version lacks


class Projector:
    """One member of the projector group. ``run()`` blocks until ``stop()`` (from a signal
    handler or another thread); ``totals`` says what this member did."""

    def __init__(
        self,
        saver: RedisStreamSaver,
        *,
        group: str = DEFAULT_GROUP,
        consumer: str | None = None,
        batch: int = 1000,
        min_idle_ms: int = 30_000,
        catch_up_s: float = 5.0,
        log_every_s: float = 30.0,
        sweep_every_s: float = 300.0,
    ) -> None:
        self.saver = saver
        self.group = group
        self.consumer = consumer
        self.batch = batch
        self.min_idle_ms = min_idle_ms
        self.catch_up_s = catch_up_s
        self.log_every_s = log_every_s
        self.sweep_every_s = sweep_every_s
        self.totals = Totals()
        self._stopped = threading.Event()
        self._members: ConsumerGroup | None = None
        # (slot, feed entry id or None): deliveries, and slots to look at
        self._work: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self._failed: BaseException | None = None

    def stop(self) -> None:
        self._stopped.set()
        if self._members is not None:
            self._members.stop()

    def start(self) -> None:
        """Seed what has no projections yet (first start, or keys deleted), then catch up."""
        if not self.saver.projector_seeded():
            log.info("no projections yet: seeding them from the thread logs")
            # a replica starting at the same time seeds too: a slot it seeded and went on
            # applying is left to it (seeding it again would move its cursor back)
            registered = self.saver.seed_projections(unseeded_only=True)
            log.info("seeded: %d threads registered", registered)
        self.catch_up()

    def _reseed(self, slots: list[int], why: str = "") -> None:
        if why:
            log.info("slot %s: %s: seeding it again", slots[0], why)
        else:
            log.warning("slots %s have no usable cursor (trimmed feed?): seeding them again", slots)
        self.saver.seed_projections(slots)
        self.totals.reseeded += len(slots)

    def catch_up(self, slots: list[int] | None = None) -> None:
        """Apply every slot's pending entries (the group only wakes us; the cursor rules)."""
        if slots is None:
            lag = self.saver.projector_lag(fresh=False)
            slots = [s.slot for s in lag.slots if s.pending or not s.usable]
        for slot in slots:
            self.apply(slot, [])

    def apply(self, slot: int, acks: list[str]) -> None:
        while True:
            done = self.saver.project(slot, count=self.batch, group=self.group, acks=acks)
            if done.status == "seeding":
                # another process seeds the slot; the next catch-up applies what follows
                return
            if done.status == "reseed":
                self._reseed([slot], f"thread {done.thread!r}'s long log was rewritten")
                continue
            if done.status != "ok":
                self._reseed([slot])
                continue
            self.totals.applied += done.applied
            self.totals.batches += 1
            for unknown in done.unknown:
                log.warning("slot %d: entry %s (its thread recomputed from its log)", slot, unknown)
                if len(self.totals.unknown) < 100:
                    self.totals.unknown.append(unknown)
            if not done.more:
                return

    def _skipped(self, item: SkippedEvent) -> None:
        # the group acknowledged an entry it could not hand over (its thread is gone, say):
        # the projector still has to apply it
        log.debug("group skipped %s %s: %s", item.stream, item.id, item.reason)
        self._work.put((slot_of(item.stream), None))

    def _worker(self) -> None:
        try:
            self._apply_loop()
        except BaseException as exc:  # handed to run(), which re-raises it
            self._failed = exc
            self.stop()

    def _apply_loop(self) -> None:
        next_catch_up = time.monotonic() + self.catch_up_s
        next_log = time.monotonic() + self.log_every_s
        next_sweep = time.monotonic() + self.sweep_every_s
        while not self._stopped.is_set() or not self._work.empty():
            try:
                first = self._work.get(timeout=0.2)
            except queue.Empty:
                first = None
            acks: dict[int, list[str]] = {}
            item = first
            while item is not None:
                slot, entry_id = item
                acks.setdefault(slot, [])
                if entry_id is not None:
                    acks[slot].append(entry_id)
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    item = None
            for slot, ids in acks.items():
                self.apply(slot, ids)
            now = time.monotonic()
            if now >= next_catch_up:
                next_catch_up = now + self.catch_up_s
                self.catch_up()
            if now >= next_log:
                next_log = now + self.log_every_s
                self.log_lag()
            if now >= next_sweep:
                next_sweep = now + self.sweep_every_s
                # delete_thread and expiry leave no feed entry: look for vanished threads
                forgotten = self.saver.sweep_projections()
                if forgotten:
                    log.info("forgot %d threads whose log is gone", forgotten)

    def log_lag(self) -> None:
        lag = self.saver.projector_lag(fresh=False)
        log.info(
            "lag: %d entries pending over %d slots, oldest %.1f s; applied %d so far",
            lag.pending,
            sum(1 for s in lag.slots if s.pending),
            lag.oldest_age_s,
            self.totals.applied,
        )

    def run(self) -> Totals:
        self.start()
        members = self.saver.consumer_group(
            self.group,
            self.consumer,
            start="$",
            min_idle_ms=self.min_idle_ms,
            count=self.batch,
            on_skip=self._skipped,
        )
        self._members = members
        worker = threading.Thread(target=self._worker, name="projector-apply")
        worker.start()
        try:
            log.info("projector %s joined group %r", members.consumer, self.group)
            if not self._stopped.is_set():
                for delivery in members:
                    self._work.put((_slot(delivery), delivery.entry_id))
        finally:
            # the worker applies (and acknowledges) what was delivered before the member leaves
            self._stopped.set()
            worker.join()
            members.close()
        if self._failed is not None:
            raise self._failed
        log.info(
            "projector stopped: %d entries applied in %d batches",
            self.totals.applied,
            self.totals.batches,
        )
        return self.totals


def _slot(delivery: Delivery) -> int:
    return slot_of(delivery.stream)
