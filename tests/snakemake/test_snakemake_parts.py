"""The parts of jobtap.snakemake that need no scheduler: jobtap's records as the
Slurm states the stock round acts on, discovery of ``jobtap-slurm`` by Snakemake
(its options beside the stock plugin's), what the imports load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import jobtap
from jobtap.snakemake import ExecutorSettings, slurm_state
from tests.support.paths import ROOT
from tests.support.records import job_record


def record(state: str, **extra) -> jobtap.Job:
    final = state == "unknown" and extra.pop("final", True)
    return jobtap.Job.from_record(job_record("7", "alice", state, **extra), final=final)


@pytest.mark.parametrize(
    "state, native, expected",
    [
        ("queued", "PENDING", None),
        ("running", "RUNNING", None),
        ("exiting", "COMPLETING", None),
        ("completed", "COMPLETED", "COMPLETED"),
        ("failed", "FAILED", "FAILED"),
        ("failed", "TIMEOUT", "TIMEOUT"),
        ("failed", "OUT_OF_MEMORY", "OUT_OF_MEMORY"),
        ("failed", "NODE_FAIL", "NODE_FAIL"),
        ("cancelled", "CANCELLED by 0", "CANCELLED"),
        ("cancelled", "PREEMPTED", "PREEMPTED"),
        ("failed", "F", "FAILED"),  # not a Slurm word (PBS): jobtap's state decides
        ("unknown", None, "UNKNOWN"),  # left Slurm with no history: success, as stock
    ],
)
def test_records_as_the_states_the_stock_round_reads(state, native, expected):
    assert slurm_state(record(state, native_state=native)) == expected


def test_an_unknown_that_is_not_final_says_nothing():
    assert slurm_state(record("unknown", final=False)) is None


def test_settings_are_the_stock_ones_and_jobtaps():
    s = ExecutorSettings(init_seconds_before_status_checks=2, redis="redis://h/0", site="x")
    assert (s.init_seconds_before_status_checks, s.redis, s.site) == (2, "redis://h/0", "x")
    assert (s.unseen_timeout, s.max_wait) == (15, 30)


PROBE = """
import json, sys
before = set(sys.modules)
import jobtap
after_jobtap = set(sys.modules)
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
plugin = ExecutorPluginRegistry().get_plugin("jobtap-slurm")
print(json.dumps({
    "jobtap_loads": sorted({m.split(".")[0] for m in after_jobtap - before}
                           & {"snakemake", "parsl", "psij"}),
    "executor": plugin.executor.__module__ + "." + plugin.executor.__name__,
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("rq", "click", "parsl", "psij")
                     or m.startswith("jobtap.collector") or m.startswith("jobtap.workers")),
}))
"""


def test_snakemake_finds_jobtap_slurm_and_loads_no_service_code(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True
    ).stdout
    found = json.loads(out.splitlines()[-1])
    assert found["executor"] == "jobtap.snakemake.executor.Executor"
    assert found["jobtap_loads"] == []
    assert [m for m in found["loaded"] if not m.startswith("click")] == []


def test_the_command_line_has_the_options(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "--help"],
        capture_output=True, text=True, env=env, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    for option in ("--jobtap-slurm-redis", "--jobtap-slurm-site", "--slurm-logdir"):
        assert option in out
