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

It outlives what a failover, a restart or a dropped connection does to it: it talks through a
client of its own whose every wait is bounded (``connections``), and a call that fails for
such a reason is tried again after a pause, the layout learned again (its slot may have a new
owner), the group joined again; ``stop()`` ends it wherever it waits.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis.cluster import RedisCluster

from ..checkpoint.saver import RedisStreamSaver
from ..core.slots import slot_of
from ..events import Delivery, SkippedEvent
from ..tailing.blocking import within
from ..tailing.shells import ConsumerGroup
from .connections import cut, own_saver, passing

__all__ = ["DEFAULT_GROUP", "Projector", "Totals"]

log = logging.getLogger("projector")

DEFAULT_GROUP = "projector"
# the pauses before trying again what a failover or a restart broke: growing, up to the bound
# of one call (the tails' grace), so a server that comes back is found within about that
_FIRST_PAUSE_S = 0.1
# how long a stopped projector may go on applying what was delivered (and its member leave the
# group) before its connections are shut down: a call on a silent server would otherwise run
# to its bound
_STOP_GRACE_S = 1.0


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
        # set once a stopped projector still waited after the grace and its connections were cut
        self._abandoned = threading.Event()
        self._cutting: threading.Timer | None = None
        # the saver the projector's calls go through: on a client of its own while it runs
        self._saver = saver
        self._client: Any = None
        self._members: ConsumerGroup | None = None
        # (slot, feed entry id or None): deliveries, and slots to look at
        self._work: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self._failed: BaseException | None = None
        self._pause = _FIRST_PAUSE_S  # the apply thread's next pause after an error

    def stop(self) -> None:
        """End ``run()`` from a signal handler or another thread: at once where it waits for
        deliveries; what was delivered is applied within a grace of a second, after which
        whatever still waits (on a server that stopped answering) is cut short."""
        self._stopped.set()
        if self._members is not None:
            self._members.stop()
        if self._client is not None and self._cutting is None:
            self._cutting = threading.Timer(_STOP_GRACE_S, self._abandon)
            self._cutting.daemon = True
            self._cutting.start()

    def _abandon(self) -> None:
        client = self._client
        if client is not None:  # run() has not ended yet
            self._abandoned.set()
            cut(client)

    def start(self) -> None:
        """Seed what has no projections yet (first start, or keys deleted), then catch up."""
        if not self._saver.projector_seeded():
            log.info("no projections yet: seeding them from the thread logs")
            # a replica starting at the same time seeds too: a slot it seeded and went on
            # applying is left to it (seeding it again would move its cursor back)
            registered = self._saver.seed_projections(unseeded_only=True)
            log.info("seeded: %d threads registered", registered)
        self.catch_up()

    def _reseed(self, slots: list[int], why: str = "") -> None:
        if why:
            log.info("slot %s: %s: seeding it again", slots[0], why)
        else:
            log.warning("slots %s have no usable cursor (trimmed feed?): seeding them again", slots)
        self._saver.seed_projections(slots)
        self.totals.reseeded += len(slots)

    def catch_up(self, slots: list[int] | None = None) -> None:
        """Apply every slot's pending entries (the group only wakes us; the cursor rules)."""
        if slots is None:
            lag = self._saver.projector_lag(fresh=False)
            slots = [s.slot for s in lag.slots if s.pending or not s.usable]
        for slot in slots:
            self.apply(slot, [])

    def apply(self, slot: int, acks: list[str]) -> None:
        while True:
            done = self._saver.project(slot, count=self.batch, group=self.group, acks=acks)
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
            while not self._stopped.is_set() and not self._done(self.start, "starting"):
                pass
            self._apply_loop()
        except BaseException as exc:
            if self._abandoned.is_set() or (self._stopped.is_set() and passing(exc)):
                # stopped: what it was doing is applied by the next call after the cursor
                log.debug("stopped while applying: %s", _named(exc))
                return
            self._failed = exc  # handed to run(), which re-raises it
            self.stop()

    def _done(self, call: Callable[[], object], what: str) -> bool:
        """``call`` done, or False after an error the projector waits out (a failover, a
        restart), once the pause is over. Anything else is raised; so is every error once
        stopped, which ends the apply thread."""
        try:
            call()
        except Exception as exc:
            if self._stopped.is_set() or not passing(exc):
                raise
            log.warning("%s: %s; trying again in %.1f s", what, _named(exc), self._pause)
            self._pause = self._wait_out(self._pause)
            return False
        self._pause = _FIRST_PAUSE_S
        return True

    def _wait_out(self, pause: float) -> float:
        """Wait ``pause`` (a stop ends it), then learn the cluster's layout again: the slot's
        owner may have changed. Returns the next pause."""
        self._stopped.wait(pause)
        client: Any = self._saver.client
        if isinstance(client, RedisCluster) and not self._stopped.is_set():
            # no node may answer yet: the next call's own error says so
            with contextlib.suppress(Exception):
                client.nodes_manager.initialize()
        return min(pause * 2, within())

    def _apply_loop(self) -> None:
        next_catch_up = time.monotonic() + self.catch_up_s
        next_log = time.monotonic() + self.log_every_s
        next_sweep = time.monotonic() + self.sweep_every_s
        while (not self._stopped.is_set() or not self._work.empty()) and (
            not self._abandoned.is_set()
        ):
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
            if not self._apply_each(acks):
                continue
            now = time.monotonic()
            if now >= next_catch_up and self._done(self.catch_up, "catching up"):
                next_catch_up = time.monotonic() + self.catch_up_s
            if now >= next_log:
                next_log = now + self.log_every_s
                self._done(self.log_lag, "reading the lag")
            if now >= next_sweep and self._done(self._sweep, "sweeping"):
                next_sweep = time.monotonic() + self.sweep_every_s

    def _apply_each(self, acks: dict[int, list[str]]) -> bool:
        for slot, ids in acks.items():
            if not self._done(partial(self.apply, slot, ids), f"slot {slot}"):
                # this slot and those after it, with their deliveries, once the pause is over
                for again in list(acks)[list(acks).index(slot) :]:
                    self._work.put((again, None))
                    for entry_id in acks[again]:
                        self._work.put((again, entry_id))
                return False
        return True

    def _sweep(self) -> None:
        # delete_thread and expiry leave no feed entry: look for vanished threads
        forgotten = self._saver.sweep_projections()
        if forgotten:
            log.info("forgot %d threads whose log is gone", forgotten)

    def log_lag(self) -> None:
        lag = self._saver.projector_lag(fresh=False)
        log.info(
            "lag: %d entries pending over %d slots, oldest %.1f s; applied %d so far",
            lag.pending,
            sum(1 for s in lag.slots if s.pending),
            lag.oldest_age_s,
            self.totals.applied,
        )

    def _join(self) -> ConsumerGroup:
        members = self._saver.consumer_group(
            self.group,
            self.consumer,
            start="$",
            min_idle_ms=self.min_idle_ms,
            count=self.batch,
            on_skip=self._skipped,
        )
        # joined again after a failover under the same name: what it held is still its own
        self.consumer = members.consumer
        self._members = members
        if self._stopped.is_set():  # a stop() that came while it joined
            members.stop()
        return members

    def _follow(self) -> None:
        """Hand each delivery to the apply thread until stopped; a member that met a failover
        or a restart leaves and joins again after a pause."""
        pause = _FIRST_PAUSE_S
        while not self._stopped.is_set():
            try:
                self._leave()  # a member whose iteration ended on its own, if any
                members = self._join()
                log.info("projector %s joined group %r", members.consumer, self.group)
                for delivery in members:
                    self._work.put((_slot(delivery), delivery.entry_id))
                    pause = _FIRST_PAUSE_S
            except Exception as exc:
                if not passing(exc):
                    raise
                if self._stopped.is_set():
                    return
                log.warning("group: %s; joining again in %.1f s", _named(exc), pause)
                self._leave()
                pause = self._wait_out(pause)

    def _leave(self) -> None:
        # leaving sends (the member is deleted where nothing is pending for it): on a server
        # that is gone, the others claim what it held, and it joins again under its name
        members, self._members = self._members, None
        if members is None:
            return
        try:
            members.close()
        except Exception as exc:
            if not passing(exc):
                raise
            log.debug("group: leaving: %s", _named(exc))

    def run(self) -> Totals:
        self._saver, self._client = own_saver(self.saver, self._stopped, self._abandoned)
        worker = threading.Thread(target=self._worker, name="projector-apply")
        worker.start()
        try:
            if self._stopped.is_set():  # stopped before its client was made
                self.stop()
            self._follow()
        finally:
            # the worker applies (and acknowledges) what was delivered; its member left the
            # group as its iteration ended
            self.stop()
            worker.join()
            try:
                self._leave()
            finally:
                client, self._client = self._client, None
                if self._cutting is not None:
                    self._cutting.cancel()
                if client is not None:
                    client.close()
                self._saver = self.saver
        if self._failed is not None:
            raise self._failed
        log.info(
            "projector stopped: %d entries applied in %d batches",
            self.totals.applied,
            self.totals.batches,
        )
        return self.totals


def _named(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _slot(delivery: Delivery) -> int:
    return slot_of(delivery.stream)
