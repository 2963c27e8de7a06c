"""The parts of jobtap.snakemake that need no scheduler: jobtap's records as the
Slurm states the stock round acts on, discovery of ``jobtap-slurm`` by Snakemake
(its options beside the stock plugin's), what the imports load."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import jobtap
from jobtap.snakemake import ExecutorSettings, slurm_state
from sim.rig.paths import ROOT
from sim.rig.records import job_record


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


def snakemake(tmp_path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``snakemake ARGV`` as a user runs it (the checkout's jobtap on the path), in
    ``tmp_path`` with a one-rule workflow; help unwrapped (COLUMNS)."""
    (tmp_path / "Snakefile").write_text('rule all:\n    shell: "true"\n')
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "COLUMNS": "10000"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *argv],
        capture_output=True, text=True, env=env, check=check, cwd=tmp_path, timeout=120,
    )  # fmt: skip


def test_the_command_line_has_the_options(tmp_path):
    out = snakemake(tmp_path, "--help").stdout
    ours = out.partition("jobtap-slurm executor plugin settings:")[2].partition("\n\n")[0]
    for option in ("--jobtap-slurm-redis", "--jobtap-slurm-site", "--jobtap-slurm-logdir",
                   "--jobtap-slurm-requeue", "--jobtap-slurm-array-jobs"):  # fmt: skip
        assert option in ours
    # the stock help's "Use as: --slurm-array-jobs=..." names this executor's option
    assert "Use as: --jobtap-slurm-array-jobs='rule1, rule2'" in ours
    assert re.findall(r"(?<![\w-])--slurm-[\w-]+", ours) == []


SETTINGS_PROBE = """
import json, sys
from snakemake.cli import parse_args
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
parser, args = parse_args(sys.argv[1:])
s = ExecutorPluginRegistry().get_plugin(args.executor).get_settings(args)
print(json.dumps({"logdir": str(s.logdir), "requeue": s.requeue, "redis": s.redis}))
"""


def test_the_stock_options_are_spelled_with_the_executors_name(tmp_path):
    """What Snakemake's own command line hands the executor: the stock settings
    under ``--jobtap-slurm-<name>``."""
    argv = ["--executor", "jobtap-slurm", "--jobtap-slurm-logdir", "/x",
            "--jobtap-slurm-requeue", "--jobtap-slurm-redis", "redis://h/0"]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", SETTINGS_PROBE, *argv],
        capture_output=True, text=True, env=env, check=True, cwd=tmp_path, timeout=120,
    ).stdout  # fmt: skip
    found = json.loads(out.splitlines()[-1])
    assert found == {"logdir": "/x", "requeue": True, "redis": "redis://h/0"}


def test_a_stock_spelling_is_refused_with_the_one_to_use(tmp_path):
    """``--slurm-logdir`` belongs to the stock executor: with ``--executor
    jobtap-slurm`` Snakemake would parse it and hand it to nobody."""
    proc = snakemake(tmp_path, "--executor", "jobtap-slurm", "--slurm-logdir", "/x",
                     "--slurm-requeue", "--dry-run", check=False)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "--slurm-logdir, --slurm-requeue: the stock slurm executor's option(s)" in said
    assert "spell them --jobtap-slurm-logdir, --jobtap-slurm-requeue" in said


def test_a_stock_spelling_in_a_profile_is_refused_too(tmp_path):
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(
        "executor: jobtap-slurm\nslurm-keep-successful-logs: true\n"
    )
    proc = snakemake(tmp_path, "--profile", "profile", "--dry-run", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "spell them --jobtap-slurm-keep-successful-logs" in proc.stdout + proc.stderr


def test_the_stock_executor_keeps_its_own_spelling(tmp_path):
    """The check is jobtap-slurm's alone: the stock executor's dry run is untouched."""
    proc = snakemake(tmp_path, "--executor", "slurm", "--slurm-logdir", "/x", "--jobs", "1",
                     "--dry-run")  # fmt: skip
    assert proc.returncode == 0
