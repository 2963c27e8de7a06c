"""``jobtap-slurm``: PSI/J's Slurm executor (``sbatch``, ``scancel``, the same batch
script) with job status from jobtap.  Jobs jobtap cannot report are polled with
PSI/J's ``squeue``, and a job that left ``squeue`` is looked up in ``sacct`` instead
of being called COMPLETED (with ``MinJobAge`` short, a cancelled job is often gone
before the next poll)."""

from __future__ import annotations

import re
import subprocess

from psij import JobExecutorConfig, JobState, JobStatus
from psij.executors.batch.slurm import SlurmJobExecutor

from .executor import JobtapExecutorMixin

# sacct's State (first word: "CANCELLED by 0") -> PSI/J
SACCT_STATES = {
    "PENDING": JobState.QUEUED,
    "REQUEUED": JobState.QUEUED,
    "RESIZING": JobState.QUEUED,
    "RUNNING": JobState.ACTIVE,
    "SUSPENDED": JobState.ACTIVE,
    "COMPLETING": JobState.ACTIVE,
    "COMPLETED": JobState.COMPLETED,
    "CANCELLED": JobState.CANCELED,
}
ARRAY_PARENT = re.compile(r"^\d+_(\[.*\]|\*)$")  # 12_[1-5], 12_*


def parse_sacct(native_id: str, out: str) -> JobStatus | None:
    """The status of ``native_id`` in ``sacct -X -n -P -o JobID,State,Reason`` output."""
    for line in out.splitlines():
        fields = line.split("|")
        if len(fields) < 2 or fields[0] != native_id:
            continue
        word = fields[1].split()[0] if fields[1].strip() else ""
        state = SACCT_STATES.get(word, JobState.FAILED)
        message = None
        if state == JobState.FAILED:
            reason = fields[2] if len(fields) > 2 and fields[2] not in ("", "None") else None
            message = f"{word}: {reason}" if reason else word
        return JobStatus(state, message=message, metadata={"native_state": fields[1]})
    return None


class JobtapSlurmJobExecutor(JobtapExecutorMixin, SlurmJobExecutor):
    """PSI/J's Slurm executor, listening to jobtap instead of polling ``squeue``.

    ``url``: the jobtap Redis, optionally with the site (``redis://h:6379/0?site=hpc1``);
    ``config``: a :class:`~jobtap.psij.config.JobtapExecutorConfig` (or any PSI/J
    configuration, whose settings are taken over).
    """

    NATIVE_PREFIX = "slurm"

    def __init__(self, url: str | None = None, config: JobExecutorConfig | None = None):
        super().__init__(url=url, config=self._jobtap_init(url, config))  # type: ignore[arg-type]

    def is_array_parent(self, native_id: str) -> bool:
        return bool(ARRAY_PARENT.match(native_id))

    def history(self, native_id: str) -> JobStatus | None:
        try:
            out = self._run_command(
                ["sacct", "-X", "-n", "-P", "-o", "JobID,State,Reason", "-j", native_id]
            )
        except subprocess.CalledProcessError:
            return None  # no accounting here: PSI/J's own answer (COMPLETED) stands
        return parse_sacct(native_id, out)
