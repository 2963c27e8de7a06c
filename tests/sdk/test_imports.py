"""What `import jobtap` costs.

The SDK must stand alone: a tool author's `import jobtap` loads neither rq nor click
nor any service code, and `jobtap.keys` (imported by `jobtap poke` in scheduler
hooks) not even redis-py.  tests/test_release.py checks the same of jobtap installed
from its wheel, and what the wheel holds.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.release import Venv, build_dists, heavy, loaded_after


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
    """A fresh venv with jobtap's wheel installed with its [psij] extra: its
    site-packages (tests/psij/test_psij_parts.py)."""
    venv = Venv.create(tmp_path / "venv")
    venv.install(build_dists(tmp_path / "build").wheel, extras=("psij",))
    return venv.site


def python_of(site: Path) -> str:
    return str(site.parents[2] / "bin" / "python")  # venv/lib/pythonX.Y/site-packages
