"""Parsl's own tests (the ``parsl/tests`` the wheel ships, unmodified: every test
they run with a ``--config``, or those given)
on the real Slurm of deploy/slurm/start.sh, with Parsl's CI Slurm configuration
(``parsl/tests/configs/slurm_local.py``: one HighThroughputExecutor block) and the
same configuration with ``jobtap.parsl.SlurmProvider``; jobtap in follow mode (the
slurmctld hook, ``jobtap collector --follow``, ``jobtap worker``) on a fresh
redis-server.  Prints each side's outcome, wall time and the scheduler commands
it ran (sacct, squeue, scontrol, sinfo: logged by wrappers first on PATH); exits
1 if the jobtap side ran a status command or failed a test the stock side passed.

    sudo .venv/bin/python -m bench.parsl_suite                       # ~2 x 1 min, ~150 tests
    sudo .venv/bin/python -m bench.parsl_suite test_bash_apps/test_basic.py

Needs root; starts Slurm if it is not running; takes the Slurm lock for each side.
Parsl 2026.10.26's tests/conftest.py declares a hook argument pytest 9 removed
(``pytest_ignore_collect(path)``): the ``test`` extra keeps pytest below 9.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import parsl

from jobtap.sim.localredis import RedisServer
from sim.rig.cmdlog import CommandLog
from sim.rig.psij_upstream import jobtap_on_slurm
from sim.rig.slurm import SITE

from .snakemake_suite import slurm_turn, status_calls, summary

TESTS = Path(parsl.__file__).parent / "tests"
# Everything Parsl's tests run with a --config (its conftest skips the tests marked
# ``local``, which bring their own configuration): about 150 tests, 15 s a side here.
SELECTION = (".",)
CONFIG = """
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.launchers import SrunLauncher
from {module} import SlurmProvider


def fresh_config():
    return Config(
        executors=[
            HighThroughputExecutor(
                label="docker_slurm",
                encrypted=True,
                provider=SlurmProvider(
                    partition="debug",
                    exclusive=False,
                    cmd_timeout=60,
                    nodes_per_block=1,
                    init_blocks=1,
                    min_blocks=1,
                    max_blocks=1,
                    walltime="00:10:00",
                    launcher=SrunLauncher(),{extra}
                ),
            )
        ],
    )
"""
SIDES = {
    "parsl SlurmProvider": ("parsl.providers", ""),
    "jobtap.parsl SlurmProvider": ("jobtap.parsl", "\n                    jobtap_site={site!r},"),
}


def run_side(tmp: Path, name: str, selection: list[str]) -> tuple[str, float, CommandLog, set[str]]:
    """One side's last pytest line, wall time, commands and failed test ids."""
    module, extra = SIDES[name]
    folder = tmp / re.sub(r"\W+", "-", name)
    folder.mkdir()
    config = folder / "config.py"
    config.write_text(CONFIG.format(module=module, extra=extra.format(site=SITE)))
    with slurm_turn():
        redis = RedisServer(folder / "redis").start()
        try:
            with jobtap_on_slurm(redis.url, folder) as env:
                commands = CommandLog(folder / "cmds")
                # HTEX starts interchange.py and process_worker_pool.py from PATH
                env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
                argv = [
                    sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider",
                    *(str(TESTS / s) for s in selection), "--config", str(config),
                ]  # fmt: skip
                t0 = time.monotonic()
                proc = subprocess.run(
                    argv, cwd=folder, env=commands.env(env), capture_output=True, text=True,
                    timeout=600, stdin=subprocess.DEVNULL,
                )  # fmt: skip
                wall = time.monotonic() - t0
        finally:
            redis.stop()
    output = (proc.stdout + proc.stderr).strip().splitlines()
    failed = {line.split()[1].rpartition("parsl/tests/")[2] for line in output
              if line.startswith("FAILED ")}  # fmt: skip
    for test in sorted(failed):
        print(f"  failed: {test}")
    return (output[-1:] or ["(no output)"])[0], wall, commands, failed


def main(argv: list[str]) -> int:
    selection = argv or list(SELECTION)
    failed = []
    results = {}
    failures: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory(prefix="parsl-suite-") as tmp_name:
        for name in SIDES:
            outcome, wall, commands, failures[name] = run_side(Path(tmp_name), name, selection)
            results[name] = outcome
            print(f"{name}: {outcome}; {wall:.1f} s; commands: {summary(commands)}", flush=True)
            if name.startswith("jobtap") and status_calls(commands):
                failed.append(f"{name} ran status commands: {status_calls(commands)}")
    stock, ours = results.values()
    passed = re.search(r"(\d+) passed", stock)
    if passed and f"{passed[1]} passed" not in ours:
        failed.append(f"stock: {stock}; jobtap: {ours}")
    stock_failed, ours_failed = failures.values()
    only_ours = ours_failed - stock_failed
    if only_ours:
        failed.append(f"failed with jobtap only: {', '.join(sorted(only_ours))}")
    for f in failed:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
