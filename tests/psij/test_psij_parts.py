"""The pieces of jobtap.psij that need no scheduler: the state mapping, the URL,
sacct's output, the exit-code file read a moment late, discovery by PSI/J, and
what each import loads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from psij import InvalidJobException, Job, JobExecutor, JobSpec, JobState, JobStatus

import jobtap
from jobtap.psij.config import JobtapExecutorConfig, split_url
from jobtap.psij.slurm import parse_sacct
from jobtap.psij.states import psij_status
from sim.rig.paths import ROOT
from sim.rig.records import job_record
from tests.psij.support import new_executor
from tests.sdk.test_imports import install_copy, python_of
from tests.support.sdk import Writer
from tests.support.sdk import job_record as sdk_record


def record(state: str, **extra) -> jobtap.Job:
    return jobtap.Job.from_record(job_record("7", "alice", state, **extra))


@pytest.mark.parametrize(
    "state, final, expected",
    [
        ("queued", False, JobState.QUEUED),
        ("held", False, JobState.QUEUED),
        ("waiting", False, JobState.QUEUED),
        ("running", False, JobState.ACTIVE),
        ("suspended", False, JobState.ACTIVE),
        ("exiting", False, JobState.ACTIVE),
        ("completed", True, JobState.COMPLETED),
        ("failed", True, JobState.FAILED),
        ("cancelled", True, JobState.CANCELED),
        ("unknown", True, JobState.COMPLETED),  # vanished: as PSI/J treats it
        ("unknown", False, None),
    ],
)
def test_jobtap_states_as_psij_states(state, final, expected):
    status = psij_status(record(state), final)
    assert (status.state if status else None) == expected


def test_a_failed_job_carries_the_reason():
    status = psij_status(record("failed", reason="TimeLimit", exit_status=0), True)
    assert (status.state, status.message) == (JobState.FAILED, "TimeLimit")
    assert status.metadata["jobtap_state"] == "failed"


def test_the_url_names_redis_and_site():
    assert split_url("redis://h:6379/0?site=hpc1") == ("redis://h:6379/0", "hpc1")
    assert split_url("redis://u:p@h/2?site=a&socket_timeout=3") == (
        "redis://u:p@h/2?socket_timeout=3",
        "a",
    )
    assert split_url("redis://h/0") == ("redis://h/0", None)
    assert split_url(None) == (None, None)


# sacct -X -n -P -o JobID,State,Reason of Slurm 22.05 (deploy/slurm/start.sh)
SACCT = """2047|COMPLETED|None
2048|FAILED|None
2049|CANCELLED by 0|None
2050_2|FAILED|None
2061|TIMEOUT|None
2062|RUNNING|None
"""


def test_sacct_output():
    assert parse_sacct("2047", SACCT).state == JobState.COMPLETED
    failed = parse_sacct("2048", SACCT)
    assert (failed.state, failed.message) == (JobState.FAILED, "FAILED")
    assert parse_sacct("2049", SACCT).state == JobState.CANCELED
    assert parse_sacct("2050_2", SACCT).state == JobState.FAILED
    assert parse_sacct("2061", SACCT).message == "TIMEOUT"
    assert parse_sacct("2062", SACCT).state == JobState.ACTIVE
    assert parse_sacct("2050", SACCT) is None  # the array itself is not its task


def _completed_with_late_exit_code(tmp_path, native_id: str, *, created_empty: bool):
    """A jobtap-slurm executor's executor and job ``native_id``, and the status
    it gives when the scheduler says completed and the exit-code file gets
    ``3`` 0.3 s later (``created_empty``: the file exists, empty, before)."""
    ex = new_executor("jobtap-slurm", None, work_directory=tmp_path, exit_code_wait=10)
    ex.work_directory.mkdir(parents=True)
    job = Job(JobSpec("/bin/true"))
    job._native_id = native_id
    path = ex.work_directory / f"{native_id}.ec"
    if created_empty:
        path.touch()
    late = threading.Timer(0.3, lambda: path.write_text("3\n"))
    late.start()
    status = JobStatus(JobState.COMPLETED)
    ex._read_aux_files(job, status)
    late.join()
    return ex, job, status


def test_the_exit_code_file_is_waited_for_and_decides(tmp_path):
    """The scheduler says completed; PSI/J's file says 3 and shows up late."""
    ex, job, status = _completed_with_late_exit_code(tmp_path, "41", created_empty=False)
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)
    # and a FAILED from the scheduler yields to a file that says 0
    (ex.work_directory / "42.ec").write_text("0\n")
    job._native_id = "42"
    status = JobStatus(JobState.FAILED, message="NonZeroExitCode")
    ex._read_aux_files(job, status)
    assert (status.state, status.exit_code, status.message) == (JobState.COMPLETED, 0, None)


def test_an_exit_code_file_is_read_once_written_not_once_created(tmp_path):
    """The file exists before its content is written (a shell's ``> FILE``, or a
    shared filesystem showing the two apart): an empty file is waited past.  A
    clean make test once read such a file empty and took exit 3 for success."""
    _, _, status = _completed_with_late_exit_code(tmp_path, "43", created_empty=True)
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)


def test_psij_settings_are_taken_over(tmp_path):
    from psij.executors.batch.slurm import SlurmExecutorConfig

    config = SlurmExecutorConfig(work_directory=tmp_path, queue_polling_interval=7, keep_files=1)
    ex = JobExecutor.get_instance("jobtap-slurm", config=config)
    assert isinstance(ex.config, JobtapExecutorConfig)
    assert (ex.config.queue_polling_interval, ex.config.keep_files) == (7, 1)
    assert ex.work_directory == tmp_path / "jobtap-slurm"


IMPORTS = """
import json, sys
before = set(sys.modules)
import jobtap
after_jobtap = set(sys.modules)
import psij
ex = psij.JobExecutor.get_instance("jobtap-slurm", url="redis://127.0.0.1:1/0?site=x")
print(json.dumps({
    "names": sorted(psij.JobExecutor.get_executor_names()),
    "jobtap_loads_psij": any(m.split(".")[0] == "psij" for m in after_jobtap - before),
    "class": type(ex).__module__ + "." + type(ex).__name__,
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("rq", "click")
                     or m.startswith("jobtap.collector") or m.startswith("jobtap.workers")),
}))
"""


def test_psij_finds_the_executors_and_loads_no_service_code():
    """PSI/J discovers jobtap-slurm and jobtap-pbs through psij-descriptors/ and
    gets the jobtap.psij classes; ``import jobtap`` loads no PSI/J, and PSI/J's
    path loads no rq, click, collector or workers."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", IMPORTS], capture_output=True, text=True, env=env, check=True
    ).stdout
    found = json.loads(out)
    assert {"jobtap-slurm", "jobtap-pbs", "slurm", "pbs"} <= set(found["names"])
    assert found["class"] == "jobtap.psij.slurm.JobtapSlurmJobExecutor"
    assert found["jobtap_loads_psij"] is False
    assert found["loaded"] == []


def test_an_array_is_refused_clearly(r, redis_server, tmp_path):
    """An array parent's id form is refused by attach(); a bare Slurm id that
    jobtap knows only as array tasks fails the job at once, naming them."""
    ex = new_executor(
        "jobtap-slurm", f"{redis_server.url}?site=t1", work_directory=tmp_path, user="alice"
    )
    with pytest.raises(InvalidJobException, match="job array"):
        ex.attach(Job(), "20_[1-5]")
    Writer(r).jobs_at_once(
        [
            sdk_record(f"20_{i}", "alice", "running", array_parent="20", array_index=i)
            for i in (1, 2)
        ]
    )
    job = Job()
    ex.attach(job, "20")
    status = job.wait(timedelta(seconds=20))
    assert status.state == JobState.FAILED
    assert status.message == "20 is a job array (20_1, 20_2): attach to its tasks, one job each"


def test_psij_finds_the_executors_of_an_installed_jobtap(tmp_path):
    """``pip install .`` (not editable): PSI/J finds psij-descriptors/ in
    site-packages and loads jobtap.psij from there."""
    site = install_copy(tmp_path)
    probe = (
        "import psij, jobtap.psij.pbs as m\n"
        "ex = psij.JobExecutor.get_instance('jobtap-pbs')\n"
        "print(type(ex) is m.JobtapPBSJobExecutor, m.__file__)"
    )
    out = subprocess.run(
        [python_of(site), "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.split()
    assert out == ["True", str(site / "jobtap" / "psij" / "pbs.py")]
