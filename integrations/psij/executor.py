"""What the ``jobtap-*`` executors add to PSI/J's batch executors: status from
jobtap (:class:`~jobtap.psij.watcher.JobWatcher` in place of the queue-poll thread),
a patient read of PSI/J's exit-code file, a clear refusal of array parents, and
custom attributes under the executor's own name."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psij import InvalidJobException, Job, JobExecutorConfig, JobState, JobStatus

from .config import JobtapExecutorConfig
from .fallback import FallbackPoller, StatusOutputError
from .watcher import JobWatcher

log = logging.getLogger("jobtap.psij")


def _written(path: Path) -> bool:
    """``path`` exists and holds something: the file is created before its
    content is written (``echo $? > FILE``; a shared filesystem may show the
    two apart), and an empty exit-code file decides nothing."""
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False


def wait_for_file(path: Path, timeout: float) -> bool:
    """Whether ``path`` is written within ``timeout`` seconds (checked at growing
    intervals: a shared filesystem may show a file written on a compute node late)."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while not _written(path):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.5)
    return True


class JobtapExecutorMixin:
    """Mixed in before PSI/J's Slurm or PBS executor class.  Subclasses set
    ``NATIVE_PREFIX`` (the custom-attribute prefix of the native executor),
    ``is_array_parent`` and ``history``."""

    NATIVE_PREFIX = ""
    config: JobtapExecutorConfig
    _run_command: Callable[[list[str]], str]
    get_status_command: Callable[[list[str]], list[str]]
    parse_status_output: Callable[[int, str], dict[str, JobStatus]]
    work_directory: Path
    name: str
    url: str | None

    def _jobtap_init(
        self, url: str | None, config: JobExecutorConfig | None
    ) -> JobtapExecutorConfig:
        """The configuration to hand PSI/J's constructor; remembers the URL, which
        PSI/J's Slurm and PBS executors do not pass on."""
        self._jobtap_url = url
        if isinstance(config, JobtapExecutorConfig):
            return config
        if config is None:
            return JobtapExecutorConfig()
        return JobtapExecutorConfig._from_config(config)

    # -- status: jobtap instead of the queue-poll thread ------------------------------
    def _start_queue_poll_thread(self) -> JobWatcher:  # called by PSI/J's constructor
        self.url = self._jobtap_url
        return JobWatcher(self, self.config)

    def _start_fallback_poller(self) -> FallbackPoller:
        poller = FallbackPoller(f"{self.name} fallback polling", self.config, self)
        poller.start()
        return poller

    @property
    def watcher(self) -> JobWatcher:
        return self._queue_poll_thread  # type: ignore[attr-defined]

    def submit(self, job: Job) -> None:
        self.watcher.submitting(job)
        try:
            super().submit(job)  # type: ignore[misc]
        except BaseException:
            self.watcher.not_submitted(job)
            raise

    def attach(self, job: Job, native_id: str) -> None:
        if self.is_array_parent(native_id):
            raise InvalidJobException(
                f"{self.name}: {native_id} is a job array; PSI/J jobs are single jobs: "
                "attach to one of its tasks"
            )
        super().attach(job, native_id)  # type: ignore[misc]

    def is_array_parent(self, native_id: str) -> bool:
        raise NotImplementedError

    def query_status(self, native_id: str) -> JobStatus:
        """The job's status from the scheduler, once, as PSI/J's poll thread would
        see it (with the history look-up of :meth:`history` for a vanished job)."""
        return self.query_statuses([native_id])[native_id]

    def query_statuses(self, native_ids: list[str]) -> dict[str, JobStatus]:
        """Each job's status from one run of PSI/J's status command; a job it no
        longer lists is looked up in :meth:`history`, and called COMPLETED (PSI/J's
        own answer) only if that does not know it either.  Raises
        :class:`~jobtap.psij.fallback.StatusOutputError` if PSI/J cannot parse the
        output, and whatever running the command raised if it could not run."""
        try:
            out, code = self._run_command(self.get_status_command(native_ids)), 0
        except subprocess.CalledProcessError as exc:
            out, code = exc.output, exc.returncode
        try:
            found = self.parse_status_output(code, out)
        except Exception as exc:
            raise StatusOutputError(f"{type(exc).__name__}: {exc}") from exc
        return {nid: found.get(nid) or self._history_or_done(nid) for nid in native_ids}

    def _history_or_done(self, native_id: str) -> JobStatus:
        try:
            status = self.history(native_id)
        except Exception as exc:  # a failing history must not fail the other jobs
            log.warning("jobtap: history of job %s failed: %s", native_id, exc)
            status = None
        return status or JobStatus(JobState.COMPLETED)

    def history(self, native_id: str) -> JobStatus | None:
        """The final state of a job that left the queue, from the scheduler's history."""
        raise NotImplementedError

    # -- the exit-code file -------------------------------------------------------------
    def _read_aux_files(self, job: Job, status: JobStatus) -> None:
        """PSI/J's exit-code file decides COMPLETED versus FAILED: wait a moment for
        it when the scheduler says the job completed, and let it overrule a FAILED
        from the scheduler (the batch script wrote the command's ``$?`` itself)."""
        if status.state in (JobState.COMPLETED, JobState.FAILED) and status.exit_code is None:
            assert job.native_id
            ec = self.work_directory / (job.native_id + ".ec")
            if status.state == JobState.COMPLETED:
                wait_for_file(ec, self.config.exit_code_wait)
            elif ec.exists():
                status.state = JobState.COMPLETED
                status.message = None
        super()._read_aux_files(job, status)  # type: ignore[misc]

    # -- custom attributes ----------------------------------------------------------------
    def _create_script_context(self, job: Job) -> dict[str, object]:
        """``jobtap-slurm.qos`` is rendered as ``slurm.qos`` would be."""
        ctx: dict[str, Any] = super()._create_script_context(job)  # type: ignore[misc]
        attrs = ctx.get("custom_attributes")
        if isinstance(attrs, dict) and self.name.lower() in attrs:
            own = attrs.pop(self.name.lower())
            attrs[self.NATIVE_PREFIX] = list(attrs.get(self.NATIVE_PREFIX, [])) + own
        return ctx
