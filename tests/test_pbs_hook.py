"""The PBS server hook (deploy/pbs) runs `jobtap poke` without blocking the server.

PBS hooks run inside pbs_server's Python with its `pbs` module, which is not
available here: the test gives the hook a minimal `pbs` module (event, job id,
config file name, logmsg) and a stand-in `jobtap` that records its arguments.
"""

from __future__ import annotations

import json
import runpy
import sys
import time
import types
from pathlib import Path

HOOK = Path(__file__).resolve().parent.parent / "deploy" / "pbs" / "jobtap_poke_hook.py"


def run_hook(tmp_path, job_id, monkeypatch):
    record = tmp_path / "args"
    fake = tmp_path / "jobtap"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    fake.chmod(0o755)
    config = tmp_path / "hook.json"
    config.write_text(json.dumps({"jobtap": str(fake), "site": "hpc1", "redis": "redis://x/0"}))
    accepted = []
    event = types.SimpleNamespace(job=types.SimpleNamespace(id=job_id),
                                  accept=lambda: accepted.append(True))  # fmt: skip
    pbs = types.SimpleNamespace(event=lambda: event, hook_config_filename=str(config),
                                logmsg=lambda *a: None, LOG_DEBUG=4)  # fmt: skip
    monkeypatch.setitem(sys.modules, "pbs", pbs)
    runpy.run_path(str(HOOK))
    return record, accepted


def test_hook_pokes_the_job_and_accepts(tmp_path, monkeypatch):
    record, accepted = run_hook(tmp_path, "123.server", monkeypatch)
    assert accepted == [True]
    for _ in range(100):
        if record.exists():
            break
        time.sleep(0.02)
    assert record.read_text().split() == [
        "poke", "--site", "hpc1", "--redis", "redis://x/0", "123.server",
    ]  # fmt: skip


def test_hook_without_a_job_id_still_accepts(tmp_path, monkeypatch):
    record, accepted = run_hook(tmp_path, None, monkeypatch)
    assert accepted == [True]
    time.sleep(0.2)
    assert not record.exists()
