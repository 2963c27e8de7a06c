"""Fixtures of the collector tests: the PBS and Flux stand-ins replaying real output."""

from __future__ import annotations

import json

import pytest

from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pipeline import FakePBS


@pytest.fixture
def pbs(tmp_path, monkeypatch):
    """sim/standins' qstat and pbsnodes, replaying tests/fixtures/pbs."""
    fixtures = fixtures_dir() / "pbs"
    return FakePBS(tmp_path, fixtures, monkeypatch)


@pytest.fixture
def flux(tmp_path, monkeypatch):
    """A Flux backend on sim/standins' flux, replaying tests/fixtures/flux at its
    last stage (its journal reader replays the captured events, then ends)."""
    from jobtap.collector.backends.flux import FluxBackend

    fixtures = fixtures_dir() / "flux"
    control = tmp_path / "fake-flux.json"
    control.write_text(json.dumps({"dir": str(fixtures), "mode": "ok", "stage": "07-final"}))
    monkeypatch.setenv("JOBTAP_FAKE_FLUX", str(control))
    return FluxBackend(flux=str(FAKE_BIN / "flux"), timeout=10)
