"""Polling for the jobs jobtap cannot report: PSI/J's own queue-poll thread, which
asks the scheduler for the final state of a job that left its queue (``sacct``,
``qstat -x``) before calling it COMPLETED as the stock thread does.

Jobs come here when subscribing failed (Redis slow or unreachable at submit time),
when jobtap has no record of them after ``unseen_timeout`` (an attached job it never
saw, or one past retention) and when jobtap's record belongs to an older job that
had the same id.  The thread is PSI/J's (a private class, pinned by the version range
of the ``psij`` extra), so these jobs are polled exactly as PSI/J would, every
``queue_polling_interval`` seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from psij import JobState, JobStatus
from psij.executors.batch.batch_scheduler_executor import _QueuePollThread

log = logging.getLogger("jobtap.psij")

# native id -> its final status from the scheduler's history, or None if unknown
History = Callable[[str], JobStatus | None]


class FallbackPoller(_QueuePollThread):
    """PSI/J's queue-poll thread, with a history look-up for vanished jobs."""

    def __init__(self, name: str, config: Any, executor: Any, history: History):
        super().__init__(name, config, executor)
        self._history = history

    def _get_job_status(self, native_id: str, status_map: dict[str, JobStatus]) -> JobStatus:
        if native_id in status_map:
            return status_map[native_id]
        try:
            found = self._history(native_id)
        except Exception as exc:  # a failing history must not fail the poll of the others
            log.warning("jobtap: history of job %s failed: %s", native_id, exc)
            found = None
        return found if found is not None else JobStatus(JobState.COMPLETED)
