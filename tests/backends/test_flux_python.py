"""The Flux journal reader run the way a real Flux runs it: ``flux python SCRIPT``
is the system Python with Flux's bindings on PYTHONPATH and the script's folder
first on ``sys.path``, no project package importable (sim/standins/flux_standin.py
and its bindings stand-in, sim/standins/flux_bindings).  On a real Flux the
reader, then beside the backend's ``flux.py``, imported that file instead of the
bindings and the feed never started; these tests fail on that layout."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from jobtap.collector.backends.flux import READER_PATH, FluxBackend
from sim.rig.paths import FAKE_BIN, ROOT, fixtures_dir
from tests.support.flux import fake_flux

FIXTURES = fixtures_dir() / "flux"
FLUX = str(FAKE_BIN / "flux")


@pytest.fixture
def control(tmp_path, monkeypatch):
    return fake_flux(tmp_path, monkeypatch)


def lines(out: bytes) -> list[dict]:
    return [json.loads(x) for x in out.decode().splitlines()]


def test_flux_python_runs_a_script_as_the_real_command_does(control, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(
        "import json, sys\n"
        "try:\n    import jobtap\n    project = True\nexcept ImportError:\n    project = False\n"
        "import flux\n"
        "print(json.dumps({'first': sys.path[0], 'project': project,"
        " 'flux': flux.__file__}))\n"
    )
    out = subprocess.run([FLUX, "python", str(script)], capture_output=True, check=True,
                         timeout=30, cwd=ROOT)  # fmt: skip
    seen = json.loads(out.stdout)
    assert seen["first"] == str(tmp_path)  # the script's folder comes first
    assert seen["project"] is False  # nothing of the project is importable
    assert "flux_bindings" in seen["flux"]


def test_a_reader_beside_a_flux_module_imports_that_module_and_fails(control, tmp_path):
    """The old layout: the reader in collector/backends/, beside flux.py."""
    old = tmp_path / "backends"
    old.mkdir()
    shutil.copy(READER_PATH, old / "flux_journal_reader.py")
    shutil.copy(ROOT / "collector" / "backends" / "flux.py", old / "flux.py")
    proc = subprocess.run([FLUX, "python", str(old / "flux_journal_reader.py")],
                          capture_output=True, timeout=30)  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"flux journal reader" in proc.stderr


def test_the_reader_has_a_folder_of_its_own() -> None:
    assert READER_PATH.exists()
    assert sorted(p.name for p in READER_PATH.parent.iterdir() if p.suffix == ".py") == [
        "flux_journal_reader.py"
    ]


def test_the_feed_command_starts_on_the_bindings(control):
    """``follow_command()`` through the stand-in: the live journal (not --replay),
    a ready line first, then every recorded event."""
    backend = FluxBackend(flux=FLUX)
    proc = subprocess.run(backend.follow_command(), capture_output=True, timeout=30, check=True)
    out = lines(proc.stdout)
    assert out[0]["ready"] is True and "replay" not in out[0]
    assert sum(1 for x in out if "event" in x) == 208
    assert b"the journal stream ended" in proc.stderr  # the recording's end
    batches = list(backend.follow_parse(proc.stdout.splitlines(keepends=True)))
    assert len({job for batch in batches for job in batch}) == 19


def test_since_and_full_reach_the_consumer(control):
    backend = FluxBackend(flux=FLUX)
    since = 1795274968.0
    proc = subprocess.run(backend.follow_command(since=since), capture_output=True, timeout=30,
                          check=True)  # fmt: skip
    out = lines(proc.stdout)
    events = [x for x in out if "event" in x]
    assert events and all(x["timestamp"] > since for x in events)
    assert {"sentinel": True} in out  # with --since the backlog's end is marked
    assert out[0] == {"ready": True, "full": True, "since": since}


def test_a_user_other_than_the_owner_is_refused_before_ready(control):
    control(journal_owner=False)
    proc = subprocess.run(FluxBackend(flux=FLUX).follow_command(), capture_output=True,
                          timeout=30)  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"Operation not permitted" in proc.stderr


def test_no_instance_is_a_failure_before_ready(control):
    control(modes={"python": "fail"})
    proc = subprocess.run(FluxBackend(flux=FLUX).follow_command(), capture_output=True,
                          timeout=30)  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"Unable to connect to Flux" in proc.stderr


def test_a_quiet_open_journal_still_says_ready(control):
    """No events at all: ready comes once no refusal came for half a second."""
    control(mode="empty", journal_end="open")
    proc = subprocess.Popen(FluxBackend(flux=FLUX).follow_command(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
    finally:
        proc.kill()
        proc.wait()
    assert json.loads(first)["ready"] is True


def test_the_reader_is_a_file_of_the_installed_package() -> None:
    """``flux python`` runs the reader by its path in the installed package
    (tests/test_release.py checks that the wheel carries it)."""
    import jobtap.collector.backends.journal_reader as reader_package

    assert Path(READER_PATH).parent in {Path(p) for p in reader_package.__path__}
