"""The rules of every jobtap integration, in one place.

A tool keeps submitting and cancelling with its own commands; jobtap only replaces
its status polling.  Whether an answer comes from jobtap or from the tool's own
status query ("the stock query") follows these rules:

- **Off the submit path.**  Nothing here runs while a job is submitted: a slow or
  unreachable Redis never delays or fails a submission.
- **Redis away.**  When reading the cache fails (refused, timed out, an ACL
  error), the jobs are asked of the scheduler with the stock query; one log line
  says so when it starts and one when jobtap answers again.
- **Unseen.**  A job jobtap has no record of is *waiting* (the collector has not
  seen it yet: a tool must take it for pending, never for finished) for
  ``unseen_timeout`` seconds after it was tracked; then it is asked of the
  scheduler (it may have lived and died between two of the collector's stats,
  or the collector may be behind), at most once per ``ask_every`` seconds.
- **An older job's record.**  A record submitted before the job was (less
  ``clock_skew``) belongs to an earlier job with the same id (Slurm reuses ids
  after a purge): it is ignored and the job is asked of the scheduler.

:func:`older_than_submission` and :class:`Settings` serve the subscription-based
PSI/J executors too; :class:`Tracker` is the read-based form (Parsl's ``status()``,
Snakemake's status rounds): one pipelined read of every job per call.
"""

from __future__ import annotations

import getpass
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import jobtap

log = logging.getLogger("jobtap.integrations")

# What "jobtap cannot be reached" looks like to a caller of the SDK.
UNREACHABLE: tuple[type[BaseException], ...] = (jobtap.JobtapError, OSError)

UNSEEN_TIMEOUT = 15.0
CLOCK_SKEW = 60.0
SUBSCRIBE_TIMEOUT = 10.0


def split_url(url: str | None) -> tuple[str | None, str | None]:
    """``redis://h:6379/0?site=hpc1`` -> (``redis://h:6379/0``, ``hpc1``); the other
    query parameters stay in the Redis URL."""
    if not url:
        return None, None
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    site = next((v for k, v in query if k == "site"), None)
    rest = urlencode([(k, v) for k, v in query if k != "site"])
    return urlunsplit(parts._replace(query=rest)), site


@dataclass
class Settings:
    """Where an integration finds jobtap.  ``None`` means jobtap's own default:
    the URL's ``?site=``, then ``$JOBTAP_REDIS``/``$JOBTAP_SITE``, then the user's
    credential file (``~/.config/jobtap/credentials``), as :class:`jobtap.Client`
    resolves them."""

    redis_url: str | None = None
    site: str | None = None
    credentials: str | os.PathLike[str] | None = None
    user: str | None = None
    timeout: float = SUBSCRIBE_TIMEOUT
    unseen_timeout: float = UNSEEN_TIMEOUT
    clock_skew: float = CLOCK_SKEW

    def client(self) -> jobtap.Client:
        """A client (nothing connects until it is used)."""
        url, url_site = split_url(self.redis_url)
        return jobtap.Client(
            url,
            site=self.site or url_site,
            credentials=self.credentials,
            timeout=self.timeout,
        )

    def owner(self, client: jobtap.Client) -> str:
        """The user whose jobs these are, as jobtap (and the scheduler) names them."""
        return self.user or client.user or getpass.getuser()


def older_than_submission(
    record: jobtap.Job, submitted_at: float | None, clock_skew: float = CLOCK_SKEW
) -> bool:
    """Whether ``record`` is of a job submitted before ours (wall clock
    ``submitted_at``, taken before the submit command): a reused id."""
    if submitted_at is None or record.submit_time is None:
        return False
    return record.submit_time.timestamp() < submitted_at - clock_skew


class Outage:
    """One log line when jobtap goes away and one when it is back, not one per call."""

    def __init__(self, what: str, logger: logging.Logger = log):
        self.what = what
        self.log = logger
        self.reason: str | None = None

    def failed(self, exc: BaseException) -> None:
        if self.reason is None:
            self.log.warning(
                "jobtap: cannot read the cache (%s): %s uses the scheduler's own status "
                "query until it answers again",
                exc,
                self.what,
            )
        self.reason = str(exc)

    def answered(self) -> None:
        if self.reason is not None:
            self.log.warning("jobtap: the cache answers again: %s reads it", self.what)
        self.reason = None


Kind = Literal["record", "wait", "ask", "keep"]


class Verdict(NamedTuple):
    """What to do about one job this round.

    ``record``: jobtap's record says it (``record`` is set); ``wait``: jobtap has
    not seen the job yet, inside its grace period (report it pending); ``ask``: ask
    the scheduler with the stock query now (``reason`` says why); ``keep``: asked
    recently, keep the scheduler's last answer."""

    kind: Kind
    record: jobtap.Job | None = None
    reason: str = ""


@dataclass
class _Tracked:
    since: float  # monotonic time it was tracked
    submitted_at: float | None  # wall clock before the submit command
    asked_at: float | None = None  # monotonic time of the last stock query
    fell_back: bool = False  # logged already


@dataclass
class Tracker:
    """The jobs of one tool instance and the rules above, for integrations that
    read (one pipelined read of every tracked job per round) rather than
    subscribe.  Thread-safe.  ``what`` names the tool in log lines; ``ask_every``
    bounds how often one job is asked of the scheduler (the tool's own polling
    period)."""

    settings: Settings
    what: str
    ask_every: float = 60.0
    logger: logging.Logger = log
    clock: Callable[[], float] = time.monotonic
    _jobs: dict[str, _Tracked] = field(default_factory=dict)
    _client: jobtap.Client | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    outage: Outage = field(init=False)

    def __post_init__(self) -> None:
        self.outage = Outage(self.what, self.logger)

    @property
    def client(self) -> jobtap.Client:
        with self._lock:
            if self._client is None:
                self._client = self.settings.client()
            return self._client

    @property
    def owner(self) -> str:
        return self.settings.owner(self.client)

    def track(self, native_id: str, submitted_at: float | None = None) -> None:
        """Start the grace period of a job just submitted (``submitted_at``: the wall
        clock taken before the submit command) or attached."""
        with self._lock:
            self._jobs.setdefault(native_id, _Tracked(self.clock(), submitted_at))

    def forget(self, native_id: str) -> None:
        with self._lock:
            self._jobs.pop(native_id, None)

    def tracked(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def asked(self, native_ids: Iterable[str]) -> None:
        """The stock query has just answered for these jobs."""
        now = self.clock()
        with self._lock:
            for nid in native_ids:
                if nid in self._jobs:
                    self._jobs[nid].asked_at = now

    def read(self, native_ids: Iterable[str]) -> dict[str, Verdict]:
        """The verdict of each job (untracked ones are tracked from now on), from one
        read of the cache."""
        ids = list(dict.fromkeys(native_ids))
        for nid in ids:
            self.track(nid)
        if not ids:
            return {}
        try:
            records = self.client.jobs_by_id(ids, user=self.owner)
        except UNREACHABLE as exc:
            self.outage.failed(exc)
            return {nid: self._ask(nid, f"jobtap unreachable ({exc})") for nid in ids}
        self.outage.answered()
        out: dict[str, Verdict] = {}
        now = self.clock()
        for nid in ids:
            record = records.get(nid)
            with self._lock:
                t = self._jobs[nid]
            if record is not None and older_than_submission(
                record, t.submitted_at, self.settings.clock_skew
            ):
                out[nid] = self._ask(nid, "jobtap's record is an older job's (reused id)")
            elif record is not None:
                out[nid] = Verdict("record", record)
            elif now - t.since < self.settings.unseen_timeout:
                out[nid] = Verdict("wait")
            else:
                unseen = self.settings.unseen_timeout
                out[nid] = self._ask(nid, f"jobtap has had no record of it for {unseen:g} s")
        return out

    def _ask(self, nid: str, reason: str) -> Verdict:
        with self._lock:
            t = self._jobs[nid]
            due = t.asked_at is None or self.clock() - t.asked_at >= self.ask_every
            first = not t.fell_back
            t.fell_back = True
        if first and self.outage.reason is None:
            self.logger.info("jobtap: job %s: %s: asking the scheduler", nid, reason)
        return Verdict("ask" if due else "keep", None, reason)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def watch_user(
    settings: Settings,
    on_change: Callable[[jobtap.Change], Any],
    client: jobtap.Client | None = None,
) -> jobtap.Subscription:
    """Subscribe ``on_change`` to every job of the settings' user (present and
    future; no initial records): what lets a tool's status loop sleep until one
    of its jobs changes.  Raises what the SDK raises when Redis is away."""
    client = client or settings.client()
    return client.subscribe(on_change, user=settings.owner(client), initial=False, attrs=("state",))
