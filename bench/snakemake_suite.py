"""Snakemake on the real Slurm of deploy/slurm/start.sh, the stock executor
``slurm`` (snakemake-executor-plugin-slurm) and jobtap's ``jobtap-slurm`` side by
side; jobtap in follow mode (the slurmctld hook, ``jobtap collector --follow``,
``jobtap worker``) on a fresh redis-server.  Two parts, each run by both:

1. the issue's workflow: 12 jobs (11 independent ones, then one that gathers
   them), each sleeping 3 s, as ``snakemake --executor ...``;
2. the plugin's own test suite (``tests/tests.py`` of its sdist, unmodified, its
   workflow classes; sim/rig/snakemake_harness switches the executor).

Prints each side's wall time and the scheduler commands it ran (sacct, squeue,
scontrol, sinfo: logged by wrappers first on PATH); exits 1 if jobtap-slurm is
not at least 4x faster on the workflow, runs a status command, or fails a suite
test the stock executor passes.

    sudo .venv/bin/python -m bench.snakemake_suite            # both parts, ~6 min
    sudo .venv/bin/python -m bench.snakemake_suite workflow   # the workflow only

Needs root; starts Slurm if it is not running; takes the live tests' Slurm lock
for each run separately (each hold a few minutes at most).
"""

from __future__ import annotations

import collections
import contextlib
import platform
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from jobtap.sim.localredis import RedisServer
from sim.rig import cmdlog
from sim.rig.cmdlog import CommandLog
from sim.rig.psij_upstream import jobtap_on_slurm
from sim.rig.slurm import SITE, SLURM_22, cancel_everything
from sim.rig.snakemake import run_workflow, write_workflow
from sim.rig.snakemake_upstream import prepare, run_suite

EXECUTORS = ("slurm", "jobtap-slurm")


@contextlib.contextmanager
def slurm_turn() -> Iterator[None]:
    with SLURM_22.held():
        cancel_everything()
        try:
            yield
        finally:
            cancel_everything()


def summary(commands: CommandLog) -> str:
    counts = collections.Counter(" ".join(c.split()[:2]) for c in commands.calls())
    return ", ".join(f"{n}x {c}" for c, n in sorted(counts.items())) or "none"


def status_calls(commands: CommandLog) -> list[str]:
    return cmdlog.status_calls(commands.calls())


def workflow(tmp: Path, executor: str) -> tuple[float, CommandLog]:
    folder = tmp / executor
    write_workflow(folder / "wf", parts=11, seconds=3)
    with slurm_turn():
        redis = RedisServer(folder / "redis").start()
        try:
            with jobtap_on_slurm(redis.url, folder) as env:
                commands = CommandLog(folder / "cmds")
                run = run_workflow(folder / "wf", executor, commands.env(env), timeout=900)
        finally:
            redis.stop()
    if run.returncode != 0:
        raise SystemExit(f"{executor}: snakemake exited {run.returncode}:\n{run.output[-3000:]}")
    return run.wall, commands


def suite(tmp: Path, executor: str):
    folder = tmp / f"suite-{executor}"
    run_dir = prepare(folder / "tests")
    with slurm_turn():
        redis = RedisServer(folder / "redis").start()
        try:
            with jobtap_on_slurm(redis.url, folder) as env:
                commands = CommandLog(folder / "cmds")
                result = run_suite(run_dir, executor, env=commands.env(env), timeout=1800)
        finally:
            redis.stop()
    return result, commands


def main(argv: list[str]) -> int:
    parts = argv or ["workflow", "suite"]
    failed = []
    with tempfile.TemporaryDirectory(prefix="snakemake-suite-") as tmp_name:
        tmp = Path(tmp_name)
        if "workflow" in parts:
            walls = {}
            for executor in EXECUTORS:
                walls[executor], commands = workflow(tmp, executor)
                print(f"workflow, {executor}: {walls[executor]:.1f} s; commands: "
                      f"{summary(commands)}", flush=True)  # fmt: skip
                if executor == "jobtap-slurm" and status_calls(commands):
                    failed.append(f"jobtap-slurm ran status commands: {status_calls(commands)}")
            ratio = walls["slurm"] / walls["jobtap-slurm"]
            print(f"workflow: {ratio:.1f}x faster with jobtap-slurm (site {SITE})")
            if ratio < 4:
                failed.append(f"only {ratio:.1f}x faster")
        if "suite" in parts:
            runs = {}
            for executor in EXECUTORS:
                runs[executor], commands = suite(tmp, executor)
                print(f"plugin suite, {executor}: {runs[executor].seconds:.1f} s in tests; "
                      f"commands: {summary(commands)}", flush=True)  # fmt: skip
                if executor == "jobtap-slurm" and status_calls(commands):
                    failed.append(f"jobtap-slurm ran status commands: {status_calls(commands)}")
            stock, ours = (runs[e] for e in EXECUTORS)
            print(f"{'test':70} {'slurm':>14} {'jobtap-slurm':>14}")
            for test in sorted(set(stock.tests) | set(ours.tests)):
                cells = []
                for run in (stock, ours):
                    t = run.tests.get(test, {})
                    cells.append(f"{t.get('outcome', '-')} {t.get('seconds', 0):5.1f}s")
                print(f"{test[-70:]:70} {cells[0]:>14} {cells[1]:>14}")
                if stock.tests.get(test, {}).get("outcome") == "passed" and (
                    ours.tests.get(test, {}).get("outcome") != "passed"
                ):
                    failed.append(f"{test} fails with jobtap-slurm")
            print(f"totals: slurm {stock.seconds:.1f} s, jobtap-slurm {ours.seconds:.1f} s")
    print(f"machine: {platform.node()}, {platform.platform()}")
    for f in failed:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
