"""jobtap's normalised job states as PSI/J states.

PSI/J's exit-code file, read after this mapping (see :mod:`jobtap.psij.executor`),
stays the authority for COMPLETED versus FAILED: PSI/J's batch scripts record the
command's ``$?`` themselves and exit 0, so the scheduler says "completed" either way.
"""

from __future__ import annotations

from psij import JobState, JobStatus

import jobtap

QUEUED = frozenset({"queued", "held", "waiting"})
ACTIVE = frozenset({"running", "suspended", "exiting"})
FINALS = {
    "completed": JobState.COMPLETED,
    "failed": JobState.FAILED,
    "cancelled": JobState.CANCELED,
    # A job that left the scheduler with no history: what PSI/J's poll thread
    # says of a job that vanished from the queue (the exit-code file decides).
    "unknown": JobState.COMPLETED,
}


def psij_status(job: jobtap.Job, final: bool) -> JobStatus | None:
    """The PSI/J status of a jobtap record; ``None`` when it says nothing PSI/J
    can use (a non-final ``unknown``)."""
    meta = {"native_id": job.id, "native_state": job.native_state, "jobtap_state": job.state}
    if final or job.state in jobtap.TERMINAL:
        state = FINALS.get(job.state, JobState.COMPLETED)
        message = (job.reason or job.native_state or "failed") if state == JobState.FAILED else None
        return JobStatus(state, message=message, metadata=meta)
    if job.state in QUEUED:
        return JobStatus(JobState.QUEUED, metadata=meta)
    if job.state in ACTIVE:
        return JobStatus(JobState.ACTIVE, metadata=meta)
    return None
