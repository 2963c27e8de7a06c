"""PSI/J's own test files, run unmodified with a harness of ours.

The psij-python sdist on PyPI ships its test files but not their harness
(``conftest.py``, ``_test_tools.py``, ``executor_test_params.py`` live only in
PSI/J's repository).  :func:`sdist_tests` fetches the sdist of the installed
version once (``pip download``, cached in the virtualenv); :func:`prepare` copies
its tests beside the harness of ``sim/rig/psij_harness`` into a run folder;
:func:`run_suite` runs them in a subprocess with ``--executors A,B`` and returns
both columns.  :func:`jobtap_on_slurm` sets up jobtap in follow mode on the Slurm
of ``deploy/slurm/start.sh`` (its hook pointed at the given Redis), for the live
test and the benchmark.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.rig.paths import ROOT
from sim.rig.procs import jobtap_services
from sim.rig.sdist import sdist_tests as support_sdist_tests
from sim.rig.slurm import SITE, hook_settings

HARNESS = Path(__file__).parent / "psij_harness"
# The executor tests: the sdist's files whose tests take ``execparams``.
EXECUTOR_TESTS = (
    "test_executor.py",
    "test_issue_435.py",
    "test_nodefile.py",
    "test_resources.py",
    "test_mpi.py",
)
# PSI/J's stock Slurm executor, and ours
EXECUTORS = ("slurm:single", "jobtap-slurm:single")
PYTEST_INI = "[pytest]\ntimeout = 180\naddopts = -p no:cacheprovider\n"


def sdist_tests() -> Path:
    """The ``tests`` folder of the installed psij-python's sdist (downloaded once)."""
    return support_sdist_tests("psij-python", "test_executor.py")


def prepare(run_dir: Path, tests: Path | None = None) -> Path:
    """A folder with PSI/J's test files, unmodified, and our harness: always our
    ``conftest.py`` (the side-by-side results); PSI/J's own test helpers
    (``_test_tools.py``, ``executor_test_params.py``) where the folder has them (a
    repository checkout), else ours (the sdist does not ship them)."""
    tests = tests or sdist_tests()
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in tests.iterdir():
        if path.is_file():
            shutil.copyfile(path, run_dir / path.name)
    shutil.copyfile(HARNESS / "conftest_psij.py", run_dir / "conftest.py")
    for name in ("_test_tools.py", "executor_test_params.py"):
        if not (tests / name).exists():
            shutil.copyfile(HARNESS / name, run_dir / name)
    (run_dir / "pytest.ini").write_text(PYTEST_INI)
    return run_dir


def executor_tests(tests: Path) -> list[str]:
    """The files of a PSI/J ``tests`` folder whose tests take ``execparams`` (a
    repository checkout may have more than :data:`EXECUTOR_TESTS`)."""
    return sorted(
        p.name for p in tests.glob("test_*.py") if "execparams" in p.read_text(errors="replace")
    )


@dataclass
class SuiteResult:
    returncode: int
    output: str
    executors: list[str]
    tests: dict[str, dict[str, dict]]  # test -> executor -> outcome, seconds, message
    totals: dict[str, float]

    def outcome(self, test: str, executor: str) -> str | None:
        return self.tests.get(test, {}).get(executor, {}).get("outcome")

    def table(self) -> str:
        """The harness's side-by-side section of the output."""
        marker = "PSI/J tests, side by side"
        at = self.output.find(marker)
        return self.output[self.output.rfind("\n", 0, at) + 1 :] if at >= 0 else self.output


def run_suite(
    run_dir: Path,
    executors: Sequence[str],
    selection: Sequence[str] = EXECUTOR_TESTS,
    env: dict[str, str] | None = None,
    timeout: float = 1800,
) -> SuiteResult:
    """Run the PSI/J tests ``selection`` (files or node ids) on ``executors``."""
    results = run_dir / "results.json"
    results.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "pytest", "-q", "-rfE", *selection,
        "--executors", ",".join(executors), "--psij-results", str(results),
    ]  # fmt: skip
    proc = subprocess.run(
        argv, cwd=run_dir, env=env, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    if not results.exists():
        raise AssertionError(
            f"the PSI/J tests wrote no results (exit {proc.returncode}):\n{output}"
        )
    data = json.loads(results.read_text())
    return SuiteResult(proc.returncode, output, data["executors"], data["tests"], data["totals"])


def check_side_by_side(result: SuiteResult) -> float:
    """Every test the stock executor passes passes with jobtap-slurm, test_cancel
    included, in at most half the time; returns the ratio."""
    stock, ours = EXECUTORS
    for test in result.tests:
        if result.outcome(test, stock) == "passed":
            assert result.outcome(test, ours) == "passed", (test, result.table())
    assert result.outcome("test_cancel", ours) == "passed", result.table()
    ratio = result.totals[stock] / max(result.totals[ours], 0.001)
    assert ratio >= 2.0, f"jobtap-slurm only {ratio:.1f}x faster:\n{result.table()}"
    return ratio


def check_all_passed(result: SuiteResult, executor: str = EXECUTORS[1]) -> None:
    """Every selected test ran on ``executor`` and passed (test_cancel included,
    which the stock executor fails here)."""
    failed = {t: r.get(executor, {}).get("outcome") for t, r in result.tests.items()}
    assert failed and all(o == "passed" for o in failed.values()), (failed, result.table())


@contextlib.contextmanager
def jobtap_on_slurm(url: str, log_dir: Path, interval: float = 5.0) -> Iterator[dict[str, str]]:
    """jobtap in follow mode on the running Slurm: the slurmctld hook pokes
    ``url``, a collector (``--follow``) and a worker run; yields the environment
    for PSI/J (``JOBTAP_REDIS``, ``JOBTAP_SITE``; the checkout on ``PYTHONPATH`` so
    that PSI/J finds ``psij-descriptors``)."""
    collector = ["--backend", "slurm", "--follow", "--interval", str(interval)]
    with hook_settings(url, SITE, log_dir / "hook.log"):
        with jobtap_services(url, SITE, collector, log_dir):
            env = dict(os.environ, JOBTAP_REDIS=url, JOBTAP_SITE=SITE)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
            yield env
