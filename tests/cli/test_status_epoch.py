"""`jobtap status` names the site's epoch, when it began and why, and the
collector keeps its state where --state-dir says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from jobtap.keys import SiteKeys
from sim.rig.redisloss import restart_empty

SITE = "cliep"
K = SiteKeys(SITE)


def jobtap(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobtap.cli", *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def test_status_shows_the_epoch_and_when_it_changed(redis_server, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTAP_")}
    env.update(JOBTAP_REDIS=redis_server.url, JOBTAP_SITE=SITE)
    state = tmp_path / "collector-state"
    once = ("collector", "--once", "--sim-jobs", "100", "--sim-nodes", "10")
    res = jobtap(*once, "--state-dir", str(state), env=env)
    assert res.returncode == 0, res.stderr
    first = redis_server.client().hget(K.meta, "epoch").decode()
    assert json.loads((state / "collector.json").read_text()) == {"epoch": first, "cycle": 1}
    res = jobtap("status", env=env)
    assert res.returncode == 0, res.stderr
    (line,) = [x for x in res.stdout.splitlines() if x.strip().startswith("epoch")]
    assert first in line and "came back empty, or is new" in line

    restart_empty(redis_server)
    res = jobtap(*once, "--state-dir", str(state), env=env)
    assert res.returncode == 0, res.stderr
    assert "began" in res.stderr and "shipping what Redis lost again" in res.stderr
    second = redis_server.client().hget(K.meta, "epoch").decode()
    assert second != first
    assert json.loads((state / "collector.json").read_text()) == {"epoch": second, "cycle": 2}
    (line,) = [
        x for x in jobtap("status", env=env).stdout.splitlines() if x.strip().startswith("epoch")
    ]
    assert second in line and "since 20" in line
    as_json = json.loads(jobtap("status", "--json", env=env).stdout)
    assert as_json["meta"]["epoch"] == second and as_json["meta"]["epoch_cause"] == "empty"
