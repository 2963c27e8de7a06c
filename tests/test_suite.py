"""The suite itself: a bare clone collects every test that CI collects, and
nothing in it can pass by skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sim.rig.paths import ROOT

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]


def _env() -> dict[str, str]:
    """This environment without the variables that once pointed tests at files
    beside the checkout (none is read any more; a clone must not need them)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("JOBTAP_")}


def collected(checkout: Path) -> list[str]:
    proc = subprocess.run(
        [*PYTEST, "--collect-only", "-q"],
        cwd=checkout, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(line for line in proc.stdout.splitlines() if "::" in line)


def bare_clone(dest: Path) -> Path:
    """The repository's files as they stand in this checkout (tracked, and new
    ones not ignored), alone in ``dest``: nothing beside it, no venv."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    clone = dest / "jobtap"
    for name in filter(None, listing.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is gone
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    return clone


def test_a_bare_clone_collects_every_test_of_this_checkout(tmp_path):
    here = collected(ROOT)
    there = collected(bare_clone(tmp_path))
    assert len(here) > 800
    assert there == here, {
        "only here": sorted(set(here) - set(there))[:20],
        "only in the bare clone": sorted(set(there) - set(here))[:20],
    }


THROWAWAY = {
    "test_runtime_skip.py": (
        "import pytest\n"
        "def test_forgot_a_prerequisite():\n    pytest.skip('no flux here')\n"
        "def test_fine():\n    pass\n"
    ),
    "test_module_skip.py": "import pytest\npytest.skip('no captures', allow_module_level=True)\n",
    "test_empty_list.py": (
        "import pytest\n"
        "@pytest.mark.parametrize('capture', [])\n"
        "def test_over_no_capture(capture):\n    pass\n"
    ),
}


def test_a_skip_or_an_empty_parameter_list_fails_with_its_reason(tmp_path):
    for name, text in THROWAWAY.items():
        (tmp_path / name).write_text(text)
    # the suite's own pytest settings (empty_parameter_set_mark among them)
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    proc = subprocess.run(
        [*PYTEST, "-p", "tests.support.noskip", "-q", "-rA", "--continue-on-collection-errors",
         *THROWAWAY],
        cwd=tmp_path, env={**_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "skipped, and this suite does not skip: no flux here" in out, out
    assert "ERROR collecting test_module_skip.py" in out, out
    assert "skipped, and this suite does not skip: no captures" in out, out
    assert "Empty parameter set in 'test_over_no_capture'" in out, out
    assert "PASSED test_runtime_skip.py::test_fine" in out, out
    assert out.splitlines()[-1].startswith("1 failed, 1 passed, 2 errors"), out


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path):
    """make test's `--dist loadgroup` must keep the Slurm tests on one worker (they
    share one Slurm, locked per session); pytest 9.2 with pytest-xdist 3.8 silently
    spread them (pyproject pins pytest below 9)."""
    (tmp_path / "test_groups.py").write_text(
        "import pytest\n"
        + "".join(
            f"@pytest.mark.xdist_group('g')\ndef test_in_{i}():\n    pass\n" for i in range(4)
        )
        + "".join(f"def test_out_{i}():\n    pass\n" for i in range(4))
    )
    proc = subprocess.run(
        [*PYTEST, "-n", "2", "--dist", "loadgroup", "-v", "test_groups.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {
        line.split()[0]
        for line in proc.stdout.splitlines()
        if "PASSED" in line and "test_in_" in line
    }
    assert len(workers) == 1, proc.stdout
