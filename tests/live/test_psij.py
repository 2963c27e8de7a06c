"""PSI/J's own executor tests on the real Slurm of deploy/slurm/start.sh
(MinJobAge 10 s), with ``jobtap-slurm``; jobtap runs in follow mode (the
slurmctld hook pokes, ``jobtap collector --follow``, ``jobtap worker``) on a real
redis-server.

``make test`` runs a representative part of the suite with ``jobtap-slurm`` only:
the tests bound by the stock executor's 30-s poll and ``test_cancel``, which the
stock executor fails here (the cancelled job is purged from ``squeue`` between two
polls and reported COMPLETED); every one must pass.  The comparison with PSI/J's
stock ``slurm`` executor (2.5 minutes of its 30-s polls for this part alone) is a
benchmark: ``python -m bench.psij_suite`` runs both side by side on the whole suite.

The other tests here use Slurm through ``jobtap-slurm`` in this process: a reused
job id (jobtap holding an older job's final) and ``sacct`` for jobs that left
``squeue``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from psij import Job, JobSpec, JobState

from sim.rig.psij_upstream import (
    EXECUTORS,
    check_all_passed,
    jobtap_on_slurm,
    prepare,
    run_suite,
    sdist_tests,
)
from sim.rig.slurm import SITE, _cmd, sbatch
from sim.rig.wait import eventually
from tests.psij.support import new_executor
from tests.support.sdk import Writer, job_record

SUBSET = (
    "test_executor.py::test_simple_job",
    "test_executor.py::test_failing_job",
    "test_executor.py::test_attach",
    "test_executor.py::test_cancel",
    "test_executor.py::test_parallel_jobs",
    "test_executor.py::test_list",
)
WAIT = timedelta(seconds=60)
JOBTAP_SLURM = EXECUTORS[1]

pytestmark = [
    pytest.mark.timeout(900),  # the first test may wait for the Slurm lock
    # The tool runs sbatch/squeue from its own PATH, the host's 22.05; the backend's
    # own live tests (test_slurm_*.py) run on 24.11 as well.
    pytest.mark.slurm_releases("22.05"),
]


def test_psij_executor_tests_pass_with_jobtap_slurm(clean, redis_server, tmp_path):
    run_dir = prepare(tmp_path / "psij-tests", sdist_tests())
    with jobtap_on_slurm(redis_server.url, tmp_path) as env:
        result = run_suite(run_dir, [JOBTAP_SLURM], SUBSET, env=env, timeout=600)
    print("\n" + result.table())
    check_all_passed(result, JOBTAP_SLURM)


def test_a_reused_id_does_not_hand_the_old_final_to_the_new_job(clean, r, redis_server, tmp_path):
    """jobtap still holds the final of an older job with the id Slurm hands out
    next (ids started again after a purge): the new job is polled instead, and
    ends right."""
    probe = sbatch("--wrap", "true", "-J", "psij_probe")
    reused = str(int(probe) + 1)
    old = job_record(reused, "root", "completed", site=SITE, scheduler="slurm", exit_status=0)
    Writer(r, site=SITE).jobs_at_once([old])  # submitted 2026-11-21
    ex = new_executor(
        "jobtap-slurm",
        f"{redis_server.url}?site={SITE}",
        work_directory=tmp_path / "work",
        queue_polling_interval=1,
        initial_queue_polling_delay=0,
    )
    job = Job(JobSpec("/bin/bash", ["-c", "exit 5"]))
    ex.submit(job)
    assert job.native_id == reused, "another job took the id: is the Slurm lock held?"
    status = job.wait(WAIT)
    assert (status.state, status.exit_code) == (JobState.FAILED, 5)
    assert list(ex.watcher.fallen_back) == [reused]


def test_sacct_gives_the_final_state_of_jobs_that_left_squeue(clean, tmp_path):
    """What the fallback and the one-shot look-up ask when squeue no longer lists
    a job: sacct's record (here right after the end; it outlives MinJobAge)."""
    ex = new_executor("jobtap-slurm", None, work_directory=tmp_path / "work")
    failed = sbatch("--wrap", "exit 3", "-J", "psij_exit3")
    cancelled = sbatch("--wrap", "sleep 120", "-J", "psij_cancel")
    _cmd("scancel", cancelled)
    done = sbatch("--wrap", "true", "-J", "psij_ok")
    history = {}

    def ended():
        for job_id in (failed, cancelled, done):
            history[job_id] = ex.history(job_id)
        return all(s is not None and s.state.final for s in history.values())

    eventually(ended, timeout=60, interval=0.5, what="sacct's records of the three jobs")
    assert history[failed].state == JobState.FAILED and "FAILED" in history[failed].message
    assert history[cancelled].state == JobState.CANCELED
    assert history[done].state == JobState.COMPLETED
    assert ex.history("999999999") is None
