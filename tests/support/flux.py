"""Driving the flux stand-in (sim/standins/flux_standin.py) and its bindings
(sim/standins/flux_bindings) through their control file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sim.rig.paths import fixtures_dir


def fake_flux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **base) -> Callable[..., None]:
    """Point ``$JOBTAP_FAKE_FLUX`` at a control file over the captured fixtures
    (with ``base`` settings) and return ``write(**extra)`` to change it."""
    path = tmp_path / "fake-flux.json"
    monkeypatch.setenv("JOBTAP_FAKE_FLUX", str(path))

    def write(**extra) -> None:
        doc = {"dir": str(fixtures_dir() / "flux"), "mode": "ok", **base, **extra}
        path.write_text(json.dumps(doc))

    write()
    return write
