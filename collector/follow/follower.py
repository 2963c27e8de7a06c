"""Follow mode: the scheduler says "job X just changed" and the collector
refreshes exactly those jobs at once, between its periodic full stats.

Every push source ends up in the site's poke stream (:mod:`.pokes`); a
backend with an event feed of its own (Flux's events journal) has it read by
:class:`~.feed.FeedThread`.  The :class:`Follower` reads the stream, looks
again at jobs it found still ending (re-checks), and has the collector
refresh the poked jobs through the cycle's own steps (``Collector.refresh``),
reading them the way the backend gives (:mod:`.reads`) within the read
budget (:mod:`.budget`).  It never delays the periodic full cycle, which
stays the reconciliation that catches anything a push missed; while a cycle
runs, it keeps serving the pokes that need no listing (:meth:`during`).

``CollectorService`` (collector/service.py) owns the lease, the epoch check,
the cycles and health; it starts a Follower when it holds the lease and hands
it the waits between cycles and each cycle to run beside.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import redis

from jobtap.contract import meta
from jobtap.contract.lease import Lease, LeaseLost
from jobtap.schema import EXITING, JOB, TERMINAL

from ..backends.base import EventFeed, Native
from ..cycle import Collector, CycleFailed
from ..metrics import REFRESH
from .feed import FeedThread, now_iso
from .pokes import PokeReader

if TYPE_CHECKING:
    from ..metrics import CollectorMetrics

_T = TypeVar("_T")
log = logging.getLogger("jobtap.collector")


class Follower:
    """Follow mode for one collector while it holds the site's lease.

    ``max_refresh``: poked jobs refreshed at most at once; ``refresh_gap``:
    seconds between two refreshes that ask the scheduler; ``refreshed``:
    called with the cycle number of each refresh made between cycles (the
    service keeps it on the host).  Re-checks: a poked job found still
    exiting is looked at again every ``recheck_delay`` x tries seconds, up to
    ``max_rechecks`` times; a job poked as ended that the server still shows
    alive every ``ended_step`` x tries seconds (at most ``recheck_delay``),
    up to ``max_ended_rechecks`` times."""

    def __init__(
        self,
        collector: Collector,
        lease: Lease,
        *,
        max_refresh: int = 1000,
        refresh_gap: float = 0.05,
        refreshed: Callable[[int], None] = lambda cycle: None,
        metrics: CollectorMetrics | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        self.collector = collector
        self.redis = collector.redis
        self.keys = collector.keys
        self.lease = lease
        self.reads = collector.reads
        self.max_refresh = max_refresh
        self.refresh_gap = refresh_gap
        self.refreshed = refreshed
        self.metrics = metrics
        self.pokes: PokeReader | None = None
        self.feed: FeedThread | None = None
        self.rechecks: dict[str, tuple[float, int]] = {}  # job -> (due, tries)
        self._refresh_after = 0.0  # the next refresh that asks the scheduler, not before
        self.recheck_delay = 0.5
        self.max_rechecks = 5
        self.ended_step = 0.1  # re-checks of jobs poked as ended: 0.1, 0.2, ... 0.5, 0.5 s
        self.max_ended_rechecks = 20
        self.stop_event = stop_event or threading.Event()  # the service's: it stops the waits

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Read the poke stream from now on; start the backend's event feed."""
        ways = self.reads.ways
        self.pokes = PokeReader(
            self.redis, self.keys, carried_soon=ways.carried_soon, settle=ways.settle
        )
        backend = self.collector.backend
        feed = ""
        if isinstance(backend, EventFeed):
            self.feed = FeedThread(backend, self.redis, self.keys)
            self.feed.start()
            feed = f"{getattr(backend, 'scheduler', 'scheduler')} event feed"
        self.lease.guarded().hset(
            self.keys.meta, mapping={meta.FOLLOW: 1, meta.FEED: feed}
        ).execute()
        if self.metrics is not None:
            self.metrics.watch_pokes(self.pokes)
            if self.feed is not None:
                self.metrics.watch_feed(self.feed)
        log.info("follow mode: serving pokes from %s", self.keys.pokes)

    def stop(self) -> None:
        """Stop the feed and drop the pokes in hand (the next holder's first
        cycle is a reconciliation)."""
        if self.feed is not None:
            self.feed.stop()
            self.feed.join(timeout=5)
            self.feed = None
        self.pokes = None
        self.rechecks.clear()

    # -- between cycles ---------------------------------------------------------------
    def serve_until(self, deadline: float) -> None:
        """Until ``deadline`` (the next full cycle, ``time.monotonic()``), refresh
        poked jobs as they come."""
        while not self.stop_event.is_set() and self.lease.held and self.pokes is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            soonest = min(self.next_recheck(), self.pokes.next_release())
            wait = min(left, 1.0, max(0.001, soonest - time.monotonic()))
            if ready := self.pokes.ready():  # held by the read budget: gather pokes
                wait = min(wait, max(0.001, self.reads.delay(ready)))
            try:
                if self.pokes.read(block_ms=max(1, int(wait * 1000))):
                    self.note_pokes_read()
            except LeaseLost:
                return  # the service's loop steps down
            except redis.RedisError as exc:
                log.warning("poke stream: %s", exc)
                self.stop_event.wait(min(left, 1.0))
                continue
            self.due_rechecks()
            self.serve_carried(None)  # a carried record costs no read: the budget does not hold it
            if (ready := self.pokes.ready()) and self.reads.delay(ready) <= 0:
                self.serve_pokes()
                self.refresh_pause()  # bounds refreshes per second

    def refresh_pause(self) -> None:
        """Wait ``refresh_gap`` before the next refresh that asks the scheduler;
        pokes that bring their record (no command) are served meanwhile."""
        assert self.pokes is not None
        until = self._refresh_after = time.monotonic() + self.refresh_gap
        if self.reads.ways.carried is None:
            self.stop_event.wait(self.refresh_gap)
            return
        while not self.stop_event.is_set() and (left := until - time.monotonic()) > 0:
            try:
                if self.pokes.read(block_ms=max(1, int(left * 1000))):
                    self.note_pokes_read()
            except redis.RedisError:
                self.stop_event.wait(left)
                return
            self.serve_carried(None)

    def note_pokes_read(self) -> None:
        """Say in ``meta`` how far the poke stream has been read (and which
        probes of ``jobtap doctor`` were seen): the proof pokes are consumed."""
        assert self.pokes is not None
        fields: dict[str, str] = {meta.POKES_READ: self.pokes.last_id}
        if self.pokes.probes:
            fields[meta.PROBE_SEEN] = self.pokes.probes[-1]
            fields[meta.PROBE_SEEN_AT] = now_iso()
            self.pokes.probes.clear()
        self.lease.guarded().hset(self.keys.meta, mapping=fields).execute()

    # -- re-checks --------------------------------------------------------------------------
    def next_recheck(self) -> float:
        return min((due for due, _ in self.rechecks.values()), default=float("inf"))

    def due_rechecks(self) -> None:
        """Put the jobs whose re-check is due back among the pending pokes."""
        now = time.monotonic()
        assert self.pokes is not None
        for jid in [j for j, (due, _) in self.rechecks.items() if due <= now]:
            self.pokes.pending.setdefault(jid, None)

    def plan_rechecks(self, ids: list[str], states: dict[str, str]) -> None:
        """A poked job found still exiting (Slurm's epilog runs while the job is
        COMPLETING, PBS's jobobit while it is E) is looked at again shortly, a
        few times, so its final does not wait for the next full stat.  So is a
        job poked as ``ended`` (by a PBS MoM's epilogue, before the server
        knows) that the server still shows alive, only more often: the
        server's own end-of-job path takes a few hundred milliseconds, and
        every step of ``ended_step`` seconds waited is latency.  ``states``:
        what the refresh found each job in; for a job it did not find, what
        the collector last knew of it (beside a cycle, as it was before)."""
        seen = self.collector.ledger.of(JOB) if self.collector.ledger else {}
        ended = self.pokes.ended if self.pokes is not None else set()
        now = time.monotonic()
        for jid in ids:
            state = states.get(jid)
            if state is None and (entry := seen.get(jid)) is not None:
                state = entry.state
            tries = self.rechecks.pop(jid, (0.0, 0))[1]
            if state is None or state in TERMINAL:
                ended.discard(jid)
                continue
            if jid in ended and tries < self.max_ended_rechecks:
                step = min(self.recheck_delay, self.ended_step * (tries + 1))
                self.rechecks[jid] = (now + step, tries + 1)
            elif state == EXITING and tries < self.max_rechecks:
                self.rechecks[jid] = (now + self.recheck_delay * (tries + 1), tries + 1)
            else:
                ended.discard(jid)

    # -- refreshing poked jobs -----------------------------------------------------------
    def serve_pokes(self) -> bool:
        """Refresh up to ``max_refresh`` poked jobs now: first those whose record
        the poke carried or the backend has at hand (Flux: built from the
        journal), so that their changes never wait for the scheduler's answer
        about the others."""
        assert self.pokes is not None
        ids = self.pokes.take(self.max_refresh)
        carried = self.carried_records(ids)
        if carried:  # records the pokes brought (PBS's jobobit hook): no scheduler command
            rest = [j for j in ids if j not in carried]
            done = self.refresh_now(list(carried), carried)
            return done & self._asking(rest) if rest else done
        if self.reads.ways.carried is not None:
            return self._asking(ids)
        quick = self.reads.at_hand(ids)
        if quick and len(quick) < len(ids):
            at_hand = set(quick)
            rest = [j for j in ids if j not in at_hand]
            return self.refresh_now(quick) & self.refresh_now(rest)
        return self.refresh_now(ids)

    def carried_records(self, ids: list[str]) -> dict[str, Native]:
        """The records among ``ids``' pokes that the backend accepts as they are
        (``PokedReads.carried``); the others are asked of the scheduler."""
        assert self.pokes is not None
        held = self.pokes.records
        if not held:
            return {}
        raw = {j: held.pop(j) for j in ids if j in held}
        accept = self.reads.ways.carried
        if accept is None:
            return {}
        given = {}
        for jid, data in raw.items():
            native = accept(jid, data)
            if native is not None:
                given[jid] = native
        return given

    def refresh_now(
        self,
        ids: list[str],
        given: dict[str, Native] | None = None,
        deferred: list[Callable[[], None]] | None = None,
    ) -> bool:
        """Refresh these poked jobs (``given``: records their pokes brought;
        ``deferred``: during a cycle, see :meth:`during`)."""
        assert self.pokes is not None
        t0 = time.perf_counter()
        try:
            if given is None and deferred is None:
                report = self.collector.refresh(ids)
            else:
                report = self.collector.refresh(ids, given, deferred=deferred)
            if deferred is None:  # beside a cycle, the cycle saves its own
                self.refreshed(report.cycle)
            self.plan_rechecks(ids, report.states)
        except LeaseLost as exc:
            log.warning("refresh of %d poked jobs dropped: %s", len(ids), exc)
            return False
        except (CycleFailed, redis.RedisError) as exc:
            return self._refresh_failed(ids, str(exc))
        except Exception as exc:  # a bug must not stop follow mode: later pokes, cycles go on
            log.exception("refresh of %d poked jobs failed unexpectedly", len(ids))
            return self._refresh_failed(ids, f"unexpected {type(exc).__name__}: {exc}")
        if self.metrics is not None:
            self.metrics.cycle_done(report, time.perf_counter() - t0, REFRESH)
        try:
            pipe = self.lease.guarded()
            pipe.hincrby(self.keys.meta, meta.REFRESHES, 1)
            pipe.hincrby(self.keys.meta, meta.POKED_JOBS_REFRESHED, report.counts.get("poked", 0))
            pipe.hset(self.keys.meta, mapping={
                meta.LAST_REFRESH_AT: report.observed_at,
                meta.POKES_RECEIVED: self.pokes.received,
                meta.POKES_COALESCED: self.pokes.coalesced,
                meta.POKES_DROPPED: self.pokes.dropped,
            })  # fmt: skip
            pipe.execute()
        except (redis.RedisError, LeaseLost):
            pass
        log.debug(
            "refreshed %d poked jobs: %s%s", len(ids), " ".join(ids[:20]),
            " ..." if len(ids) > 20 else "", extra={"fields": {**report.counts, **report.timings}},
        )  # fmt: skip
        return True

    def _refresh_failed(self, ids: list[str], message: str) -> bool:
        """A refresh failed: said in the log, the metrics and ``meta``; False."""
        log.warning("refresh of %d poked jobs failed: %s", len(ids), message)
        if self.metrics is not None:
            self.metrics.cycle_failed(message, REFRESH)
        try:
            self.lease.guarded().hincrby(self.keys.meta, meta.REFRESHES_FAILED, 1).execute()
        except (redis.RedisError, LeaseLost):
            pass
        return False

    # -- beside a cycle ------------------------------------------------------------------
    def during(self, work: Callable[[], _T]) -> _T:
        """Run a cycle (``work``).  A final must not wait for a cycle's commands
        (a probe's qselect, a reconciliation's listing of 10,000 jobs,
        seconds long): when the backend's pokes may carry records (PBS's
        jobobit hook) or its poked jobs are read one by one (Slurm through
        slurmrestd), the cycle runs in a thread of its own while this one
        keeps serving pokes: those that bring their record, and the single
        reads the read budget allows (never a listing beside the cycle's).
        Their chunks are shipped at once; what the collector remembers of
        them is noted after the cycle, which owns the ledger until it ends.
        Other pokes wait as before."""
        if self.pokes is None:
            return work()
        reads = self.reads.beside_cycles()
        if not (reads or self.reads.ways.carried is not None):
            return work()
        return self._serving_pokes(work, "jobtap-cycle", reads=reads)

    def _asking(self, ids: list[str]) -> bool:
        """Refresh poked jobs that need the scheduler's answer (a ``qstat -E``,
        which the same-second throttle may hold 200 ms) while the pokes that
        bring their record keep being served, as during a cycle."""
        return self._serving_pokes(lambda: self.refresh_now(ids), "jobtap-refresh", reads=False)

    def _serving_pokes(self, work: Callable[[], _T], name: str, *, reads: bool) -> _T:
        """``work`` (a cycle, or a refresh that asks the scheduler) in a thread
        of its own, while this one ships the pending pokes that brought their
        record and, with ``reads``, reads other poked jobs one by one
        (:meth:`serve_reads`); what the collector remembers of those is noted
        after ``work``, which owns the ledger until it ends.  Returns what
        ``work`` returned, or raises what it raised."""
        assert self.pokes is not None
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                outcome["result"] = work()
            except BaseException as exc:  # raised again in this thread
                outcome["error"] = exc

        deferred: list[Callable[[], None]] = []
        runner = threading.Thread(target=run, name=name, daemon=True)
        runner.start()
        try:
            while runner.is_alive():
                try:
                    if self.pokes.read(block_ms=20):
                        self.note_pokes_read()
                except redis.RedisError as exc:
                    log.warning("poke stream: %s", exc)
                    runner.join(0.1)
                    continue
                self.serve_carried(deferred)
                if reads:
                    self.serve_reads(deferred)
        finally:
            runner.join()
            for step in deferred:
                step()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["result"]  # type: ignore[return-value]

    def serve_carried(self, deferred: list[Callable[[], None]] | None) -> None:
        """Ship the pending pokes that brought an acceptable record (during a
        cycle, ``deferred``: see :meth:`during`); the others stay pending."""
        assert self.pokes is not None
        held = self.pokes.records
        if not held:
            return
        ids = [j for j in self.pokes.pending if j in held][: self.max_refresh]
        given = self.carried_records(ids)
        if not given:
            return
        for jid in given:
            self.pokes.pending.pop(jid, None)
        self.refresh_now(list(given), given, deferred)

    def serve_reads(self, deferred: list[Callable[[], None]]) -> None:
        """Beside a cycle: read the pending poked jobs (re-checks due
        included) one by one, ``refresh_gap`` after the last refresh that
        asked the scheduler (:meth:`refresh_pause` between cycles), if the
        read budget has room for their single reads now; otherwise they stay
        pending until the cycle ends."""
        assert self.pokes is not None
        self.due_rechecks()
        pending = self.pokes.pending
        if not pending or time.monotonic() < self._refresh_after:
            return
        ids = self.pokes.ready()[: self.max_refresh]
        if not self.reads.singly_now(ids):
            return
        for jid in ids:
            del pending[jid]
        self.refresh_now(ids, None, deferred)
        self._refresh_after = time.monotonic() + self.refresh_gap
