"""``jobtap doctor``: for a site, whether the collector is alive, pokes arrive and
are consumed, the feed is up and workers apply.  Against a real redis-server,
a real collector service (sim backend) and a real ``jobtap worker``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import redis

from jobtap.acl.rules import poker_rules
from jobtap.cli.doctor import FAIL, OK, WARN, run_checks
from jobtap.collector.cycle import Collector
from jobtap.collector.follow.pokes import poke
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.wait import eventually

SITE = "doc1"
K = SiteKeys(SITE)
JOBTAP = [sys.executable, "-m", "jobtap.cli"]


def levels(checks) -> dict[str, str]:
    return {c.name: c.level for c in checks}


def message(checks, name: str) -> str:
    return next(c.message for c in checks if c.name == name)


@pytest.fixture
def collector(r):
    """A collector service in follow mode on the simulated cluster, in a thread."""
    services: list[tuple[CollectorService, threading.Thread]] = []

    def start(*, follow: bool = True, backend: SimBackend | None = None) -> CollectorService:
        backend = backend or SimBackend(seed=5, nodes=10, jobs=50, tick=0)
        svc = CollectorService(Collector(backend, r, site=SITE), interval=0.5, follow=follow)
        thread = threading.Thread(target=svc.run, daemon=True)
        thread.start()
        eventually(lambda: r.hget(K.meta, "last_cycle_at"), timeout=30, what="first cycle")
        services.append((svc, thread))
        return svc

    yield start
    for svc, thread in services:
        svc.stop_event.set()
        thread.join(timeout=30)


@pytest.fixture
def worker(redis_server):
    proc = subprocess.Popen([*JOBTAP, "worker", "--redis", redis_server.url, "--site", SITE],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    yield proc
    proc.terminate()
    proc.wait(timeout=30)


def workers_registered(r) -> bool:
    return any(b"jobtap" in k for k in r.keys("rq:worker:*"))


def test_nothing_running_fails(r):
    checks = run_checks(r, r, SITE, send_probe=True, wait=0.5)
    assert levels(checks) == {"collector": FAIL, "follow": FAIL, "pokes": WARN,
                              "pokes read": OK, "workers": FAIL}  # fmt: skip
    assert "hook installed" in message(checks, "pokes")


def test_follow_mode_working_end_to_end(redis_server, r, collector, worker):
    r.config_set("hash-max-listpack-value", 8192)  # as deploy/redis/jobtap.conf sets it
    collector()
    eventually(lambda: workers_registered(r), timeout=60, what="the worker registered")
    poke(r, K, ["1.simhost"], source="pbs-server")
    r.xadd(K.pokes, {"ids": "2.simhost", "source": "pbs-server", "record": "{}", "ended": "1"})
    res = subprocess.run([*JOBTAP, "doctor", "--redis", redis_server.url, "--site", SITE],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    lines = {line[6:16].strip(): line for line in res.stdout.splitlines()}
    assert all(line.startswith("ok") for line in lines.values()), res.stdout
    assert "2 from pbs-server; 1 carried an end record" in lines["pokes"]
    assert "read by the collector in" in lines["probe"]
    assert "1 running" in lines["workers"]
    out = subprocess.run([*JOBTAP, "doctor", "--redis", redis_server.url, "--site", SITE,
                          "--json", "--no-probe"], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    assert {c["name"] for c in json.loads(out.stdout)} == {
        "collector", "follow", "pokes", "pokes read", "workers", "hashes", "refused"}  # fmt: skip


def test_refused_pokes_fail_the_doctor(redis_server, r, tmp_path):
    """poker as an install for another site left it (its rules name hpc-old): its
    pokes to this site are refused, which the hook swallows; `jobtap doctor` run
    as the Redis admin (the test's default user) reads ACL LOG and fails."""
    r.execute_command("ACL", "SETUSER", "poker", "reset", "on", ">pw", *poker_rules(["hpc-old"]))
    poker = redis.Redis(port=redis_server.port, username="poker", password="pw")
    with poker, pytest.raises(redis.exceptions.NoPermissionError):
        poker.xadd(K.pokes, {"ids": "1.simhost"})
    res = subprocess.run([*JOBTAP, "doctor", "--redis", redis_server.url, "--site", SITE,
                          "--no-probe", "--hook-settings", str(tmp_path / "none.json")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    lines = {line[6:16].strip(): line for line in res.stdout.splitlines()}
    assert lines["refused"].startswith("FAIL"), res.stdout
    assert f"user poker may not append to {K.pokes}" in lines["refused"], res.stdout


def test_pokes_not_consumed_without_follow(r, collector):
    collector(follow=False)
    old = int((time.time() - 60) * 1000)
    r.xadd(K.pokes, {"ids": "7.simhost", "source": "pbs-server"}, id=f"{old}-0")
    checks = run_checks(r, r, SITE, send_probe=True, wait=0.5)
    got = levels(checks)
    assert (got["collector"], got["follow"], got["pokes read"]) == (OK, FAIL, FAIL)
    assert "probe" not in got  # nobody would read it
    assert "the oldest for 60 s" in message(checks, "pokes read")


class StuckRefresh(SimBackend):
    """The scheduler hangs while the collector refreshes a poked job."""

    def __init__(self, gate: threading.Event, **kw) -> None:
        super().__init__(**kw)
        self.gate = gate

    def stat_some(self, job_ids):
        self.gate.wait(60)
        return super().stat_some(job_ids)


def test_a_probe_not_read_in_time_fails(r, collector):
    gate = threading.Event()
    svc = collector(backend=StuckRefresh(gate, seed=5, nodes=10, jobs=50, tick=0))
    try:
        poke(r, K, ["1.simhost"], source="pbs-server")
        eventually(lambda: r.hget(K.meta, "pokes_read"), what="the poke read")
        checks = run_checks(r, r, SITE, send_probe=True, wait=1.0)
        assert levels(checks)["probe"] == FAIL
    finally:
        gate.set()
    eventually(lambda: r.hget(K.meta, "probe_seen"), what="the probe read after all")
    assert svc.follower.pokes is not None


def test_a_failing_feed_fails(r, collector):
    collector()
    r.hset(K.meta, mapping={"feed": "flux event feed", "feed_status": "failing",
                            "feed_restarts": 7, "feed_last_error": "no Flux bindings"})  # fmt: skip
    checks = run_checks(r, r, SITE, send_probe=False, wait=0)
    assert levels(checks)["feed"] == FAIL
    assert "7 restarts" in message(checks, "feed") and "no Flux bindings" in message(checks, "feed")


def test_a_dead_collector_fails(r, collector):
    svc = collector()
    svc.stop_event.set()
    # a stopping collector notes "stopped", then gives its lease up
    eventually(lambda: r.hget(K.meta, "status") == b"stopped" and not r.exists(K.lease),
               timeout=30, what="the collector stopped and its lease released")  # fmt: skip
    checks = run_checks(r, r, SITE, send_probe=True, wait=0.5)
    assert levels(checks)["collector"] == FAIL and "probe" not in levels(checks)
    assert "not running" in message(checks, "collector")


def test_job_hashes_stored_as_hashtables_are_a_warning(r):
    """Redis' default hash-max-listpack-value (64) makes every job hash with a
    native record a hashtable, a third larger: the doctor says so, and what to
    set; a hash written after the setting is a listpack."""
    from tests.support.sdk import Writer

    w = Writer(r, site=SITE)
    native = {"job_state": "Q", "Job_Owner": "alice@vm", "Variable_List": "PBS_O_HOME=/x" * 20}
    w.job("1.pbs", native=native)
    checks = run_checks(r, r, SITE, send_probe=False, wait=0)
    assert levels(checks)["hashes"] == WARN
    assert "1 of 1 job hashes" in message(checks, "hashes")
    assert "hash-max-listpack-value 8192" in message(checks, "hashes")
    r.config_set("hash-max-listpack-value", 8192)
    w.job("2.pbs", native=native)
    checks = run_checks(r, r, SITE, send_probe=False, wait=0)
    assert "1 of 2 job hashes" in message(checks, "hashes")
    r.delete(K.job("alice", "1.pbs"))  # the older one gone: every hash left is a listpack
    checks = run_checks(r, r, SITE, send_probe=False, wait=0)
    assert levels(checks)["hashes"] == OK


def test_no_jobs_no_hash_check(r):
    assert "hashes" not in levels(run_checks(r, r, SITE, send_probe=False, wait=0))
