"""The real Slurm of deploy/slurm/start.sh, once per test session.

The lock file is held for the whole session so that two sessions on one
machine take turns; the session fixture is defined here only, so every module
of tests/live/ shares the one fixture (a session fixture imported into two
modules would be set up twice, and the second ``flock`` from this process would
wait for the first)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.prereq import missing
from tests.support.slurm import LOCK, LOCK_WAIT, STOP, _start_slurm, cancel_everything


@pytest.fixture(scope="session")
def slurm():
    """A running single-host Slurm, or a failure that says why there is none."""
    if os.geteuid() != 0:
        missing("Slurm tests need root: deploy/slurm/start.sh installs and starts daemons")
    if not Path("/usr/bin/apt-get").exists() and not Path("/usr/sbin/slurmctld").exists():
        missing("Slurm tests need Debian 12 (apt-get) or Slurm 22.05 installed")
    lock = open(LOCK, "a")  # held for the whole session
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() - t0 > LOCK_WAIT:
                lock.close()
                missing(f"another session has held the Slurm lock {LOCK} for {LOCK_WAIT}s")
            time.sleep(1)
    if time.monotonic() - t0 > 1:
        print(f"\nwaited {time.monotonic() - t0:.0f}s for another session's Slurm tests")
    t0 = time.monotonic()
    try:
        proc = _start_slurm()
    except subprocess.TimeoutExpired:
        lock.close()
        missing("deploy/slurm/start.sh did not finish within 300 s")
    if proc.returncode != 0:
        lock.close()
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        missing(f"Slurm could not start (deploy/slurm/start.sh exit {proc.returncode}): {tail}")
    started_here = "already running" not in proc.stdout
    print(f"\nSlurm ready in {time.monotonic() - t0:.1f}s: {proc.stdout.strip().splitlines()[-1]}")
    try:
        yield
    finally:
        if started_here and not os.environ.get("JOBTAP_SLURM_KEEP"):
            subprocess.run(["bash", str(STOP)], capture_output=True, timeout=120)
        lock.close()


@pytest.fixture
def clean(slurm):
    cancel_everything()
    yield
    cancel_everything()
