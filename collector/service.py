"""``jobtap collector``: the loop around :class:`collector.cycle.Collector`.

- one cycle every ``interval`` seconds; a failed cycle (scheduler down, command
  timing out, garbage output, Redis away) changes nothing, is written to the
  ``meta`` hash and backs off exponentially up to ``max_backoff``;
- one collector per site: a lock key names the holder (host and pid); a dead
  holder on this host is taken over at once, elsewhere when its lock expires;
- if Redis comes back empty (restarted without persistence) the collector
  notices (the ``epoch`` in ``meta`` is gone) and ships everything again;
- SIGTERM/SIGINT end the loop after the cycle in hand.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from datetime import UTC, datetime

import redis

from jobtap.schema import EXITING, JOB

from .backends.base import EventFeed
from .cycle import Collector, CycleFailed, CycleReport
from .follow import FeedThread, PokeReader

log = logging.getLogger("jobtap.collector")
HOST = socket.gethostname()


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
        lock_ttl: int | None = None,
        backend_name: str = "",
        follow: bool = False,
        max_refresh: int = 1000,
        refresh_gap: float = 0.05,
    ):
        self.collector = collector
        self.redis = collector.redis
        self.keys = collector.keys
        self.interval = interval
        self.max_backoff = max_backoff
        self.lock_ttl = lock_ttl or int(max(30, 4 * interval, 2 * max_backoff))
        self.lock_key = f"{self.keys.base}:collector"
        self.holder = f"{HOST} {os.getpid()} {uuid.uuid4().hex[:6]}"
        self.backend_name = backend_name
        self.stop_event = threading.Event()
        self.failures = 0
        self.epoch: str | None = None
        self.follow = follow
        self.max_refresh = max_refresh
        self.refresh_gap = refresh_gap
        self.pokes: PokeReader | None = None
        self.feed: FeedThread | None = None
        self.rechecks: dict[str, tuple[float, int]] = {}  # job -> (due, tries)
        self.recheck_delay = 0.5
        self.max_rechecks = 5

    # -- lifecycle -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def handler(signum, frame):
            log.info("signal %s: stopping after the cycle in hand", signal.Signals(signum).name)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def acquire_lock(self) -> None:
        """Take the site's collector lock or raise :class:`AlreadyRunning`."""
        if self.redis.set(self.lock_key, self.holder, nx=True, ex=self.lock_ttl):
            return
        current = self.redis.get(self.lock_key)
        current = current.decode() if current else ""
        host, _, rest = current.partition(" ")
        pid = rest.split(" ")[0] if rest else ""
        if host == HOST and pid.isdigit() and not _alive(int(pid)):
            log.warning("taking over the lock of dead collector %s", current)
            self.redis.set(self.lock_key, self.holder, ex=self.lock_ttl)
            return
        raise AlreadyRunning(
            f"another collector holds site {self.keys.site!r} ({current or 'unknown'});"
            f" it expires {self.redis.ttl(self.lock_key)}s after that collector stops"
        )

    def refresh_lock(self) -> None:
        current = self.redis.get(self.lock_key)
        if current is not None and current.decode() != self.holder:
            raise AlreadyRunning(f"lost the collector lock of {self.keys.site!r} to {current!r}")
        self.redis.set(self.lock_key, self.holder, ex=self.lock_ttl)

    def release_lock(self) -> None:
        try:
            if self.redis.get(self.lock_key) == self.holder.encode():
                self.redis.delete(self.lock_key)
        except redis.RedisError:
            pass

    # -- the loop ------------------------------------------------------------------------
    def run(self, *, max_cycles: int | None = None) -> int:
        """Run cycles until stopped (or ``max_cycles``); return an exit status:
        0 if the last cycle succeeded, 1 if it failed.  In follow mode, pokes
        are served between full cycles."""
        self.acquire_lock()
        self.write_meta_start()
        if self.follow:
            self.start_follow()
        ok = False
        n = 0
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                ok = self.run_one()
                n += 1
                if max_cycles is not None and n >= max_cycles:
                    break
                delay = self.interval if ok else self.backoff()
                self.wait_serving_pokes(started + delay)
        finally:
            if self.feed is not None:
                self.feed.stop()
            self.release_lock()
            try:
                self.redis.hset(self.keys.meta, mapping={"status": "stopped", "stopped_at": _now()})
            except redis.RedisError:
                pass
        return 0 if ok else 1

    def start_follow(self) -> None:
        self.pokes = PokeReader(self.redis, self.keys)
        backend = self.collector.backend
        if isinstance(backend, EventFeed):
            self.feed = FeedThread(backend, self.redis, self.keys)
            self.feed.start()
        log.info("follow mode: serving pokes from %s", self.keys.pokes)

    def wait_serving_pokes(self, deadline: float) -> None:
        """Until ``deadline`` (the next full cycle), refresh poked jobs as they
        come; without follow mode, just wait."""
        while not self.stop_event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.pokes is None:
                self.stop_event.wait(left)
                return
            wait = min(left, 1.0, max(0.001, self.next_recheck() - time.monotonic()))
            try:
                self.pokes.read(block_ms=max(1, int(wait * 1000)))
            except redis.RedisError as exc:
                log.warning("poke stream: %s", exc)
                self.stop_event.wait(min(left, 1.0))
                continue
            self.due_rechecks()
            if self.pokes.pending:
                self.serve_pokes()
                self.stop_event.wait(self.refresh_gap)  # bounds refreshes per second

    def next_recheck(self) -> float:
        return min((due for due, _ in self.rechecks.values()), default=float("inf"))

    def due_rechecks(self) -> None:
        """Put the jobs whose re-check is due back among the pending pokes."""
        now = time.monotonic()
        assert self.pokes is not None
        for jid in [j for j, (due, _) in self.rechecks.items() if due <= now]:
            self.pokes.pending.setdefault(jid, None)

    def plan_rechecks(self, ids: list[str]) -> None:
        """A poked job found still exiting (Slurm's epilog runs while the job is
        COMPLETING, PBS's jobobit while it is E) is looked at again shortly, a
        few times, so its final does not wait for the next full stat."""
        seen = self.collector.tracker.of(JOB) if self.collector.tracker else {}
        now = time.monotonic()
        for jid in ids:
            entry = seen.get(jid)
            tries = self.rechecks.pop(jid, (0.0, 0))[1]
            if entry is not None and entry.state == EXITING and tries < self.max_rechecks:
                self.rechecks[jid] = (now + self.recheck_delay * (tries + 1), tries + 1)

    def serve_pokes(self) -> bool:
        """Refresh up to ``max_refresh`` poked jobs now."""
        assert self.pokes is not None
        ids = self.pokes.take(self.max_refresh)
        try:
            report = self.collector.refresh(ids)
            self.plan_rechecks(ids)
        except (CycleFailed, redis.RedisError) as exc:
            log.warning("refresh of %d poked jobs failed: %s", len(ids), exc)
            try:
                self.redis.hincrby(self.keys.meta, "refreshes_failed", 1)
            except redis.RedisError:
                pass
            return False
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hincrby(self.keys.meta, "refreshes", 1)
            pipe.hset(self.keys.meta, mapping={
                "last_refresh_at": report.observed_at,
                "pokes_dropped": self.pokes.dropped,
            })  # fmt: skip
            pipe.execute()
        except redis.RedisError:
            pass
        log.debug("refreshed %d poked jobs", len(ids), extra={"fields": report.counts})
        return True

    def backoff(self) -> float:
        return min(self.max_backoff, self.interval * 2 ** min(self.failures - 1, 10))

    def run_one(self) -> bool:
        t0 = time.perf_counter()
        try:
            self.check_epoch()
            self.refresh_lock()
            report = self.collector.run_cycle()
        except CycleFailed as exc:
            self.failed(str(exc), time.perf_counter() - t0)
            return False
        except redis.RedisError as exc:
            self.failed(f"redis: {exc}", time.perf_counter() - t0)
            return False
        self.succeeded(report, time.perf_counter() - t0)
        return True

    def check_epoch(self) -> None:
        """Notice a Redis that lost its data and resynchronise from scratch."""
        epoch = self.redis.hget(self.keys.meta, "epoch")
        if epoch is None:
            if self.epoch is not None:
                log.warning("Redis lost the site's data: shipping every object again")
            self.epoch = uuid.uuid4().hex
            self.redis.hset(self.keys.meta, "epoch", self.epoch)
            self.collector.load()
            self.write_meta_start()
        else:
            self.epoch = epoch.decode()

    # -- meta ------------------------------------------------------------------------------
    def write_meta_start(self) -> None:
        self.redis.hset(
            self.keys.meta,
            mapping={
                "status": "starting",
                "backend": self.backend_name,
                "interval": self.interval,
                "collector": self.holder,
                "started_at": _now(),
            },
        )

    def succeeded(self, report: CycleReport, duration: float) -> None:
        self.failures = 0
        fields = {
            "status": "ok",
            "last_cycle": report.cycle,
            "last_cycle_at": report.observed_at,
            "last_ok_at": report.observed_at,
            "last_duration_s": round(duration, 4),
            "consecutive_failures": 0,
            "last_warning": "; ".join(report.warnings)[:1000],
        }
        for name, value in report.counts.items():
            fields[f"count_{name}"] = value
        for stage, secs in report.timings.items():
            fields[f"time_{stage}_s"] = round(secs, 4)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.meta, mapping=fields)
        pipe.hincrby(self.keys.meta, "cycles_ok", 1)
        if report.bad:
            pipe.hset(self.keys.meta, mapping={"last_bad": "; ".join(report.bad)[:2000]})
            pipe.hincrby(self.keys.meta, "bad_records", report.counts.get("bad", 0))
        pipe.execute()
        level = logging.WARNING if report.warnings or report.bad else logging.INFO
        log.log(
            level,
            "cycle %d done",
            report.cycle,
            extra={
                "fields": {
                    "duration_s": round(duration, 3),
                    **report.counts,
                    **({"warnings": report.warnings} if report.warnings else {}),
                    **({"bad": report.bad[:5]} if report.bad else {}),
                }
            },
        )

    def failed(self, message: str, duration: float) -> None:
        self.failures += 1
        log.error(
            "cycle failed: %s",
            message,
            extra={
                "fields": {
                    "consecutive_failures": self.failures,
                    "retry_in_s": round(self.backoff(), 1),
                }
            },
        )
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hset(
                self.keys.meta,
                mapping={
                    "status": "failing",
                    "last_error": message[:1000],
                    "last_error_at": _now(),
                    "last_duration_s": round(duration, 4),
                    "consecutive_failures": self.failures,
                },
            )
            pipe.hincrby(self.keys.meta, "cycles_failed", 1)
            pipe.execute()
        except redis.RedisError:
            pass  # Redis itself is away: the log line is all we can do


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
