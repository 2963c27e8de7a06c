"""``jobtap-pbs``: PSI/J's PBS Pro executor (``qsub``, ``qdel``, the same batch
script) with job status from jobtap.  Jobs jobtap cannot report are polled with
PSI/J's ``qstat -f -F json -x``, which includes finished jobs while the server keeps
their history."""

from __future__ import annotations

from psij import JobExecutorConfig, JobStatus
from psij.executors.batch.pbs import PBSJobExecutor

from .executor import JobtapExecutorMixin


class JobtapPBSJobExecutor(JobtapExecutorMixin, PBSJobExecutor):
    """PSI/J's PBS Pro executor, listening to jobtap instead of polling ``qstat``.

    ``url`` and ``config`` as for :class:`~jobtap.psij.slurm.JobtapSlurmJobExecutor`.
    """

    NATIVE_PREFIX = "pbs"

    def __init__(self, url: str | None = None, config: JobExecutorConfig | None = None):
        super().__init__(url=url, config=self._jobtap_init(url, config))  # type: ignore[arg-type]

    def is_array_parent(self, native_id: str) -> bool:
        return "[]" in native_id  # 12[].server; subjobs are 12[3].server

    def history(self, native_id: str) -> JobStatus | None:
        return None  # qstat -x already lists finished jobs: a job missing from it is gone
