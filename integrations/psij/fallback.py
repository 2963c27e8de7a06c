"""Polling for the jobs jobtap cannot report, as PSI/J's own queue-poll thread polls
them: every ``queue_polling_interval`` seconds (the first time after
``initial_queue_polling_delay``), one status command for all of them, with the
executor's history look-up (``sacct``, ``qstat -x``) for a job that left the queue
where the stock thread would call it COMPLETED.

Jobs come here when subscribing failed (Redis slow or unreachable at submit time),
when jobtap has no record of them after ``unseen_timeout`` (an attached job it never
saw, or one past retention) and when jobtap's record belongs to an older job that
had the same id.

The thread is ours, built on the public part of PSI/J's batch executor
(``get_status_command``, ``parse_status_output``, through the executor's
:meth:`~jobtap.psij.executor.JobtapExecutorMixin.query_statuses`), not a subclass of
PSI/J's private ``_QueuePollThread``, whose constructor and registration changed
after 0.9.11.  Errors are handled as the stock thread handles them: a status command
that cannot run fails the polled jobs at once; output that cannot be parsed does so
after ``queue_polling_error_threshold`` polls in a row.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any

from psij import Job, JobState, JobStatus

log = logging.getLogger("jobtap.psij")


class StatusOutputError(Exception):
    """PSI/J's parser refused the status command's output."""


class FallbackPoller(threading.Thread):
    """Polls the registered jobs until each has a final state."""

    def __init__(self, name: str, config: Any, executor: Any):
        super().__init__(name=name, daemon=True)
        self.config = config
        self._executor = weakref.ref(executor)
        self._jobs: dict[str, set[Job]] = {}  # native id -> the PSI/J jobs attached to it
        self._lock = threading.Lock()
        self._errors = 0  # polls in a row whose output could not be parsed

    def register_job(self, job: Job) -> None:
        assert job.native_id
        with self._lock:
            self._jobs.setdefault(job.native_id, set()).add(job)

    def unregister_job(self, job: Job) -> None:
        with self._lock:
            self._jobs.pop(job.native_id or "", None)

    def run(self) -> None:
        time.sleep(self.config.initial_queue_polling_delay)
        while self._executor() is not None:
            self.poll()
            time.sleep(self.config.queue_polling_interval)

    def poll(self) -> None:
        """Ask the scheduler once about every registered job and set their statuses."""
        executor = self._executor()
        with self._lock:
            jobs = {nid: set(js) for nid, js in self._jobs.items()}
        if executor is None or not jobs:
            return
        try:
            statuses = executor.query_statuses(list(jobs))
        except StatusOutputError as exc:
            self._errors += 1
            log.warning("jobtap: polling %d jobs: %s", len(jobs), exc)
            if self._errors > self.config.queue_polling_error_threshold:
                self._fail(executor, jobs, f"Failed to poll for job status: {exc}")
            return
        except Exception as exc:  # the command could not run
            log.warning("jobtap: polling %d jobs: %s", len(jobs), exc)
            self._fail(executor, jobs, f"Failed to poll for job status: {exc}")
            return
        self._errors = 0
        for nid, job_set in jobs.items():
            status = statuses[nid]
            if status.state.final:
                self._drop(nid)
            for job in job_set:
                executor._set_job_status(job, status)

    def _fail(self, executor: Any, jobs: dict[str, set[Job]], message: str) -> None:
        self._errors = 0
        for nid, job_set in jobs.items():
            self._drop(nid)
            for job in job_set:
                executor._set_job_status(job, JobStatus(JobState.FAILED, message=message))

    def _drop(self, native_id: str) -> None:
        with self._lock:
            self._jobs.pop(native_id, None)
