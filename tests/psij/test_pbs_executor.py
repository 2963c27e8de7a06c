"""``jobtap-pbs`` through the PBS stand-ins (a live one-host server, see
sim/standins/pbs_server.py), with jobtap's real collector and worker on a real
redis-server: jobs end as PSI/J says, and the fallbacks (Redis unreachable or
silent at submit time, an attached job jobtap never saw, a reused id) still give
the right final state."""

from __future__ import annotations

import json
import socket
import subprocess
from datetime import timedelta

import pytest
from psij import InvalidJobException, Job, JobSpec, JobState

from jobtap.sim.localredis import free_port
from sim.rig.wait import eventually
from tests.psij.conftest import SITE
from tests.psij.support import new_executor
from tests.support.sdk import Writer, job_record

WAIT = timedelta(seconds=30)


def watched(ex, *specs: JobSpec) -> tuple[list[Job], dict[str, list[JobState]]]:
    """Submit jobs, recording each one's states through PSI/J's callback."""
    seen: dict[str, list[JobState]] = {}
    ex.set_job_status_callback(lambda job, status: seen.setdefault(job.id, []).append(status.state))
    jobs = [Job(spec) for spec in specs]
    for job in jobs:
        ex.submit(job)
    return jobs, seen


def until_exists(path, then: str = "true") -> JobSpec:
    """A job that runs until ``path`` exists (30 s at most), then ``then``."""
    loop = f"for i in $(seq 600); do [ -e {path} ] && break; sleep 0.05; done; {then}"
    return JobSpec("/bin/bash", ["-c", loop])


def test_jobs_end_as_psij_says(jobtap_pbs, tmp_path):
    """Completed, failed (exit code from PSI/J's file) and cancelled, each seen
    queued and active, all from jobtap: nothing falls back to polling.  (The jobs
    end only once jobtap reported them active: a job that lives and dies between
    two of the collector's stats is never collected, see the test after next.)"""
    ex = new_executor("jobtap-pbs", jobtap_pbs, work_directory=tmp_path / "work")
    go = tmp_path / "go"
    (ok, bad, long), seen = watched(
        ex, until_exists(go), until_exists(go, "exit 3"), JobSpec("/bin/sleep", ["60"])
    )
    for job in (ok, bad, long):
        assert job.wait(WAIT, target_states=[JobState.ACTIVE]).state == JobState.ACTIVE
    go.touch()
    long.cancel()
    assert long.wait(WAIT).state == JobState.CANCELED
    status = ok.wait(WAIT)
    assert (status.state, status.exit_code) == (JobState.COMPLETED, 0)
    assert status.metadata["jobtap_state"] == "completed"
    status = bad.wait(WAIT)
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)
    for job in (ok, bad, long):
        assert seen[job.id][:2] == [JobState.QUEUED, JobState.ACTIVE], seen[job.id]
    assert list(ex.watcher.fallen_back) == [] and list(ex.watcher.asked) == []


class SilentServer:
    """A TCP port that accepts connections and never answers (a hung Redis)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"


@pytest.mark.parametrize("redis_is", ["refusing", "silent"])
def test_redis_away_at_submit_falls_back_to_polling(pbs, tmp_path, redis_is):
    """Submission does not wait for Redis; the jobs are polled with qstat -x
    (PSI/J's poll thread) and end right."""
    silent = SilentServer() if redis_is == "silent" else None
    url = silent.url if silent else f"redis://127.0.0.1:{free_port()}/0"
    try:
        ex = new_executor(
            "jobtap-pbs",
            f"{url}?site={SITE}",
            work_directory=tmp_path / "work",
            subscribe_timeout=1.0,
            queue_polling_interval=1,
            initial_queue_polling_delay=0,
        )
        (ok, bad), _ = watched(ex, JobSpec("/bin/date"), JobSpec("/bin/false"))
        status = bad.wait(WAIT)
        assert (status.state, status.exit_code) == (JobState.FAILED, 1)
        assert "jobtap_state" not in (status.metadata or {})  # from qstat, not jobtap
        assert ok.wait(WAIT).state == JobState.COMPLETED
        assert sorted(ex.watcher.fallen_back) == sorted([ok.native_id, bad.native_id])
    finally:
        if silent:
            silent.sock.close()


def test_a_job_jobtap_never_saw_is_asked_of_the_scheduler(pbs, redis_server, tmp_path):
    """No collector runs (as if the job had lived and died between two stats, or
    were past retention): after unseen_timeout, qstat -x gives its final state."""
    script = tmp_path / "exit4.sh"
    script.write_text("#!/bin/bash\nexit 4\n")
    native_id = subprocess.run(
        ["qsub", str(script)], capture_output=True, text=True, check=True
    ).stdout.strip()
    ex = new_executor(
        "jobtap-pbs",
        f"{redis_server.url}?site={SITE}",
        work_directory=tmp_path / "work",
        unseen_timeout=1.0,
    )
    job = Job()
    ex.attach(job, native_id)
    status = job.wait(WAIT)
    assert status.state == JobState.FAILED  # Exit_status 4 from qstat -x (no PSI/J file)
    assert list(ex.watcher.asked) == [native_id] and list(ex.watcher.fallen_back) == []


def test_a_reused_id_does_not_hand_the_old_final_to_the_new_job(jobtap_pbs, r, tmp_path):
    """jobtap still holds the final of an older job 0.vm (a server whose ids
    started again): the new 0.vm is not taken for it, and ends right."""
    old = job_record("0.vm", "root", "completed", site=SITE, exit_status=0)
    Writer(r, site=SITE).jobs_at_once([old])  # submit_time 2026-11-21, an old job
    ex = new_executor(
        "jobtap-pbs",
        jobtap_pbs,
        work_directory=tmp_path / "work",
        queue_polling_interval=1,
        initial_queue_polling_delay=0,
    )
    (job,), _ = watched(ex, JobSpec("/bin/false"))
    assert job.native_id == "0.vm"
    status = job.wait(WAIT)
    assert (status.state, status.exit_code) == (JobState.FAILED, 1)
    assert list(ex.watcher.fallen_back) == ["0.vm"]


def test_array_parents_are_refused(pbs, tmp_path):
    ex = new_executor("jobtap-pbs", None, work_directory=tmp_path / "work")
    with pytest.raises(InvalidJobException, match="job array"):
        ex.attach(Job(), "12[].vm")


def test_a_subscription_that_ends_in_error_falls_back(jobtap_pbs, r, tmp_path):
    """The user's Redis account is disabled while a job runs: the SDK's reconnect
    is refused, the subscription ends with the error, and the job is polled to
    its end instead."""
    r.acl_setuser("root", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                  commands=["+@all"])  # fmt: skip
    url = jobtap_pbs.replace("redis://", "redis://root:pw@")
    ex = new_executor(
        "jobtap-pbs",
        url,
        work_directory=tmp_path / "work",
        queue_polling_interval=1,
        initial_queue_polling_delay=0,
    )
    go = tmp_path / "go"
    (job,), _ = watched(ex, until_exists(go))
    status = job.wait(WAIT, target_states=[JobState.ACTIVE])
    assert status.metadata["jobtap_state"] == "running"
    r.acl_setuser("root", enabled=False)
    r.client_kill_filter(user="root")
    eventually(lambda: list(ex.watcher.fallen_back) == [job.native_id], timeout=30)
    go.touch()
    status = job.wait(WAIT)
    assert (status.state, status.exit_code) == (JobState.COMPLETED, 0)


@pytest.mark.parametrize("qstat_mode", ["fail", "garbage", "missing"])
def test_the_fallback_fails_a_job_whose_status_stays_unreadable(
    pbs, tmp_path, qstat_mode, monkeypatch
):
    """As PSI/J's own poll thread does: qstat cannot reach the server (or prints
    output PSI/J cannot parse) for more than queue_polling_error_threshold polls
    in a row, or cannot be run at all (at once), and the polled job is FAILED
    with the reason, not left waiting."""
    ex = new_executor(
        "jobtap-pbs",
        f"redis://127.0.0.1:{free_port()}/0?site={SITE}",  # refusing: polled from the start
        work_directory=tmp_path / "work",
        queue_polling_interval=1,
        initial_queue_polling_delay=0,
        queue_polling_error_threshold=2,
    )
    go = tmp_path / "go"
    (job,), _ = watched(ex, until_exists(go))
    eventually(lambda: list(ex.watcher.fallen_back) == [job.native_id], timeout=30)
    if qstat_mode == "missing":
        monkeypatch.setenv("PATH", str(tmp_path / "no-such-folder"))
    else:
        control = tmp_path / "fake-pbs.json"
        settings = json.loads(control.read_text())
        control.write_text(json.dumps({**settings, "modes": {"qstat": qstat_mode}}))
    status = job.wait(WAIT)
    assert status.state == JobState.FAILED
    assert status.message and status.message.startswith("Failed to poll for job status")
    go.touch()  # the job itself may end now
