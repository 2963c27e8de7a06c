"""Follow mode: the scheduler says "job X just changed" and the collector
refreshes exactly those jobs at once, between its periodic full stats.

Every push source ends up in the site's poke stream ``jobtap:{S}:pokes``:
``jobtap poke JOBID...`` (Slurm's PrologSlurmctld/EpilogSlurmctld, PBS hooks)
appends to it; backends with an event feed of their own (Flux's events journal)
are read by a thread that appends to it too.  The collector reads the stream,
coalesces the ids (a job poked ten times is refreshed once), bounds each
refresh, and never lets pokes delay the periodic full cycle, which stays the
reconciliation that catches anything a push missed.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import redis

from jobtap.contract import meta
from jobtap.keys import POKES_MAXLEN, SiteKeys

from .backends.base import EventFeed

log = logging.getLogger("jobtap.collector")


def poke(
    r: redis.Redis, keys: SiteKeys, job_ids: Sequence[str], source: str = "", *, ended: bool = False
) -> str:
    """Append one poke naming ``job_ids``; return its stream id.  ``ended``: the
    jobs are known to have ended (a PBS MoM's epilogue saw it) although the
    server may not show it yet (the ``ended`` field, ``1``)."""
    fields = {"ids": " ".join(job_ids), "source": source or socket.gethostname()}
    if ended:
        fields["ended"] = "1"
    entry = r.xadd(keys.pokes, fields, maxlen=POKES_MAXLEN, approximate=True)
    return entry.decode() if isinstance(entry, bytes) else entry


class PokeReader:
    """Reads the poke stream from where it stood when the reader started (what
    was poked while no collector ran is the first full cycle's business).

    An entry with a ``probe`` field names no job: ``jobtap doctor`` sends one to
    see that pokes are being read; its token is kept in :attr:`probes`.  The
    ids of entries with ``ended`` set are also kept in :attr:`ended`: the
    collector looks at those again until the scheduler shows them ended.
    An entry naming one job with a ``record`` field (the PBS jobobit hook: the
    job's final record as the scheduler will list it) keeps that record in
    :attr:`records` until the job is refreshed; a later poke of the job
    without one drops it (something changed after it: ask the scheduler)."""

    def __init__(self, r: redis.Redis, keys: SiteKeys, *, max_pending: int = 10_000):
        self.redis = r
        self.keys = keys
        self.max_pending = max_pending
        self.pending: dict[str, None] = {}  # ordered set of ids waiting for a refresh
        # Counted for jobtap_collector_pokes_*_total (collector/metrics.py).
        self.received = self.coalesced = self.dropped = 0
        self.probes: list[str] = []
        self.ended: set[str] = set()
        self.records: dict[str, bytes] = {}
        last = r.xrevrange(keys.pokes, count=1)
        self.last_id: str = last[0][0].decode() if last else "0-0"

    def read(self, block_ms: int) -> int:
        """Wait up to ``block_ms`` for pokes; add their ids to :attr:`pending`;
        return how many entries were read."""
        reply = self.redis.xread({self.keys.pokes: self.last_id}, count=1000, block=block_ms)
        n = 0
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                n += 1
                if b"probe" in fields:
                    self.probes.append(fields[b"probe"].decode(errors="replace"))
                    continue
                ended = fields.get(b"ended") == b"1"
                ids = (fields.get(b"ids") or b"").decode(errors="replace").split()
                record = fields.get(b"record") if len(ids) == 1 else None
                for jid in ids:
                    if ended and len(self.ended) < self.max_pending:
                        self.ended.add(jid)
                    if record is not None and len(self.records) < self.max_pending:
                        self.records[jid] = record
                    else:
                        self.records.pop(jid, None)
                    if jid in self.pending:
                        self.coalesced += 1
                        continue
                    if len(self.pending) >= self.max_pending:
                        self.dropped += 1  # the next full cycle will see it anyway
                        continue
                    self.pending[jid] = None
        self.received += n
        return n

    def take(self, limit: int) -> list[str]:
        """Up to ``limit`` pending ids, oldest first."""
        ids = list(self.pending)[:limit]
        for jid in ids:
            del self.pending[jid]
        return ids


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
                self.set_status("up", **{meta.FEED_UP_SINCE: _now()})
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
                        meta.FEED_LAST_ERROR: text[:500], meta.FEED_LAST_ERROR_AT: _now(),
                    })  # fmt: skip
                except redis.RedisError:
                    pass

    def stop(self) -> None:
        self.stopped.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
