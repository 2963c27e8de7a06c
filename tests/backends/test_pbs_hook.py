"""The PBS server hook (deploy/pbs) with a configuration that names no poke
stream (written before the hook wrote its pokes itself) runs `jobtap poke`
without blocking the server.

PBS hooks run inside pbs_server's Python with its `pbs` module, which is not
available here: tests/backends/pbs_server_python.py runs the hook with the part
of that module it uses, and the hook is given a stand-in `jobtap` that records
its arguments.  The hook starts the poke in the background and returns;
``run_reaped`` returns once that background poke has exited too, so the record
is complete when the test reads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sim.rig.paths import ROOT
from tests.support.reaper import run_reaped

HOOK = ROOT / "deploy" / "pbs" / "jobtap_poke_hook.py"
PBS_SERVER_PYTHON = Path(__file__).with_name("pbs_server_python.py")


def run_hook(tmp_path: Path, job_id: str | None) -> tuple[Path, subprocess.CompletedProcess]:
    """Run the hook for ``job_id``; return the stand-in's record of its
    arguments (written by every poke, background ones included) and the run."""
    record = tmp_path / "args"
    fake = tmp_path / "jobtap"
    fake.write_text(f'#!/bin/sh\necho "$@" "JOBTAP_REDIS=$JOBTAP_REDIS" >> {record}\n')
    fake.chmod(0o755)
    config = tmp_path / "hook.json"
    config.write_text(json.dumps({"jobtap": str(fake), "site": "hpc1", "redis": "redis://x/0"}))
    argv = [sys.executable, str(PBS_SERVER_PYTHON), str(HOOK), str(config)]
    done = run_reaped(argv + ([job_id] if job_id else []), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return record, done


def test_hook_pokes_the_job_and_accepts(tmp_path):
    record, done = run_hook(tmp_path, "123.server")
    assert done.stdout.split() == ["accepted"]
    # the URL (poker's password) goes through the environment, not the command line
    assert record.read_text().split() == [
        "poke", "--site", "hpc1", "123.server", "JOBTAP_REDIS=redis://x/0",
    ]  # fmt: skip


def test_hook_without_a_job_id_still_accepts(tmp_path):
    record, done = run_hook(tmp_path, None)
    assert done.stdout.split() == ["accepted"]
    assert not record.exists()
