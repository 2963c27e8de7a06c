"""The parts of jobtap.parsl that need no scheduler: jobtap's records as Parsl
statuses, the constructor (Parsl's arguments, no status command run), the
polling interval, what the import loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from parsl.jobs.states import JobState

import jobtap
from jobtap.parsl import PBSProProvider, SlurmProvider, parsl_status
from sim.rig.cmdlog import CommandLog
from sim.rig.paths import ROOT
from sim.rig.records import job_record


def record(state: str, **extra) -> jobtap.Job:
    return jobtap.Job.from_record(job_record("7", "alice", state, **extra))


@pytest.mark.parametrize(
    "state, extra, expected, exit_code",
    [
        ("queued", {}, JobState.PENDING, None),
        ("waiting", {}, JobState.PENDING, None),
        ("held", {}, JobState.HELD, None),
        ("suspended", {}, JobState.HELD, None),
        ("running", {}, JobState.RUNNING, None),
        ("exiting", {}, JobState.RUNNING, None),
        ("completed", {"exit_status": 0}, JobState.COMPLETED, 0),
        ("failed", {"exit_status": 3, "reason": "NonZeroExitCode"}, JobState.FAILED, 3),
        ("failed", {"native_state": "TIMEOUT", "reason": "TimeLimit"}, JobState.TIMEOUT, None),
        ("cancelled", {"exit_status": 271}, JobState.CANCELLED, 271),
    ],
)
def test_jobtap_records_as_parsl_statuses(state, extra, expected, exit_code):
    extra.setdefault("exit_status", None)
    status = parsl_status(record(state, **extra), "o", "e")
    assert (status.state, status.exit_code, status.stdout_path) == (expected, exit_code, "o")


def test_a_final_unknown_is_asked_of_the_scheduler():
    assert parsl_status(record("unknown")) is None


def test_the_constructor_is_parsls_and_runs_no_status_command(tmp_path, monkeypatch):
    commands = CommandLog(tmp_path / "cmds").install(monkeypatch)
    p = SlurmProvider(partition="debug", walltime="00:01:00", jobtap_site="s1")
    assert (p.partition, p.walltime, p.label) == ("debug", "00:01:00", "slurm")
    assert p.status_polling_interval == 5
    assert "partition='debug'" in repr(p)
    assert commands.calls() == []
    q = PBSProProvider(queue="workq", jobtap_polling_interval=2)
    assert (q.queue, q.status_polling_interval) == ("workq", 2)


IMPORTS = """
import json, sys
before = set(sys.modules)
import jobtap
after_jobtap = set(sys.modules)
import jobtap.parsl
tools = {"parsl", "snakemake", "psij"}
heavy = {"rq", "click", "snakemake", "psij"}
print(json.dumps({
    "jobtap_loads": sorted({m.split(".")[0] for m in after_jobtap - before} & tools),
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in heavy
                     or m.startswith("jobtap.collector") or m.startswith("jobtap.workers")),
}))
"""


def test_imports_load_parsl_only_inside_jobtap_parsl():
    out = subprocess.run(
        [sys.executable, "-c", IMPORTS],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout
    assert json.loads(out) == {"jobtap_loads": [], "loaded": []}
