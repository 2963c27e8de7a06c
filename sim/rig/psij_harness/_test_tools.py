"""PSI/J's test helpers (``_test_tools`` of PSI/J's repository, which its sdist
does not ship), written for jobtap to the same interface."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from executor_test_params import ExecutorTestParams
from psij import Job, JobAttributes, JobExecutor, JobState, JobStatus, ResourceSpecV1

_QUICK_EXECUTORS = {"local", "batch-test"}
TEST_DIR = Path.home() / ".psij" / "test"


def _make_test_dir() -> None:
    TEST_DIR.mkdir(parents=True, exist_ok=True)


def _get_timeout(execparams: ExecutorTestParams) -> timedelta | None:
    """PSI/J waits without a limit for batch executors (pytest-timeout bounds them)."""
    return timedelta(minutes=10) if execparams.executor in _QUICK_EXECUTORS else None


def _read_file(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return "<missing>"
    except Exception as ex:
        return f"<error: {ex}>"


def assert_completed(job: Job, status: JobStatus | None, attached: bool = False) -> None:
    assert status is not None
    if status.state == JobState.COMPLETED:
        return
    details = f"Exit code: {status.exit_code}, Status message: {status.message}"
    if not attached:
        assert job.spec is not None
        details += (
            f", stdout: {_read_file(job.spec.stdout_path)}"
            f", stderr: {_read_file(job.spec.stderr_path)}"
        )
    raise AssertionError(f"Job not completed. {details}")


def _get_executor_instance(ep: ExecutorTestParams, job: Job | None = None) -> JobExecutor:
    if job is not None:
        assert job.spec is not None
        job.spec.launcher = ep.launcher
        attrs = JobAttributes(custom_attributes=ep.custom_attributes)
        job.spec.attributes = attrs
        if ep.account is not None:
            attrs.account = ep.account
        if ep.queue_name is not None:
            attrs.queue_name = ep.queue_name
        res = job.spec.resources
        if (
            isinstance(res, ResourceSpecV1)
            and res.computed_node_count > 1
            and ep.multi_node_queue_name is not None
        ):
            attrs.queue_name = ep.multi_node_queue_name
    return JobExecutor.get_instance(ep.executor, url=ep.url)


@contextmanager
def _deploy(path: Path | str) -> Iterator[Path]:
    """Copy ``path`` to the test directory (a shared filesystem on a cluster)."""
    _make_test_dir()
    fd, name = tempfile.mkstemp(dir=TEST_DIR)
    os.close(fd)
    try:
        shutil.copyfile(path, name)
        yield Path(name)
    finally:
        os.unlink(name)
