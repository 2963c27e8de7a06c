"""What `import jobtap` costs and what `pip install .` installs.

The SDK must stand alone: a tool author's `import jobtap` loads neither rq nor click
nor any service code, and `jobtap.keys` (imported by `jobtap poke` in scheduler
hooks) not even redis-py.  The package installs as one `jobtap/` folder, with its
py.typed marker and the event schemas, and none of the source folders' names.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SERVICES = ("jobtap.collector", "jobtap.workers", "jobtap.cli", "jobtap.acl", "jobtap.sim")


def loaded_after(code: str, python: str = sys.executable) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(out.split())


def heavy(modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the SDK must not load."""
    return {
        m
        for m in modules
        if m.split(".")[0] in ("rq", "click")
        or any(m == s or m.startswith(f"{s}.") for s in SERVICES)
    }


def test_import_jobtap_loads_no_service_code():
    assert heavy(loaded_after("import jobtap")) == set()


def test_the_client_and_the_asyncio_client_load_no_service_code():
    modules = loaded_after("import jobtap, jobtap.aio\njobtap.Client, jobtap.Subscription")
    assert "jobtap.client" in modules and "redis" in modules  # the probe did load the client
    assert heavy(modules) == set()


def test_the_contract_loads_without_redis():
    modules = loaded_after("import jobtap.keys, jobtap.events, jobtap.schema")
    assert "jobtap.keys" in modules
    assert not {m for m in modules if m.split(".")[0] == "redis"}


def install_copy(tmp_path: Path) -> Path:
    """``pip install`` (not editable) a copy of the source tree into a new venv that
    reuses this venv's packages (no network); returns its site-packages."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    for folder in ("sdk", "collector", "workers", "cli", "acl", "sim", "psij_executors",
                   "psij-descriptors"):  # fmt: skip
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # A path in a .pth file joins sys.path, but the .pth files there (this venv's
    # editable jobtap) are not run: only the installed copy can be imported.
    (Path(site) / "reuse.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # The build backend (setuptools, from the test extra) comes from this venv too.
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-build-isolation", "--no-index", str(src)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    return Path(site)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with jobtap installed from a copy of this tree: its site-packages."""
    return install_copy(tmp_path_factory.mktemp("install"))


def test_pip_install_gives_one_jobtap_package_with_its_data(installed):
    site = installed
    top = {p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth"))}
    # no top-level sdk, collector, workers, ...; psij-descriptors is where PSI/J looks
    # for executors (a namespace folder, docs/psij.md): jobtap's descriptors only
    assert top == {"jobtap", "psij-descriptors"}
    descriptors = {p.name for p in (site / "psij-descriptors").glob("*.py")}
    assert descriptors == {"jobtap_executors.py"}  # and no __init__.py
    package = site / "jobtap"
    assert (package / "py.typed").is_file()
    schemas = {p.name for p in (package / "schemas").iterdir()}
    assert {"event.schema.json", "event.avsc"} <= schemas
    assert (package / "workers" / "apply.lua").is_file()
    python = python_of(site)
    where = subprocess.run(
        [python, "-c", "import jobtap, jobtap.events as e; jobtap.Client; e.json_schema();"
         "print(jobtap.__file__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where) == package / "__init__.py"
    assert heavy(loaded_after("import jobtap\njobtap.Client", python)) == set()


def python_of(site: Path) -> str:
    return str(site.parents[2] / "bin" / "python")  # venv/lib/pythonX.Y/site-packages


def test_a_tool_authors_type_checker_sees_the_installed_types(installed, tmp_path):
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
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--python-executable", python_of(installed), str(tool)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    ).stdout  # fmt: skip
    assert (
        'Revealed type is "jobtap.records.Job | jobtap.records.Node | jobtap.records.Queue"' in out
    )
    assert 'Revealed type is "jobtap.records.Job | None"' in out
    assert 'Unexpected keyword argument "stat" for "jobs" of "Client"' in out
    assert "Found 1 error in 1 file" in out  # nothing else: py.typed and the exports work
