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
from datetime import UTC, datetime

import orjson
import redis

from jobtap.cluster import publish_command
from jobtap.contract import meta
from jobtap.contract.epoch import CAUSES, EpochCheck, epoch_args
from jobtap.contract.lease import GUARDED_EPOCH_LUA, Holding, Lease, LeaseLost, default_lease

from . import plan
from .cycle import Collector, CycleFailed, CycleReport
from .follow.follower import Follower
from .hoststate import HostState
from .metrics import FULL, PROBE, PUSHED, CollectorMetrics, failure_cause

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
        self.reload = False  # reload the ledger from Redis at the next epoch check
        self.looping = False  # in run(): the lease kept by a thread, follow mode started
        self.backend_name = backend_name
        self.stop_event = threading.Event()
        self.failures = 0
        self.state = state or HostState()
        self.epoch: str | None = self.state.epoch  # the epoch this collector wrote in
        collector.last_cycle = max(collector.last_cycle, self.state.cycle)
        self.follow = follow
        collector.reads.budget.interval = interval  # follow mode's read budget is per interval
        self.feed_wait = 10.0
        self.metrics = metrics
        self.follower = (
            Follower(
                collector,
                self.lease,
                max_refresh=max_refresh,
                refresh_gap=refresh_gap,
                refreshed=lambda cycle: self.state.save(self.epoch, cycle),
                metrics=metrics,
                stop_event=self.stop_event,
            )
            if follow
            else None
        )
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
        # reloaded at the epoch check (a new epoch: what this ledger knew and
        # Redis lost is shipped again; else another collector wrote meanwhile).
        self.reload = self.collector.ledger is not None
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
        re-checks; a shipment in hand was refused).  The ledger is reloaded
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
            feed = self.follower.feed if self.follower is not None else None
            if feed is not None and max_cycles is not None:
                feed_up = feed.wait_started(self.feed_wait)
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
        if self.follower is not None:
            self.follower.stop()

    def start_follow(self) -> None:
        if self.follower is not None:
            self.follower.start()

    def wait_serving_pokes(self, deadline: float) -> None:
        """Until ``deadline`` (the next full cycle), let follow mode refresh
        poked jobs as they come; without it, just wait."""
        if self.follower is not None and self.follower.pokes is not None:
            self.follower.serve_until(deadline)
        elif not self.stop_event.is_set() and self.lease.held:
            self.stop_event.wait(max(0.0, deadline - time.monotonic()))

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
        except Exception as exc:  # a bug must not stop the site's one collector
            log.exception("cycle failed unexpectedly")
            self.failed(f"unexpected {type(exc).__name__}: {exc}", time.perf_counter() - t0)
            return False
        try:
            self.succeeded(report, time.perf_counter() - t0)
        except LeaseLost as exc:
            log.warning("lost the lease after cycle %d: %s", report.cycle, exc)
        return True

    def _run_cycle(self) -> CycleReport:
        """One cycle; in follow mode, with pokes served beside it (``Follower.during``)."""
        if self.follower is None:
            return self.collector.run_cycle()
        return self.follower.during(self.collector.run_cycle)

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
        if self.follower is not None and self.follower.feed is not None:
            fields[meta.FEED_RESTARTS] = self.follower.feed.restarts
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
