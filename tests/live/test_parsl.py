"""``jobtap.parsl.SlurmProvider`` on the real Slurm of deploy/slurm/start.sh, with
jobtap in follow mode (the slurmctld hook pokes, ``jobtap collector --follow``,
``jobtap worker``) on a real redis-server: Parsl's provider contract, with status
from jobtap and no status command run on the scheduler.

Every status command the provider runs goes through the logging wrappers of
sim/rig/cmdlog.py (first on PATH); the test's own Slurm calls use absolute
paths, and jobtap's collector starts before the wrappers are on PATH.
``status()`` is synchronous: when it has returned, whatever it ran is in the log,
so "no command ran" is read after the last call.
"""

from __future__ import annotations

import subprocess

import pytest
from parsl.jobs.states import JobState

from jobtap.parsl import SlurmProvider
from jobtap.sim.localredis import free_port
from sim.rig.cmdlog import CommandLog
from sim.rig.psij_upstream import jobtap_on_slurm
from sim.rig.slurm import SITE
from sim.rig.wait import eventually

pytestmark = [
    pytest.mark.timeout(900),  # the first test may wait for the Slurm lock
    # The tool runs sbatch/squeue from its own PATH, the host's 22.05; the backend's
    # own live tests (test_slurm_*.py) run on 24.11 as well.
    pytest.mark.slurm_releases("22.05"),
]
SQUEUE = "/usr/bin/squeue"


def provider(url: str, tmp_path, **jobtap) -> SlurmProvider:
    p = SlurmProvider(
        partition="debug", exclusive=False, walltime="00:05:00", init_blocks=0, **jobtap
    )
    p.script_dir = str(tmp_path / "scripts")
    (tmp_path / "scripts").mkdir(exist_ok=True)
    return p


def status_of(p: SlurmProvider, job_id: str):
    return p.status([job_id])[0]


def in_squeue(job_id: str) -> bool:
    out = subprocess.run(
        [SQUEUE, "-h", "-j", job_id, "-o", "%A"], capture_output=True, text=True, check=False
    ).stdout
    return job_id in out.split()


def scancel(job_id: str) -> None:
    subprocess.run(["/usr/bin/scancel", job_id], check=True, capture_output=True)


def test_blocks_have_their_real_states_from_jobtap_and_no_status_command_runs(
    clean, redis_server, tmp_path, monkeypatch
):
    """Right after submit a block is PENDING or RUNNING (never COMPLETED); a block
    whose script exits 3 is FAILED with exit code 3; a block cancelled by
    someone else while it runs is CANCELLED; one cancelled by the provider stays
    CANCELLED; a block that lived and left squeue before its first status call
    (Parsl#1588) is COMPLETED with exit code 0.  No sacct, squeue or scontrol."""
    with jobtap_on_slurm(redis_server.url, tmp_path):  # the collector runs the real ones
        commands = CommandLog(tmp_path / "cmds").install(monkeypatch)
        url = f"{redis_server.url}?site={SITE}"
        p = provider(url, tmp_path, jobtap_redis=url)
        late = provider(url, tmp_path, jobtap_redis=url)  # asked only at the end
        gone = late.submit("true", 1)
        ok = p.submit("sleep 2", 1)
        bad = p.submit("sleep 2; exit 3", 1)
        killed = p.submit("sleep 120", 1)
        ours = p.submit("sleep 120", 1)
        first = p.status([ok, bad, killed, ours])
        assert all(s.state in (JobState.PENDING, JobState.RUNNING) for s in first), first

        eventually(
            lambda: status_of(p, killed).state == JobState.RUNNING,
            timeout=30,
            interval=0.2,
            what="the long block running",
        )
        scancel(killed)
        p.cancel([ours])
        eventually(
            lambda: all(s.terminal for s in p.status([ok, bad, killed, ours])),
            timeout=40,
            interval=0.3,
            what="every block ended",
        )
        assert (status_of(p, ok).state, status_of(p, ok).exit_code) == (JobState.COMPLETED, 0)
        failed = status_of(p, bad)
        assert (failed.state, failed.exit_code) == (JobState.FAILED, 3), failed
        assert status_of(p, killed).state == JobState.CANCELLED
        assert status_of(p, ours).state == JobState.CANCELLED

        eventually(lambda: not in_squeue(gone), timeout=40, interval=0.5, what="left squeue")
        done = status_of(late, gone)
        assert (done.state, done.exit_code) == (JobState.COMPLETED, 0), done
    assert commands.calls() == [] and p.stock_queries == late.stock_queries == 0
    assert p.status_polling_interval == 5


def test_redis_away_falls_back_to_parsls_own_query(clean, tmp_path, monkeypatch, caplog):
    """Redis refuses: the provider asks sacct as Parsl's does, once per fallback
    interval, with one log line; a block sacct does not know yet stays PENDING
    (the stock provider calls it COMPLETED), and the exit-3 block ends FAILED."""
    commands = CommandLog(tmp_path / "cmds").install(monkeypatch)
    url = f"redis://127.0.0.1:{free_port()}/0?site={SITE}"
    p = provider(url, tmp_path, jobtap_redis=url, jobtap_fallback_interval=0.5)
    assert commands.calls() == []  # the stock constructor's `sacct -X` waits for a fallback
    bad = p.submit("exit 3", 1)
    assert status_of(p, bad).state in (JobState.PENDING, JobState.RUNNING, JobState.FAILED)
    eventually(
        lambda: status_of(p, bad).state == JobState.FAILED,
        timeout=40,
        interval=0.3,
        what="sacct's FAILED",
    )
    assert "sacct" in commands.names() and p.stock_queries >= 1
    outage = [r for r in caplog.records if "cannot read the cache" in r.getMessage()]
    assert len(outage) == 1
