"""Snakemake's executor ``jobtap-slurm`` on the real Slurm of deploy/slurm/start.sh,
with jobtap in follow mode (the slurmctld hook pokes, ``jobtap collector
--follow``, ``jobtap worker``) on a real redis-server: a small workflow (three
jobs, then one that gathers them; each sleeps 2 s) runs as ``snakemake
--executor jobtap-slurm``, gives its outputs, takes seconds more than the jobs'
own run time (the stock plugin waits 40 s before its first status round), and
runs no status command.

Every sacct, squeue and scontrol call of the snakemake process goes through the
logging wrappers of sim/rig/cmdlog.py; jobtap's collector starts before
they are on PATH.  The stock plugin's submission guesses the Slurm account with
``sacct -nu USER -o Account``: that is the submit path, not a status query.  The
snakemake process has exited when the log is read: every call it made is in it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from sim.rig.cmdlog import CommandLog, status_calls
from sim.rig.pipeline import final_record, site_events
from sim.rig.psij_upstream import jobtap_on_slurm
from sim.rig.slurm import SITE
from sim.rig.snakemake import run_workflow, write_workflow

pytestmark = [
    pytest.mark.timeout(900),  # the first test may wait for the Slurm lock
    # The tool runs sbatch/squeue from its own PATH, the host's 22.05; the backend's
    # own live tests (test_slurm_*.py) run on 24.11 as well.
    pytest.mark.slurm_releases("22.05"),
]


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def jobs_span(r, workdir: Path) -> float:
    """From the first job's start to the last one's end, as Slurm recorded them, of
    the workflow's jobs (those run in ``workdir``: other tests' jobs, cancelled by
    the ``clean`` fixture, may end meanwhile, and the reconciliation brings older
    ones)."""
    finals = [final_record(r, SITE, e) for e in site_events(r, SITE) if e["type"] == "final"]
    ours = [f for f in finals if _workdir(f) == str(workdir)]
    assert len(ours) == 4 and all(f["start_time"] and f["end_time"] for f in ours), [
        (f["id"], f["name"], f["state"], _workdir(f)) for f in finals
    ]
    return max(ts(f["end_time"]) for f in ours) - min(ts(f["start_time"]) for f in ours)


def _workdir(record: dict) -> str | None:
    """Where the job ran, from its native record: squeue's, sacct's, or the
    completion record the slurmctld hook sent as JobCompLoc (``WORK_DIR``)."""
    native = record.get("native") or {}
    completion = native.get("jobcomp") or {}
    return (
        native.get("current_working_directory")
        or native.get("working_directory")
        or completion.get("WORK_DIR")
    )


def test_a_workflow_runs_in_seconds_and_asks_slurm_nothing(clean, r, redis_server, tmp_path):
    workdir = tmp_path / "wf"
    write_workflow(workdir, parts=3, seconds=2)
    with jobtap_on_slurm(redis_server.url, tmp_path) as env:
        commands = CommandLog(tmp_path / "cmds")
        run = run_workflow(
            workdir,
            "jobtap-slurm",
            commands.env(env),
            "--jobtap-slurm-redis", redis_server.url, "--jobtap-slurm-site", SITE,
        )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    assert (workdir / "all.txt").read_text().split() == ["0", "1", "2"]
    span = jobs_span(r, workdir)
    print(f"\nworkflow {run.wall:.1f} s, jobs from first start to last end {span:.1f} s")
    assert run.wall < span + 30, (run.wall, span)  # the stock plugin: 40 s before its 1st round
    assert status_calls(commands.calls()) == [], commands.calls()
    assert "jobtap: cannot read the cache" not in run.output
