"""The README's "Running it at a site" block, typed as a new user types it: the
environment it exports (a URL naming only the writer, the password in a file
given by JOBTAP_REDIS_PASSWORD_FILE, the site), then collector, worker,
status, doctor, top, watch and show, against a real redis-server whose
default user is off, with the sim backend instead of PBS."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import orjson
import pytest

from sim.rig.wait import eventually
from tests.cli.test_top import terminal_env
from tests.support.terminal import Tmux

JOBTAP = [sys.executable, "-m", "jobtap.cli"]
PASSWORD = "w-r1ter/pass"


@pytest.fixture
def site_env(redis_server, r, tmp_path) -> dict[str, str]:
    """What the README's block exports, on a Redis with an ACL user ``writer``."""
    r.execute_command("ACL", "SETUSER", "writer", "on", f">{PASSWORD}", "~*", "&*", "+@all")
    secret = tmp_path / "writer.password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    r.execute_command("ACL", "SETUSER", "default", "off")  # as jobtap's Redis set-up has it
    base = {k: v for k, v in os.environ.items() if not k.startswith("JOBTAP_")}
    return {**base, "JOBTAP_REDIS": f"redis://writer@127.0.0.1:{redis_server.port}/0",
            "JOBTAP_SITE": "hpc1", "JOBTAP_REDIS_PASSWORD_FILE": str(secret),
            "JOBTAP_CREDENTIALS": str(tmp_path / "no-credentials")}  # fmt: skip


def jobtap(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    res = subprocess.run([*JOBTAP, *args], capture_output=True, text=True, env=env,
                         timeout=timeout)  # fmt: skip
    assert "Traceback" not in res.stderr, (args, res.stderr)
    return res


@pytest.mark.timeout(180)
def test_the_readme_site_block_as_typed(site_env, tmp_path):
    services = [
        subprocess.Popen([*JOBTAP, "collector", "--backend", "sim", "--interval", "5",
                          "--sim-jobs", "200", "--sim-nodes", "20"],
                         env=site_env, stderr=subprocess.PIPE, text=True),
        subprocess.Popen([*JOBTAP, "worker"], env=site_env, stderr=subprocess.PIPE, text=True),
    ]  # fmt: skip
    try:

        def healthy() -> str:
            res = jobtap(site_env, "status")
            assert res.returncode == 0 and "collector ok" in res.stdout, res.stderr
            assert re.search(r"jobs\s+\d+ live", res.stdout) and "applied" in res.stdout
            return res.stdout

        status = eventually(healthy, timeout=60, what="jobtap status: collector ok, applied")
        assert "(1 cycle)" in status or "cycles)" in status

        # the README's collector runs without --follow: doctor says so (and exits 1)
        doctor = jobtap(site_env, "doctor")
        assert doctor.stdout.startswith("ok    collector   running"), doctor.stdout
        assert "FAIL  follow      the collector does not run with --follow" in doctor.stdout

        first = jobtap(site_env, "watch", "--all", "--json", "--count", "3")
        assert first.returncode == 0, first.stderr
        events = [orjson.loads(line) for line in first.stdout.splitlines()]
        assert len(events) == 3 and all(e["type"] == "initial" for e in events)
        job = events[0]["object_id"]

        lines = jobtap(site_env, "watch", "--all", "--count", "3")
        assert lines.returncode == 0 and len(lines.stdout.splitlines()) == 3, lines.stderr
        assert all(" hpc1 " in f" {line} " for line in lines.stdout.splitlines())
        updates = jobtap(site_env, "watch", "--all", "--updates", "--count", "1")
        assert updates.returncode == 0 and updates.stdout.strip(), updates.stderr

        one = jobtap(site_env, "watch", job, "--timeout", "1")
        assert one.returncode == 0 and job in one.stdout.splitlines()[0], one.stderr

        shown = jobtap(site_env, "show", job)
        assert shown.returncode == 0, shown.stderr
        record = dict(line.split(None, 1) for line in shown.stdout.splitlines())
        assert record["id"] == job and record["site"] == "hpc1"

        term = Tmux(tmp_path)
        try:
            env = terminal_env(**{k: v for k, v in site_env.items() if k.startswith("JOBTAP_")})
            term.start(["sh", "-c", shlex.join([*JOBTAP, "top"])], env)
            eventually(lambda: "jobtap top — site hpc1 — every job" in term.screen(),
                       timeout=30, what="top's board")  # fmt: skip
            eventually(lambda: "collector ok" in term.screen(), timeout=30, what="its health")
            term.send("q")
            eventually(lambda: term.exit_status() is not None, what="top quitting")
            assert term.exit_status() == 0
        finally:
            term.close()
    finally:
        for proc in services:
            proc.terminate()
        for proc in services:
            proc.wait(30)
    for proc in services:
        assert "Traceback" not in proc.stderr.read()
