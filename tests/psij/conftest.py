"""The PBS stand-ins as a live one-host server (sim/standins/pbs_server.py) and
jobtap's collector and worker on it."""

from __future__ import annotations

import json
import os

import pytest

from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.procs import jobtap_services
from sim.standins import pbs_server

SITE = "psij1"


@pytest.fixture
def pbs(tmp_path, monkeypatch):
    """An empty server behind qsub/qdel/qstat (first job 0.vm), first on PATH."""
    server = tmp_path / "pbs-server"
    pbs_server.init(server, fixtures_dir() / "pbs")
    control = tmp_path / "fake-pbs.json"
    control.write_text(json.dumps({"dir": str(server), "stage": pbs_server.LIVE_STAGE}))
    monkeypatch.setenv("JOBTAP_FAKE_PBS", str(control))
    monkeypatch.setenv("PATH", f"{FAKE_BIN}:{os.environ['PATH']}")
    return server


@pytest.fixture
def jobtap_pbs(pbs, redis_server, tmp_path):
    """jobtap's collector (polling qstat every second, the floor) and a worker; yields the
    executor URL (the Redis URL naming the site)."""
    collector = [
        "--backend", "pbs", "--interval", "1", "--nodes-every", "1000", "--tz", "UTC",
        "--qstat", str(FAKE_BIN / "qstat"), "--pbsnodes", str(FAKE_BIN / "pbsnodes"),
    ]  # fmt: skip
    with jobtap_services(redis_server.url, SITE, collector, tmp_path):
        yield f"{redis_server.url}?site={SITE}"
