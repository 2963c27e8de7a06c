"""The real Slurms of this machine, once per test session each: Debian 12's
22.05 (deploy/slurm/start.sh) and Debian 13's 24.11 (deploy/slurm/debian13/start.sh),
and in development the releases JOBTAP_SLURM_FROM_SOURCE names
(deploy/slurm/run-from-source.sh).

A test that asks for ``slurm`` runs once per cluster (ids ``[22.05]`` and
``[24.11]``), unless its module narrows that with
``pytestmark = pytest.mark.slurm_releases("22.05")`` and says why.  Each
cluster's tests form an xdist group of their own (tests/conftest.py), so one
worker runs them in turn while the other cluster's run on another.

The lock file of a cluster is held for the whole session so that two sessions
on one machine take turns; the session fixture is defined here only, so every
module of tests/live/ shares the one fixture (a session fixture imported into
two modules would be set up twice, and the second ``flock`` from this process
would wait for the first)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from sim.rig.slurm import CLUSTERS, LOCK_WAIT, SlurmCluster, cancel_everything, use
from tests.support.prereq import missing


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm_releases(*releases): run this module's slurm tests on these only"
    )


def pytest_generate_tests(metafunc):
    if "slurm" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("slurm_releases")
    releases = marker.args if marker else tuple(CLUSTERS)
    metafunc.parametrize("slurm", releases, indirect=True, scope="session")


def _take_turn(lock_path: Path):
    lock = open(lock_path, "a")  # held for the whole session
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() - t0 > LOCK_WAIT:
                lock.close()
                missing(f"another session has held the Slurm lock {lock_path} for {LOCK_WAIT}s")
            time.sleep(1)
    if time.monotonic() - t0 > 1:
        print(f"\nwaited {time.monotonic() - t0:.0f}s for another session's Slurm tests")
    return lock


@pytest.fixture(scope="session")
def slurm(request) -> SlurmCluster:
    """A running single-host Slurm of the release asked for (the cluster under
    test of sim/rig/slurm.py), or a failure that says why there is none."""
    cluster = CLUSTERS[request.param]
    if os.geteuid() != 0:
        missing("Slurm tests need root: the start scripts install and start daemons")
    if not Path("/usr/bin/apt-get").exists() and not Path("/usr/sbin/slurmctld").exists():
        missing("Slurm tests need Debian 12 (apt-get) or Slurm 22.05 installed")
    lock = _take_turn(cluster.lock)
    t0 = time.monotonic()
    try:
        proc = cluster.start()
    except subprocess.TimeoutExpired:
        lock.close()
        missing(f"{' '.join(cluster.start_command)} did not finish within 600 s")
    if proc.returncode != 0:
        lock.close()
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        missing(f"Slurm {cluster.release} could not start ({' '.join(cluster.start_command)}"
                f" exit {proc.returncode}): {tail}")  # fmt: skip
    started_here = "already running" not in proc.stdout
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    print(f"\nSlurm {cluster.release} ready in {time.monotonic() - t0:.1f}s: {last}")
    use(cluster)
    try:
        yield cluster
    finally:
        if started_here and not os.environ.get("JOBTAP_SLURM_KEEP"):
            cluster.stop()
        lock.close()


@pytest.fixture
def clean(slurm):
    cancel_everything()
    yield
    cancel_everything()
