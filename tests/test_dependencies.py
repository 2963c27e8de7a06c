"""The extras' version ranges follow their tools' releases (pyproject.toml says how):
each range holds the tool's newest release, a semver tool's runs to its next
major version (the next minor before 1.0), and Parsl's, a date, runs well past its
newest release instead of closing within days.  The development tools are a
dependency group, not an extra a user of the wheel would see.

The newest release is what ``pip index versions`` says (CI reaches PyPI); where
the index cannot be asked, the installed version (the newest the range allowed
when the venv was made) stands in for it.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tomllib
from importlib.metadata import version as installed_version

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sim.rig.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# how each tool of the extras numbers its releases
CADENCE = {
    "psij-python": "semver",
    "snakemake": "semver",
    "snakemake-executor-plugin-slurm": "semver",
    "parsl": "date",  # YYYY.MM.DD, about weekly
}
# a date range's upper bound lies this far past the newest release at least
DATE_MARGIN = datetime.timedelta(weeks=8)


def extras_requirements() -> dict[str, Requirement]:
    found = {}
    for requirements in PYPROJECT["project"]["optional-dependencies"].values():
        for line in requirements:
            requirement = Requirement(line)
            found[requirement.name] = requirement
    return found


def newest_release(name: str) -> tuple[Version, str]:
    """The tool's newest release on the package index, else the installed one;
    and which of the two it is."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", name, "--json",
             "--disable-pip-version-check"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if proc.returncode == 0:
            return Version(json.loads(proc.stdout)["latest"]), "the index"
    except (subprocess.TimeoutExpired, ValueError, KeyError):
        pass
    return Version(installed_version(name)), "installed"


def bounds(specifier: SpecifierSet) -> tuple[Version, Version]:
    (lower,) = [Version(s.version) for s in specifier if s.operator == ">="]
    (upper,) = [Version(s.version) for s in specifier if s.operator == "<"]
    return lower, upper


def test_every_tool_of_the_extras_has_a_cadence():
    assert set(extras_requirements()) == set(CADENCE)


@pytest.mark.parametrize("name", sorted(CADENCE))
def test_the_range_holds_the_newest_release(name):
    requirement = extras_requirements()[name]
    newest, where = newest_release(name)
    assert requirement.specifier.contains(newest), (
        f"{name} {newest} ({where}) is outside {requirement}: test jobtap with it and move "
        "the range in pyproject.toml"
    )


@pytest.mark.parametrize("name", sorted(n for n, c in CADENCE.items() if c == "semver"))
def test_a_semver_range_runs_to_the_next_major_version(name):
    lower, upper = bounds(extras_requirements()[name].specifier)
    major, minor = (lower.release + (0,))[:2]
    assert upper == (Version(f"0.{minor + 1}") if major == 0 else Version(f"{major + 1}"))


@pytest.mark.parametrize("name", sorted(n for n, c in CADENCE.items() if c == "date"))
def test_a_date_range_does_not_close_soon_after_the_newest_release(name):
    _, upper = bounds(extras_requirements()[name].specifier)
    newest, where = newest_release(name)
    released = datetime.date(*newest.release[:3])
    closes = datetime.date(*(upper.release + (1, 1))[:3])
    assert closes - released >= DATE_MARGIN, (
        f"{name}'s range closes on {closes}, {(closes - released).days} days after its newest "
        f"release {newest} ({where}): test the newest and move the range on"
    )


def test_the_development_tools_are_a_group_that_setup_installs():
    """`pip install 'jobtap[...]'` shows a user no test extra; `make test` still
    gets the tools it runs (ruff, mypy, pytest) through deploy/setup-dev.sh."""
    assert set(PYPROJECT["project"]["optional-dependencies"]) == {"psij", "parsl", "snakemake"}
    group = {Requirement(line).name for line in PYPROJECT["dependency-groups"]["test"]}
    assert {"pytest", "pytest-xdist", "pytest-timeout", "ruff", "mypy", "build"} <= group
    setup = (ROOT / "deploy" / "setup-dev.sh").read_text()
    assert "pip install -q -e '.[psij,parsl,snakemake]' --group test" in setup
