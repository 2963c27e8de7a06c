"""``jobtap collector``: the loop around :class:`collector.cycle.Collector`.

- one cycle every ``interval`` seconds; a failed cycle (scheduler down, command
  timing out, garbage output, Redis away) changes nothing, is written to the
  ``meta`` hash and backs off exponentially up to ``max_backoff``;
- one active collector per site, holding the site's lease (jobtap.contract.lease:
  ``lease`` seconds, 3 x the interval and at most 15 s by default); a second
  one waits as a standby and takes over within the lease once the active one
  stops renewing it (at once if it was a dead process on this host); the new
  holder's first cycle is a reconciliation; a collector that finds the lease
  gone (paused past it, Redis lost it) writes nothing more and steps down
  to a standby;
- before every cycle it makes sure of the site's epoch (``jobtap.contract.epoch``);
  when a new one began (Redis came back empty, restarted, failed over, or went
  back to an older snapshot, which only the collector's own last cycle, kept on
  its host, can show), it reloads what Redis holds and ships every difference
  again, including the finals of jobs that ended meanwhile;
- SIGTERM/SIGINT end the loop after the cycle in hand.

After every cycle the health written to ``meta`` is also published on the
site's health channel (``jobtap top`` shows it without polling), and counted in
Prometheus series when ``metrics`` is given (collector/metrics.py).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import orjson
import redis

from jobtap.connection import publish_command
from jobtap.contract import meta
from jobtap.contract.epoch import CAUSES, EpochCheck, epoch_args
from jobtap.contract.lease import GUARDED_EPOCH_LUA, Holding, Lease, LeaseLost, default_lease
from jobtap.schema import EXITING, JOB, TERMINAL

from . import plan
from .backends.base import EventFeed, Native, RecordsAtHand, RecordsInPokes
from .cycle import Collector, CycleFailed, CycleReport
from .follow import FeedThread, PokeReader
from .hoststate import HostState
from .metrics import FULL, PROBE, PUSHED, REFRESH, CollectorMetrics, failure_cause

_T = TypeVar("_T")
log = logging.getLogger("jobtap.collector")
# The plan's tiers as the metrics name them ("full": a full stat of every job).
METRICS_TIER = {plan.RECONCILE: FULL, plan.PROBE: PROBE, plan.PUSHED: PUSHED}
HOST = socket.gethostname()


# Exit status of a run whose cycles went well but whose event feed never came up.
FEED_FAILED = 3


class AlreadyRunning(RuntimeError):
    pass


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class CollectorService:
    def __init__(
        self,
        collector: Collector,
        *,
        interval: float = 5.0,
        max_backoff: float = 60.0,
        lease: float | None = None,
        host: str = HOST,
        backend_name: str = "",
        follow: bool = False,
        max_refresh: int = 1000,
        refresh_gap: float = 0.05,
        state: HostState | None = None,
        metrics: CollectorMetrics | None = None,
    ):
        self.collector = collector
        self.redis = collector.redis
        self.publish = publish_command(self.redis)  # SPUBLISH on a Redis Cluster
        self.keys = collector.keys
        self.interval = interval
        self.max_backoff = max_backoff
        self.lease = Lease(self.redis, self.keys, duration=lease or default_lease(interval),
                           host=host)  # fmt: skip
        self.holder = self.lease.identity
        collector.lease = self.lease
        self.guarded_epoch = self.redis.register_script(GUARDED_EPOCH_LUA)
        self.takeovers = 0
        self.step_downs = 0
        self.reload = False  # reload the tracker from Redis at the next epoch check
        self.looping = False  # in run(): the lease kept by a thread, follow mode started
        self.backend_name = backend_name
        self.stop_event = threading.Event()
        self.failures = 0
        self.state = state or HostState()
        self.epoch: str | None = self.state.epoch  # the epoch this collector wrote in
        collector.last_cycle = max(collector.last_cycle, self.state.cycle)
        self.follow = follow
        collector.plan.reads.interval = interval  # follow mode's read budget is per interval
        self.max_refresh = max_refresh
        self.refresh_gap = refresh_gap
        self.pokes: PokeReader | None = None
        self.feed: FeedThread | None = None
        self.rechecks: dict[str, tuple[float, int]] = {}  # job -> (due, tries)
        self._refresh_after = 0.0  # the next refresh that asks the scheduler, not before
        self.recheck_delay = 0.5
        self.max_rechecks = 5
        self.ended_step = 0.1  # re-checks of jobs poked as ended: 0.1, 0.2, ... 0.5, 0.5 s
        self.max_ended_rechecks = 20
        self.feed_wait = 10.0
        self.metrics = metrics
        self.described: dict[str, str] = {}  # the backend's facts, as last written to meta
        if metrics is not None:
            metrics.start(interval, collector.shipper.queues)
        if collector.plan.pushed and not follow:
            log.warning(
                "no probe and no follow mode: jobs are seen only by the full stat every %gs",
                collector.plan.reconcile_every,
            )

    # -- lifecycle -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def handler(signum, frame):
            log.info("signal %s: stopping after the cycle in hand", signal.Signals(signum).name)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def acquire_lock(self) -> None:
        """Take the site's lease now or raise :class:`AlreadyRunning`."""
        holding = self.try_lease()
        if not holding.ours:
            raise AlreadyRunning(
                f"another collector holds site {self.keys.site!r} ({holding.holder or 'unknown'},"
                f" generation {holding.generation}); its lease runs out"
                f" {holding.ttl_ms / 1000:.1f}s after that collector stops renewing it"
            )

    def try_lease(self) -> Holding:
        """One try at the lease (a standby registers itself if it fails); a
        holder that is a dead process of this host is taken over at once."""
        holding = self.lease.acquire()
        if not holding.ours:
            host, _, rest = holding.holder.partition(":")
            pid = rest.split(":")[0]
            if host == self.lease.host and pid.isdigit() and not _alive(int(pid)):
                log.warning("taking over the lease of dead collector %s", holding.holder)
                holding = self.lease.acquire(dead=holding.holder)
        if holding.ours:
            self.took_over()
        return holding

    def release_lock(self) -> None:
        self.lease.release()

    def ensure_lease(self) -> None:
        """Before a cycle: renew the lease (a collector driven cycle by cycle
        takes it at its first); raise :class:`LeaseLost` if it was lost."""
        if self.lease.held:
            try:
                self.lease.check()
                return
            except LeaseLost:
                pass
        if self.lease.lost.is_set() or self.lease.generation:  # lost: take it again if free
            self.step_down()
            holding = self.try_lease()
            if not holding.ours:
                raise LeaseLost(f"{holding.holder} holds the lease now")
            if self.looping:
                self.begin()
            return
        self.acquire_lock()

    def took_over(self) -> None:
        """The lease is ours (generation N): the first cycle reconciles, from
        what Redis holds (the host state may be stale or absent here)."""
        self.takeovers += 1
        if self.state.path is not None:  # another collector of this host may have run since
            fresh = HostState.load(self.state.path)
            self.state.cycle = max(self.state.cycle, fresh.cycle)
            self.epoch = fresh.epoch or self.epoch
        self.collector.last_cycle = max(self.collector.last_cycle, self.state.cycle)
        # Held before (stepped down, took it again): what Redis holds now is
        # reloaded at the epoch check (a new epoch: what this tracker knew and
        # Redis lost is shipped again; else another collector wrote meanwhile).
        self.reload = self.collector.tracker is not None
        self.collector.plan.reset()
        log.info(
            "holding the lease of site %s (generation %d): the first cycle reconciles",
            self.keys.site, self.lease.generation,
            extra={"fields": {"holder": self.holder, "generation": self.lease.generation}},
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.lease_changed(True, self.lease.generation, took_over=True)

    def wait_for_lease(self, *, standby: bool = True) -> bool:
        """Take the lease, waiting as a standby while another collector holds it
        (polling at a fifth of the lease, and just after it runs out); False if
        stopped meanwhile.  Without ``standby``, raise :class:`AlreadyRunning`."""
        said = ""
        while not self.stop_event.is_set():
            try:
                holding = self.try_lease()
            except redis.RedisError as exc:
                log.warning("cannot reach Redis for the lease: %s", exc)
                self.stop_event.wait(self.lease.poll)
                continue
            if holding.ours:
                return True
            if not standby:
                self.acquire_lock()  # raises AlreadyRunning with the holder's name
            if said != holding.holder:
                said = holding.holder
                log.info(
                    "standby for site %s: %s holds it (generation %d, expires in %.1fs);"
                    " taking over when it stops renewing", self.keys.site, holding.holder,
                    holding.generation, holding.ttl_ms / 1000,
                    extra={"fields": {"standby": self.holder, "holder": holding.holder}},
                )  # fmt: skip
                if self.metrics is not None:
                    self.metrics.lease_changed(False, holding.generation)
            wait = self.lease.poll
            if holding.ttl_ms > 0:
                wait = min(wait, holding.ttl_ms / 1000 + 0.005)
            self.stop_event.wait(wait)
        self.lease.leave_standby()
        return False

    def step_down(self) -> None:
        """The lease is lost: write nothing more, drop what is in hand (pokes,
        re-checks; a shipment in hand was refused).  The tracker is reloaded
        from Redis if the lease comes back (see :meth:`took_over`)."""
        if not self.lease.generation:
            return  # stepped down already
        self.step_downs += 1
        log.warning("stepping down: %s; waiting as a standby", self.lease.why,
                    extra={"fields": {"generation": self.lease.generation}})  # fmt: skip
        self.stop_follow()
        self.lease.stepped_down()
        if self.metrics is not None:
            self.metrics.lease_changed(False, 0, stepped_down=True)

    # -- the loop ------------------------------------------------------------------------
    def run(self, *, max_cycles: int | None = None, standby: bool | None = None) -> int:
        """Run cycles until stopped (or ``max_cycles``); return an exit status:
        0 if the last cycle succeeded, 1 if it failed.  While another collector
        holds the site's lease, wait as a standby (``standby``, by default
        unless ``max_cycles`` is given: else :class:`AlreadyRunning`).  In
        follow mode, pokes are served between full cycles; with ``max_cycles``
        and an event feed, the feed's first run is waited for (``feed_wait``
        seconds at most) and a feed that did not come up makes the status
        :data:`FEED_FAILED` (a feed that can never start must not pass for a
        quiet one)."""
        if standby is None:
            standby = max_cycles is None
        if not self.lease.held and not self.wait_for_lease(standby=standby):
            return 0
        ok = False
        feed_up = True
        n = 0
        self.looping = True
        begun = False
        try:
            while not self.stop_event.is_set():
                if not self.lease.held:
                    self.step_down()
                    if not self.wait_for_lease():
                        break
                    begun = False
                if not begun:
                    try:
                        self.begin()
                    except LeaseLost:
                        continue  # lost again at once: back to waiting
                    begun = True
                started = time.monotonic()
                ok = self.run_one()
                n += 1
                if max_cycles is not None and n >= max_cycles:
                    break
                delay = self.interval if ok else self.backoff()
                self.wait_serving_pokes(started + delay)
            if self.feed is not None and max_cycles is not None:
                feed_up = self.feed.wait_started(self.feed_wait)
        finally:
            self.looping = False
            self.stop_follow()
            if self.lease.held:
                try:
                    self.lease.guarded().hset(
                        self.keys.meta, mapping={meta.STATUS: "stopped", meta.STOPPED_AT: _now()}
                    ).execute()
                except (redis.RedisError, LeaseLost):
                    pass
            self.release_lock()
        if not ok:
            return 1
        return 0 if feed_up else FEED_FAILED

    def begin(self) -> None:
        """The lease is ours: renew it in the background, say so in ``meta``,
        start follow mode."""
        self.lease.start_keeper()
        self.write_meta_start()
        self.lease.guarded().hdel(self.keys.meta, *meta.FEED_FIELDS).execute()  # an earlier run's
        if self.follow:
            self.start_follow()

    def stop_follow(self) -> None:
        if self.feed is not None:
            self.feed.stop()
            self.feed.join(timeout=5)
            self.feed = None
        self.pokes = None
        self.rechecks.clear()

    def start_follow(self) -> None:
        self.pokes = PokeReader(self.redis, self.keys)
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

    def wait_serving_pokes(self, deadline: float) -> None:
        """Until ``deadline`` (the next full cycle), refresh poked jobs as they
        come; without follow mode, just wait."""
        while not self.stop_event.is_set() and self.lease.held:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.pokes is None:
                self.stop_event.wait(left)
                return
            wait = min(left, 1.0, max(0.001, self.next_recheck() - time.monotonic()))
            if self.pokes.pending:  # held by the read budget (plan.ReadBudget): gather pokes
                wait = min(wait, max(0.001, self.collector.refresh_delay(self.pokes.pending)))
            try:
                if self.pokes.read(block_ms=max(1, int(wait * 1000))):
                    self.note_pokes_read()
            except LeaseLost:
                return  # the loop steps down
            except redis.RedisError as exc:
                log.warning("poke stream: %s", exc)
                self.stop_event.wait(min(left, 1.0))
                continue
            self.due_rechecks()
            if self.pokes.pending and self.collector.refresh_delay(self.pokes.pending) <= 0:
                self.serve_pokes()
                self.refresh_pause()  # bounds refreshes per second

    def refresh_pause(self) -> None:
        """Wait ``refresh_gap`` before the next refresh that asks the scheduler;
        pokes that bring their record (no command) are served meanwhile."""
        assert self.pokes is not None
        until = self._refresh_after = time.monotonic() + self.refresh_gap
        if not isinstance(self.collector.backend, RecordsInPokes):
            self.stop_event.wait(self.refresh_gap)
            return
        while not self.stop_event.is_set() and (left := until - time.monotonic()) > 0:
            try:
                if self.pokes.read(block_ms=max(1, int(left * 1000))):
                    self.note_pokes_read()
            except redis.RedisError:
                self.stop_event.wait(left)
                return
            self.serve_records(None)

    def note_pokes_read(self) -> None:
        """Say in ``meta`` how far the poke stream has been read (and which
        probes of ``jobtap doctor`` were seen): the proof pokes are consumed."""
        assert self.pokes is not None
        fields: dict[str, str] = {meta.POKES_READ: self.pokes.last_id}
        if self.pokes.probes:
            fields[meta.PROBE_SEEN] = self.pokes.probes[-1]
            fields[meta.PROBE_SEEN_AT] = _now()
            self.pokes.probes.clear()
        self.lease.guarded().hset(self.keys.meta, mapping=fields).execute()

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
        seen = self.collector.tracker.of(JOB) if self.collector.tracker else {}
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

    def serve_pokes(self) -> bool:
        """Refresh up to ``max_refresh`` poked jobs now: first those whose record
        the backend has at hand (Flux: built from the journal), so that their
        changes never wait for the scheduler's answer about the others."""
        assert self.pokes is not None
        ids = self.pokes.take(self.max_refresh)
        backend = self.collector.backend
        given = self.poked_records(ids)
        if given:  # records the pokes brought (PBS's jobobit hook): no scheduler command
            rest = [j for j in ids if j not in given]
            done = self.refresh_now(list(given), given)
            return done & self._asking(rest) if rest else done
        if isinstance(backend, RecordsInPokes):
            return self._asking(ids)
        if isinstance(backend, RecordsAtHand):
            quick = backend.at_hand(ids)
            if quick and len(quick) < len(ids):
                rest = [j for j in ids if j not in set(quick)]
                return self.refresh_now(quick) & self.refresh_now(rest)
        return self.refresh_now(ids)

    def poked_records(self, ids: list[str]) -> dict[str, Native]:
        """The records among ``ids``' pokes that the backend accepts as they are
        (:class:`RecordsInPokes`); the others are asked of the scheduler."""
        assert self.pokes is not None
        held = self.pokes.records
        if not held:
            return {}
        raw = {j: held.pop(j) for j in ids if j in held}
        backend = self.collector.backend
        if not isinstance(backend, RecordsInPokes):
            return {}
        given = {}
        for jid, data in raw.items():
            native = backend.poked_record(jid, data)
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
        ``deferred``: during a cycle, see :meth:`_run_cycle`)."""
        assert self.pokes is not None
        t0 = time.perf_counter()
        try:
            if given is None and deferred is None:
                report = self.collector.refresh(ids)
            else:
                report = self.collector.refresh(ids, given, deferred=deferred)
            if deferred is None:  # beside a cycle, the cycle saves its own
                self.state.save(self.epoch, report.cycle)
            self.plan_rechecks(ids, report.states)
        except LeaseLost as exc:
            log.warning("refresh of %d poked jobs dropped: %s", len(ids), exc)
            return False
        except (CycleFailed, redis.RedisError) as exc:
            log.warning("refresh of %d poked jobs failed: %s", len(ids), exc)
            if self.metrics is not None:
                self.metrics.cycle_failed(str(exc), REFRESH)
            try:
                self.lease.guarded().hincrby(self.keys.meta, meta.REFRESHES_FAILED, 1).execute()
            except (redis.RedisError, LeaseLost):
                pass
            return False
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

    def backoff(self) -> float:
        return min(self.max_backoff, self.interval * 2 ** min(self.failures - 1, 10))

    def run_one(self) -> bool:
        t0 = time.perf_counter()
        try:
            self.ensure_lease()
            self.check_epoch()
            report = self._run_cycle()
            self.state.save(self.epoch, report.cycle)
        except LeaseLost as exc:  # wrote nothing; the loop steps down
            log.warning("cycle dropped: %s", exc)
            return False
        except CycleFailed as exc:
            self.failed(str(exc), time.perf_counter() - t0)
            return False
        except redis.RedisError as exc:
            self.failed(f"redis: {exc}", time.perf_counter() - t0)
            return False
        try:
            self.succeeded(report, time.perf_counter() - t0)
        except LeaseLost as exc:
            log.warning("lost the lease after cycle %d: %s", report.cycle, exc)
        return True

    def _run_cycle(self) -> CycleReport:
        """One cycle.  In follow mode, a final must not wait for a cycle's
        commands (a probe's qselect, a reconciliation's listing of 10,000
        jobs, seconds long): when the backend's pokes may carry records (PBS's
        jobobit hook) or its poked jobs are read one by one (Slurm through
        slurmrestd), the cycle runs in a thread of its own while this one
        keeps serving pokes: those that bring their record, and the single
        reads the read budget allows (never a listing beside the cycle's).
        Their chunks are shipped at once; what the collector remembers of
        them is noted after the cycle, which owns the tracker until it ends.
        Other pokes wait as before."""
        collector = self.collector
        if self.pokes is None:
            return collector.run_cycle()
        reads = collector.reads_beside_cycles()
        if not (reads or isinstance(collector.backend, RecordsInPokes)):
            return collector.run_cycle()
        return self._serving_pokes(collector.run_cycle, "jobtap-cycle", reads=reads)

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
        after ``work``, which owns the tracker until it ends.  Returns what
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
                self.serve_records(deferred)
                if reads:
                    self.serve_reads(deferred)
        finally:
            runner.join()
            for step in deferred:
                step()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["result"]  # type: ignore[return-value]

    def serve_records(self, deferred: list[Callable[[], None]] | None) -> None:
        """Ship the pending pokes that brought an acceptable record (during a
        cycle, ``deferred``: see :meth:`_run_cycle`); the others stay pending."""
        assert self.pokes is not None
        held = self.pokes.records
        if not held:
            return
        ids = [j for j in self.pokes.pending if j in held][: self.max_refresh]
        given = self.poked_records(ids)
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
        ids = list(pending)[: self.max_refresh]
        if not self.collector.reads_singly_now(ids):
            return
        for jid in ids:
            del pending[jid]
        self.refresh_now(ids, None, deferred)
        self._refresh_after = time.monotonic() + self.refresh_gap

    def check_epoch(self) -> None:
        """Make sure of the site's epoch (beginning a new one if Redis' data is
        not the continuation of what was written); if it is not the one this
        collector wrote in, reload what Redis holds and ship every difference."""
        args = [*epoch_args(self.collector.last_cycle, owner=True), self.holder,
                self.lease.generation]  # fmt: skip
        epoch, cause, cycle = self.guarded_epoch(keys=[self.keys.meta, self.lease.key], args=args)
        if _s(epoch) == "lost":
            self.lease.check()  # raises LeaseLost (saying who holds it) unless taken back
            epoch, cause, cycle = self.guarded_epoch(
                keys=[self.keys.meta, self.lease.key], args=args
            )
            if _s(epoch) == "lost":
                raise LeaseLost("the lease was lost")
        check = EpochCheck(_s(epoch), _s(cause), int(cycle))
        if self.metrics is not None:
            self.metrics.set_epoch(check.epoch)
        reload, self.reload = self.reload, False
        if check.epoch == self.epoch:
            if reload:
                self.collector.load()  # the lease again: what Redis holds now
            return
        if self.epoch is not None:
            why = CAUSES.get(check.cause, "another writer began it")
            log.warning(
                "epoch %s began (%s): shipping what Redis lost again", check.epoch, why,
                extra={"fields": {"previous_epoch": self.epoch, "cause": check.cause}},
            )  # fmt: skip
            self.collector.resume_after_loss()
        elif reload:
            self.collector.load()
        self.epoch = check.epoch
        self.write_meta_start()

    # -- meta ------------------------------------------------------------------------------
    def write_meta_start(self) -> None:
        self.described = {}  # a new start (or meta lost with Redis): write the facts again
        if not self.lease.held and not self.lease.lost.is_set():  # driven by hand: take it
            self.acquire_lock()
        self.lease.guarded().hset(
            self.keys.meta,
            mapping={
                meta.STATUS: "starting",
                meta.BACKEND: self.backend_name,
                meta.INTERVAL: self.interval,
                meta.RECONCILE_EVERY: self.collector.plan.reconcile_every,
                meta.PROBING: int(self.collector.plan.probing),
                meta.PUSHED: int(self.collector.plan.pushed),
                meta.COLLECTOR: self.holder,
                meta.STARTED_AT: _now(),
                meta.FOLLOW: int(self.follow),
                meta.LEASE_HOLDER: self.holder,
            },
        ).execute()

    def facts_changed(self) -> dict[str, str]:
        """What the backend says of the scheduler and of the ways it reads it
        (``describe()``: Slurm's release and paths), when that changed since it
        was last written to ``meta``; for ``jobtap status`` and ``doctor``."""
        describe = getattr(self.collector.backend, "describe", None)
        facts = describe() if callable(describe) else {}
        if facts == self.described:
            return {}
        self.described = facts
        return facts

    def succeeded(self, report: CycleReport, duration: float) -> None:
        self.failures = 0
        fields = {
            meta.STATUS: "ok",
            meta.LAST_CYCLE: report.cycle,
            meta.LAST_CYCLE_AT: report.observed_at,
            meta.LAST_OK_AT: report.observed_at,
            meta.LAST_DURATION_S: round(duration, 4),
            meta.CONSECUTIVE_FAILURES: 0,
            meta.LAST_WARNING: "; ".join(report.warnings)[:1000],
        }
        for name, value in report.counts.items():
            fields[meta.count(name)] = value
        for stage, secs in report.timings.items():
            fields[meta.stage_time(stage)] = round(secs, 4)
        fields.update(report.tier_fields(duration))
        fields.update(self.facts_changed())
        if self.feed is not None:
            fields[meta.FEED_RESTARTS] = self.feed.restarts
        pipe = self.lease.guarded()
        pipe.hset(self.keys.meta, mapping=fields)
        pipe.hincrby(self.keys.meta, meta.CYCLES_OK, 1)
        pipe.hincrby(self.keys.meta, meta.cycles_of(report.tier), 1)
        pipe.hincrby(self.keys.meta, meta.CHUNKS_SHIPPED, report.counts.get("chunks", 0))
        pipe.execute_command(self.publish, self.keys.health_channel, self.health(fields))
        if report.bad:
            pipe.hset(self.keys.meta, mapping={meta.LAST_BAD: "; ".join(report.bad)[:2000]})
            pipe.hincrby(self.keys.meta, meta.BAD_RECORDS, report.counts.get("bad", 0))
        pipe.execute()
        if self.metrics is not None:
            self.metrics.cycle_done(report, duration, METRICS_TIER[report.tier])
        level = logging.WARNING if report.warnings or report.bad else logging.INFO
        log.log(
            level,
            "cycle %d done",
            report.cycle,
            extra={
                "fields": {
                    "duration_s": round(duration, 3),
                    "tier": report.tier,
                    **report.counts,
                    **({"warnings": report.warnings} if report.warnings else {}),
                    **({"bad": report.bad[:5]} if report.bad else {}),
                }
            },
        )

    def health(self, fields: dict) -> bytes:
        """What the health channel carries: the fields just written to ``meta``."""
        return orjson.dumps({**fields, "interval": self.interval, "epoch": self.epoch or ""})

    def failed(self, message: str, duration: float) -> None:
        self.failures += 1
        cause = failure_cause(message)
        if self.metrics is not None:
            self.metrics.cycle_failed(message, METRICS_TIER[self.collector.plan.tier()])
        log.error(
            "cycle failed: %s",
            message,
            extra={
                "fields": {
                    meta.CONSECUTIVE_FAILURES: self.failures,
                    "retry_in_s": round(self.backoff(), 1),
                }
            },
        )
        fields = {
            meta.STATUS: "failing",
            meta.LAST_ERROR: message[:1000],
            meta.LAST_ERROR_AT: _now(),
            meta.LAST_DURATION_S: round(duration, 4),
            meta.CONSECUTIVE_FAILURES: self.failures,
        }
        try:
            pipe = self.lease.guarded()
            pipe.hset(self.keys.meta, mapping=fields)
            pipe.hincrby(self.keys.meta, meta.CYCLES_FAILED, 1)
            pipe.hincrby(self.keys.meta, meta.failures_of(cause), 1)
            pipe.execute_command(self.publish, self.keys.health_channel, self.health(fields))
            pipe.execute()
        except (redis.RedisError, LeaseLost):
            pass  # Redis itself is away (or the lease lost): the log line is all we can do


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
