"""jobtap as a release ships it: ``python -m build`` makes an sdist and, from it, a
wheel, with no setuptools warning; the wheel holds ``jobtap/`` (with its data),
``psij-descriptors/`` and ``snakemake_executor_plugin_jobtap_slurm/`` (the tools'
discovery shims) and nothing else; installed into a fresh venv with its
dependencies (plain, and with the [psij] extra) it imports, says its version, keeps
``import jobtap`` light and lets PSI/J find its executors.

The sdist carries what a build needs (pyproject.toml, README.md, the package
folders) and not the test suite: it needs what no Python distribution holds (real
redis-server, Slurm, tmux, Prometheus, the stand-ins and captures under tests/,
deploy/'s scripts) and runs from a clone (`make test`); MANIFEST.in prunes it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest

from sim.rig.paths import ROOT
from tests.psij.test_psij_parts import IMPORTS as PSIJ_PROBE
from tests.support.release import (
    CHECKOUT_ONLY,
    Dists,
    Venv,
    build_dists,
    heavy,
    loaded_after,
    version,
)

# one worker builds and installs once (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("release")


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> Dists:
    return build_dists(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def plain(dists, tmp_path_factory) -> Venv:
    """A fresh venv after `pip install jobtap` (the wheel, with its dependencies)."""
    venv = Venv.create(tmp_path_factory.mktemp("plain") / "venv")
    venv.install(dists.wheel)
    return venv


@pytest.fixture(scope="module")
def with_psij(dists, tmp_path_factory) -> Venv:
    """A fresh venv after `pip install 'jobtap[psij]'`."""
    venv = Venv.create(tmp_path_factory.mktemp("psij") / "venv")
    venv.install(dists.wheel, extras=("psij",))
    return venv


def test_the_build_warns_of_nothing_and_makes_the_wheel_from_the_sdist(dists):
    assert dists.warnings() == []
    assert "Building wheel from sdist" in dists.log
    v = version()
    assert (dists.sdist.name, dists.wheel.name) == (
        f"jobtap-{v}.tar.gz",
        f"jobtap-{v}-py3-none-any.whl",
    )


def test_the_sdist_holds_what_a_build_needs_and_no_tests(dists):
    with tarfile.open(dists.sdist) as tar:
        names = [name.partition("/")[2] for name in tar.getnames()]  # under jobtap-VERSION/
    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"].values())  # fmt: skip
    generated = {"PKG-INFO", "setup.cfg", "jobtap.egg-info"}  # written by setuptools
    top = {name.split("/")[0] for name in names if name}
    tops = {folder.split("/")[0] for folder in folders}  # integrations/psij: integrations
    # MANIFEST.in: `prune tests` (setuptools would add tests/test*.py), the changelog in
    assert top == {"pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in", "LICENSE",
                   "docs", "deploy", *tops, *generated}  # fmt: skip
    # sim/'s rig and stand-ins serve a checkout's tests and benches (MANIFEST.in prunes them)
    assert not [name for name in names if name.startswith(tuple(f"{f}/" for f in CHECKOUT_ONLY))]
    assert {"sim/model.py", "sim/backend.py", "sim/localredis.py"} <= set(names)


# a file or folder of the checkout that jobtap's code names: docs/security.md, deploy/systemd/
NAMED_PATH = re.compile(r"\b(?:docs|deploy)/[\w./-]*[\w/]")


def test_every_file_the_code_names_is_in_the_sdist(dists):
    """Messages send a site to deploy/redis/setup.sh, deploy/pbs/install-hook.sh,
    docs/security.md, ...: whatever the installed code names, the sdist holds
    (`pip download --no-deps --no-binary :all: jobtap`, as the README says)."""
    with zipfile.ZipFile(dists.wheel) as whl:
        named = {
            path.rstrip("/")
            for name in whl.namelist() if name.endswith(".py")
            for path in NAMED_PATH.findall(whl.read(name).decode())
        }  # fmt: skip
    assert {"deploy/redis/setup.sh", "deploy/pbs/install-hook.sh", "docs/security.md"} <= named
    with tarfile.open(dists.sdist) as tar:
        shipped = {name.partition("/")[2] for name in tar.getnames()}
    assert {p for p in named if not any(s == p or s.startswith(f"{p}/") for s in shipped)} == set()
    readme = (ROOT / "README.md").read_text()
    assert "pip download --no-deps --no-binary :all: jobtap" in readme


def test_the_licence_ships_in_the_sdist_and_the_wheel(dists):
    """pyproject.toml says BSD-3-Clause: its text, with the copyright line, goes
    with every copy (the licence's own first and second conditions)."""
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n\nCopyright (c) ")
    assert "the jobtap authors\n" in text.splitlines(keepends=True)[2]
    assert "Neither the name of the copyright holder" in text
    with tarfile.open(dists.sdist) as tar:
        member = tar.extractfile(f"jobtap-{version()}/LICENSE")
        assert member is not None and member.read().decode() == text
    info = f"jobtap-{version()}.dist-info"
    with zipfile.ZipFile(dists.wheel) as whl:
        assert whl.read(f"{info}/licenses/LICENSE").decode() == text
        metadata = whl.read(f"{info}/METADATA").decode()
    assert "\nLicense-Expression: BSD-3-Clause\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata


def test_the_wheel_holds_jobtap_and_the_discovery_shims_with_their_data(dists):
    with zipfile.ZipFile(dists.wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(f"jobtap-{version()}.dist-info/METADATA").decode()
        entry_points = whl.read(f"jobtap-{version()}.dist-info/entry_points.txt").decode()
    info = f"jobtap-{version()}.dist-info"
    shims = {"psij-descriptors", "snakemake_executor_plugin_jobtap_slurm"}
    assert {name.split("/")[0] for name in names} == {"jobtap", *shims, info}
    # every file of every package folder, under its installed name, and nothing else:
    # a subpackage left out of `packages` or data left out of `package-data` shows here
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    expected = {
        f"{package.replace('.', '/')}/{path.relative_to(dists.source / folder).as_posix()}"
        for package, folder in package_dir.items()
        for path in (dists.source / folder).rglob("*")
        if path.is_file()
        and not any(path.is_relative_to(dists.source / rig) for rig in CHECKOUT_ONLY)
    }
    assert {name for name in names if not name.startswith(info)} == expected
    assert {
        "jobtap/py.typed",
        "jobtap/schemas/event.schema.json",
        "jobtap/schemas/event.avsc",
        # what a finished job's packed native record is read with (jobtap.packing)
        "jobtap/schemas/native-dictionary-1.json",
        "jobtap/workers/apply.lua",
        "jobtap/contract/epoch.lua",
        # run as a file by `flux python` (collector/backends/flux.py READER_PATH)
        "jobtap/collector/backends/journal_reader/flux_journal_reader.py",
        # where PSI/J looks for executors: a namespace folder, jobtap's file only
        "psij-descriptors/jobtap_executors.py",
        "jobtap/integrations/rules.py",
        "jobtap/parsl/__init__.py",
        "jobtap/snakemake/__init__.py",
        # where Snakemake looks for executor plugins: a top-level module, a shim
        "snakemake_executor_plugin_jobtap_slurm/__init__.py",
    } <= names
    assert not {name for name in names if name.startswith("psij-descriptors/__init__")}
    assert f"\nVersion: {version()}\n" in metadata
    assert "jobtap = jobtap.cli:main" in entry_points
    assert "sim = jobtap.sim.backend:SimBackend" in entry_points  # the backends' group

    # the integrations' extras and no others: the test tools are a dependency group
    extras = {
        line.split(": ")[1] for line in metadata.splitlines() if line.startswith("Provides-Extra")
    }
    assert extras == {"psij", "parsl", "snakemake"}
    assert not [line for line in metadata.splitlines() if line.startswith("Requires-Dist")
                and any(tool in line for tool in ("pytest", "ruff", "mypy"))]  # fmt: skip


def test_the_wheel_holds_the_simulator_and_not_the_rig(dists):
    """What a user runs ships: the simulator and the redis-server of `jobtap demo`
    (jobtap.sim).  The rig beside it in sim/ (sim/rig: redis clusters, Sentinels,
    the pipeline, eventually(); sim/standins: the scheduler stand-ins) serves a
    checkout's tests and benches and is no part of the wheel."""
    with zipfile.ZipFile(dists.wheel) as whl:
        names = set(whl.namelist())
    sim = {name for name in names if name.startswith("jobtap/sim/")}
    assert {f"jobtap/sim/{module}.py" for module in (
        "__init__", "model", "render", "pbs", "faults", "truth", "backend", "localredis",
    )} == sim  # fmt: skip
    rig = {f"jobtap/{folder}/" for folder in CHECKOUT_ONLY} | {f"{f}/" for f in CHECKOUT_ONLY}
    assert not [name for name in names if name.startswith(tuple(rig))]
    assert not [name for name in names if "standin" in name or "/rig/" in name]
    # and the checkout has them, where tests and `python -m bench.X` import them
    assert all((ROOT / folder / "__init__.py").is_file() for folder in CHECKOUT_ONLY)


def test_the_changelog_has_the_versions_heading():
    """A version per release: pyproject.toml's version (its one source) has its
    section in CHANGELOG.md, below Unreleased."""
    headings = [line for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
                if line.startswith("## ")]  # fmt: skip
    assert headings[0] == "## [Unreleased]"
    assert headings[1].startswith(f"## [{version()}] - ")


PLAIN_PROBE = """
import importlib.util, json
import jobtap
jobtap.Client
import jobtap.collector.service, jobtap.workers.service, jobtap.cli
import jobtap.events
from jobtap.collector.backends.flux import READER_PATH
jobtap.events.json_schema(), jobtap.events.avro_schema()
print(json.dumps({
    "version": jobtap.__version__,
    "file": jobtap.__file__,
    "reader": str(READER_PATH) if READER_PATH.is_file() else None,
    "psij": importlib.util.find_spec("psij") is not None,
}))
"""


def test_pip_install_jobtap_imports_and_says_its_version(plain):
    found = json.loads(plain.run("python", "-I", "-c", PLAIN_PROBE))
    package = plain.site / "jobtap"
    assert found == {
        "version": version(),
        "file": str(package / "__init__.py"),
        "reader": str(package / "collector/backends/journal_reader/flux_journal_reader.py"),
        "psij": False,  # only with the extra
    }
    assert plain.run("jobtap", "--version") == f"jobtap {version()}\n"
    assert heavy(loaded_after("import jobtap\njobtap.Client", plain.python)) == set()


def test_pip_install_jobtap_psij_lets_psij_find_the_executors(with_psij):
    found = json.loads(with_psij.run("python", "-I", "-c", PSIJ_PROBE))
    assert {"jobtap-slurm", "jobtap-pbs"} <= set(found["names"])
    assert found["class"] == "jobtap.psij.slurm.JobtapSlurmJobExecutor"
    assert found["jobtap_loads_psij"] is False
    assert found["loaded"] == []  # no rq, click, collector or workers
    where = with_psij.run("python", "-I", "-c", "import jobtap.psij.pbs as m; print(m.__file__)")
    assert where.strip() == str(with_psij.site / "jobtap" / "psij" / "pbs.py")
    # the descriptors PSI/J registers them by say the installed jobtap's version
    versions = with_psij.run("python", "-I", "-c", DESCRIPTOR_VERSIONS)
    assert json.loads(versions) == {"jobtap-slurm": version(), "jobtap-pbs": version()}


DESCRIPTOR_VERSIONS = """
import importlib, json
module = importlib.import_module("psij-descriptors.jobtap_executors")
print(json.dumps({d.name: str(d.version) for d in module.__PSI_J_EXECUTORS__}))
"""


def test_a_tool_authors_type_checker_sees_the_installed_types(plain, tmp_path):
    tool = tmp_path / "tool.py"
    tool.write_text(
        "import jobtap, jobtap.aio\n"
        "def on_change(change: jobtap.Change) -> None:\n"
        "    if change.type == jobtap.FINAL:\n"
        "        reveal_type(change.record)\n"
        "async def main() -> None:\n"
        "    async with jobtap.aio.Client(site='hpc1') as client:\n"
        "        reveal_type(await client.job('1.pbs', user='alice'))\n"
        "jobtap.Client().jobs(stat='running')\n"
        "reveal_type(jobtap.__version__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--python-executable", plain.python, str(tool)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    ).stdout  # fmt: skip
    assert (
        'Revealed type is "jobtap.records.Job | jobtap.records.Node | jobtap.records.Queue"' in out
    )
    assert 'Revealed type is "jobtap.records.Job | None"' in out
    assert 'Revealed type is "str"' in out
    assert 'Unexpected keyword argument "stat" for "jobs" of "Client"' in out
    assert "Found 1 error in 1 file" in out  # nothing else: py.typed and the exports work
