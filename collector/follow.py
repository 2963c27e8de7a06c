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
from collections.abc import Sequence

import redis

from jobtap.keys import POKES_MAXLEN, SiteKeys

from .backends.base import EventFeed

log = logging.getLogger("jobtap.collector")


def poke(r: redis.Redis, keys: SiteKeys, job_ids: Sequence[str], source: str = "") -> str:
    """Append one poke naming ``job_ids``; return its stream id."""
    fields = {"ids": " ".join(job_ids), "source": source or socket.gethostname()}
    entry = r.xadd(keys.pokes, fields, maxlen=POKES_MAXLEN, approximate=True)
    return entry.decode() if isinstance(entry, bytes) else entry


class PokeReader:
    """Reads the poke stream from where it stood when the reader started (what
    was poked while no collector ran is the first full cycle's business)."""

    def __init__(self, r: redis.Redis, keys: SiteKeys, *, max_pending: int = 10_000):
        self.redis = r
        self.keys = keys
        self.max_pending = max_pending
        self.pending: dict[str, None] = {}  # ordered set of ids waiting for a refresh
        self.dropped = 0
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
                for jid in (fields.get(b"ids") or b"").decode(errors="replace").split():
                    if jid in self.pending:
                        continue
                    if len(self.pending) >= self.max_pending:
                        self.dropped += 1  # the next full cycle will see it anyway
                        continue
                    self.pending[jid] = None
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
    to the collector's log."""

    def __init__(
        self,
        feed: EventFeed,
        r: redis.Redis,
        keys: SiteKeys,
        *,
        max_backoff: float = 60.0,
    ):
        super().__init__(name="jobtap-feed", daemon=True)
        self.feed, self.redis, self.keys = feed, r, keys
        self.max_backoff = max_backoff
        self.proc: subprocess.Popen | None = None
        self.stopped = threading.Event()
        self.since: float | None = None
        self.batches = 0

    def run(self) -> None:
        backoff = 1.0
        while not self.stopped.is_set():
            argv = self.feed.follow_command(since=self.since)
            try:
                self.proc = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                log.error("follow feed %s cannot start: %s", argv[0], exc)
                self.stopped.wait(backoff)
                backoff = min(self.max_backoff, backoff * 2)
                continue
            threading.Thread(target=self._log_stderr, args=(self.proc,), daemon=True).start()
            got_any = False
            try:
                for ids in self.feed.follow_parse(self.proc.stdout):  # type: ignore[arg-type]
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
            if got_any:
                backoff = 1.0
            if not self.stopped.is_set():
                log.warning(
                    "follow feed ended (status %s); restarting in %.0f s",
                    self.proc.returncode,
                    backoff,
                )
                self.stopped.wait(backoff)
                backoff = min(self.max_backoff, backoff * 2)

    @staticmethod
    def _log_stderr(proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            text = line.decode(errors="replace").rstrip()
            if text:
                log.warning("follow feed: %s", text)

    def stop(self) -> None:
        self.stopped.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
