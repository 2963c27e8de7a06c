"""A backend's own event feed (Flux's events journal), turned into pokes."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from datetime import UTC, datetime

import redis

from jobtap.contract import meta
from jobtap.keys import SiteKeys

from ..backends.base import EventFeed
from .pokes import poke

log = logging.getLogger("jobtap.collector")


class FeedThread(threading.Thread):
    """Runs a backend's event feed (e.g. the Flux journal reader) and turns
    each batch of changed job ids it yields into a poke.

    If the feed ends (the scheduler restarted, the reader died), it is started
    again with exponential backoff, asking for the events since the last batch
    it handled (``follow_command(since=...)``).  The feed's standard error goes
    to the collector's log.

    Its health goes to the site's ``meta`` hash as it changes.  ``feed_status``:
    ``starting``; ``up`` once the feed printed its first line; ``restarting``
    after it ended; ``failing`` after ``FAILING_AFTER`` runs in a row ended
    without a batch and within ``GOOD_RUN`` seconds of coming up; ``stopped``.
    Also ``feed_restarts``, ``feed_failures`` (in a row), ``feed_last_error``
    and when: a feed that never starts must not look like a quiet one."""

    FAILING_AFTER = 3
    GOOD_RUN = 60.0  # a run up this long was no failure, batches or not

    def __init__(
        self,
        feed: EventFeed,
        r: redis.Redis,
        keys: SiteKeys,
        *,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
    ):
        super().__init__(name="jobtap-feed", daemon=True)
        self.feed, self.redis, self.keys = feed, r, keys
        self.first_backoff = backoff
        self.max_backoff = max_backoff
        self.proc: subprocess.Popen | None = None
        self.stopped = threading.Event()
        self.since: float | None = None
        self.batches = 0
        self.status = "starting"
        self.restarts = 0  # jobtap_collector_feed_restarts_total
        self.failures = 0  # runs in a row that ended without a batch
        self.last_error = ""
        self.up = threading.Event()  # the current run printed its first line
        self.up_at: float | None = None
        self.first_run_over = threading.Event()  # up, or the first run ended

    def run(self) -> None:
        backoff = self.first_backoff
        self.set_status("starting")
        while not self.stopped.is_set():
            argv = self.feed.follow_command(since=self.since)
            self.up.clear()
            self.up_at = None
            try:
                self.proc = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                log.error("follow feed %s cannot start: %s", argv[0], exc)
                self.last_error = f"cannot start {argv[0]}: {exc}"
                self.ended(got_any=False, returncode=None)
                self.stopped.wait(backoff)
                backoff = min(self.max_backoff, backoff * 2)
                continue
            stderr = threading.Thread(target=self._log_stderr, args=(self.proc,), daemon=True)
            stderr.start()
            got_any = False
            try:
                for ids in self.feed.follow_parse(self._lines(self.proc)):
                    self.since = ids.last_timestamp or self.since
                    if ids:
                        poke(self.redis, self.keys, list(ids), source="feed")
                        self.batches += 1
                        got_any = True
            except redis.RedisError as exc:
                log.warning("follow feed: redis: %s", exc)
            finally:
                self.proc.kill()
                self.proc.wait()
                stderr.join(timeout=1)
            if self.stopped.is_set():
                break
            if got_any:
                backoff = self.first_backoff
            self.ended(got_any=got_any, returncode=self.proc.returncode)
            log.warning(
                "follow feed ended (status %s); restarting in %.0f s",
                self.proc.returncode,
                backoff,
            )
            self.stopped.wait(backoff)
            backoff = min(self.max_backoff, backoff * 2)
        self.set_status("stopped")

    def _lines(self, proc: subprocess.Popen):
        """The feed's output, line by line; the first line says it is up."""
        assert proc.stdout is not None
        for line in proc.stdout:
            if not self.up.is_set():
                self.up_at = time.monotonic()
                self.up.set()
                self.first_run_over.set()
                self.set_status("up", **{meta.FEED_UP_SINCE: now_iso()})
            yield line

    def ended(self, *, got_any: bool, returncode: int | None) -> None:
        """A run of the feed ended while the collector still wants it."""
        self.restarts += 1
        lasted = self.up_at is not None and time.monotonic() - self.up_at >= self.GOOD_RUN
        self.failures = 0 if got_any or lasted else self.failures + 1
        self.first_run_over.set()
        status = "failing" if self.failures >= self.FAILING_AFTER else "restarting"
        if not self.last_error and returncode:
            self.last_error = f"exited with status {returncode}"
        self.set_status(status, **{meta.FEED_RESTARTS: self.restarts})

    def set_status(self, status: str, **fields: object) -> None:
        """Note the feed's health in ``meta``; Redis being away loses only that."""
        self.status = status
        mapping = {meta.FEED_STATUS: status, meta.FEED_FAILURES: self.failures, **fields}
        if self.last_error:
            mapping[meta.FEED_LAST_ERROR] = self.last_error[:500]
        try:
            self.redis.hset(self.keys.meta, mapping=mapping)
        except redis.RedisError as exc:
            log.warning("follow feed: cannot note its health: %s", exc)

    def wait_started(self, timeout: float) -> bool:
        """Wait until the first run is up or over; True if it came up."""
        self.first_run_over.wait(timeout)
        return self.up.is_set()

    def _log_stderr(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            text = line.decode(errors="replace").rstrip()
            if text:
                log.warning("follow feed: %s", text)
                self.last_error = text
                try:
                    self.redis.hset(self.keys.meta, mapping={
                        meta.FEED_LAST_ERROR: text[:500], meta.FEED_LAST_ERROR_AT: now_iso(),
                    })  # fmt: skip
                except redis.RedisError:
                    pass

    def stop(self) -> None:
        self.stopped.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
