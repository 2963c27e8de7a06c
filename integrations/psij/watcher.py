"""The threads that take the place of PSI/J's queue-poll thread: they subscribe each
submitted or attached job to jobtap, turn the changes into PSI/J statuses and hand
the jobs jobtap cannot report to the fallback poller, by the rules every jobtap
integration follows (:mod:`jobtap.integrations.rules`).

PSI/J's ``submit()`` and ``attach()`` end by calling ``register_job()``; here that
only queues the job, so a slow or unreachable Redis never holds up a submission.
Two threads, started on the first job:

- the *status* thread owns the watched jobs: it maps each change to a PSI/J status
  and sets it (reading PSI/J's exit-code file, which may wait a moment for a shared
  filesystem, and running PSI/J's status callbacks), and keeps the deadlines;
- the *subscriber* thread calls :meth:`jobtap.Client.subscribe` for each job (the
  current record, then every change in order, without a gap; a job not collected
  yet is waited for on its user's channel).  It may block on a Redis that accepts
  connections but does not answer: the status thread does not wait for it.

The SDK's callbacks run on the client's dispatcher thread and only queue the change.

A job jobtap has no record of ``unseen_timeout`` seconds after it was subscribed
(it lived and died between two of the collector's stats, it is past retention, or
the collector is behind) is asked of the scheduler once (``squeue`` then ``sacct``,
``qstat -x``), and again every ``unseen_timeout`` while it is alive and unseen.

A job goes to the fallback poller, for good, when subscribing fails or takes longer
than ``subscribe_timeout``, when asking the scheduler fails, when its record leaves
the cache without a final,
when the subscription ends with an error, and when the record is an older job's with
the same id (its ``submit_time`` before this submission: a reused Slurm id; jobtap
keeps that final until its retention ends).  Jobs attached under one native id
share one subscription and one status, as they share one entry of PSI/J's poll
thread.  An attached id jobtap does not know but whose array tasks it does is a job
array: the job fails at once with a message naming the tasks.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

from psij import Job, JobState, JobStatus

import jobtap
from jobtap.integrations.rules import UNREACHABLE, older_than_submission

from .config import JobtapExecutorConfig, job_owner, make_client
from .states import psij_status

log = logging.getLogger("jobtap.psij")

TICK = 0.5  # seconds between checks of the deadlines and of the executor's life
HISTORY = 1000  # native ids remembered in fallen_back and asked


@dataclass
class Watched:
    """One native id being watched and the PSI/J jobs attached to it."""

    native_id: str
    jobs: list[Job]
    submitted_at: float | None  # wall clock before the submit command; None if attached
    deadline: float  # monotonic: for the subscription, then for jobtap's first record
    sub: jobtap.Subscription | None = None
    seen: bool = False
    last: JobStatus | None = None


def psij_status_updater() -> Any | None:
    """PSI/J after 0.9.11 (its repository head): the thread through which a job's
    batch script reports what only it knows (ACTIVE, file staging) over UDP or a
    file.  PSI/J's batch executor reads its address from the poll thread's
    ``status_updater`` when it writes the script, and the poll thread registers
    each job with it, so ours does too.  None on PSI/J 0.9.11, which has none."""
    try:
        from psij.utils import _StatusUpdater  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    return _StatusUpdater.get_instance()


class JobWatcher:
    """What PSI/J's batch executor asks of its queue-poll thread (``register_job``,
    ``unregister_job``, ``status_updater``), backed by jobtap."""

    def __init__(self, executor: Any, config: JobtapExecutorConfig):
        self.config = config
        self.name = f"{executor.name} jobtap"
        self._executor = weakref.ref(executor)
        self._url = executor.url
        self._tasks: queue.SimpleQueue[tuple[str, tuple]] = queue.SimpleQueue()
        self._to_subscribe: queue.SimpleQueue[tuple[str, bool] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False
        self._submitted: dict[str, float] = {}  # PSI/J job id -> time of submission
        self._watched: dict[str, Watched] = {}
        self._client: jobtap.Client | None = None
        self._fallback: Any = None
        self.fallen_back: deque[str] = deque(maxlen=HISTORY)
        """The latest native ids handed to the fallback poller, in order."""
        self.asked: deque[str] = deque(maxlen=HISTORY)
        """The latest native ids jobtap had no record of in time, asked of the scheduler."""
        self.status_updater = psij_status_updater()

    # -- called by the executor (any thread) -----------------------------------------
    def submitting(self, job: Job) -> None:
        """Note the time before the submit command (tells a reused id's old record)."""
        self._submitted[job.id] = time.time()

    def not_submitted(self, job: Job) -> None:
        """The submit command failed: nothing to watch."""
        self._submitted.pop(job.id, None)

    def register_job(self, job: Job) -> None:
        """Watch ``job`` (its native id is set); returns at once."""
        assert job.native_id
        with self._lock:
            if not self._started:
                self._started = True
                for target, what in ((self._run, "status"), (self._subscriber, "subscriber")):
                    threading.Thread(target=target, name=f"{self.name} {what}", daemon=True).start()
        if self.status_updater is not None:
            self.status_updater.register_job(job, self._executor())
        self._tasks.put(("watch", (job, self._submitted.pop(job.id, None))))

    def unregister_job(self, job: Job) -> None:
        """The job has a final state (PSI/J after 0.9.11 says so on every final):
        no script update or fallback poll is wanted for it any more.  Its
        subscription ends on its own, with the final jobtap reports."""
        if self.status_updater is not None:
            self.status_updater.unregister_job(job)
        if self._fallback is not None:
            self._fallback.unregister_job(job)

    # -- the status thread --------------------------------------------------------------
    def _run(self) -> None:
        checked = time.monotonic()
        try:
            while True:
                try:
                    kind, args = self._tasks.get(timeout=TICK)
                except queue.Empty:
                    kind, args = "tick", ()
                executor = self._executor()
                if executor is None:
                    return  # the executor is gone, and its jobs with it
                try:
                    if kind != "tick":
                        getattr(self, "_on_" + kind)(executor, *args)
                    if time.monotonic() - checked >= TICK:  # O(jobs): not on every change
                        checked = time.monotonic()
                        self._check(executor)
                except Exception:
                    log.exception("jobtap: the PSI/J status thread failed on %s", kind)
                del executor
        finally:
            self._to_subscribe.put(None)

    def _on_watch(self, executor: Any, job: Job, submitted_at: float | None) -> None:
        nid = job.native_id
        w = self._watched.get(nid)
        if w is not None:  # attached again under the same id: share its status
            w.jobs.append(job)
            if w.last is not None:
                executor._set_job_status(job, w.last)
            return
        deadline = time.monotonic() + self.config.subscribe_timeout
        self._watched[nid] = Watched(nid, [job], submitted_at, deadline)
        self._to_subscribe.put((nid, submitted_at is None))

    def _on_subscribed(self, executor: Any, nid: str, sub: jobtap.Subscription) -> None:
        w = self._watched.get(nid)
        if w is None or w.sub is not None:
            sub.close()  # handed to the fallback meanwhile (or finished)
            return
        w.sub = sub
        w.deadline = time.monotonic() + self.config.unseen_timeout

    def _on_failed(self, executor: Any, nid: str, reason: str) -> None:
        w = self._watched.get(nid)
        if w is not None:
            log.warning("jobtap: job %s: %s: polling it instead", nid, reason)
            self._to_fallback(executor, w)

    def _on_array(self, executor: Any, nid: str, tasks: list[str]) -> None:
        w = self._watched.get(nid)
        if w is None:
            return
        self._forget(w)
        shown = ", ".join(tasks[:5]) + (", ..." if len(tasks) > 5 else "")
        message = f"{nid} is a job array ({shown}): attach to its tasks, one job each"
        for job in w.jobs:
            executor._set_job_status(job, JobStatus(JobState.FAILED, message=message))

    def _on_change(self, executor: Any, nid: str, change: jobtap.Change) -> None:
        w = self._watched.get(nid)
        if w is None:
            return  # finished, or handed to the fallback
        record = change.record
        if change.type == "removed":
            self._on_failed(executor, nid, "its record left the cache without a final")
            return
        if self._older_job(w, record):
            if change.final:
                self._on_failed(executor, nid, "jobtap's record is an older job's (reused id)")
            return
        w.seen = True
        status = psij_status(record, change.final)
        if status is None:
            return
        if status.state.final:
            self._forget(w)
        w.last = status
        for job in list(w.jobs):
            executor._set_job_status(job, status)

    def _older_job(self, w: Watched, record: jobtap.Job) -> bool:
        """Whether the record is of a job submitted before ours (a reused id)."""
        return older_than_submission(record, w.submitted_at, self.config.clock_skew)

    def _check(self, executor: Any) -> None:
        """Hand over the jobs past their deadline, and those whose subscription
        ended with an error."""
        now = time.monotonic()
        for w in list(self._watched.values()):
            if w.sub is None:
                if now >= w.deadline:
                    timeout = self.config.subscribe_timeout
                    self._on_failed(executor, w.native_id, f"Redis did not answer in {timeout:g} s")
            elif w.sub.closed and w.sub.error is not None:
                self._on_failed(executor, w.native_id, f"subscription ended: {w.sub.error}")
            elif not w.seen and now >= w.deadline:
                self._ask_scheduler(executor, w)

    def _ask_scheduler(self, executor: Any, w: Watched) -> None:
        """jobtap has no record of the job: it may have lived and died between two
        of the collector's stats, be past retention, or jobtap may be behind.  Ask
        the scheduler once; keep listening unless the job is over."""
        nid = w.native_id
        self.asked.append(nid)
        try:
            status = executor.query_status(nid)
        except Exception as exc:
            self._on_failed(executor, nid, f"no record in jobtap, and the scheduler: {exc}")
            return
        log.info("jobtap: no record of job %s yet; the scheduler says %s", nid, status.state)
        if status.state.final:
            self._forget(w)
        else:
            w.deadline = time.monotonic() + self.config.unseen_timeout
        w.last = status
        for job in list(w.jobs):
            executor._set_job_status(job, status)

    def _forget(self, w: Watched) -> None:
        self._watched.pop(w.native_id, None)
        if w.sub is not None and not w.sub.closed:
            w.sub.close()

    def _to_fallback(self, executor: Any, w: Watched) -> None:
        self._forget(w)
        self.fallen_back.append(w.native_id)
        if self._fallback is None:
            self._fallback = executor._start_fallback_poller()
        for job in w.jobs:
            self._fallback.register_job(job)

    # -- the subscriber thread ------------------------------------------------------------
    def _subscriber(self) -> None:
        try:
            while (item := self._to_subscribe.get()) is not None:
                nid, attached = item
                try:
                    self._subscribe(nid, attached)
                except UNREACHABLE as exc:
                    self._tasks.put(("failed", (nid, f"cannot subscribe ({exc})")))
                except Exception as exc:
                    log.exception("jobtap: subscribing job %s failed", nid)
                    self._tasks.put(("failed", (nid, f"cannot subscribe ({exc})")))
        finally:
            if self._client is not None:
                self._client.close()

    def _subscribe(self, nid: str, attached: bool) -> None:
        if self._client is None:
            self._client = make_client(self.config, self._url)
        client = self._client
        user = job_owner(self.config, client)
        sub = client.subscribe(
            lambda change: self._tasks.put(("change", (nid, change))),
            jobs=[nid],
            user=user,
            attrs=("state",),
        )
        self._tasks.put(("subscribed", (nid, sub)))
        if attached and client.job(nid, user=user) is None:
            tasks = sorted(j.id for j in client.jobs(user, finished=True) if j.array_parent == nid)
            if tasks:
                self._tasks.put(("array", (nid, tasks)))
