"""snakemake-executor-plugin-slurm's own test suite (``tests/tests.py`` of the
sdist of the installed version, unmodified) run with our harness
(``sim/rig/snakemake_harness``), once per executor: ``slurm`` (stock) or
``jobtap-slurm``.  Used by ``python -m bench.snakemake_suite``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sim.rig.sdist import sdist_tests as support_sdist_tests

HARNESS = Path(__file__).parent / "snakemake_harness"
DIST = "snakemake-executor-plugin-slurm"
# The suite's tests that run workflows on the cluster (the rest are unit tests
# with mocks and never reach an executor's status loop).
WORKFLOW_TESTS = (
    "tests.py::TestWorkflows",
    "tests.py::TestPassCommandAsScript",
    "tests.py::TestWrapExecJobQuoteEscaping",
)


def sdist_tests() -> Path:
    """The ``tests`` folder of the installed plugin's sdist (downloaded once)."""
    return support_sdist_tests(DIST, "tests.py")


def prepare(run_dir: Path, tests: Path | None = None) -> Path:
    """A folder with the sdist's tests, unmodified, and our harness as conftest.py."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shutil.copytree(tests or sdist_tests(), run_dir)
    shutil.copyfile(HARNESS / "conftest_snakemake.py", run_dir / "conftest.py")
    (run_dir / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    return run_dir


@dataclass
class SuiteRun:
    executor: str
    returncode: int
    output: str
    tests: dict[str, dict]

    @property
    def seconds(self) -> float:
        return sum(t.get("seconds", 0) for t in self.tests.values())


def run_suite(
    run_dir: Path,
    executor: str,
    selection=WORKFLOW_TESTS,
    env: dict[str, str] | None = None,
    timeout: float = 1800,
) -> SuiteRun:
    results = run_dir / f"results-{executor}.json"
    results.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "pytest", "-q", "-rfE", *selection,
        "--executor-under-test", executor, "--smk-results", str(results),
    ]  # fmt: skip
    proc = subprocess.run(
        argv, cwd=run_dir, env=env, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    if not results.exists():
        raise AssertionError(f"the suite wrote no results (exit {proc.returncode}):\n{output}")
    data = json.loads(results.read_text())
    return SuiteRun(executor, proc.returncode, output, data["tests"])
