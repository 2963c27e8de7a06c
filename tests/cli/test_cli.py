"""The `jobtap` command as a person runs it: real processes, real Redis."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import orjson

from jobtap.keys import SiteKeys
from jobtap.packing import PRIMED_NATIVE, unpack_native
from jobtap.sim.localredis import free_port
from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pipeline import site_events

JOBTAP = [sys.executable, "-m", "jobtap.cli"]


def run_jobtap(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*JOBTAP, *args], capture_output=True, text=True, timeout=timeout, **kw)


def test_unreachable_redis_is_one_line_not_a_traceback():
    url = f"redis://127.0.0.1:{free_port()}/0"
    for cmd in (["status"], ["worker", "--burst"], ["collector", "--once"], ["show", "1.x"]):
        res = run_jobtap(*cmd, "--redis", url)
        assert res.returncode != 0, cmd
        assert "Traceback" not in res.stderr, (cmd, res.stderr)
        assert "cannot reach Redis" in res.stderr, (cmd, res.stderr)


def test_bad_site_name_is_refused(redis_server):
    res = run_jobtap("status", "--redis", redis_server.url, "--site", "a:b*")
    assert res.returncode == 2 and "site name" in res.stderr


def test_collector_once_worker_burst_status(redis_server, r, tmp_path, monkeypatch):
    site = "cli1"
    env_ok = {"JOBTAP_REDIS": redis_server.url, "JOBTAP_SITE": site}
    res = run_jobtap("collector", "--once", "--sim-jobs", "200", "--sim-nodes", "20",
                 env={**_env(), **env_ok})  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "cycle 1 done" in res.stderr
    res = run_jobtap("worker", "--burst", env={**_env(), **env_ok})
    assert res.returncode == 0, res.stderr
    assert len(site_events(r, site)) >= 200
    res = run_jobtap("status", env={**_env(), **env_ok})
    assert res.returncode == 0, res.stderr
    assert "collector stopped" in res.stdout or "collector ok" in res.stdout
    assert re.search(r"jobs\s+\d+ live", res.stdout)
    assert "0 waiting" in res.stdout


def test_worker_event_version(redis_server, r):
    """--event-version 1 (or JOBTAP_EVENT_VERSION=1) writes the events of before,
    native in them; the default, 2, leaves it out; anything else is one line."""
    env = {**_env(), "JOBTAP_REDIS": redis_server.url}
    for site, args, extra, version in (
        ("ev1", ["--event-version", "1"], {}, 1),
        ("ev1env", [], {"JOBTAP_EVENT_VERSION": "1"}, 1),
        ("ev2", [], {}, 2),
    ):
        site_env = {**env, **extra, "JOBTAP_SITE": site}
        res = run_jobtap("collector", "--once", "--sim-jobs", "20", "--sim-nodes", "2",
                         env=site_env)  # fmt: skip
        assert res.returncode == 0, res.stderr
        res = run_jobtap("worker", "--burst", *args, env=site_env)
        assert res.returncode == 0, res.stderr
        events = site_events(r, site)
        assert events and {e.get("event_version", 1) for e in events} == {version}, site
        assert {"native" in e["record"] for e in events} == {version == 1}, site
    res = run_jobtap("worker", "--burst", "--event-version", "3", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("Error:")]
    assert "'--event-version': '3' is not one of '1', '2'" in line


def test_pbs_collector_with_missing_qstat_fails_clearly(redis_server, r, tmp_path):
    res = run_jobtap("collector", "--once", "--backend", "pbs", "--qstat", str(tmp_path / "qstat"),
                 "--redis", redis_server.url, "--site", "cli2")  # fmt: skip
    assert res.returncode == 1
    assert "command not found" in res.stderr and "Traceback" not in res.stderr
    assert r.hget(SiteKeys("cli2").meta, "status") == b"stopped"
    assert b"command not found" in r.hget(SiteKeys("cli2").meta, "last_error")


def test_the_collector_plan_follows_the_backend_and_follow_mode(redis_server, r, tmp_path):
    """No probe (a pushed plan) by default only with --follow on Slurm, whose
    probe costs slurmctld a full stat; --probe and --no-probe choose.  The
    plan is in meta as the collector starts (here its cycle then fails: there
    is no Slurm behind these commands)."""
    missing = str(tmp_path / "missing")
    slurm = ["--backend", "slurm", "--squeue", missing, "--sinfo", missing, "--sacct", missing]
    cases = {
        "p1": ([*slurm, "--follow"], "1"),
        "p2": ([*slurm], "0"),
        "p3": ([*slurm, "--follow", "--probe"], "0"),
        "p4": (["--backend", "sim", "--sim-jobs", "20", "--follow"], "0"),
        "p5": (["--backend", "sim", "--sim-jobs", "20", "--no-probe"], "1"),
    }
    for site, (args, pushed) in cases.items():
        run_jobtap("collector", "--once", *args, "--redis", redis_server.url, "--site", site,
                   "--state-dir", str(tmp_path / site))  # fmt: skip
        assert r.hget(SiteKeys(site).meta, "pushed") == pushed.encode(), (site, args)


def test_pbs_collector_through_the_standin(redis_server, r, tmp_path):
    control = tmp_path / "fake.json"
    control.write_text(f'{{"dir": "{fixtures_dir() / "pbs"}", "stage": "10-busy", "mode": "ok"}}')
    env = {**_env(), "JOBTAP_FAKE_PBS": str(control)}
    res = run_jobtap("collector", "--once", "--backend", "pbs", "--qstat", str(FAKE_BIN / "qstat"),
                 "--pbsnodes", str(FAKE_BIN / "pbsnodes"), "--tz", "UTC",
                 "--redis", redis_server.url, "--site", "cli3", env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = run_jobtap("worker", "--burst", "--redis", redis_server.url, "--site", "cli3")
    assert res.returncode == 0
    jobs = {e["object_id"] for e in site_events(r, "cli3") if e["kind"] == "job"}
    assert jobs >= {"1.vm", "3.vm"}


def test_demo_runs_and_stops_everything_it_started():
    """In a pipe: the banner on stderr, then readable `jobtap watch --all` lines."""
    res = run_jobtap("demo", "--duration", "8", "--jobs", "300", "--nodes", "30", timeout=90)
    assert res.returncode == 0, res.stderr
    assert "try in another terminal" in res.stderr and "jobtap watch" in res.stderr
    port = int(re.search(r"redis://127\.0\.0\.1:(\d+)/0", res.stderr).group(1))
    job = re.search(r"jobtap wait (\S+)", res.stderr).group(1)
    assert job.endswith(".simhost")  # a real running job of the first cycle
    lines = res.stdout.splitlines()
    assert lines and all(re.match(r"\d\d:\d\d:\d\d  demo  \S+\.simhost ", x) for x in lines)
    assert "stopped" in res.stderr
    assert port_closed(port)  # its redis-server is gone (the demo waited for it to exit)


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("JOBTAP_")}


def test_flux_collector_through_the_standin(redis_server, r, tmp_path):
    control = tmp_path / "fake-flux.json"
    control.write_text(f'{{"dir": "{fixtures_dir() / "flux"}", "stage": "07-final", "mode": "ok"}}')
    env = {**_env(), "JOBTAP_FAKE_FLUX": str(control)}
    res = run_jobtap("collector", "--once", "--backend", "flux", "--flux", str(FAKE_BIN / "flux"),
                 "--redis", redis_server.url, "--site", "cli4", env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = run_jobtap("worker", "--burst", "--redis", redis_server.url, "--site", "cli4")
    assert res.returncode == 0
    finals = [e for e in site_events(r, "cli4") if e["type"] == "final"]
    assert len(finals) >= 19
    # a finished job's native record: packed by default, plain when the worker is told
    ended = r.hgetall(SiteKeys("cli4").job(finals[0]["user"], finals[0]["object_id"]))
    assert ended[b"native"] == b"" and unpack_native(ended[PRIMED_NATIVE.encode()], ended)
    for site, told in (("cli5", ["--plain-finished-native"]), ("cli6", [])):
        res = run_jobtap("collector", "--once", "--backend", "flux", "--flux",
                         str(FAKE_BIN / "flux"), "--redis", redis_server.url, "--site", site,
                         env=env)  # fmt: skip
        assert res.returncode == 0, res.stderr
        plain = {**_env(), "JOBTAP_PACK_FINISHED_NATIVE": "false"} if not told else None
        res = run_jobtap("worker", "--burst", *told, "--redis", redis_server.url,
                         "--site", site, env=plain)  # fmt: skip
        assert res.returncode == 0, res.stderr
        final = next(e for e in site_events(r, site) if e["type"] == "final")
        ended = r.hgetall(SiteKeys(site).job(final["user"], final["object_id"]))
        assert PRIMED_NATIVE.encode() not in ended and orjson.loads(ended[b"native"]), site


def test_metrics_port_in_use_is_one_line(redis_server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for cmd in (["collector", "--once"], ["worker", "--burst"]):
            res = run_jobtap(*cmd, "--redis", redis_server.url, "--metrics-port", port)
            assert res.returncode == 1, (cmd, res.stderr)
            assert f"cannot serve metrics on 127.0.0.1:{port}" in res.stderr
            assert "Traceback" not in res.stderr
